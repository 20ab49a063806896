"""Fine-tune any norm_type with the transformers `Trainer`, from Python or as `hf-norms finetune`, on one process or many.

Tasks: image classification (ViT, DeiT), text classification and masked-LM fine-tuning (BERT). The model comes from a
checkpoint folder or Hub id (an hf-norms checkpoint, or a stock one of a supported family, converted to `--norm_type` as it
loads) or is built from scratch (`--model_type vit_norm --config_overrides hidden_size=64,...`). The data is a
`datasets` dataset, an imagefolder, a CSV/JSON/Parquet file or a packaged real dataset (`hf_norms.training.data`),
checked before training starts.

The Trainer is `NormTrainer` (no weight decay on norm and 1-D parameters), logs each norm's state
(`NormStateCallback`), and computes accuracy and macro F1 with the metric modules that the package ships. Under
`torchrun` or `accelerate launch --multi_gpu` (CPU processes with gloo too), SepNorm's BatchNorm becomes a synchronised
BatchNorm.

Python:

```python
from transformers import TrainingArguments
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune

result = finetune(
    ModelArguments(model_type="vit_norm", norm_type="dyt", config_overrides="image_size=28,patch_size=7,"
                   "num_channels=1,hidden_size=64,num_hidden_layers=4,num_attention_heads=4,intermediate_size=128"),
    DataArguments(dataset="packaged:fashion-mnist", max_train_samples=2000),
    TrainingArguments(output_dir="out", use_cpu=True, max_steps=200, eval_strategy="steps", eval_steps=100),
)
print(result.eval_metrics["eval_accuracy"])
```

Command line (every `TrainingArguments` option is accepted too):

```
hf-norms finetune --model_name_or_path <folder or Hub id> --norm_type dtn --dataset train.csv \
    --text_column text --label_column label --output_dir out --max_steps 100 --use_cpu
```
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from huggingface_hub import CommitInfo, get_token
from transformers import (
    AutoImageProcessor,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    PreTrainedConfig,
    TrainingArguments,
    ViTImageProcessorPil,
    default_data_collator,
    set_seed,
)
from transformers.training_args import ParallelMode

from ..conversion.checkpoint_io import (
    ConversionError,
    check_trainer_checkpoint,
    last_complete_checkpoint,
    set_aside_newer_checkpoints,
    trainer_checkpoints,
)
from ..conversion.sources import load_processor
from ..errors import handled_errors, require_type
from ..hub.publish import pushed_line
from ..models.family_registry import FAMILIES, family_of
from ..models.family_spec import FamilySpec
from ..models.image_processing_norm import GrayscaleImageProcessor
from ..output_folders import ClaimedFolder, claim_folder
from ..readers import read_json_object
from ..redaction import redacted_output, tokens_redacted
from .arguments import CHECKED_VALUES, DataArguments, ModelArguments, arguments_file, check_values
from .data import (
    FinetuneInputError,
    ImageClassificationTransform,
    TextTransform,
    check_batch_norm_batches,
    encode_labels,
    load_dataset_source,
    resolve_label_names,
    select_splits,
    subsample,
    validate_image_column,
    validate_text_column,
)
from .metrics import argmax_logits, classification_metrics, masked_lm_metrics
from .model_setup import (
    Calibration,
    build_config,
    build_model,
    checkpoint_model_type,
    converted_from_layernorm,
    model_family,
)
from .sync_batchnorm import convert_sync_batchnorm
from .trainer import NormStateCallback, NormTrainer, create_trainer_model_card, only_the_trainers_bar
from .trainer_arguments import (
    FinetuneArgumentParser,
    build_argument_parser,
    check_keyword_options,
    read_arguments_file,
)

logger = logging.getLogger(__name__)

DEFAULT_PIXEL_MEAN_STD = 0.5  # from-scratch image processor: x -> (x / 255 - 0.5) / 0.5 per channel


@dataclass
class FinetuneResult:
    """What `finetune` leaves: the trainer (its model holds the final, or best, weights) and the metrics (no eval
    metrics without an eval set)."""

    trainer: NormTrainer
    train_metrics: dict[str, float]
    eval_metrics: dict[str, float] | None
    pushed: CommitInfo | None = None  # the commit of `push_to_hub` (None without it, and on other processes)


def build_image_processor(model_args: ModelArguments, config: PreTrainedConfig) -> Any:
    """The named or the checkpoint's image processor, else one that resizes to `image_size` and normalises to [-1, 1]:
    for a one-channel model, `GrayscaleImageProcessor`, which turns the RGB images `pipeline` opens into one channel."""
    source = model_args.image_processor_name or model_args.model_name_or_path
    if source is not None and (model_args.image_processor_name or _has_file(source, "preprocessor_config.json")):
        return _processor(source, "image", model_args.token)
    size = config.image_size
    processor_class = GrayscaleImageProcessor if config.num_channels == 1 else ViTImageProcessorPil
    return processor_class(
        size={"height": size, "width": size},
        image_mean=[DEFAULT_PIXEL_MEAN_STD] * config.num_channels,
        image_std=[DEFAULT_PIXEL_MEAN_STD] * config.num_channels,
    )


def _has_file(source: str, name: str) -> bool:
    """Whether a local checkpoint folder holds `name`; a Hub id is assumed to (its loader says so if not)."""
    path = Path(source)
    return (path / name).is_file() if path.is_dir() else True


def build_tokenizer(model_args: ModelArguments) -> Any:
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source is None:
        raise FinetuneInputError("A BERT trained from scratch needs a tokenizer: pass --tokenizer_name.")
    return _processor(source, "text", model_args.token)


def _processor(source: str, modality: str, token: str | None) -> Any:
    """The tokenizer or image processor of a Hub id, or of a local folder as a conversion reads it
    (`sources.load_processor`: its JSON files through the bounded reader, one line when it does not load)."""
    folder = Path(source).expanduser()
    if not folder.is_dir():
        return (AutoTokenizer if modality == "text" else AutoImageProcessor).from_pretrained(source, token=token)
    processor = load_processor(folder, modality)
    if processor is None:
        kind, option = (
            ("tokenizer", "--tokenizer_name") if modality == "text" else ("image processor", "--image_processor_name")
        )
        raise FinetuneInputError(f"{folder} holds no {kind} files; give one with {option}.")
    return processor


def prepare_training_arguments(
    model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments
) -> None:
    """Refuse a batch size, count or rate that is wrong on its own (`arguments.check_values`: the Trainer would
    silently reinterpret `max_steps=0` as "train the epochs", and fail on a batch size of 0 only once it is training)
    or keyword arguments that are not a mapping (`arguments.check_keyword_options`), and keep the raw columns:
    hf-norms prepares each batch's model inputs from them."""
    check_values({name: getattr(args, name) for args in (model_args, data_args, training_args)
                  for name in CHECKED_VALUES if hasattr(args, name)})  # fmt: skip
    check_keyword_options(training_args)
    if training_args.remove_unused_columns:
        logger.info("Setting remove_unused_columns=False: batches are built from the raw columns.")
        training_args.remove_unused_columns = False


