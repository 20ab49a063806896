"""A model card's YAML metadata read as the Hub reads it, with bounded work: YAML 1.2's core schema, as the Hub's
JavaScript parser applies it, on PyYAML's safe loader.

- Plain scalars resolve as in the core schema: `null`/`~`/empty, `true`/`false` (not `yes`, `on`, ...), integers in
  decimal, `0o` octal and `0x` hexadecimal, and floats with `.inf` and `.nan`. YAML 1.1's sexagesimal (`1:20:30`),
  binary (`0b101`), `_` separators, merge keys (`<<`) and implicit timestamps are plain text. Explicit `!!int`,
  `!!float` and `!!bool` tags accept only the core schema's forms, and `!!timestamp` only a valid date or time.
- Digits are bounded: an integer of more than `MAX_INTEGER_DIGITS` significant digits is read as a float, as the
  Hub's JavaScript reads every number (infinite, hence null in JSON, beyond the float range), so no value needs
  quadratic work to read or to write out as JSON.
- Anchors and aliases (`*name`, which could expand a few bytes into gigabytes), collections nested deeper than
  `MAX_CARD_DEPTH` and metadata of more than `MAX_CARD_NODES` values are refused as the parser meets them, before the
  rest is read: the loader is `readers.bounded_yaml_loader`, the one that reads every YAML text hf-norms reads.

PyYAML (a dependency of huggingface_hub and transformers) is imported when the first card is read.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from ...readers import JSON_DEPTH, YAML_NODES, bounded_yaml_loader

MAX_CARD_DEPTH = JSON_DEPTH  # collections nested deeper are refused
MAX_CARD_NODES = YAML_NODES  # scalars, lists and mappings in one card's metadata
MAX_INTEGER_DIGITS = 64  # an integer with more significant digits is read as a float
_NULL = re.compile(r"null|Null|NULL|~|")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INTEGER = re.compile(r"(?P<sign>[-+]?)(?:0o(?P<oct>[0-7]+)|0x(?P<hex>[0-9a-fA-F]+)|(?P<dec>[0-9]+))")
_FLOAT = re.compile(
    r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)
_BASES = {"oct": 8, "hex": 16, "dec": 10}


def read_card_yaml(text: str) -> Any:
    """The value of a card's YAML metadata block; ValueError, saying why, when it does not parse, uses an alias or a
    tag the safe loader refuses, nests deeper than `MAX_CARD_DEPTH` or holds more than `MAX_CARD_NODES` values."""
    import yaml

    loader = _card_loader(yaml)(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        raise ValueError(f"the YAML metadata does not parse: {' '.join(str(error).split())[:300]}") from None
    finally:
        loader.dispose()


def core_integer(text: str) -> int | float | None:
    """A core-schema integer (`12`, `-0o17`, `0xFF`), exact up to `MAX_INTEGER_DIGITS` significant digits and a float
    beyond (`inf` past the float range); None when `text` is no such integer."""
    match = _INTEGER.fullmatch(text)
    if match is None:
        return None
    kind = next(name for name in _BASES if match[name] is not None)
    digits = match[kind].lstrip("0") or "0"
    sign = -1 if match["sign"] == "-" else 1
    if len(digits) <= MAX_INTEGER_DIGITS:
        return sign * int(digits, _BASES[kind])
    if kind == "dec":
        return sign * float(digits)  # linear in the digits; inf past the float range
    return sign * float("inf")  # more than 64 octal or hex digits: at least 8**65, past a float's 1.8e308


def core_float(text: str) -> float | None:
    """A core-schema float (`1.5`, `-2e3`, `.inf`, `.nan`), or None."""
    if _FLOAT.fullmatch(text) is None:
        return None
    lowered = text.lower()
    return float(lowered.replace(".", "") if lowered.endswith((".inf", ".nan")) else text)


@functools.cache
def _card_loader(yaml: Any) -> type:
    """The bounded loader of `readers` (anchors and aliases, nesting deeper than `MAX_CARD_DEPTH` and more than
    `MAX_CARD_NODES` nodes refused) with the core schema's resolvers and constructors."""
    return bounded_yaml_loader(_core_constructor(yaml), _core_resolver(yaml), "card metadata")


def _core_resolver(yaml: Any) -> type:
    """A resolver with the core schema's implicit tags of plain scalars, and no others."""

    class CoreResolver(yaml.resolver.BaseResolver):
        """The core schema's implicit tags of plain scalars."""

    implicit = [
        ("null", _NULL, ["n", "N", "~", ""]),
        ("bool", re.compile("|".join(_BOOL)), list("tTfF")),
        ("int", _INTEGER, list("-+0123456789")),
        ("float", _FLOAT, list("-+0123456789.")),
    ]
    for name, pattern, first in implicit:
        anchored = re.compile(rf"^(?:{pattern.pattern})$")
        CoreResolver.add_implicit_resolver(f"tag:yaml.org,2002:{name}", anchored, first)
    return CoreResolver


def _core_constructor(yaml: Any) -> type:
    """The safe constructor with the core schema's integers, floats and booleans, and timestamps that fail cleanly."""
    refused = yaml.constructor.ConstructorError

    class CoreConstructor(yaml.constructor.SafeConstructor):
        """The safe constructor, with the core schema's integers, floats and booleans."""

        def construct_core(self, node: Any) -> Any:
            text = self.construct_scalar(node)
            kind = node.tag.rsplit(":", 1)[1]
            value = {"int": core_integer, "float": core_float, "bool": _BOOL.get}[kind](text)
            if value is None:
                raise refused(None, None, f"{text[:40]!r} is not a core-schema {kind}")
            return value

        def construct_timestamp(self, node: Any) -> Any:
            """An explicit `!!timestamp`: a date or a time of YAML 1.1's form, or a ConstructorError (PyYAML's own
            fails with AttributeError or ValueError on `99999-01-01` or `2024-13-45`)."""
            text = node.value if isinstance(node.value, str) else ""
            if self.timestamp_regexp.match(text) is None:
                raise refused(None, None, f"{text[:40]!r} is not a timestamp")
            try:
                return self.construct_yaml_timestamp(node)
            except (ValueError, OverflowError) as error:
                raise refused(None, None, f"{text[:40]!r} is not a date: {error}") from None

    for kind in ("int", "float", "bool"):
        CoreConstructor.add_constructor(f"tag:yaml.org,2002:{kind}", CoreConstructor.construct_core)
    CoreConstructor.add_constructor("tag:yaml.org,2002:timestamp", CoreConstructor.construct_timestamp)
    return CoreConstructor
