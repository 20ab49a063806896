"""Heal a converted checkpoint by distillation from its LayerNorm original, through the `transformers.Trainer`.

    hf-norms heal DIR --data DATA [--max-steps N] [--resume]

The student is the converted model in `DIR` (all its parameters train); the teacher is the original model named in
`DIR/conversion_report.json` (or `--teacher`), frozen in eval mode. The student trains in training mode, with the
dropout of its config (`student_dropout`): LayerNorm divides each token by its own standard deviation, which keeps
dropout noise small; DyT and Derf pass it on, so a model distilled without dropout does not tolerate the dropout that
fine-tuning turns on. On unlabeled examples, per batch:

    loss = hidden_state_weight * sum over hidden states l of ||h_l - t_l||^2 / ||t_l||^2  (every layer, real tokens)
         + ||f - g||^2 / ||g||^2 + cosine_weight * (1 - cos(pool(f), pool(g)))   (final hidden states f, g)
         + token_weight * mean over token types k of mean over tokens i of type k of (1 - cos(f_i, g_i))
         + head_weight * (||f_p - g_p||^2 / ||g_p||^2 + ||o - q||^2 / ||q||^2)  (what stock heads read)
         + KL(softmax(teacher logits) || softmax(student logits))          (heads with logits)

with `pool` the mean over real tokens (text) or the [CLS] token (images); the token types are the prefix tokens
([CLS]), the other special tokens ([SEP], ...) and the ordinary tokens (`data.token_type_masks`), so that the few
special tokens weigh as much as the many ordinary ones; `f_p`, `g_p` the prefix tokens' final states and `o`, `q` the
base models' `pooler_output` where they have one (BERT's pooler, which a stock classification head reads). Checkpoints
go to a work folder beside `DIR` every `save_steps`, so an interrupted run continues with `--resume`
(`resume_from_checkpoint`). At the end the healed weights replace `DIR`'s (or go to `--output`), and the report gains
the `healed` stage and a `healing` entry.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers import TrainingArguments

from ..errors import require_type
from ..models.auto_registration import MODEL_CLASSES
from ..output_folders import (
    ClaimedFolder,
    PlannedOutput,
    check_output_location,
    checkpoint_files,
    claim_folder,
    copy_checkpoint_files,
    made_by_hf_norms,
    resolved,
)
from .checkpoint_io import (
    ConversionError,
    check_model_fits,
    check_source_config,
    check_weights,
    last_complete_checkpoint,
    resolve_source,
    set_aside_newer_checkpoints,
)
from .convert import NEW_PARAMETER_SUFFIXES, check_counts, data_places, save_checkpoint
from .data import (
    Examples,
    encode_batches,
    fitting_max_length,
    load_examples,
    model_device,
    probe_examples,
)
from .devices import resolve_device, training_teacher, use_bf16
from .distillation import (
    COSINE_WEIGHT,
    HEAD_WEIGHT,
    HIDDEN_STATE_WEIGHT,
    TOKEN_WEIGHT,
    DistillationTrainer,
    EveryProcessSaved,
    TimeBudget,
    TimeLimit,
    loss_description,
)
from .downstream import check_out_of_domain, checks_for_report, local_data, with_downstream
from .fidelity import measure_fidelity
from .processes import Processes
from .report import REPORT_JSON, read_report, write_report
from .sources import inspect_source, load_processor, load_teacher, quiet_transformers
from .streaming import DataSource, HeldOut, Stream, is_streamed, open_stream, text_windows


def training_examples(processor, examples: Examples, max_length: int) -> list[dict]:
    """One training example per `max_length`-token window of every text (`streaming.text_windows`: long texts give
    several; with its `SPECIAL_TOKENS_MASK`), or per image."""
    if examples.modality == "text":
        encoded = text_windows(processor, examples.items, max_length)
        return [{k: values[i] for k, values in encoded.items()} for i in range(len(encoded["input_ids"]))]
    return [
        {"pixel_values": batch["pixel_values"][0]}
        for batch in encode_batches(processor, examples, batch_size=1, max_length=max_length)
    ]


def heal(
    folder: str | Path,
    data: Any,
    *,
    teacher: str | None = None,
    output: str | Path | None = None,
    samples: int | None = None,
    max_steps: int = 300,
    max_minutes: float | None = None,
    max_cpu_minutes: float | None = None,
    batch_size: int = 8,
    max_length: int = 128,
    learning_rate: float = 2e-4,
    warmup_steps: int = 10,
    save_steps: int = 50,
    cosine_weight: float = COSINE_WEIGHT,
    hidden_state_weight: float = HIDDEN_STATE_WEIGHT,
    token_weight: float = TOKEN_WEIGHT,
    head_weight: float = HEAD_WEIGHT,
    student_dropout: bool = True,
    bf16: bool | None = None,
    device: str | None = "auto",
    evaluation_data: Any = None,
    work_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    allow_pickle: bool = False,
    token: str | bool | None = None,
    progress: bool = True,
    seed: int = 0,
    ood_evaluation_data: Any = None,
    probe_data: Any = None,
    data_config: str | None = None,
    data_split: str | None = None,
    text_column: str | None = None,
    image_column: str | None = None,
) -> dict[str, Any]:
    """Distil the converted checkpoint `folder` from its original on `data` (unlabeled); write the healed checkpoint
    to `output` (default: `folder`, replaced when complete) and return the report.

    `data` is a path or a Hub dataset id, read as a stream (`streaming.open_stream`: `.txt`, `.jsonl`, `.parquet`
    files or a folder of them, a folder of images, a saved `datasets` folder, a Hub id with `data_config` and
    `data_split`; the column `text_column` / `image_column`), or texts, images or a `datasets.Dataset` in memory.
    With `samples`, the first `samples` examples are read into memory and trained on.
    Training runs `max_steps` AdamW steps, or stops after `max_minutes` (wall clock) or `max_cpu_minutes` (this
    process's CPU time, all threads), whichever comes first; the learning rate warms up over `warmup_steps` (at most a
    third of the steps) and decays linearly to zero at whichever end comes first. The loss and its weights are the
    module docstring's; `student_dropout=False` trains the student without dropout. It runs on `device`
    (`devices.resolve_device`: a CUDA GPU when there is one, else the CPU), under bfloat16 autocast when `bf16`
    (default: on a GPU that supports it; `devices.use_bf16`), with `batch_size` examples per process and step: under
    `torchrun` or `accelerate launch`, every process trains on its share of the data (`processes`).
    With `resume`, it continues from the last checkpoint in `work_dir` (default: `.<folder name>.healing` beside the
    folder), which is removed after success. `work_dir` is created by heal (a folder heal did not make is refused);
    the output, the work folder, the teacher and the data may not overlap, which is checked before training. Evaluation
    uses the report's evaluation examples when their source is a path, else `evaluation_data`; they are left out of
    training when both come from the same source. The report's checks (`downstream`) are made again on the healed
    model: short inputs cut from the evaluation texts, out of domain and probe on their recorded data or on
    `ood_evaluation_data` / `probe_data` (given without such a record, made on the healed model only).
    """
    require_type("folder", folder, (str, os.PathLike), "the folder `hf-norms convert` wrote")
    if data is None:
        raise ConversionError("heal needs data to distil on (--data): a .txt file, a folder of images or a dataset.")
    check_counts(max_steps=max_steps, batch_size=batch_size, max_length=max_length, save_steps=save_steps,
                 **({"samples": samples} if samples is not None else {}))  # fmt: skip
    check_numbers(learning_rate=learning_rate, cosine_weight=cosine_weight, hidden_state_weight=hidden_state_weight,
                  token_weight=token_weight, head_weight=head_weight, warmup_steps=warmup_steps,
                  **{k: v for k, v in (("max_minutes", max_minutes), ("max_cpu_minutes", max_cpu_minutes)) if v is not None})  # fmt: skip
    target = resolve_device(device)
    processes = Processes.join(target)
    folder = resolved(Path(folder), "Folder")
    if not (folder / REPORT_JSON).is_file():
        raise ConversionError(f"{folder} has no {REPORT_JSON}: heal a folder written by `hf-norms convert`.")
    report = read_report(folder)
    source = resolve_source(
        teacher or report["source"],
        revision=None if teacher else report["source_revision"],
        allow_pickle=allow_pickle,
        token=token,
    )
    places = HealingPlaces.check(folder, output, work_dir, overwrite, resume, source, data, evaluation_data,
                                 **local_data(ood_evaluation_data=ood_evaluation_data))  # fmt: skip
    check_out_of_domain(ood_evaluation_data, healing_data=data, evaluation_data=evaluation_data)
    source_model = inspect_source(source)
    processor = load_processor(folder, source_model.modality)
    if processor is None:
        raise ConversionError(f"{folder} has no tokenizer or image processor to encode the healing data with.")
    column = text_column if source_model.modality == "text" else image_column
    data_source = DataSource(data, data_config, data_split, column) if is_streamed(data) else data
    evaluation, examples = healing_examples(report, source_model.modality, data_source, evaluation_data, samples,
                                            processes.count, token)  # fmt: skip
    student = load_student(folder, report["architecture"])
    max_length, report["evaluation"]["max_length"] = (fitting_max_length(student.config, length)
                                                      for length in (max_length, report["evaluation"]["max_length"]))  # fmt: skip
    checks = checks_for_report(report, processor, source_model.modality, ood_evaluation_data, probe_data, batch_size,
                               evaluation)  # fmt: skip
    teacher_model = load_teacher(source, source_model)
    train_examples = training_dataset(examples, processor, max_length, seed)
    checkpoint = last_complete_checkpoint(places.work, student) if resume and places.work.is_dir() else None
    work = processes.on_main(lambda: places.claim_work(checkpoint, resume))
    resumed_from = int(checkpoint.name.split("-")[1]) if checkpoint else None
    started, cpu_started = time.perf_counter(), time.process_time()
    weights = {"cosine_weight": cosine_weight, "hidden_state_weight": hidden_state_weight,
               "token_weight": token_weight, "head_weight": head_weight}  # fmt: skip
    bf16 = use_bf16(bf16, target)
    steps, teacher_record = train(
        student, teacher_model, processor, train_examples, places.work, modality=source_model.modality,
        device=target, processes=processes, max_steps=max_steps, budget=TimeBudget(max_minutes, max_cpu_minutes),
        batch_size=batch_size, learning_rate=learning_rate, warmup_steps=warmup_steps, save_steps=save_steps,
        loss_weights=weights, bf16=bf16, resume_from=checkpoint, progress=progress, seed=seed, student_dropout=student_dropout,
        probe_batch=encode_batches(processor, evaluation, batch_size, max_length)[0],
    )  # fmt: skip
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    if processes.is_main:
        measure_healed(report, student, teacher_model, processor, evaluation, checks, batch_size)
        report["healing"] = {
            "data": examples.description, "samples": len(examples) if isinstance(examples, Examples) else examples.size,
            "steps": steps, "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
            "threads": torch.get_num_threads(), "loss": loss_description(**weights, student_dropout=student_dropout),
            "student_dropout": student_dropout,
            "learning_rate": learning_rate, "batch_size": batch_size, "max_length": max_length, "bf16": bf16,
            "training_examples": len(train_examples) if isinstance(train_examples, list) else None,
            "streamed": not isinstance(examples, Examples), "resumed_from_step": resumed_from,
            **run_record(target, processes, teacher_record, batch_size, steps - (resumed_from or 0), seconds),
        }  # fmt: skip
        _save_healed(student, processor, folder, places, report)
        if steps >= max_steps:  # finished: the checkpoints are no longer needed; else keep them for --resume
            work.remove_what_this_run_made()
    return processes.from_main(report if processes.is_main else None)


def run_record(device, processes: Processes, teacher: dict, batch_size: int, steps: int, seconds: float) -> dict:
    """Where and how fast a healing run trained, for its report: the device, the processes, the examples of one step
    (`batch_size` per process), the examples per second of the steps this run made, and the teacher's dtype."""
    examples = steps * batch_size * processes.count
    return {"device": device.type, "processes": processes.count, "global_batch_size": batch_size * processes.count,
            "examples_per_second": round(examples / max(seconds, 1e-9), 3), "teacher_dtype": teacher["dtype"],
            "teacher_bf16_cosine": teacher["bf16_cosine"]}  # fmt: skip


