"""Bounded readers: every text, image, JSON, JSON Lines, CSV and YAML input that a user or a downloaded repo gives
hf-norms is read here, before `json`, `yaml`, `datasets` or `pyarrow` see it, so that what one file, line, cell or
document can make hf-norms hold is fixed, whatever it holds.

- Files. `open_regular` opens only a regular file (`os.stat` before the open, `os.fstat` after): a FIFO, a device or
  a socket, which could block a read for ever or never end, is refused.
- Texts. `text_lines(path)` reads a text file one text per line, a line longer than `TEXT_LIMIT` bytes cut into
  windows (`file_records`: the cuts depend on the file alone, so any byte range of it is read on its own, as a stream's
  pieces are); `json_lines(path)` reads JSON Lines objects (`parse_json`), refusing a line longer than
  `DOCUMENT_LIMIT` bytes; `cut_text` cuts a document read whole (a JSON value, a Parquet or dataset cell, at most
  `DOCUMENT_LIMIT` bytes: `check_document`) into windows of at most `TEXT_LIMIT` characters. So no text handed on
  (to a tokenizer) is longer than `TEXT_LIMIT` characters (+ 3, where a file's cut moved).
- Images. `open_image` reads an image's size from its header and refuses one of more than `IMAGE_PIXELS` before it is
  decoded; a decoded image larger than `HELD_PIXELS` is held reduced (`PIL.Image.reduce`, a box filter by an integer
  factor) to at most that many.
- JSON. `parse_json` (text) and `read_json` / `read_json_object` (a file of at most `JSON_LIMIT` bytes) refuse a value
  nested deeper than `JSON_DEPTH` (which Python's recursive JSON parser and the code that walks the value would
  otherwise meet as a `RecursionError`).
- YAML. `parse_yaml` reads YAML text of at most `YAML_LIMIT` bytes with PyYAML's safe loader, refusing an anchor or an
  alias (a few bytes of aliases expand to gigabytes wherever the value is copied or written out), more than
  `YAML_NODES` values and nesting deeper than `JSON_DEPTH`, as the parser meets them; `front_matter` is a card's
  metadata (the YAML block at the top of a README.md), `card_metadata_of` that of a card file.
- Data files. `checked_copy` reads a `.txt`, `.csv`, `.tsv`, `.json` or `.jsonl` data file whole, record by record,
  and writes each record into a copy only once it is checked: no line or CSV row longer than `DOCUMENT_LIMIT` bytes, no
  cell longer than `DOCUMENT_LIMIT`, no row of more than `COLUMN_LIMIT` columns, every JSON value within `JSON_DEPTH`.
  The copy, not the file, is what `datasets` reads (`conversion.data_files`), so what it reads is what was checked.

Every refusal is a `ConversionError` (an `InputError`, exit 2): one line that names the file, the line where there is
one, the bound and what to do.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from .errors import ConversionError

TEXT_LIMIT = 1 << 15  # characters of one text handed on; in a file, bytes of UTF-8 (+ the rest of a cut character)
DOCUMENT_LIMIT = 1 << 24  # bytes of one document read whole: a JSON line, a CSV row, a cell, a data set's text
IMAGE_PIXELS = 1 << 26  # pixels an image may have (8192 x 8192), checked from its header before it is decoded
HELD_PIXELS = 1 << 22  # pixels a decoded image is held at (2048 x 2048) at most, reduced by an integer factor
JSON_LIMIT = 1 << 26  # bytes of a JSON file read whole (a large tokenizer.json is 20-35 MB)
JSON_DEPTH = 64  # levels of nested arrays and objects in a JSON or YAML value (a tokenizer.json has about 6)
YAML_LIMIT = 1 << 20  # bytes of YAML text (a card's metadata, a file of options)
YAML_NODES = 10_000  # scalars, lists and mappings in one YAML text
COLUMN_LIMIT = 4096  # columns of a CSV row, keys of a JSON row of data
NEWLINE = ord("\n")
DATA_SUFFIXES = (".txt", ".csv", ".tsv", ".json", ".jsonl")  # the data files `checked_copy` reads
CARD_METADATA = re.compile(r"\A\s*---[\r\n]+([\S\s]*?)[\r\n]+---(?:\r\n|\n|$)")  # as huggingface_hub finds it


# --------------------------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------------------------


def open_regular(path: Path) -> IO[bytes]:
    """`path` opened to read bytes, refused unless it is a regular file: checked before it is opened (`os.stat`) and
    after (`os.fstat`, on a non-blocking open, so that a FIFO put in its place between the two cannot block). An
    `OSError` (missing, unreadable) is the caller's to word."""
    check_regular(path)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(mode := os.fstat(descriptor).st_mode):
        os.close(descriptor)
        check_regular(path, mode=mode)
    return os.fdopen(descriptor, "rb")


