"""Bounded readers: every text, image and JSON file that hf-norms reads from a user's data or folders is read here, so
that what one line, one document, one image or one JSON file can make hf-norms hold is fixed, whatever its size.

- Texts. `text_lines(path)` reads a text file one text per line, a line longer than `TEXT_LIMIT` bytes cut into
  windows (`file_records`: the cuts depend on the file alone, so any byte range of it is read on its own, as a stream's
  pieces are); `json_lines(path)` reads JSON Lines, refusing a line longer than `DOCUMENT_LIMIT` bytes; `cut_text` cuts
  a document read whole (a JSON value, a Parquet or dataset cell, at most `DOCUMENT_LIMIT` bytes: `check_document`)
  into windows of at most `TEXT_LIMIT` characters.
  So no text handed on (to a tokenizer) is longer than `TEXT_LIMIT` characters (+ 3, where a file's cut moved).
- Images. `open_image` reads an image's size from its header and refuses one of more than `IMAGE_PIXELS` before it is
  decoded; a decoded image larger than `HELD_PIXELS` is held reduced (`PIL.Image.reduce`, a box filter by an integer
  factor) to at most that many.
- JSON. `read_json` (`read_json_object` for an object) refuses a file larger than `JSON_LIMIT` bytes before reading it,
  and a value nested deeper than `JSON_DEPTH` (which Python's recursive JSON parser and the code that walks the value
  would otherwise meet as a `RecursionError`).

Every refusal is a `ConversionError` (an `InputError`): one line that names the file, what is wrong and what to do.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from .errors import ConversionError

TEXT_LIMIT = 1 << 15  # characters of one text handed on; in a file, bytes of UTF-8 (+ the rest of a cut character)
DOCUMENT_LIMIT = 1 << 24  # bytes of one document read whole before it is cut (a JSON line, a data set's text)
IMAGE_PIXELS = 1 << 26  # pixels an image may have (8192 x 8192), checked from its header before it is decoded
HELD_PIXELS = 1 << 22  # pixels a decoded image is held at (2048 x 2048) at most, reduced by an integer factor
JSON_LIMIT = 1 << 26  # bytes of a JSON file (a large tokenizer.json is 20-35 MB)
JSON_DEPTH = 64  # levels of nested arrays and objects in a JSON value (a tokenizer.json has about 6)
NEWLINE = ord("\n")


# --------------------------------------------------------------------------------------------------------------------
# Texts
# --------------------------------------------------------------------------------------------------------------------


def file_records(path: Path, begin: int = 0, end: int | None = None, limit: int = TEXT_LIMIT) -> Iterator[tuple]:
    """`(offset, raw, whole)` for every record of the file `path` that starts in bytes `[begin, end)`: its offset, its
    bytes without the newline that ends it, and whether it is a whole line.

    The records are the file's lines, except that a line longer than `limit` bytes is cut at every multiple of `limit`
    inside it (moved past the rest of a UTF-8 character: a record is at most `limit + 3` bytes). Each cut depends only
    on the `limit` bytes before it, so a reader of `[begin, end)` reads at most a block before `begin` and the record
    that crosses `end`, and holds at most two blocks of `limit` bytes."""
    with open(path, "rb") as stream:
        yield from _records(stream, begin, end, limit)


def _records(stream: IO[bytes], begin: int, end: int | None, limit: int) -> Iterator[tuple]:
    position = begin - begin % limit  # blocks of `limit` bytes start at multiples of `limit`
    line_start = _line_start(stream, position, limit)  # None: a line longer than `limit` goes on at `position`
    stream.seek(position)
    last, last_whole = (position, True) if line_start == position else (None, False)  # the record being read
    held, held_at = b"", position  # bytes from `held_at` (the record being read, or `position`) to `position`
    while data := stream.read(limit):
        if line_start is not None and line_start < position and _longer(data, line_start, position, limit):
            line_start = None
        starts = []  # (offset, after a newline) of the records that start in this block
        cut = _continuation(data) if line_start is None else len(data)
        if cut < len(data) and data[cut] != NEWLINE:  # a cut inside the long line (not at its end)
            starts.append((position + cut, False))
        index = data.find(b"\n")
        while index >= 0:
            starts.append((position + index + 1, True))
            line_start = position + index + 1
            index = data.find(b"\n", index + 1)
        buffer = held + data
        for start, after_newline in starts:
            if last is not None and last >= begin:
                raw = buffer[last - held_at : start - held_at]
                yield last, raw.removesuffix(b"\n"), last_whole and after_newline
            if end is not None and start >= end:
                return
            last, last_whole = start, after_newline
        position += len(data)
        held, held_at = (buffer[last - held_at :], last) if last is not None else (b"", position)
    if last is not None and begin <= last < position:
        yield last, held, last_whole


def _line_start(stream: IO[bytes], position: int, limit: int) -> int | None:
    """Where the line open at `position` started, from the block before it; None when it started earlier still."""
    if position == 0:
        return 0
    stream.seek(position - limit)
    newline = stream.read(limit).rfind(b"\n")
    return position - limit + newline + 1 if newline >= 0 else None


def _longer(data: bytes, line_start: int, position: int, limit: int) -> bool:
    """Whether the line that started at `line_start` (before `position`, less than `limit` bytes before) and is still
    open at `position` is longer than `limit` bytes, from the block `data` at `position`."""
    needed = line_start + limit + 1 - position
    return len(data) >= needed and data.find(b"\n", 0, needed) < 0


def _continuation(data: bytes) -> int:
    """How many of the first bytes of `data` (at most 3) continue a UTF-8 character begun before it."""
    count = 0
    while count < min(3, len(data)) and data[count] & 0xC0 == 0x80:
        count += 1
    return count


def decoded(path: Path, offset: int, raw: bytes) -> str:
    """`raw`, the bytes at `offset` of `path`, as UTF-8 text."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConversionError(
            f"{path} is not UTF-8 text (byte {raw[error.start]:#04x} at offset {offset + error.start}): give UTF-8 text."
        ) from None


