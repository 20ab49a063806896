"""The options of `hf-norms finetune` that need transformers: `TrainingArguments` beside hf-norms' own dataclasses
(`arguments`), parsed by transformers' `HfArgumentParser` as in its example scripts (`build_argument_parser`).

`check_trainer_options` judges what the command line left to `TrainingArguments` (`arguments.check_command_line`
judges the rest before transformers is imported): the option names, and every option of a `.json` / `.yaml` file,
once `TrainingArguments` is imported and before the fine-tuning code (datasets, the Trainer, the models) is.
"""

from __future__ import annotations

import argparse
import os
import stat
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

from transformers import HfArgumentParser, TrainingArguments

from ..errors import FinetuneInputError
from ..readers import read_json
from .arguments import (
    ONE_MODEL,
    OWN_ARGUMENTS,
    arguments_file,
    check_model_path,
    check_one_model,
    check_values,
    field_names,
    own_option_names,
    refuse_unknown_options,
    spellings,
)
from .option_values import read_value

ARGUMENT_CLASSES = (*OWN_ARGUMENTS, TrainingArguments)
# TrainingArguments options whose value is keyword arguments: a mapping (`TrainingArguments` reads the JSON text of one
# from the command line, and keeps any other text as it is, which the Trainer would unpack with ** once training starts)
KEYWORD_OPTIONS = ("lr_scheduler_kwargs", "activation_checkpointing_kwargs", "gradient_checkpointing_kwargs")


def check_trainer_options(argv: list[str]) -> None:
    """Refuse, in one line, an option of `argv` that neither hf-norms' dataclasses nor `TrainingArguments` have (with
    the nearest one), then not exactly one model; for one file of options, what `read_arguments_file` refuses, a
    wrong `CHECKED_VALUES` value, a missing checkpoint folder, or not exactly one model."""
    path = arguments_file(argv)
    if path is not None:
        options = read_arguments_file(path)
        check_values(options)
        if (options.get("model_name_or_path") is None) == (options.get("model_type") is None):
            raise FinetuneInputError(ONE_MODEL)
        check_model_path(options.get("model_name_or_path"))
        return
    refuse_unknown_options(argv, option_names())
    check_one_model(argv)


def option_names() -> set[str]:
    """Every option `hf-norms finetune` takes, as `HfArgumentParser` spells them: hf-norms' own
    (`arguments.own_option_names`) and those of `TrainingArguments` (`trainer_field_names`)."""
    return own_option_names() | spellings(trainer_field_names())


def trainer_field_names() -> set[str]:
    """The option names of the installed `TrainingArguments` (`arguments.field_names`)."""
    return field_names(TrainingArguments)


def check_keyword_options(training_args: TrainingArguments) -> None:
    """Refuse, in one line, a `KEYWORD_OPTIONS` value that is not a mapping (`--lr_scheduler_kwargs '[1]'`)."""
    for name in KEYWORD_OPTIONS:
        value = getattr(training_args, name, None)
        if value is not None and not isinstance(value, dict):
            raise FinetuneInputError(
                f"{name} must be a mapping (on the command line, the JSON text of one, such as '{{\"power\": 2.0}}'), "
                f"got {value!r}."
            )


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
