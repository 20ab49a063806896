"""Heal a converted checkpoint by distillation from its LayerNorm original, through the `transformers.Trainer`.

    hf-norms heal DIR --data DATA [--max-steps N] [--resume]

The student is the converted model in `DIR` (all its parameters train); the teacher is the original model named in
`DIR/conversion_report.json` (or `--teacher`), frozen in eval mode. The student trains in training mode, with the
dropout of its source for the first `student_dropout_until` (0.67) of the healing, then without, to match the
teacher's deterministic outputs (`student_dropout=False`: never; the config `convert` wrote may set another dropout
for fine-tuning): LayerNorm divides each token by its own standard deviation, which keeps dropout noise small; DyT and
Derf pass it on, so a model distilled without dropout fine-tunes worse. On unlabeled examples, per batch:

    loss = hidden_state_weight * sum over hidden states l of ||h_l - t_l||^2 / ||t_l||^2  (every layer, real tokens)
         + ||f - g||^2 / ||g||^2 + cosine_weight * (1 - cos(pool(f), pool(g)))   (final hidden states f, g)
         + token_weight * mean over token types k of mean over tokens i of type k of (1 - cos(f_i, g_i))
         + head_weight * (||f_p - g_p||^2 / ||g_p||^2 + ||o - q||^2 / ||q||^2)  (what stock heads read)
         + similarity_weight * mean over examples i of KL(softmax_j(T_ij / tau) || softmax_j(S_ij / tau))  (j != i)
         + position_weight * mean over hidden states l and tokens i of ||h_li - t_li||^2 / ||t_li||^2
         + KL(softmax(teacher logits) || softmax(student logits))          (heads with logits)

with `pool` the pooling of a sentence-transformers checkpoint (its Pooling module: the mean over real tokens for
all-MiniLM-L6-v2, [CLS] for others; `retrieval.sentence_pooling`), else the mean over real tokens (text) or the [CLS]
token (images); `S`, `T` the student's and the teacher's in-batch cosine similarities of pooled final states (the
neighbour order semantic search reads; `distillation.similarity_divergence`); the per-token error of the hidden states
weighs every position alike, whatever its activation scale. The token types are the prefix tokens
([CLS]), the other special tokens ([SEP], ...) and the ordinary tokens (`data.token_type_masks`), so that the few
special tokens weigh as much as the many ordinary ones; `f_p`, `g_p` the prefix tokens' final states and `o`, `q` the
base models' `pooler_output` where they have one (BERT's pooler, which a stock classification head reads). Checkpoints
go to a work folder beside `DIR` every `save_steps`, so an interrupted run continues with `--resume`
(`resume_from_checkpoint`). At the end the healed weights replace `DIR`'s (or go to `--output`), and the report gains
the `healed` stage and a `healing` entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers import TrainingArguments

from ..models.family_registry import MODEL_CLASSES
from ..norms.build import NEW_PARAMETER_SUFFIXES
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
from .arguments import HealArguments
from .checkpoint_io import (
    ConversionError,
    check_weights,
    last_complete_checkpoint,
    resolve_source,
    set_aside_newer_checkpoints,
)
from .config_checks import check_model_fits, check_source_config
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
    DistillationTrainer,
    DropoutUntil,
    EveryProcessSaved,
    TimeBudget,
    TimeLimit,
    disable_dropout,
    loss_description,
)
from .downstream import check_out_of_domain, checks_for_report, data_places, local_data, with_downstream
from .fidelity import measure_fidelity
from .processes import Processes
from .progress import StageLines
from .report import REPORT_JSON, read_report, set_fine_tuning_config, write_report
from .retrieval import RetrievalCheck, measure_retrieval, sentence_pooling
from .sources import (
    check_sentence_transformers_files,
    inspect_source,
    load_processor,
    load_teacher,
    quiet_transformers,
    save_checkpoint,
)
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


def heal(folder: str | os.PathLike, data: Any, **options: Any) -> dict[str, Any]:
    """Distil the converted checkpoint `folder` from its original on `data` (unlabeled); write the healed checkpoint
    to the output (default: `folder`, replaced when complete) and return the report. `options` are the fields of
    `HealArguments` (`max_steps`, `max_minutes`, `learning_rate`, the loss weights, `output`, `resume`, ...); see
    `heal_folder`."""
    return heal_folder(HealArguments(folder=folder, data=data, **options))


@dataclasses.dataclass
class HealingRun:
    """What a healing run reads and trains, checked and loaded before training starts (`prepare`)."""

    arguments: HealArguments
    device: torch.device
    processes: Processes
    folder: Path
    report: dict[str, Any]
    places: HealingPlaces
    modality: str
    processor: Any
    evaluation: Examples
    examples: Examples | Stream
    student: nn.Module
    teacher: nn.Module
    checks: Any
    max_length: int
    retrieval: RetrievalCheck | None
    pooling: str | None  # a sentence-transformers checkpoint's pooling (`retrieval.sentence_pooling`), read first
    staging: Path | None  # the output's staging folder, made first (None in a launcher's other processes)

    @classmethod
    def prepare(cls, a: HealArguments, stack: contextlib.ExitStack) -> HealingRun:
        """Check every input and place, make the output's staging folder (in the main process; `stack` moves it into
        place when it closes), then load the data, the student and the teacher (see `heal_folder`)."""
        device = resolve_device(a.device)
        processes = Processes.join(device)
        folder = resolved(Path(a.folder), "Folder")
        if not (folder / REPORT_JSON).is_file():
            raise ConversionError(f"{folder} has no {REPORT_JSON}: heal a folder written by `hf-norms convert`.")
        report = read_report(folder)
        check_sentence_transformers_files(folder)  # the pooling heal reads: before anything is written
        pooling = sentence_pooling(folder)
        source = resolve_source(a.teacher or report["source"], revision=None if a.teacher else report["source_revision"],
                                allow_pickle=a.allow_pickle, token=a.token)  # fmt: skip
        places = HealingPlaces.check(folder, a, source, **local_data(ood_evaluation_data=a.ood_evaluation_data))
        check_out_of_domain(a.ood_evaluation_data, healing_data=a.data, evaluation_data=a.evaluation_data)
        source_model = inspect_source(source)
        modality = source_model.modality
        processor = load_processor(folder, modality)
        if processor is None:
            raise ConversionError(f"{folder} has no tokenizer or image processor to encode the healing data with.")
        staging = stack.enter_context(places.output.staged("heal")) if processes.is_main else None
        column = a.text_column if modality == "text" else a.image_column
        data = DataSource(a.data, a.data_config, a.data_split, column) if is_streamed(a.data) else a.data
        evaluation, examples = healing_examples(report, modality, data, a.evaluation_data, a.samples,
                                                processes.count, a.token)  # fmt: skip
        training_config = (report.get("fine_tuning_config") or {}).get("source_values", {})
        student = load_student(folder, report["architecture"], training_config)
        max_length, report["evaluation"]["max_length"] = (fitting_max_length(student.config, length)
                                                          for length in (a.max_length, report["evaluation"]["max_length"]))  # fmt: skip
        checks = checks_for_report(report, processor, modality, a.ood_evaluation_data, a.probe_data, a.batch_size,
                                   evaluation)  # fmt: skip
        teacher = load_teacher(source, source_model)
        retrieval = RetrievalCheck.load(source.path, (report.get("retrieval_evaluation") or {}).get("samples", 0),
                                        a.batch_size)  # fmt: skip
        return cls(a, device, processes, folder, report, places, modality, processor, evaluation, examples, student,
                   teacher, checks, max_length, retrieval, pooling, staging)  # fmt: skip


def heal_folder(arguments: HealArguments) -> dict[str, Any]:
    """`hf-norms heal`. `data` is a path or a Hub dataset id, read as a stream (`streaming.open_stream`: a `.txt`,
    `.csv`, `.tsv`, `.json`, `.jsonl` or `.parquet` file or a folder of them (`data_files`, the grammar every command
    reads), a folder of images, a saved `datasets` folder, a Hub id with
    `data_config` and `data_split`; the column `text_column` / `image_column`), or texts, images or a
    `datasets.Dataset` in memory. With `samples`, the first `samples` examples are read into memory and trained on.

    Training runs `max_steps` AdamW steps, or stops after `max_minutes` (wall clock) or `max_cpu_minutes` (this
    process's CPU time, all threads), whichever comes first; the learning rate warms up over `warmup_steps` (at most a
    third of the steps) and decays linearly to zero at whichever end comes first. The loss and its weights are the
    module docstring's. It runs on `device` (a CUDA GPU when there is one, else the CPU), under bfloat16 autocast
    when `bf16` (default: on a GPU that supports it; `devices.use_bf16`), with `batch_size` examples per process and
    step: under `torchrun` or `accelerate launch`, every process trains on its share of the data (`processes`).

    With `resume`, it continues from the last complete checkpoint in `work_dir` (default: `.<folder name>.healing`
    beside the folder); without, an earlier work folder is moved aside. At the end the work folder's checkpoints are
    removed. The output, the work folder, the teacher and the data may not overlap, which is checked before training.
    Evaluation uses the report's evaluation examples when their source is a path, else `evaluation_data`; they are
    left out of training when both come from the same source. The report's checks (`downstream`) are made again on
    the healed model.
    """
    with contextlib.ExitStack() as stack:  # the output is staged from the start and moved into place at its close
        run = HealingRun.prepare(arguments, stack)
        work = heal_prepared(run)
    if work is not None:  # finished: the checkpoints are no longer needed; else they stay for --resume
        work.remove_what_this_run_made()
    return run.processes.from_main(run.report if run.processes.is_main else None)


def heal_prepared(run: HealingRun) -> ClaimedFolder | None:
    """Train `run` and, in the main process, measure the healed model and save it into the run's staging folder;
    returns the work folder when the run finished (its checkpoints are then removed), else None."""
    a, processes, student = run.arguments, run.processes, run.student
    train_examples = training_dataset(run.examples, run.processor, run.max_length, a.seed)
    checkpoint = last_complete_checkpoint(run.places.work, student) if a.resume and run.places.work.is_dir() else None
    work = processes.on_main(lambda: run.places.claim_work(checkpoint, a.resume))
    resumed_from = int(checkpoint.name.split("-")[1]) if checkpoint else None
    started, cpu_started = time.perf_counter(), time.process_time()
    bf16 = use_bf16(a.bf16, run.device)
    try:
        steps, teacher_record = train(run, train_examples, bf16, checkpoint, work)
    except BaseException:
        if work is not None:  # stopped before its first checkpoint (data that does not read): nothing left behind
            work.release_if_unused()
        raise
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    if processes.is_main:
        report, examples = run.report, run.examples
        stage = StageLines("hf-norms heal", a.progress)
        stage.expect(2 + (run.retrieval is not None))
        stage(f"measuring the healed model on {len(run.evaluation)} examples")
        measure_healed(report, student, run.teacher, run.processor, run.evaluation, run.checks, a.batch_size)
        if run.retrieval is not None:
            stage("measuring retrieval with the source's sentence-transformers pipeline")
        measure_retrieval(report, run.retrieval, student, run.teacher)
        report["healing"] = {
            "data": examples.description, "samples": len(examples) if isinstance(examples, Examples) else examples.size,
            "steps": steps, "max_steps": a.max_steps, "seed": a.seed,
            "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
            "threads": torch.get_num_threads(),
            "loss": loss_description(a.loss_weights, a.student_dropout and a.student_dropout_until),
            "student_dropout": a.student_dropout, "student_dropout_until": a.student_dropout_until,
            "pooling": run.pooling,
            "learning_rate": a.learning_rate, "batch_size": a.batch_size,
            "max_length": run.max_length, "bf16": bf16,
            "training_examples": len(train_examples) if isinstance(train_examples, list) else None,
            "streamed": not isinstance(examples, Examples), "resumed_from_step": resumed_from,
            **run_record(run.device, processes, teacher_record, a.batch_size, steps - (resumed_from or 0), seconds),
        }  # fmt: skip
        stage("writing the healed checkpoint and its report")
        _save_healed(student, run.processor, run.folder, run.staging, report)
    return work if processes.is_main and steps >= a.max_steps else None


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


def load_student(folder: Path, architecture: str, training_config: dict[str, Any] | None = None) -> nn.Module:
    """The converted model in `folder`, with the config values it heals with (`training_config`: the source's dropout
    where `convert` saved the values it fine-tunes best with, `convert.set_fine_tuning_config`), refused when its config's norms (`norm_type`, `layer_norm_types`, per-channel
    options) do not match the norm parameters stored: transformers would initialise the missing ones (a hand-edited
    `layer_norm_types` gives a kept LayerNorm a fresh DyT alpha) and drop the others, and heal would train from that."""
    model_class = MODEL_CLASSES[architecture]
    shapes = check_weights(folder, allow_pickle=False)[1]
    check_source_config(folder, shapes)
    with quiet_transformers():
        config = model_class.config_class.from_pretrained(folder, **(training_config or {}))
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


@dataclasses.dataclass(frozen=True)
class HealingPlaces:
    """Where a healing run reads and writes: the converted folder, the planned output (the folder itself, healed in
    place, or `--output`) and the Trainer's work folder."""

    folder: Path
    output: PlannedOutput
    work: Path
    protected: dict[str, Path]

    @classmethod
    def check(cls, folder: Path, a: HealArguments, source, **other_data) -> HealingPlaces:
        """Refuse, before anything is trained, an output or work folder that overlaps the folder, each other, the
        teacher (`source`), the data, the working directory or the home folder; an existing output hf-norms did not
        make; and a work folder heal did not make (or, with `resume`, none at all)."""
        protected = {"the teacher": source.path,
                     **data_places(data=a.data, evaluation_data=a.evaluation_data, **other_data)}  # fmt: skip
        checkpoint_files(folder)  # its files are copied to the output: refuse a link out of it before training
        if a.output is None or resolved(Path(a.output)) == folder:
            planned = PlannedOutput.check(folder, True, protected)  # healed in place: the folder is moved aside
        else:
            planned = PlannedOutput.check(a.output, a.overwrite, {**protected, "the converted folder": folder})
        work = folder.parent / f".{folder.name}.healing" if a.work_dir is None else Path(a.work_dir)
        work = check_output_location(
            work, {**protected, "the converted folder": folder, "the output": planned.target}, what="Work folder"
        )
        if work.exists() and any(work.iterdir()) and not made_by_hf_norms(work, "heal"):
            raise ConversionError(
                f"Work folder {work} exists and was not made by hf-norms heal; give a new folder (heal creates it)."
            )
        if a.resume and not work.exists():
            raise ConversionError(f"--resume: there is no work folder {work} to continue from.")
        return cls(folder, planned, work, {**protected, "the converted folder": folder, "the output": planned.target})

    def claim_work(self, checkpoint: Path | None, resume: bool) -> ClaimedFolder:
        """The work folder, claimed for this run: an earlier heal's is continued with `resume` (from `checkpoint`:
        later, incomplete ones are set aside; the run continues the one that saved it, so it is recorded as this
        run's), else moved aside."""
        if checkpoint is not None:
            set_aside_newer_checkpoints(checkpoint)
        claimed = claim_folder(self.work, command="heal", protected=self.protected, overwrite=True, resume=resume,
                               what="Work folder").take()  # fmt: skip
        if checkpoint is not None:
            claimed.record(checkpoint)
        return claimed


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
        count = recorded["start"] + recorded["samples"]
        column = recorded.get("column") if isinstance(recorded.get("column"), str) else None
        examples = load_examples(recorded["data"], modality, count, column)
        examples = examples.take(recorded["start"], recorded["samples"])
        return examples, recorded["data"]
    raise ConversionError(
        f"The conversion was evaluated on {recorded['data']!r}, which cannot be reloaded: give --eval-data."
    )


