"""The options of `hf-norms finetune` that are hf-norms' own, as dataclasses for transformers' `HfArgumentParser`:
which model (`ModelArguments`), which data and task (`DataArguments`) and how the output folder may be used
(`OutputArguments`). The Trainer's own are `TrainingArguments`.

The values that need no model or data to be judged (batch sizes, counts, rates: `CHECKED_VALUES`) are checked by
`check_values` before anything is read or created, and by the command line (`check_command_line`) before the
fine-tuning code (datasets, the Trainer) is imported, as are the option names: those of these dataclasses and of
`TrainingArguments` (`trainer_fields`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import stat
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, NoReturn

from transformers import HfArgumentParser, TrainingArguments

from ..cli_parsing import did_you_mean
from ..conversion.checkpoint_io import looks_like_a_path
from ..errors import FinetuneInputError
from ..models.norm_registry import NORM_NAMES, unknown_norm_type
from ..readers import read_json
from .option_values import read_value

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


# TrainingArguments options whose value is keyword arguments: a mapping (`TrainingArguments` reads the JSON text of one
# from the command line, and keeps any other text as it is, which the Trainer would unpack with ** once training starts)
KEYWORD_OPTIONS = ("lr_scheduler_kwargs", "activation_checkpointing_kwargs", "gradient_checkpointing_kwargs")


def check_keyword_options(training_args: TrainingArguments) -> None:
    """Refuse, in one line, a `KEYWORD_OPTIONS` value that is not a mapping (`--lr_scheduler_kwargs '[1]'`)."""
    for name in KEYWORD_OPTIONS:
        value = getattr(training_args, name, None)
        if value is not None and not isinstance(value, dict):
            raise FinetuneInputError(
                f"{name} must be a mapping (on the command line, the JSON text of one, such as '{{\"power\": 2.0}}'), "
                f"got {value!r}."
            )


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


def read_arguments_file(path: Path) -> dict[str, Any]:
    """The options in a `.json` or `.yaml` file, read by `readers.read_json` (size and nesting bounded), each value read
    as the command line reads the option's text (`option_values.read_value`): an unknown option or a value of the
    wrong type is refused in one line naming it and the file. A file that is not a regular file (a FIFO, which would
    wait for a writer, a device, a folder) is refused without being opened."""
    fix = "give a file of options, as `hf-norms finetune --help` lists them"
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = True  # missing or unreadable: `read_json` says why
    if not regular:
        raise FinetuneInputError(
            f"{path} is not a regular file; give a .json or .yaml file of options, as `hf-norms finetune --help` "
            "lists them."
        )
    options = read_json(path, fix) if path.suffix == ".json" else read_json(path, fix, _yaml, "YAML")
    if not isinstance(options, dict):
        raise FinetuneInputError(f"{path} holds a {type(options).__name__}, not a mapping of options; {fix}.")
    actions, annotations = option_actions()
    read = {}
    for name, value in options.items():
        if name not in annotations:
            raise FinetuneInputError(
                f"{name} in {path} is not an option of hf-norms finetune; see `hf-norms finetune --help`."
            )
        read[name] = read_value(name, value, actions[name], annotations[name], str(path))
    return read


def _yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(" ".join(str(error).split())) from None


def check_command_line(argv: list[str]) -> None:
    """Check the `CHECKED_VALUES` that `argv` (the arguments of `hf-norms finetune`, or one file of them) gives, and
    that it names one model (a checkpoint or a model type), before the fine-tuning code (datasets, the Trainer) is
    imported: `--name value` or `--name=value`, in either spelling, the last one counting."""
    path = arguments_file(argv)
    if path is not None:
        options = read_arguments_file(path)
        check_values(options)
        if (options.get("model_name_or_path") is None) == (options.get("model_type") is None):
            raise FinetuneInputError(ONE_MODEL)
        check_model_path(options.get("model_name_or_path"))
        return
    unknown = [argument.split("=")[0] for argument in argv if argument.startswith("--")
               and argument.split("=")[0] not in option_names() | {"--help-all"}]  # fmt: skip
    if unknown:
        hint = did_you_mean(unknown[0], option_names())
        raise FinetuneInputError(f"unrecognized option {unknown[0]}{hint} (see `hf-norms finetune --help`)")
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
    options = {argument[2:].partition("=")[0].replace("-", "_") for argument in argv if argument.startswith("--")}
    if len(options & {"model_name_or_path", "model_type"}) != 1 and "help_all" not in options:
        raise FinetuneInputError(ONE_MODEL)
    check_model_path(option_value(argv, "model_name_or_path"))


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


@cache
def trainer_fields() -> dict[str, tuple[str, Any]]:
    """`{name: (type, default)}` of transformers' `TrainingArguments`; a default made by a factory is None."""
    return {
        item.name: (str(item.type), None if item.default is dataclasses.MISSING else item.default)
        for item in dataclasses.fields(TrainingArguments)
    }


def option_names() -> set[str]:
    """Every option `hf-norms finetune` takes, as `HfArgumentParser` spells them: `--name` and `--name-with-dashes` for
    each field of the argument dataclasses and of `TrainingArguments`, `--no_name` for a boolean that defaults to
    True."""
    fields = {item.name: (str(item.type), item.default) for dataclass_type in (ModelArguments, DataArguments, OutputArguments)
              for item in dataclasses.fields(dataclass_type)}  # fmt: skip
    fields |= trainer_fields()
    names = {*fields, *(f"no_{name}" for name, (kind, default) in fields.items() if "bool" in kind and default is True)}
    return {spelling for name in names for spelling in (f"--{name}", f"--{name.replace('_', '-')}")}


ARGUMENT_CLASSES = (ModelArguments, DataArguments, OutputArguments, TrainingArguments)


class FinetuneArgumentParser(HfArgumentParser):
    """transformers' parser of the argument dataclasses, whose usage errors are one line with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_argument_parser(**parser_options: Any) -> HfArgumentParser:
    """The transformers-style parser of `ModelArguments`, `DataArguments`, `OutputArguments` and `TrainingArguments`."""
    return FinetuneArgumentParser(ARGUMENT_CLASSES, **parser_options)


@cache
def option_actions() -> tuple[dict[str, argparse.Action], dict[str, str]]:
    """`({field: the argparse action that reads its value}, {field: its type as text})` for every field of the
    argument dataclasses: how the command line reads each option (a `--no_x` flag's action is not the one)."""
    actions: dict[str, argparse.Action] = {}
    for action in build_argument_parser()._actions:
        if isinstance(action, argparse._StoreAction):
            actions.setdefault(action.dest, action)
    annotations = {name: type_text(hint) for arguments in ARGUMENT_CLASSES
                   for name, hint in typing.get_type_hints(arguments).items() if name in actions}  # fmt: skip
    return actions, annotations


def type_text(hint: Any) -> str:
    """A field's declared type as text, each member of a union by its name (`dict | str | NoneType`). Read from the
    class's annotations: `HfArgumentParser` narrows the dataclass fields' own `type` in place."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return " | ".join(
        getattr(member, "__name__", str(member)) for member in (typing.get_args(hint) if union else [hint])
    )