def training_dataset(examples: Examples | Stream, processor, max_length: int, seed: int):
    """What the Trainer reads: the encoded examples in memory (`training_examples`), or the stream encoded on the
    fly (`Stream.training_dataset`)."""
    if isinstance(examples, Examples):
        return training_examples(processor, examples, max_length)
    return examples.training_dataset(processor, max_length, seed)


def measure_healed(
    report: dict, student: nn.Module, teacher: nn.Module, processor, evaluation: Examples, checks, batch_size: int
) -> None:
    """Add the `healed` stage to `report`: fidelity on the report's evaluation examples and its downstream checks,
    measured on the student's device."""
    teacher.to(model_device(student))
    batches = encode_batches(processor, evaluation, batch_size, report["evaluation"]["max_length"])
    norm_names = list(next(iter(report["stages"].values()))["per_norm"])
    measured = measure_fidelity(student, teacher, batches, norm_names)
    report["stages"]["healed"] = with_downstream(measured, checks, student, teacher)
    if checks.active:
        report.update(checks.records())


def load_student(folder: Path, architecture: str) -> nn.Module:
    """The converted model in `folder`, refused when its config's norms (`norm_type`, `layer_norm_types`, per-channel
    options) do not match the norm parameters stored: transformers would initialise the missing ones (a hand-edited
    `layer_norm_types` gives a kept LayerNorm a fresh DyT alpha) and drop the others, and heal would train from that."""
    model_class = MODEL_CLASSES[architecture]
    shapes = check_weights(folder, allow_pickle=False)[1]
    check_source_config(folder, shapes)
    with quiet_transformers():
        config = model_class.config_class.from_pretrained(folder)
        check_model_fits(model_class, config, shapes, str(folder / "config.json"))
        student, info = model_class.from_pretrained(
            folder, config=config, dtype=torch.float32, output_loading_info=True
        )
    wrong = sorted(
        key for key in [*info["missing_keys"], *info["unexpected_keys"]] if key.endswith(NEW_PARAMETER_SUFFIXES)
    )
    if wrong:
        raise ConversionError(
            f"{folder}/config.json does not describe the norms its weights hold ({', '.join(wrong[:3])}"
            f"{', ...' if len(wrong) > 3 else ''} missing or left over): was norm_type or layer_norm_types edited? "
            "Restore the config that convert wrote."
        )
    return student