def text_lines(path: Path, begin: int = 0, end: int | None = None) -> Iterator[str]:
    """The texts of a text file in bytes `[begin, end)` (see `file_records`): each line, or window of a long line, split
    further at the other line breaks Python knows (`str.splitlines`) and stripped; empty ones left out."""
    for offset, raw, _ in file_records(path, begin, end):
        for part in decoded(path, offset, raw).splitlines():
            if part.strip():
                yield part.strip()


def json_lines(path: Path, begin: int = 0, end: int | None = None) -> Iterator[tuple[int, str]]:
    """`(offset, line)` for the non-blank lines of a JSON Lines file that start in bytes `[begin, end)`; a line longer
    than `DOCUMENT_LIMIT` bytes is refused (a JSON value cannot be cut)."""
    for offset, raw, whole in file_records(path, begin, end, DOCUMENT_LIMIT):
        if not whole:
            raise ConversionError(
                f"{path}: the line at byte {offset} is longer than {DOCUMENT_LIMIT} bytes; split its document into "
                "several lines."
            )
        if raw.strip():
            yield offset, decoded(path, offset, raw)


def check_document(size: int, where: str) -> None:
    """Refuse a document of `size` bytes, read whole before it is cut, that is larger than `DOCUMENT_LIMIT`."""
    if size > DOCUMENT_LIMIT:
        raise ConversionError(
            f"{where} holds a text of {size} bytes, more than the {DOCUMENT_LIMIT} a document read whole may have; "
            "split it into several."
        )


def cut_text(text: str) -> list[str]:
    """A document read whole as windows of at most `TEXT_LIMIT` characters (one window, as it is, when it is shorter)."""
    return [text[start : start + TEXT_LIMIT] for start in range(0, max(len(text), 1), TEXT_LIMIT)]


