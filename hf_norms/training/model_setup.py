"""The model a fine-tune starts from: its family, its config (labels, overrides, the options that keep a LayerNorm
checkpoint's function, the choices made for normalization-free models) and the model itself, loaded, built from
scratch, or, for a LayerNorm checkpoint loaded into DyT or Derf, calibrated on training examples first
(`hf_norms.convert_model`).

A model with DyT or Derf norms fine-tunes with the config values the registry says they fine-tune best with
(`normalization_free_choices`, `NormSpec.fine_tuning_config`: no dropout, and why); a checkpoint `convert` or `heal`
wrote carries them already, this sets them on older ones and on LayerNorm checkpoints loaded into DyT or Derf (calibrated
DyT on BBC News, seed 0: 0.575 with dropout 0.1, 0.867 without). The choice is logged, never changes the architecture
(the head stays the stock one), and `--normalization_free_defaults false` or an explicit value in `--config_overrides`
overrides it."""

from __future__ import annotations

import copy
import difflib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from huggingface_hub.errors import StrictDataclassError
from transformers import PreTrainedConfig, PreTrainedModel

from ..conversion.arguments import looks_like_a_path
from ..conversion.checkpoint_io import (
    ConversionError,
    check_weights,
    read_json_object,
)
from ..conversion.config_checks import check_config_values, check_model_fits, check_size_fields, check_source_config
from ..conversion.convert import convert_model
from ..errors import FinetuneInputError
from ..models.family_registry import FAMILIES, MODEL_CLASSES, family_of
from ..models.family_spec import FamilySpec
from ..norms.build import NORM_TYPES, STOCK, fine_tuning_config, function_preserving_options
from .arguments import ModelArguments

logger = logging.getLogger(__name__)

# options of the norm types a conversion cannot load plainly, which a user may set explicitly (else the conversion's
# defaults: DyT's and Derf's per channel)
CONVERTED_OPTIONS = frozenset(
    option.name for spec in NORM_TYPES.values() if spec.preserving_options is None for option in spec.options
)
CALIBRATION_EXAMPLES, CALIBRATION_HELD_OUT = 64, 16  # training examples a converted DyT/Derf model is calibrated on


def model_family(model_type: str) -> FamilySpec:
    """The family of a stock or hf-norms model type (`bert`, `bert_norm`); another is refused naming the families
    that have a fine-tuning head and the nearest model type."""
    family = family_of(model_type)
    if family is None:
        tunable = [spec for spec in FAMILIES.values() if spec.task_heads]
        types = sorted(name for spec in tunable for name in (spec.stock_model_type, spec.model_type))
        nearest = difflib.get_close_matches(model_type, types, n=1) if isinstance(model_type, str) else []
        names = [spec.display_name for spec in tunable]
        raise FinetuneInputError(
            f"Model type {model_type!r} is not supported{f' (did you mean {nearest[0]!r}?)' if nearest else ''}: "
            f"hf-norms fine-tunes {', '.join(names[:-1])} and {names[-1]} models (model_type one of {types})."
        )
    return family


def apply_config_overrides(config: PreTrainedConfig, overrides: str | None) -> None:
    """Set the `key=value,key=value` fields of `config`, each parsed like its current value (bool, int, float, string;
    int, float or string where it is None), then run the config's own validation and the value checks every
    checkpoint's config gets (`check_config_values`: sizes, dropout probabilities in [0, 1), ...), so that a value no
    model trains with is refused before anything is created. Raises `FinetuneInputError`."""
    try:
        for item in overrides.split(",") if overrides else ():
            key, separator, text = item.partition("=")
            key, text = key.strip(), text.strip()
            if not separator or not hasattr(config, key):
                raise FinetuneInputError(
                    f"config_overrides: {item!r} is not key=value for a field of {type(config).__name__}."
                )
            try:
                value = _parse_like(text, getattr(config, key))
            except ValueError as error:
                raise FinetuneInputError(f"config_overrides: {key}={text!r}: {error}") from None
            setattr(config, key, value)
        config.validate()
        if overrides:
            check_config_values(config.to_dict(), "--config_overrides")
    except ConversionError as error:
        raise FinetuneInputError(str(error)) from None
    except (ValueError, StrictDataclassError) as error:
        if isinstance(error, FinetuneInputError):
            raise
        raise FinetuneInputError(f"Invalid model config: {error}") from error