def check_numbers(**values: float) -> None:
    """Refuse a rate, weight or duration that is negative, NaN or infinite (a learning rate must also be > 0)."""
    for name, value in values.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConversionError(f"{name} must be a finite number >= 0, got {value!r}.")
    if values.get("learning_rate") == 0:
        raise ConversionError("learning_rate must be > 0, got 0.")


@dataclasses.dataclass(frozen=True)
class HealingPlaces:
    """Where a healing run reads and writes: the converted folder, the planned output (the folder itself, healed in
    place, or `--output`) and the Trainer's work folder."""

    folder: Path
    output: PlannedOutput
    work: Path
    protected: dict[str, Path]

    @classmethod
    def check(cls, folder, output, work_dir, overwrite, resume, source, data, evaluation_data,
              **other_data) -> HealingPlaces:  # fmt: skip
        """Refuse, before anything is trained, an output or work folder that overlaps the folder, each other, the
        teacher, the data, the working directory or the home folder; an existing output hf-norms did not make; and a
        work folder heal did not make (or, with `resume`, none at all)."""
        protected = {"the teacher": source.path,
                     **data_places(data=data, evaluation_data=evaluation_data, **other_data)}  # fmt: skip
        checkpoint_files(folder)  # its files are copied to the output: refuse a link out of it before training
        if output is None or resolved(Path(output)) == folder:
            planned = PlannedOutput.check(folder, True, protected)  # healed in place: the folder is moved aside
        else:
            planned = PlannedOutput.check(output, overwrite, {**protected, "the converted folder": folder})
        work = folder.parent / f".{folder.name}.healing" if work_dir is None else Path(work_dir)
        work = check_output_location(
            work, {**protected, "the converted folder": folder, "the output": planned.target}, what="Work folder"
        )
        if work.exists() and any(work.iterdir()) and not made_by_hf_norms(work, "heal"):
            raise ConversionError(
                f"Work folder {work} exists and was not made by hf-norms heal; give a new folder (heal creates it)."
            )
        if resume and not work.exists():
            raise ConversionError(f"--resume: there is no work folder {work} to continue from.")
        return cls(folder, planned, work, {**protected, "the converted folder": folder, "the output": planned.target})

    def claim_work(self, checkpoint: Path | None, resume: bool) -> ClaimedFolder:
        """The work folder, claimed for this run: an earlier heal's is continued with `resume` (from `checkpoint`:
        later, incomplete ones are set aside), else moved aside."""
        if checkpoint is not None:
            set_aside_newer_checkpoints(checkpoint)
        return claim_folder(self.work, command="heal", protected=self.protected, overwrite=True, resume=resume,
                            what="Work folder").take()  # fmt: skip


