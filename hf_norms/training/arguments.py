"""The options of `hf-norms finetune` that are hf-norms' own, as dataclasses for transformers' `HfArgumentParser`:
which model (`ModelArguments`), which data and task (`DataArguments`) and how the output folder may be used
(`OutputArguments`). The Trainer's own are `TrainingArguments` (`trainer_arguments`).

The values that need no model or data to be judged (batch sizes, counts, rates: `CHECKED_VALUES`) are checked by
`check_values` before anything is read or created, and by the command line (`check_command_line`) before
transformers is imported: this module imports neither transformers nor torch. The option names, and the values a
file of options gives, are checked once `TrainingArguments` is imported (`trainer_arguments.check_trainer_options`),
before the fine-tuning code (datasets, the Trainer, the models).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..cli_parsing import did_you_mean
from ..conversion.arguments import looks_like_a_path
from ..errors import FinetuneInputError
from ..norms.registry import NORM_NAMES, unknown_norm_type

Task = Literal["image-classification", "text-classification", "masked-lm"]
ONE_MODEL = "Give exactly one of model_name_or_path (fine-tune a checkpoint) and model_type (train from scratch)."


@dataclass
class ModelArguments:
    """Which model to fine-tune: a checkpoint (`model_name_or_path`) or a fresh one (`model_type`)."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Checkpoint folder or Hub id: an hf-norms checkpoint, or a stock one of a supported family."},
    )
    model_type: str | None = field(
        default=None,
        metadata={"help": "Train from scratch: vit_norm, deit_norm or bert_norm (with --config_overrides)."},
    )
    norm_type: str | None = field(
        default=None,
        metadata={"help": f"One of {', '.join(NORM_NAMES)}; a stock checkpoint is converted on loading."},
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Config fields to set, e.g. 'hidden_size=64,num_hidden_layers=3,dyt_alpha_init=1.0'."},
    )
    normalization_free_defaults: bool = field(
        default=True,
        metadata={
            "help": "For a model with DyT or Derf norms: fine-tune without dropout (those norms pass dropout noise on, "
            "which LayerNorm removed; all-MiniLM-L6-v2 healed to DyT fine-tunes to 0.905 instead of 0.856 on BBC "
            "News), and say so. False keeps the config's dropout; --config_overrides hidden_dropout_prob=... sets it."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer folder or Hub id (default: the checkpoint's)."}
    )
    image_processor_name: str | None = field(
        default=None,
        metadata={
            "help": "Image processor folder or Hub id (default: the checkpoint's, else resize to image_size and "
            "normalise with mean 0.5, std 0.5)."
        },
    )
    token: str | None = field(
        default=None,
        repr=False,  # never shown where the arguments are printed
        metadata={
            "help": "Hub token for the model, tokenizer, image processor and Hub datasets (default: HF_TOKEN or the "
            "login stored by `hf auth login`). The Trainer's own push uses --hub_token."
        },
    )

    def __post_init__(self) -> None:
        if (self.model_name_or_path is None) == (self.model_type is None):
            raise FinetuneInputError(ONE_MODEL)


@dataclass
class DataArguments:
    """Which data, which task, and how to read it."""

    dataset: str | None = field(
        default=None,
        metadata={
            "help": "packaged:fashion-mnist, packaged:bbc-news, a save_to_disk folder, an imagefolder, a "
            ".csv/.json/.parquet file, or a datasets Hub id (in Python, a Dataset object may be passed instead)."
        },
    )
    task: Task | None = field(
        default=None,
        metadata={"help": "Default: image-classification for image models, text-classification for text models."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    eval_dataset: str | None = field(
        default=None, metadata={"help": "A separate eval source, same forms as --dataset."}
    )
    train_split: str = field(default="train", metadata={"help": "Training split."})
    eval_split: str | None = field(
        default=None, metadata={"help": "Eval split (default: validation, else test, else --eval_fraction of train)."}
    )
    eval_fraction: float = field(
        default=0.1, metadata={"help": "Share of train held out for eval when there is no eval split (0: no eval)."}
    )
    image_column: str = field(default="image", metadata={"help": "Column holding the images."})
    text_column: str = field(default="text", metadata={"help": "Column holding the texts."})
    text_pair_column: str | None = field(default=None, metadata={"help": "Second text column, for sentence pairs."})
    label_column: str = field(default="label", metadata={"help": "Column holding class indices or class names."})
    num_labels: int | None = field(
        default=None, metadata={"help": "Number of classes (default: from the label column); labels must be below it."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use a seeded random subset of train."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use a seeded random subset of eval."})
    max_seq_length: int = field(default=128, metadata={"help": "Texts are truncated to this many tokens."})
    image_mode: str | None = field(
        default=None,
        metadata={"help": "Convert images to this PIL mode first (RGB, L); default: require config.num_channels."},
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Masked-LM: share of tokens masked."})


@dataclass
class OutputArguments:
    """How `--output_dir` may be used (transformers 5 dropped `overwrite_output_dir`; its example scripts' meaning is
    kept, without ever replacing a file hf-norms did not write)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an --output_dir that already holds an earlier run, or files of yours (none of which "
            "is replaced; a folder holding files with the names a run writes is refused)."
        },
    )


OWN_ARGUMENTS = (ModelArguments, DataArguments, OutputArguments)
# The option names of `TrainingArguments` by tested transformers release (`scripts/trainer_option_names.py` writes
# them), so that a mistyped option is answered before transformers is imported
TRAINER_OPTION_NAMES = Path(__file__).with_name("trainer_option_names.json")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# Options of `finetune` (its own and the Trainer's) whose values are judged alone: name -> (the type a command line
# value is read as, whether a value is good, what it must be). None is good where an option may be unset.
COUNT_OPTIONS = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                 "max_seq_length", "max_train_samples", "max_eval_samples", "num_labels")  # fmt: skip
CHECKED_VALUES: dict[str, tuple[type, Callable[[Any], bool], str]] = {
    **{name: (int, lambda value: _integer(value) and value >= 1, "a positive integer") for name in COUNT_OPTIONS},
    "max_steps": (
        int,
        lambda value: _integer(value) and (value >= 1 or value == -1),
        ">= 1, or -1 to train num_train_epochs epochs",
    ),
    "learning_rate": (float, lambda value: _number(value) and value > 0, "a finite number > 0"),
    "num_train_epochs": (float, lambda value: _number(value) and value > 0, "a finite number > 0"),
    **{
        name: (int, lambda value: _integer(value) and 0 <= value < 2**32, f"an integer in [0, {2**32 - 1}]")
        for name in ("seed", "data_seed")
    },  # numpy's seeds; a larger one was a raw ValueError once data was loaded
    "eval_fraction": (float, lambda value: _number(value) and 0 <= value < 1, "a fraction in [0, 1)"),
    "mlm_probability": (float, lambda value: _number(value) and 0 < value < 1, "a probability in (0, 1)"),
}


def check_values(values: Mapping[str, Any]) -> None:
    """Refuse, in one line, a value of `CHECKED_VALUES` that is not good, or a `norm_type` that is not registered
    (others in `values` are not judged here)."""
    if values.get("norm_type") is not None and values["norm_type"] not in NORM_NAMES:
        raise FinetuneInputError(unknown_norm_type(values["norm_type"]))
    for name, value in values.items():
        if name in CHECKED_VALUES and value is not None and not CHECKED_VALUES[name][1](value):
            raise FinetuneInputError(f"{name} must be {CHECKED_VALUES[name][2]}, got {value!r}.")


def arguments_file(argv: list[str]) -> Path | None:
    """The one `.json` or `.yaml` file of options that `argv` gives instead of options, or None."""
    return Path(argv[0]) if len(argv) == 1 and argv[0].endswith((".json", ".yaml", ".yml")) else None


def own_option_names() -> set[str]:
    """The options of `ModelArguments`, `DataArguments` and `OutputArguments` as `HfArgumentParser` spells them:
    `--name` and `--name-with-dashes`, and `--no_name` for a boolean that defaults to True."""
    return spellings(field_names(*OWN_ARGUMENTS))


def field_names(*dataclass_types: type) -> set[str]:
    """The fields of `dataclass_types`, and `no_<field>` for each boolean that defaults to True."""
    fields = [item for kind in dataclass_types for item in dataclasses.fields(kind)]
    return {item.name for item in fields} | {f"no_{item.name}" for item in fields if item.default is True}


def spellings(names: set[str]) -> set[str]:
    """`--name` and `--name-with-dashes` of each of `names`, as `HfArgumentParser` takes them."""
    return {spelling for name in names for spelling in (f"--{name}", f"--{name.replace('_', '-')}")}


def known_trainer_option_names() -> set[str] | None:
    """The installed transformers release's `TrainingArguments` option names (`field_names`) from hf-norms' table of
    the tested releases (`TRAINER_OPTION_NAMES`), without importing transformers; None for a release not in it."""
    table = json.loads(TRAINER_OPTION_NAMES.read_text(encoding="utf-8"))
    names = table.get(importlib.metadata.version("transformers"))
    return set(names) if names is not None else None


def refuse_unknown_options(argv: list[str], known: set[str]) -> None:
    """Refuse, in one line with the nearest one, the first option of `argv` that is not among the spellings `known`."""
    unknown = [name for name in option_names_in(argv) if name not in known]
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise FinetuneInputError(f"unrecognized option {unknown[0]}{hint} (see `hf-norms finetune --help`)")


def check_command_line(argv: list[str]) -> None:
    """Check, before transformers is imported, what `argv` (the arguments of `hf-norms finetune`) gives that needs
    neither the Trainer's options nor a model: the `CHECKED_VALUES` (`--name value` or `--name=value`, in either
    spelling, the last one counting), the `norm_type`, that a checkpoint folder exists and, where every option is
    hf-norms' own, that it names one model (a checkpoint or a model type). Other options are `TrainingArguments`' to
    judge (`trainer_arguments.check_trainer_options`), as is a file of options."""
    if arguments_file(argv) is not None:
        return
    values = {}
    for index, argument in enumerate(argv):
        name, _, text = argument.removeprefix("--").partition("=")
        name = name.replace("-", "_")
        if not argument.startswith("--") or name not in CHECKED_VALUES:
            continue
        text = text if "=" in argument else (argv[index + 1] if index + 1 < len(argv) else "")
        kind, _, what = CHECKED_VALUES[name]
        try:
            values[name] = kind(text)
        except ValueError:
            raise FinetuneInputError(f"{name} must be {what}, got {text!r}.") from None
    check_values({**values, "norm_type": option_value(argv, "norm_type")})
    trainer_names = known_trainer_option_names()
    if trainer_names is not None:  # a tested release: a mistyped option is answered now
        refuse_unknown_options(argv, own_option_names() | spellings(trainer_names))
    if all(name in own_option_names() for name in option_names_in(argv)):  # else a mistyped one may name the model
        check_one_model(argv)
    check_model_path(option_value(argv, "model_name_or_path"))


def option_names_in(argv: list[str]) -> list[str]:
    """The options `argv` gives, as spelled (`--name`, without `=value`), `--help-all` left out."""
    return [argument.split("=")[0] for argument in argv if argument.startswith("--") and argument != "--help-all"]


def check_one_model(argv: list[str]) -> None:
    """Refuse `argv` unless it names exactly one model (a checkpoint or a model type), or asks for `--help-all`."""
    options = {argument[2:].partition("=")[0].replace("-", "_") for argument in argv if argument.startswith("--")}
    if len(options & {"model_name_or_path", "model_type"}) != 1 and "help_all" not in options:
        raise FinetuneInputError(ONE_MODEL)


def option_value(argv: list[str], name: str) -> str | None:
    """The value `argv` gives option `name` (`--name value` or `--name=value`, either spelling; the last counts)."""
    value = None
    for index, argument in enumerate(argv):
        option, equals, text = argument.removeprefix("--").partition("=")
        if argument.startswith("--") and option.replace("-", "_") == name:
            value = text if equals else (argv[index + 1] if index + 1 < len(argv) else None)
    return value


def check_model_path(name_or_path: str | None) -> None:
    """A `--model_name_or_path` that names a local folder (`looks_like_a_path`) that does not exist, refused in one
    line before transformers is imported (a Hub id is read later, with the token)."""
    if name_or_path is None:
        return
    path = Path(name_or_path).expanduser()
    if not path.exists() and looks_like_a_path(name_or_path):
        raise FinetuneInputError(f"There is no checkpoint folder {str(path.resolve())!r}; check --model_name_or_path.")