def output_folder(
    model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments, overwrite: bool
) -> ClaimedFolder | None:
    """`output_dir` checked for this run (`output_folders.claim_folder`): never the checkpoint, the tokenizer, the data
    or a place around them, the working directory or home; an earlier hf-norms run's folder is continued when resuming;
    with `overwrite`, any other non-empty folder is moved aside. Every process checks; only the one that saves gets the
    folder to write into (the others get None)."""
    sources = {"the checkpoint": model_args.model_name_or_path, "the tokenizer": model_args.tokenizer_name,
               "the image processor": model_args.image_processor_name, "the dataset": data_args.dataset,
               "the eval dataset": data_args.eval_dataset}  # fmt: skip
    protected = {what: Path(value) for what, value in sources.items() if value and Path(value).exists()}
    claimed = claim_folder(
        training_args.output_dir, command="finetune", protected=protected, overwrite=overwrite,
        resume=training_args.resume_from_checkpoint is not None, what="--output_dir",
        flags=("--overwrite_output_dir", "--resume_from_checkpoint last"),
    )  # fmt: skip
    return claimed if training_args.should_save else None


def check_checkpoint_to_resume(training_args: TrainingArguments) -> None:
    """Refuse, before anything is loaded, `resume_from_checkpoint=last` when output_dir holds no checkpoint-*."""
    resume, folder = training_args.resume_from_checkpoint, Path(training_args.output_dir)
    if resume is not None and resume.lower() == "last" and not (folder.is_dir() and trainer_checkpoints(folder)):
        raise FinetuneInputError(f"resume_from_checkpoint=last, but {folder} holds no checkpoint-*.")