def check_regular(path: Path, folder: bool = False, mode: int | None = None) -> None:
    """Refuse `path` (of `mode`, else `os.stat`'s) unless it is a regular file, or a folder where `folder`: a FIFO, a
    device or a socket could block a read or never end."""
    mode = os.stat(path).st_mode if mode is None else mode
    if not (stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode))):
        kind = "folder" if stat.S_ISDIR(mode) else "FIFO, device or socket"
        raise ConversionError(f"{path} is not a regular file (it is a {kind}, which is never read); give a file.")


def read_bytes(path: Path, limit: int, what: str, language: str) -> bytes:
    """The bytes of the regular file `path`, refused when larger than `limit`; `what` says what to do."""
    try:
        with open_regular(path) as stream:
            raw = stream.read(limit + 1)
    except OSError as error:
        raise ConversionError(f"{path} is not valid {language} ({error.strerror}); {what}.") from None
    if len(raw) > limit:
        raise ConversionError(f"{path} is larger than {limit} bytes, more than such a file holds; {what}.")
    return raw


def line_of(path: Path, offset: int) -> int:
    """The number (from 1) of the line of the file `path` that holds the byte at `offset`."""
    with open_regular(path) as stream:
        count, left = 1, offset
        while left > 0 and (block := stream.read(min(left, 1 << 20))):
            count, left = count + block.count(b"\n"), left - len(block)
    return count


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
    with open_regular(path) as stream:
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


def json_lines(path: Path, begin: int = 0, end: int | None = None) -> Iterator[tuple[int, dict]]:
    """`(offset, row)` for the non-blank lines of a JSON Lines file that start in bytes `[begin, end)`, each a JSON
    object (`parse_json`, `data_row`); a line longer than `DOCUMENT_LIMIT` bytes is refused (a JSON value cannot be
    cut). A refusal names the line (`line_of`, counted only then)."""
    for offset, raw, whole in file_records(path, begin, end, DOCUMENT_LIMIT):
        if whole and not raw.strip():
            continue
        try:
            if not whole:
                raise ConversionError(f"the line is longer than {DOCUMENT_LIMIT} bytes; split it into several lines.")
            row = data_row(parse_json(raw, "the line", "fix it"), "the line")
        except ConversionError as error:
            raise ConversionError(f"{path}, line {line_of(path, offset)}: {error}") from None
        yield offset, row


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


def parse_json(text: str | bytes, where: str, what: str) -> Any:
    """The JSON value of `text` (UTF-8 bytes or a string) that `where` names; a `ConversionError` ending in `what`
    (what to do) when it is not UTF-8, malformed, or nested deeper than `JSON_DEPTH`."""
    try:
        value = json.loads(text)
        too_deep = _measure(value)[0] > JSON_DEPTH
    except RecursionError:  # the parser ran out of stack first
        too_deep = True
    except (UnicodeDecodeError, ValueError) as error:
        raise ConversionError(f"{where} is not valid JSON ({' '.join(str(error).split())}); {what}.") from None
    if too_deep:
        raise ConversionError(f"{where} is nested too deeply (more than {JSON_DEPTH} levels); {what}.")
    return value