def healing_examples(
    report: dict,
    modality: str,
    data: Any,
    evaluation_data: Any,
    samples: int | None,
    processes: int = 1,
    token: str | bool | None = None,
) -> tuple[Examples, Examples | Stream]:
    """(evaluation examples, training examples): a `DataSource` as a `Stream` (its first `samples` examples in
    memory when `samples` is given) that leaves out the evaluation examples when both come from the same source, or
    other data in memory, at most `samples` of it."""
    evaluation, evaluation_source = _evaluation_examples(report, modality, evaluation_data)
    if not isinstance(data, DataSource):
        return evaluation, load_examples(data, modality, samples)
    held_out = None
    if evaluation_source is not None and _same_path(data.data, evaluation_source):
        texts = frozenset(evaluation.items) if modality == "text" else frozenset()
        held_out = HeldOut(report["evaluation"]["start"], report["evaluation"]["samples"], texts)
    stream = open_stream(data, modality, held_out, processes, token)
    return evaluation, stream if samples is None else stream.first(samples)


def _same_path(data: Any, path: str) -> bool:
    return isinstance(data, (str, Path)) and Path(data).resolve() == Path(path).resolve()


def _evaluation_examples(report: dict, modality: str, evaluation_data: Any) -> tuple[Examples, str | None]:
    """The report's evaluation examples when they can be reloaded (returns their source too), else `evaluation_data`."""
    recorded = report["evaluation"]
    if evaluation_data is not None:
        return load_examples(evaluation_data, modality, recorded["samples"]), None
    if recorded["data"].startswith("built-in"):
        return probe_examples(modality, recorded["samples"]), None
    if Path(recorded["data"]).exists():
        examples = load_examples(recorded["data"], modality, recorded["start"] + recorded["samples"])
        examples = examples.take(recorded["start"], recorded["samples"])
        return examples, recorded["data"]
    raise ConversionError(
        f"The conversion was evaluated on {recorded['data']!r}, which cannot be reloaded: give --eval-data."
    )


