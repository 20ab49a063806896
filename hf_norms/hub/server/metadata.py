"""What the loopback Hub derives from a model repo's files for `model_info` and `list_models`, as the Hub does.

- `cardData`: the YAML metadata block at the top of `README.md` (between `---` lines), as JSON;
- `pipeline_tag`, `library_name`: the card's (`library_name` is `transformers` when the card names none and the repo
  holds a `config.json`);
- `tags`: the card's `tags`, then the library, `safetensors` when there are weights in it, the `model_type` of
  `config.json`, the pipeline tag, the card's languages, `dataset:<id>`, `base_model:<id>` and `license:<id>`;
- `safetensors`: `{"parameters": {dtype: count}, "total": count}` from the headers of the `.safetensors` files at the
  repo's root (the headers only: the weights are never read).

Metadata that cannot be read is left out, never an error: a card whose YAML is invalid, is not a mapping, is larger
than `MAX_CARD_METADATA_BYTES`, or is refused by `card_yaml` (a tag the safe loader refuses, an alias, too deep, too
many values) has no `cardData`, and so has a card whose file cannot be read or whose metadata would not write out as
strict JSON; a safetensors file whose header is malformed gives no `safetensors`, a `config.json` larger than
`MAX_CONFIG_BYTES` no `model_type`.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .card_yaml import read_card_yaml

CARD_FILE = "README.md"
MAX_CARD_METADATA_BYTES = 1 << 20  # a larger YAML block is ignored
MAX_SAFETENSORS_HEADER_BYTES = 100 << 20  # the safetensors format's own limit
MAX_CONFIG_BYTES = 16 << 20  # a larger config.json gives no model_type
MAX_TENSOR_VALUES = 1 << 63  # a header with a larger tensor is malformed (and its count would not write as JSON)
_FRONT_MATTER = re.compile(rb"\A\s*---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def model_facts(files: dict[str, dict[str, Any]], blob_path: Callable[[str], Path]) -> dict[str, Any]:
    """The fields above for a commit's `{path: {oid, size}}` tree; `blob_path(oid)` is where a file's bytes are."""
    card = card_metadata(blob_path(files[CARD_FILE]["oid"])) if CARD_FILE in files else None
    card = card or {}
    weights = sorted(path for path in files if "/" not in path and path.endswith(".safetensors"))
    library = _string(card.get("library_name")) or ("transformers" if "config.json" in files else None)
    model_type = config_model_type(blob_path(files["config.json"]["oid"])) if "config.json" in files else None
    pipeline_tag = _string(card.get("pipeline_tag"))
    tags = [
        *_strings(card.get("tags")),
        *([library] if library else []),
        *(["safetensors"] if weights else []),
        *([model_type] if model_type else []),
        *([pipeline_tag] if pipeline_tag else []),
        *_strings(card.get("language")),
        *(f"dataset:{name}" for name in _strings(card.get("datasets"))),
        *(f"base_model:{name}" for name in _strings(card.get("base_model"))),
        *(f"license:{name}" for name in _strings(card.get("license"))),
    ]
    counts = [parameter_counts(blob_path(files[path]["oid"])) for path in weights]
    return {
        "cardData": card or None,
        "pipeline_tag": pipeline_tag,
        "library_name": library,
        "tags": list(dict.fromkeys(tags)),
        "safetensors": _total(counts) if weights and None not in counts else None,
    }


@functools.lru_cache(maxsize=1024)  # blobs are content-addressed: a path's bytes never change
def card_metadata(readme: Path) -> dict[str, Any] | None:
    """The YAML metadata of a model card as a JSON-ready mapping, or None when there is none or it cannot be read: a
    stored card never breaks `model_info` or a listing."""
    try:
        with readme.open("rb") as file:
            metadata = _jsonable(front_matter(file.read(MAX_CARD_METADATA_BYTES + 64)))
        json.dumps(metadata, allow_nan=False)  # what the answer will hold must write out
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    return metadata


def front_matter(card: bytes) -> dict[str, Any] | None:
    """The YAML metadata block at the top of a card's bytes as a mapping of the values YAML reads (`inf` stays `inf`, as
    the Hub checks it; `card_metadata` turns them into JSON's types); None when the card has none.
    Raises ValueError, saying why, when the block is too large, does not parse as the Hub parses it (`card_yaml`:
    aliases, over-deep nesting and too many values included) or is not a mapping."""
    match = _FRONT_MATTER.match(card)
    if match is None:
        return None
    if len(match[1]) > MAX_CARD_METADATA_BYTES:
        raise ValueError(f"the YAML metadata is larger than {MAX_CARD_METADATA_BYTES} bytes")
    value = read_card_yaml(match[1].decode("utf-8", errors="replace"))
    if not isinstance(value, dict):
        raise ValueError(f"the YAML metadata must be a mapping of fields, not {type(value).__name__}")
    return value


@functools.lru_cache(maxsize=1024)
def parameter_counts(weights: Path) -> dict[str, int] | None:
    """`{dtype: number of values}` of the tensors in a safetensors file's header, or None when the header is not an
    8-byte little-endian length followed by that many bytes of JSON `{name: {"dtype": str, "shape": [int, ...]}}`."""
    size = weights.stat().st_size
    with weights.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        if size < 8 or length > min(MAX_SAFETENSORS_HEADER_BYTES, size - 8):
            return None
        try:
            header = json.loads(file.read(length))
        except (ValueError, RecursionError):
            return None
    if not isinstance(header, dict):
        return None
    counts: dict[str, int] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) or not _is_shape(entry.get("shape")):
            return None
        count = math.prod(entry["shape"])
        if count >= MAX_TENSOR_VALUES:
            return None
        counts[entry["dtype"]] = counts.get(entry["dtype"], 0) + count
    return counts


@functools.lru_cache(maxsize=1024)
def config_model_type(config: Path) -> str | None:
    """The `model_type` of a `config.json`, or None (no such string, or not a JSON object)."""
    try:
        if config.stat().st_size > MAX_CONFIG_BYTES:
            return None
        value = json.loads(config.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return _string(value.get("model_type")) if isinstance(value, dict) else None


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)


def _total(counts: list[dict[str, int] | None]) -> dict[str, Any]:
    parameters: dict[str, int] = {}
    for file_counts in counts:
        for dtype, count in (file_counts or {}).items():
            parameters[dtype] = parameters.get(dtype, 0) + count
    return {"parameters": parameters, "total": sum(parameters.values())}


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _strings(value: Any) -> list[str]:
    """A card field that holds one string or a list of them, as a list (other items are skipped)."""
    values = value if isinstance(value, list) else [value]
    return [item for item in values if isinstance(item, str) and item]


def _jsonable(value: Any) -> Any:
    """What YAML reads, in JSON's types: dates as ISO text, sets as sorted lists, bytes as base64, NaN and infinities
    as null, keys as text."""
    if isinstance(value, dict):
        return {_key(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return [_jsonable(item) for item in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    converted = _jsonable(key)
    return converted if isinstance(converted, str) else json.dumps(converted)
