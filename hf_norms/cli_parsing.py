"""How the `hf-norms` command line parses its arguments: each command's options are the fields of one dataclass, parsed
by `ArgumentsParser` as transformers' `HfArgumentParser` parses them (the same options from the same field types,
`--no_x` for a boolean that defaults to True), with hf-norms' conventions. It is built on argparse alone, so that
`--help` and every usage error are answered without importing transformers (or torch).

- An option is declared once, as a dataclass field (its type, default, help and other spellings): the command line,
  the Python API and the reports read the same object. `option(help, default, **metadata)` declares one.
- Every multi-word option has both spellings, `--norm-type` and `--norm_type` (`spellings`), and so has each alias
  a field names (`--eval-data`); help lists them once with their value.
- Options are spelled in full: no abbreviations, as in `hf` (`--norm` would match both spellings of `--norm-type`).
  An unknown option is refused before anything else is checked, with the nearest known one (`--dryrun`: "did you
  mean --dry-run?"), as the `hf` CLI does.
- A usage error is one line naming the fix, with exit status 2, as every input error of hf-norms is; a value no run
  can use is refused by the dataclass itself, when it is made, in one line too.

Field metadata besides argparse's own (`help`, `aliases`, `choices`, `metavar`, `nargs`, `const`): `positional`
(the argument has no flag), `repeatable` (`--include A --include B` gives a list), `negation` (`--no-bf16` sets the
field to False) and `cli=False` (the Python API's only).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NoReturn

HF_NORMS_METADATA = ("positional", "repeatable", "negation", "cli")


def option(help: str, default: Any = None, **metadata: Any) -> Any:
    """A dataclass field: its default (`default`; a list is copied for each object) and its command-line help and
    metadata (see the module docstring)."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"help": help, **metadata})
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def required(help: str, **metadata: Any) -> Any:
    """A dataclass field without a default (a required option, or a positional argument)."""
    return dataclasses.field(metadata={"help": help, **metadata})