def read_json(path: Path, what: str, parse: Callable[[str], Any] | None = None, language: str = "JSON") -> Any:
    """The value in the JSON file `path` (`parse_json`), refused when larger than `JSON_LIMIT` bytes; `what` says
    what to do. (`parse` and `language` read another language: `parse` raises `ValueError`s.)"""
    raw = read_bytes(path, JSON_LIMIT, what, language)
    if parse is None:
        return parse_json(raw, str(path), what)
    try:
        value = parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ConversionError(f"{path} is not valid {language} ({' '.join(str(error).split())}); {what}.") from None
    if _measure(value)[0] > JSON_DEPTH:
        raise ConversionError(f"{path} is nested too deeply (more than {JSON_DEPTH} levels); {what}.")
    return value


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in `path` (`read_json`); a `ConversionError` ending in `what` when it is anything else."""
    value = read_json(path, what)
    if not isinstance(value, dict):
        raise ConversionError(f"{path} holds a JSON {type(value).__name__}, not an object; {what}.")
    return value


def _measure(value: Any) -> tuple[int, int]:
    """`(depth, longest)`: levels of nested lists and dicts in `value` (0 for a scalar) and the length of its longest
    string (keys included), counted without recursion; a container that YAML's aliases make appear in several places
    is walked again only when reached deeper. The walk stops below `JSON_DEPTH + 1` levels."""
    deepest, longest, reached, level = 0, 0, {}, [(value, 1)]
    while level:
        item, depth = level.pop()
        if isinstance(item, str):
            longest = max(longest, len(item))
            continue
        children = [*item, *item.values()] if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None or reached.get(id(item), 0) >= depth:
            continue
        reached[id(item)] = depth
        deepest = max(deepest, depth)
        if depth <= JSON_DEPTH:
            level.extend((child, depth + 1) for child in children)
    return deepest, longest


# --------------------------------------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------------------------------------


def parse_yaml(text: str, where: str, what: str, schema: tuple[type, type] | None = None, first_line: int = 1) -> Any:
    """The value of the YAML `text` that `where` names (its first line numbered `first_line`), read by PyYAML's safe
    loader (or the `(constructor, resolver)` classes of `schema`) bounded as the module docstring says; a
    `ConversionError` naming the line, ending in `what` (what to do), when it is larger than `YAML_LIMIT` bytes, does
    not parse, or passes a bound."""
    import yaml

    if len(text.encode("utf-8", "surrogatepass")) > YAML_LIMIT:
        raise ConversionError(f"{where} holds more than {YAML_LIMIT} bytes of YAML; {what}.")
    loader = bounded_yaml_loader(*(schema or (yaml.constructor.SafeConstructor, yaml.resolver.Resolver)))(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = f", line {mark.line + first_line}" if mark is not None else ""
        problem = " ".join(str(getattr(error, "problem", None) or error).split())[:300]
        raise ConversionError(f"{where}{line}: not YAML that hf-norms reads ({problem}); {what}.") from None
    finally:
        loader.dispose()


@functools.cache
def bounded_yaml_loader(constructor: type, resolver: type, subject: str = "the YAML") -> type:
    """PyYAML's loader with `constructor`'s and `resolver`'s schema that refuses, as it composes them, an anchor or an
    alias, nesting deeper than `JSON_DEPTH` and more than `YAML_NODES` nodes (`subject` names the text in the
    refusal)."""
    import yaml

    class BoundedLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
                        constructor, resolver):  # fmt: skip
        """A loader that counts the nodes and the depth it composes."""

        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            constructor.__init__(self)
            resolver.__init__(self)
            self.depth = self.nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            self.nodes += 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                self.refuse(event, "anchors and aliases are not accepted")
            if self.nodes > YAML_NODES:
                self.refuse(event, f"{subject} holds more than {YAML_NODES} values")
            if self.depth >= JSON_DEPTH:
                self.refuse(event, f"{subject} nests deeper than {JSON_DEPTH} levels")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        @staticmethod
        def refuse(event: Any, problem: str) -> None:
            error = yaml.YAMLError(problem)
            error.problem_mark = event.start_mark  # read by `parse_yaml`; not in the message (the Hub's has none)
            raise error

    return BoundedLoader


def front_matter(text: str, where: str, what: str) -> dict[str, Any]:
    """The metadata of a model card's text (the YAML block at its top, `parse_yaml`) that `where` names; {} when it
    has none."""
    match = CARD_METADATA.match(text)
    if match is None:
        return {}
    first_line = text.count("\n", 0, match.start(1)) + 1
    value = parse_yaml(match[1], where, what, first_line=first_line)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConversionError(f"{where}: the card's metadata is a {type(value).__name__}, not a mapping; {what}.")
    return value


def card_metadata_of(path: Path | None) -> dict[str, Any]:
    """The metadata of the card (README.md) at `path` (`front_matter`, read from its first `YAML_LIMIT` bytes and a
    little more); {} when there is no such file."""
    if path is None or not os.path.lexists(path):
        return {}
    what = "fix or remove its YAML block (between the --- lines at the top)"
    try:
        with open_regular(path) as stream:
            head = stream.read(YAML_LIMIT + 4096)
    except OSError as error:
        raise ConversionError(f"{path} cannot be read ({error.strerror}); {what}.") from None
    return front_matter(head.decode("utf-8", "replace"), str(path), what)


# --------------------------------------------------------------------------------------------------------------------
# Data files: checked record by record into the copy `datasets` reads
# --------------------------------------------------------------------------------------------------------------------


def checked_copy(path: Path, copy: Path) -> None:
    """Read the data file `path` (`.txt`, `.csv`, `.tsv`, `.json`, `.jsonl`) whole and write each of its records to
    `copy` once it is checked (see the module docstring); a `ConversionError` naming the line and the bound."""
    suffix = path.suffix.lower()
    try:
        with open_regular(path) as source, open(copy, "xb") as target:
            if suffix == ".json":
                _check_json_document(path, source, target)
            elif suffix in (".csv", ".tsv"):
                _check_csv(path, source, target, "\t" if suffix == ".tsv" else ",")
            else:
                for number, offset, raw in _bounded_lines(path, source):
                    if suffix == ".jsonl":
                        _json_row(path, number, raw)
                    else:  # .txt: UTF-8 lines
                        decoded(path, offset, raw)
                    target.write(raw)
    except OSError as error:
        raise ConversionError(f"{path} cannot be read ({error.strerror}); check the data path.") from None


def _bounded_lines(path: Path, source: IO[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """`(number, offset, line)` for the lines of `source` (newline kept); one longer than `DOCUMENT_LIMIT` bytes is
    refused."""
    number = offset = 0
    while raw := source.readline(DOCUMENT_LIMIT + 1):
        number += 1
        if len(raw) > DOCUMENT_LIMIT:
            raise ConversionError(f"{path}, line {number}: longer than {DOCUMENT_LIMIT} bytes; split it.")
        yield number, offset, raw
        offset += len(raw)


def _json_row(path: Path, number: int, raw: bytes) -> dict | None:
    """The row of data on line `number` of a JSON Lines file (`data_row`); None for a blank line."""
    where = f"{path}, line {number}"
    return data_row(parse_json(raw, where, "fix that line"), where) if raw.strip() else None


def data_row(value: Any, where: str) -> dict:
    """`value`, a JSON row of data (already within `JSON_DEPTH`), refused unless it is an object of at most
    `COLUMN_LIMIT` keys whose strings are at most `DOCUMENT_LIMIT` characters."""
    if not isinstance(value, dict):
        raise ConversionError(f"{where} is a JSON {type(value).__name__}, not an object (a row of data); fix it.")
    check_columns(len(value), where)
    check_document(_measure(value)[1], where)
    return value


def check_columns(count: int, where: str) -> None:
    """Refuse a row of data of more than `COLUMN_LIMIT` columns."""
    if count > COLUMN_LIMIT:
        raise ConversionError(
            f"{where} has {count} columns, more than the {COLUMN_LIMIT} a row of data may have; keep the columns used."
        )


def _check_json_document(path: Path, source: IO[bytes], target: IO[bytes]) -> None:
    """A `.json` data file, read whole (at most `JSON_LIMIT` bytes), as `datasets` reads it: a list of row objects,
    an object of columns, or JSON Lines (where a value is followed by "Extra data")."""
    raw = source.read(JSON_LIMIT + 1)
    if len(raw) > JSON_LIMIT:
        raise ConversionError(f"{path} is larger than {JSON_LIMIT} bytes; give large data as JSON Lines (.jsonl).")
    try:
        json.loads(raw)
        lines = False
    except ValueError as error:
        lines = getattr(error, "msg", "") == "Extra data"
    except RecursionError:
        lines = False  # `parse_json` says so
    if lines:
        for number, line in enumerate(raw.splitlines(), 1):
            _json_row(path, number, line)
    else:
        value = parse_json(raw, str(path), "fix the file")
        for index, row in enumerate(value if isinstance(value, list) else [value]):
            data_row(row, f"{path}, row {index}" if isinstance(value, list) else str(path))
    target.write(raw)


def _check_csv(path: Path, source: IO[bytes], target: IO[bytes], delimiter: str) -> None:
    """A CSV or TSV file, row by row (Python's `csv`, where a quoted cell may span lines): no row (so no cell) longer
    than `DOCUMENT_LIMIT` bytes, none of more than `COLUMN_LIMIT` columns, none of more cells than the header."""
    held: list[bytes] = []
    row = {"line": 1, "bytes": 0}  # where the row being read starts, and its bytes so far

    def texts() -> Iterator[str]:
        for number, offset, raw in _bounded_lines(path, source):
            if not held:
                row.update(line=number, bytes=0)
            held.append(raw)
            row["bytes"] += len(raw)
            if row["bytes"] > DOCUMENT_LIMIT:
                raise ConversionError(
                    f"{path}, line {row['line']}: a row longer than {DOCUMENT_LIMIT} bytes; split it."
                )
            yield decoded(path, offset, raw)

    csv.field_size_limit(DOCUMENT_LIMIT)  # the row's bound is the cell's (the default would refuse a 128 KB cell)
    reader, header = csv.reader(texts(), delimiter=delimiter), None
    while True:
        try:
            cells = next(reader, None)
        except csv.Error as error:
            raise ConversionError(f"{path}, line {row['line']}: {error}; fix that row.") from None
        if cells is None:
            return
        check_columns(len(cells), where := f"{path}, line {row['line']}")
        header = len(cells) if header is None else header
        if len(cells) > header:
            raise ConversionError(f"{where} has {len(cells)} cells, more than the header's {header} columns; fix it.")
        target.write(b"".join(held))
        held.clear()