def train(
    student: nn.Module,
    teacher: nn.Module,
    processor,
    examples,
    work_path: Path,
    *,
    modality: str,
    device: torch.device,
    processes: Processes,
    max_steps: int,
    budget: TimeBudget,
    batch_size: int,
    learning_rate: float,
    warmup_steps: int,
    save_steps: int,
    loss_weights: dict[str, float],
    bf16: bool,
    resume_from: Path | None,
    progress: bool,
    seed: int,
    probe_batch: dict,
    student_dropout: bool = True,
) -> tuple[int, dict[str, Any]]:
    """Run the `DistillationTrainer` on `examples` (a list in memory, or a `datasets.IterableDataset`), checkpoints
    in `work_path`, resuming from the checkpoint `resume_from` when given, the student in training mode (with its
    config's dropout, or none when `student_dropout` is False). The Trainer places the student on `device` (under a
    launcher, this process's GPU) and shards the data over the `processes`; the teacher follows the student
    (`devices.training_teacher`, checked on `probe_batch`). Returns the number of optimizer steps done in total and
    the teacher's record."""
    collator = (
        transformers.DataCollatorWithPadding(processor) if modality == "text" else transformers.default_data_collator
    )
    args = TrainingArguments(
        output_dir=str(work_path),
        use_cpu=device.type == "cpu",
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        weight_decay=0.0,
        warmup_steps=min(warmup_steps, max_steps // 3),
        max_grad_norm=1.0,
        bf16=bf16,
        logging_steps=max(1, min(10, max_steps // 10)),
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=1,
        report_to="none",
        disable_tqdm=not progress,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        accelerator_config={"dispatch_batches": False},  # each process reads its own shards of a stream
        seed=seed,
        data_seed=seed,
    )
    if not student_dropout:
        _disable_dropout(student)
    teacher, teacher_record = training_teacher(teacher, args.device, bf16, probe_batch)
    budget.agree = processes.largest if processes.count > 1 else None
    trainer = DistillationTrainer(
        model=student,
        args=args,
        teacher=teacher,
        budget=budget,
        **loss_weights,
        train_dataset=examples,
        data_collator=collator,
        callbacks=[TimeLimit(budget), EveryProcessSaved(processes)],
    )
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    student.eval()
    return trainer.state.global_step, teacher_record


def _disable_dropout(model: nn.Module) -> None:
    """Train the student without dropout (`student_dropout=False`): it then matches the teacher's deterministic (eval)
    outputs more closely, but fine-tunes worse with dropout on."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def _save_healed(student: nn.Module, processor, folder: Path, places: HealingPlaces, report: dict) -> None:
    """Write the healed checkpoint to the output when complete (an earlier one there is moved aside). The folder's
    other files are copied along (never through a link out of it)."""
    with places.output.staged("heal") as staging:
        copy_checkpoint_files(folder, staging)
        save_checkpoint(student, processor, staging)
        write_report(staging, report)