def checkpoint_to_resume(training_args: TrainingArguments, model) -> str | None:
    """`resume_from_checkpoint` as a folder that holds this model's training state (`check_trainer_checkpoint`): a
    path as given, or, for `last`, the newest complete checkpoint in output_dir, the later incomplete ones (saves a
    killed run did not finish) set aside by the process that saves."""
    resume = training_args.resume_from_checkpoint
    if resume is None:
        return None
    try:
        if resume.lower() != "last":
            check_trainer_checkpoint(Path(resume), model)
            check_steps_left(Path(resume), training_args.max_steps)
            return resume
        last = last_complete_checkpoint(Path(training_args.output_dir), model)
    except ConversionError as error:
        raise FinetuneInputError(f"resume_from_checkpoint: {error}") from None
    check_steps_left(last, training_args.max_steps)
    if training_args.should_save:
        set_aside_newer_checkpoints(last)
    return str(last)


def check_steps_left(checkpoint: Path, max_steps: int) -> None:
    """Refuse a checkpoint already at `max_steps` or past it (when it is set): the Trainer would train 0 steps and
    save the model and its card as a finished run."""
    step = read_json_object(checkpoint / "trainer_state.json", "resume from another checkpoint").get("global_step", 0)
    if 0 < max_steps <= step:
        raise FinetuneInputError(
            f"resume_from_checkpoint: {checkpoint} is at step {step}, and max_steps is {max_steps}: there is nothing "
            "left to train; give a larger --max_steps."
        )


def load_splits(
    data_args: DataArguments,
    training_args: TrainingArguments,
    dataset: datasets.Dataset | datasets.DatasetDict | None = None,
    token: str | None = None,
) -> dict[str, datasets.Dataset]:
    """`{"train": ..., "eval": ...}` (no `eval` without an eval set), subsampled as asked; rank 0 loads first.

    The splits come from `dataset` (a lone `Dataset` is the train split) or else from the source `data_args.dataset`;
    `token` authenticates Hub datasets.
    """
    if (dataset is None) == (data_args.dataset is None):
        raise FinetuneInputError("Give exactly one dataset: --dataset (a source), or a Dataset object in Python.")
    with training_args.main_process_first(desc="loading the dataset"):
        if dataset is None:
            splits = load_dataset_source(
                data_args.dataset, data_args.dataset_config_name, data_args.max_train_samples, token=token
            )
        else:
            splits = dataset if isinstance(dataset, datasets.DatasetDict) else datasets.DatasetDict(train=dataset)
        eval_splits = load_dataset_source(data_args.eval_dataset, token=token) if data_args.eval_dataset else None
    seed = training_args.seed
    train, evaluation = select_splits(
        splits, data_args.train_split, data_args.eval_split, data_args.eval_fraction, seed, eval_splits
    )
    parts = {"train": subsample(train, data_args.max_train_samples, seed)}
    if evaluation is not None:
        parts["eval"] = subsample(evaluation, data_args.max_eval_samples, seed)
    return parts


def prepare_inputs(
    task: str,
    model_args: ModelArguments,
    data_args: DataArguments,
    config: PreTrainedConfig,
    parts: dict[str, datasets.Dataset],
) -> tuple[Any, Callable[[dict], dict], Callable[[list], dict]]:
    """Check the input columns of every split, and return `(processing_class, transform, data_collator)`.

    The transform turns raw rows into model inputs (`Dataset.with_transform`); the collator batches them (padding
    texts, and masking tokens for masked LM).
    """
    if task == "image-classification":
        image_processor = build_image_processor(model_args, config)
        for name, part in parts.items():
            validate_image_column(part, data_args.image_column, name, config.num_channels, data_args.image_mode)
        transform = ImageClassificationTransform(
            image_processor, data_args.image_column, data_args.label_column, config.num_channels, data_args.image_mode
        )
        _check_image_size(transform(parts["train"][:1])["pixel_values"], config)
        return image_processor, transform, default_data_collator

    tokenizer = build_tokenizer(model_args)
    for name, part in parts.items():
        validate_text_column(part, data_args.text_column, name)
        if data_args.text_pair_column:
            validate_text_column(part, data_args.text_pair_column, name, option="text_pair_column")
    if data_args.max_seq_length > config.max_position_embeddings:
        raise FinetuneInputError(
            f"max_seq_length={data_args.max_seq_length} exceeds the model's {config.max_position_embeddings} positions."
        )
    masked_lm = task == "masked-lm"
    transform = TextTransform(
        tokenizer,
        data_args.text_column,
        data_args.max_seq_length,
        label_column=None if masked_lm else data_args.label_column,
        text_pair_column=data_args.text_pair_column,
    )
    if masked_lm:
        return (
            tokenizer,
            transform,
            DataCollatorForLanguageModeling(tokenizer, mlm_probability=data_args.mlm_probability),
        )
    return tokenizer, transform, DataCollatorWithPadding(tokenizer)