def _parse_like(text: str, current: Any) -> Any:
    """`text` as a value of the type of `current` (a `ValueError` when it is not one)."""
    if isinstance(current, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() == "true"
    if isinstance(current, (int, float)):
        return type(current)(text)
    if current is None:
        for parse in (int, float):
            try:
                return parse(text)
            except ValueError:
                pass
    return text


def build_config(model_args: ModelArguments, family: FamilySpec, label_names: list[str] | None) -> PreTrainedConfig:
    """The model config: the checkpoint's (or the family's defaults), with the norm type, labels and overrides."""
    config_class = family.config_class
    options: dict[str, Any] = {}
    if model_args.norm_type is not None:
        options["norm_type"] = model_args.norm_type
    if label_names is not None:
        options.update(
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: index for index, name in enumerate(label_names)},
        )
    if converted_from_layernorm(model_args):
        explicit = override_keys(model_args.config_overrides)
        options.update(function_preserving_options(model_args.norm_type, explicit) or {})
    if label_names is not None:
        check_label_count(model_args.model_name_or_path, len(label_names))
    try:
        if model_args.model_name_or_path is not None:
            config = config_class.from_pretrained(model_args.model_name_or_path, token=model_args.token, **options)
        else:
            config = config_class(**options)
    except (ValueError, StrictDataclassError) as error:  # a field of the wrong type in config.json
        raise FinetuneInputError(f"Invalid model config: {error}") from error
    apply_config_overrides(config, model_args.config_overrides)
    normalization_free_choices(config, model_args)
    return config


def check_label_count(source: str | None, count: int) -> None:
    """Refuse, before any config is built, a label count whose classifier would dwarf a local checkpoint's weights
    (`check_size_fields`)."""
    folder = Path(source).expanduser() if source is not None else None
    if folder is None or not folder.is_dir():
        return
    try:
        config = read_json_object(folder / "config.json", "the checkpoint's config must be a JSON object")
        check_size_fields({**config, "num_labels": count}, check_weights(folder, allow_pickle=True)[1], "The labels")
    except ConversionError as error:
        raise FinetuneInputError(str(error)) from None


def normalization_free_choices(config: PreTrainedConfig, model_args: ModelArguments) -> dict[str, Any]:
    """Set, and log, the config values the checkpoint's norms fine-tune measurably better with
    (`NormSpec.fine_tuning_config`: DyT and Derf, no dropout), where its config holds others (a checkpoint `convert`
    or `heal` wrote holds them already), unless the user set them (`--config_overrides`) or turned the choices off
    (`--normalization_free_defaults false`). Returns the fields set."""
    if not model_args.normalization_free_defaults or model_args.model_name_or_path is None:
        return {}  # a model trained from scratch learns with its dropout from the start
    explicit = override_keys(model_args.config_overrides)
    proposed, specs = fine_tuning_config(config)
    chosen = {name: value for name, value in proposed.items() if name not in explicit}
    for name, value in chosen.items():
        setattr(config, name, value)
    if chosen:
        logger.warning(
            "%s norms: fine-tuning with %s: %s. The head stays the stock one. Keep the config's values with "
            "--normalization_free_defaults false or set them with --config_overrides.",
            "/".join(spec.short_name for spec in specs), ", ".join(f"{k}={v}" for k, v in chosen.items()),
            "; ".join(dict.fromkeys(spec.fine_tuning_reason for spec in specs)),
        )  # fmt: skip
    return chosen


def converted_from_layernorm(model_args: ModelArguments) -> bool:
    """Whether the model is a LayerNorm checkpoint loaded into another norm_type."""
    if model_args.model_name_or_path is None or model_args.norm_type in (None, STOCK):
        return False
    stored, _ = PreTrainedConfig.get_config_dict(model_args.model_name_or_path, token=model_args.token)
    return stored.get("norm_type", STOCK) == STOCK


def override_keys(overrides: str | None) -> set[str]:
    """The config fields that `--config_overrides` sets."""
    return {item.partition("=")[0].strip() for item in overrides.split(",")} if overrides else set()


