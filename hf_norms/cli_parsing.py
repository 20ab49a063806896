"""How the `hf-norms` command line parses its arguments: the conventions every subcommand shares, and the value types.

- Every multi-word option has both spellings, `--norm-type` and `--norm_type`, as transformers' `HfArgumentParser`
  gives `finetune` (`spellings`, applied by `OneLineParser.add_argument`); help lists them once with their value.
- Options are spelled in full: no abbreviations, as in `hf` (`--norm` would match both spellings of `--norm-type`).
- A usage error is one line naming the fix, with exit status 2, as every input error of hf-norms is.
- Values are checked as they are parsed (`positive_int`, ...), so `--batch-size 0` is a usage error.

Imports nothing but the standard library, so that every `--help` answers at once.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, NoReturn


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
    """An argument parser with the conventions above: every multi-word option in both spellings, no abbreviations, and
    usage errors as one line naming the fix, with exit status 2. Its subcommand parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", SpellingsHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        return super().add_argument(*[spelling for name in names for spelling in spellings(name)], **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return value


def port_number(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise ValueError(text)
    return value


positive_int.__name__ = "positive integer"  # argparse names the type in its message: "invalid positive integer value"
positive_float.__name__ = "positive number"
non_negative_float.__name__ = "number >= 0"
port_number.__name__ = "port (0-65535)"