def finetune(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    dataset: datasets.Dataset | datasets.DatasetDict | None = None,
    *,
    overwrite_output_dir: bool = False,
) -> FinetuneResult:
    """Fine-tune (and evaluate) a model of any norm_type with `NormTrainer`.

    The data is `data_args.dataset` (a source: folder, file, Hub id, `packaged:<name>`) or the `dataset` object. Every
    data and config check runs before training (raising `FinetuneInputError`), and so does the check of `output_dir`
    (`output_folder`): never the checkpoint, the data, the working directory or home; an existing folder only when it
    holds an earlier hf-norms run being resumed, or with `overwrite_output_dir`. Trains (resuming from
    `resume_from_checkpoint`, a folder or `last`, after checking it holds this model's weights), saves the model with
    its tokenizer or image processor, the metrics and `trainer_state.json` to `output_dir`, then evaluates when there
    is an eval set.

    A sentence-transformers source's own files (modules.json, pooling, ...) are not copied: every task trains a head
    (classifier, masked LM), which `SentenceTransformer` would load without, so the output is a transformers model of
    its task, and its card says so (`pipeline(model=...)` runs it).
    """
    for name, value, kind in (("model_args", model_args, ModelArguments), ("data_args", data_args, DataArguments),
                              ("training_args", training_args, TrainingArguments)):  # fmt: skip
        require_type(name, value, kind, f"a {kind.__name__}")
    prepare_training_arguments(model_args, data_args, training_args)
    output = output_folder(model_args, data_args, training_args, overwrite_output_dir)
    check_checkpoint_to_resume(training_args)
    family, task = family_and_task(model_args, data_args)
    parts = load_splits(data_args, training_args, dataset, model_args.token)
    label_names = None
    if task != "masked-lm":
        label_names = resolve_label_names(parts, data_args.label_column, data_args.num_labels)
        parts = {name: encode_labels(part, data_args.label_column, label_names) for name, part in parts.items()}
    set_seed(training_args.seed)
    config = build_config(model_args, family, label_names)
    processing_class, transform, collator = prepare_inputs(task, model_args, data_args, config, parts)
    if config.norm_spec.uses_batch_statistics(config):
        if not training_args.dataloader_drop_last:
            check_batch_norm_batches(
                len(parts["train"]),
                training_args.per_device_train_batch_size,
                training_args.world_size,
                config.num_prefix_tokens,
            )

    calibration = None
    if converted_from_layernorm(model_args):
        column = data_args.image_column if family.modality == "image" else data_args.text_column
        calibration = Calibration.from_training_data(parts["train"], column, processing_class, data_args.max_seq_length)
    model = build_model(model_args, task, family, config, calibration)
    if training_args.parallel_mode == ParallelMode.DISTRIBUTED:
        model = convert_sync_batchnorm(model, training_args.device.type)
    resume = checkpoint_to_resume(training_args, model)
    if output is not None:
        output.take()
    masked_lm = task == "masked-lm"
    trainer = NormTrainer(
        model=model,
        args=training_args,
        train_dataset=parts["train"].with_transform(transform),
        eval_dataset=parts["eval"].with_transform(transform) if "eval" in parts else None,
        processing_class=processing_class,
        data_collator=collator,
        compute_metrics=masked_lm_metrics() if masked_lm else classification_metrics(),
        preprocess_logits_for_metrics=argmax_logits if masked_lm else None,
        callbacks=[NormStateCallback()],
    )
    return train_evaluate_and_save(trainer, resume, data_args.dataset)


def family_and_task(model_args: ModelArguments, data_args: DataArguments) -> tuple[FamilySpec, str]:
    """The model family and the task to fine-tune it on (`data_args.task`, else the family's default), refused when
    the family does not run that task."""
    family = model_family(
        model_args.model_type or checkpoint_model_type(model_args.model_name_or_path, model_args.token)
    )
    task = data_args.task or family.default_task
    if not family.task_heads:
        raise FinetuneInputError(
            f"hf-norms fine-tunes no task on {family.display_name}: transformers has no classification head for its "
            f"config; fine-tune one of {sorted(name for name, spec in FAMILIES.items() if spec.task_heads)}."
        )
    if task not in family.task_heads:
        runs_it = sorted(name for name, spec in FAMILIES.items() if task in spec.task_heads)
        raise FinetuneInputError(
            f"Task {task} is not available for {family.name}: it runs on {runs_it}; "
            f"{family.name} runs {sorted(family.task_heads)}."
        )
    return family, task


