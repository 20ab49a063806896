"""How `hf-norms finetune ARGS.json` / `ARGS.yaml` reads each value: as transformers' `HfArgumentParser` reads the
option's text on the command line (its argparse action: the type, the choices, a list where the option takes several
values), so a file gets exactly the command line's checks. A text is converted as the command line converts it
(`max_steps: "5"` is 5); a value of another JSON type is taken only where it is one the option's type holds (an
integer for a number, true or false for a flag, a mapping where the option takes a mapping), so `output_dir: 123` or
`report_to: [[a]]` is one line naming the option and the file, not a `TypeError` once the run has started.
"""

from __future__ import annotations

import argparse
import reprlib
from typing import Any

from transformers.hf_argparser import string_to_bool

from ..errors import FinetuneInputError

VALUE_LIMIT = 10_000  # values (each item and each level counted) in one list or mapping of an options file
KINDS = {int: "an integer", float: "a number", string_to_bool: "true or false"}
SHOWN = reprlib.Repr()  # a value shown in a message: a few levels and items of it
SHOWN.maxlevel, SHOWN.maxstring, SHOWN.maxother, SHOWN.maxlist, SHOWN.maxdict = 3, 60, 60, 6, 6


def read_value(name: str, value: Any, action: argparse.Action, annotation: str, where: str) -> Any:
    """`value`, the file's value of option `name` (whose parser action is `action` and whose field type, as text, is
    `annotation`), as the command line would read it; a `FinetuneInputError` naming the option and `where` (the file)
    when it is of another type."""
    if value is None and ("None" in annotation or action.default is None):
        return None
    if isinstance(value, (list, dict)) and counted_values(value) > VALUE_LIMIT:
        raise FinetuneInputError(f"{name} in {where} holds more than {VALUE_LIMIT} values; give a short one.")
    takes_list = action.nargs in ("+", "*") or "list" in annotation
    kind = KINDS.get(action.type) or (f"one of {', '.join(map(str, action.choices))}" if action.choices else "a text")
    kind += ", or a list of them" if takes_list else ""
    kind += ", or a mapping" if "dict" in annotation else ""
    wrong = FinetuneInputError(f"{name} in {where} must be {kind}, got {SHOWN.repr(value)}.")
    if isinstance(value, dict) and "dict" in annotation:
        return value
    items = value if isinstance(value, list) and takes_list else [value]
    read = [read_scalar(item, action, annotation) for item in items]
    if any(item is WRONG for item in read):
        raise wrong
    return read if items is value else read[0]


WRONG = object()  # what `read_scalar` returns for a value of another type


def read_scalar(value: Any, action: argparse.Action, annotation: str) -> Any:
    """One value as `action` reads its text (a text through the action's type, as on the command line; a number or
    flag as itself where the type holds it), or `WRONG`."""
    if isinstance(value, bool) and "bool" in annotation:  # `str | bool` options, flags
        return value
    if isinstance(value, str):
        try:
            read = action.type(value) if action.type is not None else value
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            return WRONG
        return read if not action.choices or read in action.choices else WRONG
    if action.choices:
        return value if value in action.choices else WRONG
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if action.type is int and number and isinstance(value, int):
        return value
    if action.type is float and number:
        return float(value)
    return WRONG


def counted_values(value: Any) -> int:
    """How many values `value` holds, each list and mapping and each item counted every time it is reached (so YAML's
    aliases count as the copies they stand for), stopping once past `VALUE_LIMIT`: an alias bomb costs no more."""
    count, pending = 0, [value]
    while pending and count <= VALUE_LIMIT:
        item = pending.pop()
        count += 1
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count