# What the Trainer writes into a checkpoint of the student: the model (`save_pretrained`: config, weights and their
# index, remote code), the tokenizer it takes from the text collator (`DataCollatorWithPadding`), the run's state,
# optimizer, scheduler, scaler and random states, and the arguments
TRAINER_CHECKPOINT_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json",
                            "configuration_*.py", "modeling_*.py", "tokenizer.json", "tokenizer_config.json",
                            "vocab.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                            "trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt",
                            "rng_state*.pth")  # fmt: skip


class RecordedSaves(transformers.TrainerCallback):
    """Record each checkpoint the Trainer saves into the work folder as this run's (`ClaimedFolder.record`: the files
    the Trainer writes, `TRAINER_CHECKPOINT_FILES`, so that one a user writes into it while it is saved stays), once
    every process has written its part, and remove the one before it as the Trainer's rotation would with
    `save_total_limit=1`, but only as far as this run recorded it: what a user added to it stays, and so does the
    checkpoint's folder then. At the end the run removes the last one the same way."""

    def __init__(self, work: ClaimedFolder | None, resumed_from: Path | None):
        self.work = work  # None in the other processes of a launcher: the main one records
        self.previous = resumed_from

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.work is None or not checkpoint.is_dir():
            return
        self.work.record(checkpoint, TRAINER_CHECKPOINT_FILES)
        if self.previous is not None and self.previous != checkpoint:
            self.work.remove_recorded(self.previous)
        self.previous = checkpoint