def train_evaluate_and_save(trainer: NormTrainer, resume: str | None, dataset_name: str | None) -> FinetuneResult:
    """Train (from the checkpoint `resume`), save the model, metrics and state to the output folder, evaluate when
    there is an eval set, then write the card as transformers' example scripts do; with `push_to_hub`, one push of the
    finished folder (weights, code, tokenizer or image processor, metrics, card): `NormTrainer` pushes nothing before."""
    with only_the_trainers_bar():  # checkpoint saves and the best model's reload draw no bar over the Trainer's
        train_metrics = trainer.train(resume_from_checkpoint=resume).metrics
    trainer.save_model()
    trainer.log_metrics("train", train_metrics)
    trainer.save_metrics("train", train_metrics)
    trainer.save_state()
    eval_metrics = None
    if trainer.eval_dataset is not None:
        eval_metrics = trainer.evaluate()
        trainer.log_metrics("eval", eval_metrics)
        trainer.save_metrics("eval", eval_metrics)
    pushed = None
    if trainer.args.push_to_hub:
        pushed = trainer.push_to_hub(dataset=dataset_name)
    else:
        create_trainer_model_card(trainer, dataset=dataset_name)
    return FinetuneResult(trainer, train_metrics, eval_metrics, pushed)


def _check_image_size(pixel_values: torch.Tensor, config: PreTrainedConfig) -> None:
    """The image processor's output `[1, C, H, W]` fits the model: `C = num_channels`, and `H = W = image_size`, or
    for DINOv2 (which interpolates its position grid to any size) `H` and `W` multiples of the patch size."""
    channels, height, width = pixel_values.shape[1:]
    if family_of(config.model_type).any_image_size:
        fits = channels == config.num_channels and height % config.patch_size == 0 and width % config.patch_size == 0
        expected = f"({config.num_channels}, multiple of {config.patch_size}, multiple of {config.patch_size})"
    else:
        fits = (channels, height, width) == (config.num_channels, config.image_size, config.image_size)
        expected = f"({config.num_channels}, {config.image_size}, {config.image_size})"
    if not fits:
        raise FinetuneInputError(
            f"The image processor makes {tuple(pixel_values.shape[1:])} pixel arrays, but the model takes {expected} "
            "(num_channels, height, width): give an image processor of that size (--image_processor_name) "
            "or set image_size/num_channels in --config_overrides."
        )


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parsed_arguments(parser: FinetuneArgumentParser, argv: list[str]) -> list:
    """The argument dataclasses of `argv` (options, or one `.json` / `.yaml` file of them); the `ValueError` of a
    dataclass that refuses its values (an unknown key, `TrainingArguments`' own checks) is an input error."""
    try:
        if (path := arguments_file(argv)) is not None:
            return list(parser.parse_dict(read_arguments_file(path)))
        *arguments, unknown = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    except ValueError as error:
        raise FinetuneInputError(str(error)) from None
    if unknown:
        raise FinetuneInputError(f"unrecognized arguments {unknown}; see `hf-norms finetune --help`.")
    return arguments


def main(argv: list[str] | None = None) -> int:
    """`hf-norms finetune ...` and `python -m hf_norms.training.finetune ...` (what torchrun and accelerate launch):
    ModelArguments, DataArguments and TrainingArguments options, or one .json/.yaml file of them. Input errors are one
    line on stderr, with exit status 2; nothing it prints holds a token (`redacted_output`)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_argument_parser(prog="hf-norms finetune", description=__doc__.split("\n\n")[0])
    with redacted_output(argv), handled_errors("hf-norms finetune") as outcome:
        model_args, data_args, output_args, training_args = parsed_arguments(parser, argv)
        with tokens_redacted(model_args.token, training_args.hub_token, get_token()):
            result = finetune(
                model_args, data_args, training_args, overwrite_output_dir=output_args.overwrite_output_dir
            )
            if result.pushed is not None:
                print(pushed_line(training_args.output_dir, result.trainer.hub_model_id, result.pushed), flush=True)
    return outcome.status


if __name__ == "__main__":
    sys.exit(main())