def flag(arguments: Any, name: str) -> str:
    """How the command line spells field `name` of an arguments dataclass, for messages that serve the command line and
    the Python API: `--batch-size (batch_size)`, `--eval-samples (evaluation_samples)` (its first alias)."""
    metadata = next(field.metadata for field in dataclasses.fields(arguments) if field.name == name)
    if metadata.get("positional"):
        return name
    return f"{(metadata.get('aliases') or ['--' + name.replace('_', '-')])[0]} ({name})"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean NEAREST?` for a mistyped `name`, where one of `known` is close to it; else nothing. Letters
    swapped count first (`--prot`: `--port`); of an option's two spellings, the one written as `name` is (`--dryrun`:
    `--dry-run`)."""

    def closeness(option: str) -> tuple[bool, float, bool]:
        ratio = difflib.SequenceMatcher(None, name, option).ratio()
        return sorted(option) == sorted(name), ratio, ("_" in option) == ("_" in name)

    best = max(known, key=closeness, default=None)
    if best is None or not (closeness(best)[0] or closeness(best)[1] >= 0.6):
        return ""
    return f"; did you mean {best}?"


def spellings(option: str) -> list[str]:
    """Both spellings of a multi-word long option, the given one first (`--norm-type`, `--norm_type`); any other
    argument name alone."""
    if not option.startswith("--"):
        return [option]
    words = option[2:]
    other = "--" + (words.replace("-", "_") if "-" in words else words.replace("_", "-"))
    return [option] if other == option else [option, other]


class SpellingsHelpFormatter(argparse.HelpFormatter):
    """Lists an option's spellings once, then its value: `--norm-type, --norm_type NORM_TYPE`."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        return f"{', '.join(action.option_strings)} {value}"


class OneLineParser(argparse.ArgumentParser):
    """An argument parser with the conventions above: no abbreviations, and usage errors as one line naming the fix,
    with exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", SpellingsHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        if args is not None:
            self.refuse_unknown_options(args)
        return super().parse_known_args(args, namespace)

    def refuse_unknown_options(self, args: Sequence[str]) -> None:
        """A usage error naming the first option in `args` this parser does not know, and the nearest one it does,
        before argparse reports anything else (a required option the typo was meant to give). Options end at `--`; a
        parser of subcommands reads only its own, up to the command."""
        for argument in args:
            if argument == "--":
                return
            if not argument.startswith("-") or self._negative_number_matcher.match(argument):
                if self._subparsers is not None:
                    return
                continue
            name = argument.split("=", 1)[0]
            if name not in self._option_string_actions:
                self.error(f"unrecognized option {name}{did_you_mean(name, self._option_string_actions)}")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


TRUE_WORDS = ("yes", "true", "t", "y", "1")
FALSE_WORDS = ("no", "false", "f", "n", "0")


def read_bool(text: str | bool) -> bool:
    """A boolean option's value as `HfArgumentParser` reads it: yes/no, true/false, t/f, y/n, 1/0 (any case)."""
    if isinstance(text, bool):
        return text
    if text.lower() in TRUE_WORDS + FALSE_WORDS:
        return text.lower() in TRUE_WORDS
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {text} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


def value_type(annotation: Any) -> Any:
    """The type a field's command-line value is read as: `X` of `X | None`; the field's own type otherwise."""
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    present = [member for member in members if member is not type(None)]
    return present[0] if len(present) == 1 else annotation


class ArgumentsParser(OneLineParser):
    """The parser of one dataclass (`dataclass_type`), each field an option as `HfArgumentParser` makes it, with the
    conventions and the metadata of the module docstring; `parse(argv)` returns the dataclass."""

    def __init__(self, dataclass_type: type, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dataclass_type = dataclass_type
        annotations = typing.get_type_hints(dataclass_type)
        for field in dataclasses.fields(dataclass_type):
            if field.init:
                self.add_field(field, value_type(annotations[field.name]))

    def add_field(self, field: dataclasses.Field, kind: Any) -> None:
        """The option (or positional argument) of one field, read as `kind`."""
        metadata = dict(field.metadata)
        positional, repeatable, negation, cli = (metadata.pop(key, None) for key in HF_NORMS_METADATA)
        aliases = list(
            dict.fromkeys(spelling for alias in metadata.pop("aliases", []) for spelling in spellings(alias))
        )
        names, default = [*spellings(f"--{field.name}"), *aliases], dataclass_default(self.dataclass_type, field.name)
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if cli is False:
            return
        if positional:
            self.add_argument(field.name, nargs=None if required else "?", metavar=metadata.get("metavar"),
                              default=default, help=metadata.get("help"))  # fmt: skip
            return
        if repeatable:
            self.add_argument(*names, dest=field.name, action="append", default=None, metavar=metadata.get("metavar"),
                              help=metadata.get("help"))  # fmt: skip
            return
        read = read_bool if kind is bool else kind
        if typing.get_origin(kind) is Literal:  # each choice read from its text, as `HfArgumentParser` reads it
            choices = {str(choice): choice for choice in typing.get_args(kind)}
            metadata.setdefault("choices", tuple(choices.values()))
            read = lambda text: choices.get(text, text)  # noqa: E731
        elif kind is bool and default is not None:
            metadata = {"nargs": "?", "const": True, **metadata}
        self.add_argument(*names, dest=field.name, type=read, required=required, default=None if required else default,
                          **metadata)  # fmt: skip
        opposite = f"the opposite of --{field.name.replace('_', '-')}"
        if kind is bool and default is True:
            self.add_argument(*spellings(f"--no_{field.name}"), dest=field.name, action="store_false", help=opposite)
        if negation:
            self.add_argument(*spellings(negation), dest=field.name, action="store_const", const=False, help=opposite)

    def parse(self, argv: Sequence[str]) -> Any:
        """The dataclass of `argv`: an unknown option or a missing one is a usage error; a value the dataclass refuses
        raises its error (an `InputError`)."""
        namespace = self.parse_args(list(argv))
        values = {field.name: getattr(namespace, field.name) for field in dataclasses.fields(self.dataclass_type)
                  if hasattr(namespace, field.name)}  # fmt: skip
        return self.dataclass_type(**{name: value for name, value in values.items() if value is not None or
                                      dataclass_default(self.dataclass_type, name) is None})  # fmt: skip


def dataclass_default(cls: type, name: str) -> Any:
    field = next(field for field in dataclasses.fields(cls) if field.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default