# --------------------------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------------------------


def open_image(source: Any, where: str, fix: str) -> Any:
    """The RGB PIL image in `source` (a path or a binary stream) that `where` names, checked and held as the module
    docstring says; `fix` says what to do with an unreadable one."""
    from PIL import Image

    try:
        with opened_image(source) as image:
            return held_image(image, where)
    except (OSError, ValueError, Image.DecompressionBombError) as error:  # UnidentifiedImageError is an OSError
        raise ConversionError(f"{where} is not a readable image ({error}); {fix}.") from None


def opened_image(source: Any) -> Any:
    """`source` opened by PIL, which reads its header and decodes nothing yet; PIL's warning about large images is
    silenced, since their size is checked here (`check_pixels`) before they are decoded."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return Image.open(source)


def check_pixels(size: tuple[int, int], where: str) -> None:
    """Refuse an image of `size` (width, height, from its header) of more than `IMAGE_PIXELS` pixels."""
    if size[0] * size[1] > IMAGE_PIXELS:
        raise ConversionError(
            f"{where} is an image of {size[0]} x {size[1]} pixels, more than the {IMAGE_PIXELS:,} an image may have; "
            "make it smaller or leave it out."
        )


def held_image(image: Any, where: str) -> Any:
    """`image` (a PIL image whose header is read) decoded as RGB, refused when too large (`check_pixels`) and reduced
    to at most `HELD_PIXELS` pixels."""
    check_pixels(image.size, where)
    rgb = image.convert("RGB")
    factor = math.ceil(math.sqrt(rgb.width * rgb.height / HELD_PIXELS))
    return rgb.reduce(factor) if factor > 1 else rgb


# --------------------------------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------------------------------


def read_json(path: Path, what: str, parse: Callable[[str], Any] = json.loads, language: str = "JSON") -> Any:
    """The value in the JSON file `path` (or in another `language` that `parse` reads, raising `ValueError`s); a
    `ConversionError` ending in `what` (what to do) when it is unreadable, larger than `JSON_LIMIT` bytes, not UTF-8,
    malformed or nested deeper than `JSON_DEPTH`."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read(JSON_LIMIT + 1)
    except OSError as error:
        raise ConversionError(f"{path} is not valid {language} ({error.strerror}); {what}.") from None
    if len(raw) > JSON_LIMIT:
        raise ConversionError(f"{path} is larger than {JSON_LIMIT} bytes, more than such a file holds; {what}.")
    try:
        value = parse(raw.decode("utf-8"))
        too_deep = _depth(value) > JSON_DEPTH
    except RecursionError:  # the parser ran out of stack first
        too_deep = True
    except (UnicodeDecodeError, ValueError) as error:
        raise ConversionError(f"{path} is not valid {language} ({' '.join(str(error).split())}); {what}.") from None
    if too_deep:
        raise ConversionError(f"{path} is nested too deeply (more than {JSON_DEPTH} levels); {what}.")
    return value


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in `path` (`read_json`); a `ConversionError` ending in `what` when it is anything else."""
    value = read_json(path, what)
    if not isinstance(value, dict):
        raise ConversionError(f"{path} holds a JSON {type(value).__name__}, not an object; {what}.")
    return value


def _depth(value: Any) -> int:
    """Levels of nested lists and dicts in `value` (0 for a scalar), counted without recursion; a container that YAML's
    aliases make appear in several places is walked again only when reached deeper (so an alias bomb costs no more
    than its distinct containers)."""
    deepest, reached, level = 0, {}, [(value, 1)]
    while level:
        item, depth = level.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None or reached.get(id(item), 0) >= depth:
            continue
        reached[id(item)] = depth
        deepest = max(deepest, depth)
        if depth <= JSON_DEPTH:
            level.extend((child, depth + 1) for child in children)
    return deepest