def train(
    run: HealingRun, examples, bf16: bool, resume_from: Path | None, work: ClaimedFolder | None
) -> tuple[int, dict[str, Any]]:
    """Run the `DistillationTrainer` on `examples` (a list in memory, or a `datasets.IterableDataset`), checkpoints in
    the run's work folder, resuming from the checkpoint `resume_from` when given, the student in training mode (with
    its source's dropout, or none without `student_dropout`), under bfloat16 autocast with `bf16`. The Trainer places
    the student on the run's device (under a launcher, this process's GPU) and shards the data over the processes; the
    teacher follows the student (`devices.training_teacher`, checked on one evaluation batch). Each checkpoint saved is
    recorded in the claimed `work` folder (`RecordedSaves`). Returns the number of optimizer steps done in total and
    the teacher's record."""
    a, processes = run.arguments, run.processes
    collator = (
        transformers.DataCollatorWithPadding(run.processor) if run.modality == "text"
        else transformers.default_data_collator
    )  # fmt: skip
    args = TrainingArguments(
        output_dir=str(run.places.work), use_cpu=run.device.type == "cpu", max_steps=a.max_steps,
        per_device_train_batch_size=a.batch_size, learning_rate=a.learning_rate, weight_decay=0.0,
        warmup_steps=min(a.warmup_steps, a.max_steps // 3), max_grad_norm=1.0, bf16=bf16,
        logging_steps=max(1, min(10, a.max_steps // 10)), save_strategy="steps", save_steps=a.save_steps,
        save_total_limit=None, report_to="none", disable_tqdm=not a.progress, remove_unused_columns=False,
        dataloader_num_workers=0, accelerator_config={"dispatch_batches": False},  # each process reads its own shards
        seed=a.seed, data_seed=a.seed,
    )  # fmt: skip
    if not a.student_dropout:
        disable_dropout(run.student)
    probe_batch = encode_batches(run.processor, run.evaluation, a.batch_size, run.max_length)[0]
    teacher, teacher_record = training_teacher(run.teacher, args.device, bf16, probe_batch)
    budget = TimeBudget(a.max_minutes, a.max_cpu_minutes)
    budget.agree = processes.largest if processes.count > 1 else None
    trainer = DistillationTrainer(
        model=run.student, args=args, teacher=teacher, budget=budget, loss_weights=a.loss_weights,
        pooling=run.pooling,
        train_dataset=examples, data_collator=collator,
        callbacks=[TimeLimit(budget), EveryProcessSaved(processes), DropoutUntil(a.student_dropout_until, budget),
                   RecordedSaves(work, resume_from)],
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    run.student.eval()
    return trainer.state.global_step, teacher_record


def _save_healed(student: nn.Module, processor, folder: Path, staging: Path, report: dict) -> None:
    """Write the healed checkpoint into the output's `staging` folder (moved into place when the run ends, an earlier
    output moved aside), its config with the values it fine-tunes best with (`convert.set_fine_tuning_config`). The
    folder's other files are copied along (never through a link out of it)."""
    set_fine_tuning_config(student, report)
    copy_checkpoint_files(folder, staging)
    save_checkpoint(student, processor, staging)
    write_report(staging, report)