def build_model(
    model_args: ModelArguments, task: str, family: FamilySpec, config: PreTrainedConfig, calibration: Calibration | None
) -> PreTrainedModel:
    """The task's hf-norms model class, loaded (a new head where the checkpoint's differs) or freshly initialised.

    A LayerNorm checkpoint loaded into DyT or Derf, which no option makes function-preserving, is first calibrated
    (`hf_norms.convert_model`) on `calibration`, training examples: from the naive swap, fine-tuning does not learn.
    """
    model_class = MODEL_CLASSES[family.task_heads[task]]
    check_size(model_class, config, model_args.model_name_or_path)
    if model_args.model_name_or_path is None:
        return model_class(config)
    loading = {"ignore_mismatched_sizes": True, "token": model_args.token}
    if calibration is None or function_preserving_options(config.norm_type) is not None:
        return model_class.from_pretrained(model_args.model_name_or_path, config=config, **loading)
    teacher_config = copy.deepcopy(config)
    teacher_config.norm_type = STOCK
    teacher = model_class.from_pretrained(model_args.model_name_or_path, config=teacher_config, **loading)
    explicit = override_keys(model_args.config_overrides) & CONVERTED_OPTIONS
    student = convert_model(
        teacher, config.norm_type, calibration.examples, processor=calibration.processor,
        calibration_samples=calibration.samples, max_length=calibration.max_length,
        heal_steps=0,  # a few dozen training examples: too few to distil on; the warning says how to heal
        **{name: getattr(config, name) for name in explicit},
    )  # fmt: skip
    stages = student.conversion_report["stages"]
    logger.warning(
        "Calibrated %s on %d training examples before fine-tuning (the checkpoint has LayerNorms): mean cosine to "
        "the LayerNorm model %.3f from the naive swap's %.3f. Expect accuracy well below the LayerNorm model's from "
        "this start (all-MiniLM-L6-v2 on 400 BBC News articles, 2 epochs: 0.58 against 0.89); convert with "
        "`hf-norms convert --calibration-data` first (it heals by default), or fine-tune with norm_type layernorm.",
        config.norm_type, calibration.samples,
        stages["calibrated"]["end_to_end"]["mean_cosine"], stages["naive"]["end_to_end"]["mean_cosine"],
    )  # fmt: skip
    return student


def check_size(model_class: type[PreTrainedModel], config: PreTrainedConfig, source: str | None) -> None:
    """Refuse, before allocating it, a model larger than memory or, from a local checkpoint, much larger than its
    weights (`check_model_fits`: e.g. `num_labels` of a million)."""
    folder = Path(source).expanduser() if source is not None else None
    stored = check_weights(folder, allow_pickle=True)[1] if folder is not None and folder.is_dir() else None
    try:
        check_model_fits(model_class, config, stored, "The model config (checkpoint, labels and --config_overrides)")
    except ConversionError as error:
        raise FinetuneInputError(str(error)) from None


@dataclass
class Calibration:
    """Training examples (texts or images) and the tokenizer or image processor that encodes them, for calibrating a
    converted DyT or Derf model; the examples after the first `samples` are held out to measure the calibration."""

    examples: list
    processor: Any
    samples: int
    max_length: int

    @classmethod
    def from_training_data(cls, part: datasets.Dataset, column: str, processor: Any, max_length: int) -> Calibration:
        count = min(len(part), CALIBRATION_EXAMPLES + CALIBRATION_HELD_OUT)
        examples = list(part.select(range(count))[column])
        return cls(examples, processor, max(1, min(CALIBRATION_EXAMPLES, count - CALIBRATION_HELD_OUT)), max_length)


def checkpoint_model_type(name_or_path: str, token: str | None = None) -> str:
    """The model type of a checkpoint folder or Hub id (read with `token`); a local folder's config is first checked
    against its weights' headers (`check_source_config`), so a broken or oversized config is refused before anything
    is allocated."""
    path = Path(name_or_path).expanduser()
    try:
        if path.is_dir():
            return check_source_config(path, check_weights(path, allow_pickle=True)[1]).get("model_type", "")
        if looks_like_a_path(name_or_path):
            raise FinetuneInputError(
                f"There is no checkpoint folder {str(path.resolve())!r}; check --model_name_or_path."
            )
    except ConversionError as error:
        raise FinetuneInputError(str(error)) from None
    return PreTrainedConfig.get_config_dict(name_or_path, token=token)[0].get("model_type", "")
