"""Healing data read as a stream (a `datasets.IterableDataset`), so that a corpus larger than memory heals.

`open_stream(DataSource(data, config, split, column), modality)` reads, one example at a time:

- a `.txt` file (one text per non-empty line, stripped, as `data.load_examples` reads it), a `.jsonl` file (one JSON
  object per line; its text column), a `.parquet` file (its text or image column; a column's values as they are, but
  empty texts are skipped), or a folder of such files (searched recursively, sorted by path; one kind per folder). A
  text or JSONL file is read in pieces, byte ranges of at most `PIECE_BYTES` (at least `MIN_PIECES` per file, or one
  per process where there are more processes, down to pieces of `MIN_PIECE_BYTES`), each holding the lines, or the
  windows of a long line, that start in it (`readers.file_records`); a Parquet file by row group;
- a `.csv`, `.tsv` or `.json` file, or a folder of such files (one kind): `datasets.load_dataset(builder,
  data_files=..., streaming=True)` as `data_files.load_data_files` maps them for every command, a piece per file, its
  column chosen as every command chooses it (`data_files.example_column`), its texts cut by the bounded readers;
- a folder of images (each image a piece);
- a folder saved by `datasets`' `save_to_disk` (its Arrow table memory-mapped, in up to `SAVED_DATASET_PIECES` pieces;
  `split` picks one of a `DatasetDict`);
- a Hub dataset id, with its `config` and `split` (`datasets.load_dataset(..., streaming=True)`, through `HF_ENDPOINT`;
  a piece per file).

Each piece is a shard of the stream. Under several processes (`torchrun`, `accelerate launch`), accelerate gives each
process its own shards (`IterableDataset.shard`) when there are at least as many as processes, so no process reads
another's part of the corpus; with fewer, every process reads the stream and keeps its share of the batches.
`Stream.training_dataset` shuffles the shards' order and the examples in a buffer of `SHUFFLE_BUFFER` (per epoch, the
same order in every process), then tokenises them on the fly into the windows `text_windows` makes (or encodes the
images), so memory holds a buffer, never the corpus. `Stream.first(n)` reads the first `n` examples in order.

Every source is read through the bounded readers (`hf_norms.readers`): no text is longer than `TEXT_LIMIT`
characters (a longer line or document gives several), no JSON line longer than `DOCUMENT_LIMIT` bytes, and every image
is checked from its header before it is decoded; so what the stream holds does not grow with one line or file.

Examples the evaluation holds out (`HeldOut`) are left out: for texts, every text equal to an evaluation text; for
an image folder or a saved data set, the evaluation's positions.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import math
import os
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import ConversionError, one_line
from ..readers import TEXT_LIMIT, check_regular, cut_text, held_image, json_lines, line_of, text_lines
from .data import SPECIAL_TOKENS_MASK, Examples, check_text_column, image_files, load_image, stored_image
from .data_files import (
    FILE_BUILDERS,
    FORMATS,
    data_file_rows,
    example_column,
    file_builder,
    is_saved_dataset,
    missing_path,
)

PIECE_READERS = {".txt": "text", ".jsonl": "jsonl", ".parquet": "parquet"}  # read in pieces here, by the readers
PIECE_BYTES = 16 << 20
MIN_PIECES = 16
MIN_PIECE_BYTES = 256
SAVED_DATASET_PIECES = 64
SHUFFLE_BUFFER = 1024
ENCODE_BATCH = 64  # examples tokenised at once
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


@dataclasses.dataclass(frozen=True)
class DataSource:
    """What `--data` names, with `--data-config`, `--data-split` and `--text-column` / `--image-column`."""

    data: str | os.PathLike
    config: str | None = None
    split: str | None = None
    column: str | None = None


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """The evaluation examples to leave out of the stream: positions `[start, start + count)`, and their texts."""

    start: int
    count: int
    texts: frozenset[str] = frozenset()


@dataclasses.dataclass
class Stream:
    """A stream of raw examples (`{"item": text or PIL image}`), where it comes from, and its number of examples where
    that is known without reading them (None otherwise)."""

    dataset: Any  # datasets.IterableDataset
    description: str
    modality: str
    size: int | None

    def first(self, count: int) -> Examples:
        """The first `count` examples, in order, in memory."""
        items: list = []
        for example in self.dataset if count > 0 else ():
            items.append(example["item"])
            if len(items) == count:
                break
        return Examples(items, self.description, self.modality)

    def training_dataset(self, processor, max_length: int, seed: int):
        """The stream shuffled (shards and a buffer, per epoch) and encoded on the fly: text windows of at most
        `max_length` tokens (`text_windows`), or `pixel_values`."""
        encode = partial(_encode, processor=processor, max_length=max_length, modality=self.modality)
        shuffled = self.dataset.shuffle(seed=seed, buffer_size=SHUFFLE_BUFFER)
        return shuffled.map(encode, batched=True, batch_size=ENCODE_BATCH, remove_columns=["item"])


def text_windows(processor, texts: list[str], max_length: int) -> dict[str, list]:
    """Model inputs for every `max_length`-token window of every text (a long text gives several), with the
    `SPECIAL_TOKENS_MASK`: `{key: [one list of ids per window]}`."""
    encoded = processor(texts, truncation=True, max_length=max_length, return_overflowing_tokens=True,
                        return_special_tokens_mask=True, stride=0)  # fmt: skip
    return {
        k: encoded[k] for k in ("input_ids", "attention_mask", "token_type_ids", SPECIAL_TOKENS_MASK) if k in encoded
    }


def _encode(batch: dict[str, list], processor, max_length: int, modality: str) -> dict[str, list]:
    if modality == "text":
        return text_windows(processor, batch["item"], max_length)
    return {"pixel_values": list(processor(images=batch["item"], return_tensors="np")["pixel_values"])}


def is_streamed(data: Any) -> bool:
    """Whether `data` names a source `open_stream` reads: a path or a Hub dataset id (not objects in memory)."""
    return isinstance(data, (str, os.PathLike))


def open_stream(
    source: DataSource, modality: str, held_out: HeldOut | None = None, processes: int = 1, token: Any = None
) -> Stream:
    """The stream of `source` (see the module docstring), checked to hold at least one example."""
    path = Path(source.data).expanduser()
    if path.exists():
        stream = _local_stream(path.resolve(), source, modality, held_out, processes)
    elif isinstance(source.data, str) and HUB_ID.fullmatch(source.data) and not path.suffix:
        stream = _hub_stream(source, modality, token)
    else:
        raise missing_path(path, ConversionError)
    if held_out is not None and held_out.texts:
        texts = held_out.texts
        stream.dataset = stream.dataset.filter(lambda example: example["item"] not in texts)
    if not stream.first(1).items:
        if held_out is not None:
            open_stream(source, modality, None, processes, token)  # refuses data that holds no example at all
            raise ConversionError(
                f"Every {modality} example of {stream.description} is also one the conversion evaluates on "
                f"({held_out.count} held out from position {held_out.start}), so none is left to heal on: give --data "
                "other examples, or --eval-data other data to evaluate on."
            )
        raise ConversionError(f"{stream.description} holds no {modality} examples to heal on.")
    return stream


def _local_stream(path: Path, source: DataSource, modality: str, held_out: HeldOut | None, processes: int) -> Stream:
    if source.config is not None:
        raise ConversionError(f"--data-config names a configuration of a Hub dataset; {path} is a local path.")
    check_regular(path, folder=True)
    if path.is_dir() and is_saved_dataset(path):
        return _saved_dataset_stream(path, source, modality, held_out)
    if path.is_dir() and modality == "image" and image_files(path):
        files = image_files(path)
        if held_out is not None:
            files = files[: held_out.start] + files[held_out.start + held_out.count :]
        pieces = [("image", str(file), 0, 0, None) for file in files]
        return Stream(_pieces_dataset(pieces), str(path), modality, len(files))
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix.lower() in FILE_BUILDERS)
    if path.is_file():
        file_builder(path, ConversionError)  # a format no command reads: one line naming those read
    for file in files:
        check_regular(file)  # a FIFO would block its read for ever: refused before anything is made
    kinds = {PIECE_READERS.get(file.suffix.lower(), "datasets") for file in files}
    if len(kinds) != 1:
        found = ", ".join(sorted(file.suffix for file in files)[:5]) or "no such files"
        raise ConversionError(
            f"{path}: give {FORMATS} files (one kind), a folder of them, a folder of images or a saved dataset; "
            f"found {found}."
        )
    kind = kinds.pop()
    if kind != "parquet" and modality == "image":
        raise ConversionError(f"{path} holds texts, but this model takes images: give images, or a Parquet column.")
    column = _file_column(files[0], kind, modality, source.column)
    pieces = [piece for file in files for piece in _file_pieces(file, kind, column, processes)]
    size = sum(_parquet_rows(file) for file in files) if kind == "parquet" else None
    return Stream(_pieces_dataset(pieces), str(path), modality, size)


def _file_column(file: Path, kind: str, modality: str, column: str | None) -> str | None:
    """The column read from a JSONL, Parquet, CSV, TSV or JSON file (checked against its schema, or its first JSON
    object or row)."""
    import datasets

    if kind == "text":
        return None
    if kind == "datasets":
        first = next(data_file_rows(file, ConversionError), None)
        if first is None:
            raise ConversionError(f"{file} holds no {modality} examples to heal on.")
        features = {name: datasets.Value("string" if isinstance(v, str) else "null") for name, v in first.items()}
        return example_column(features, modality, str(file), column, ConversionError)
    if kind == "parquet":
        import pyarrow.parquet as pq

        schema = datasets.Features.from_arrow_schema(pq.read_schema(file))
        features = {name: datasets.Image() if _holds_images(f) else f for name, f in schema.items()}
        return example_column(features, modality, str(file), column, ConversionError)
    example = next((row for _, row in json_lines(file)), {})
    features = {name: datasets.Value("string" if isinstance(v, str) else "null") for name, v in example.items()}
    return example_column(features, modality, str(file), column, ConversionError)


def _holds_images(feature: Any) -> bool:
    """A Parquet column that holds encoded images: `datasets.Image`, or a struct with `bytes`."""
    import datasets

    return isinstance(feature, datasets.Image) or (isinstance(feature, dict) and "bytes" in feature)


def _file_pieces(file: Path, kind: str, column: str | None, processes: int) -> list[tuple]:
    """`(kind, path, begin, end, column)` pieces of one file: byte ranges (text, JSONL), row groups (Parquet) or the
    whole file (CSV, TSV, JSON, read by `datasets`)."""
    if kind == "datasets":
        return [(kind, str(file), 0, 0, column)]
    if kind == "parquet":
        import pyarrow.parquet as pq

        groups = pq.ParquetFile(file).num_row_groups
        return [(kind, str(file), group, group + 1, column) for group in range(groups)]
    size = file.stat().st_size
    count = max(math.ceil(size / PIECE_BYTES), min(max(MIN_PIECES, processes), size // MIN_PIECE_BYTES), 1)
    bounds = [size * index // count for index in range(count + 1)]
    return [(kind, str(file), begin, end, column) for begin, end in itertools.pairwise(bounds) if end > begin]


def _parquet_rows(file: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(file).metadata.num_rows


def _pieces_dataset(pieces: list[tuple]):
    import datasets

    return datasets.IterableDataset.from_generator(_read_pieces, gen_kwargs={"pieces": pieces})


def _read_pieces(pieces: list[tuple]) -> Iterator[dict[str, Any]]:
    """`{"item": example}` for every example of `pieces` (see `_file_pieces`), in order; texts through the bounded
    readers (`hf_norms.readers`), so none is longer than `TEXT_LIMIT` characters."""
    for kind, path, begin, end, column in pieces:
        if kind == "image":
            yield {"item": load_image(Path(path), Path(path).parent)}
        elif kind == "parquet":
            yield from ({"item": item} for item in _parquet_items(Path(path), begin, column))
        elif kind == "datasets":
            yield from ({"item": item} for item in _data_file_texts(Path(path), column))
        elif kind == "text":  # as `data.load_examples` reads a .txt file
            yield from ({"item": text} for text in text_lines(Path(path), begin, end))
        else:
            for offset, row in json_lines(Path(path), begin, end):
                if (text := _json_text(Path(path), offset, row, column)).strip():
                    yield from ({"item": window} for window in cut_text(text))


def _json_text(path: Path, offset: int, row: dict, column: str) -> str:
    """The text in `column` of a JSON Lines row (at byte `offset` of `path`), refused in one line naming its line."""
    value = row.get(column)
    if not isinstance(value, str):
        found = f"a {type(value).__name__}" if column in row else "missing"
        raise ConversionError(f"{path}, line {line_of(path, offset)}: {column!r} is {found}, not a text.")
    return value


def _data_file_texts(path: Path, column: str) -> Iterator[str]:
    """The non-empty texts of `column` of a CSV, TSV or JSON file, cut into windows (`readers.cut_text`)."""
    for number, row in enumerate(data_file_rows(path, ConversionError)):
        value = row.get(column)
        if value is not None and not isinstance(value, str):
            raise ConversionError(f"{path}: {column!r} of row {number} is a {type(value).__name__}, not a text.")
        if value and value.strip():
            yield from cut_text(value)


def _parquet_items(path: Path, group: int, column: str) -> Iterator[Any]:
    """The non-empty values of `column` in row group `group`: texts (cut into windows), or images decoded from their
    bytes."""
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=ENCODE_BATCH, row_groups=[group], columns=[column]):
        for value in batch.column(0).to_pylist():
            if isinstance(value, dict):  # datasets' Image: {"bytes": ..., "path": ...}
                value = value.get("bytes")
            if isinstance(value, bytes):
                yield load_image(io.BytesIO(value), path)
            elif isinstance(value, str) and value.strip():
                yield from cut_text(value)


def _saved_dataset_stream(path: Path, source: DataSource, modality: str, held_out: HeldOut | None) -> Stream:
    import datasets

    dataset = datasets.load_from_disk(str(path))
    if isinstance(dataset, datasets.DatasetDict):
        split = source.split or ("train" if "train" in dataset else next(iter(dataset)))
        if split not in dataset:
            raise ConversionError(f"{path} has no split {split!r} (splits: {list(dataset)}).")
        dataset = dataset[split]
    column = example_column(dataset.features, modality, str(path), source.column, ConversionError)
    longest = check_text_column(dataset, column, str(path)) if modality == "text" else 0
    dataset = dataset.select_columns([column]).rename_column(column, "item")
    if held_out is not None:
        end = min(held_out.start + held_out.count, len(dataset))
        parts = [dataset.select(range(held_out.start)), dataset.select(range(end, len(dataset)))]
        dataset = datasets.concatenate_datasets([part for part in parts if len(part)] or parts[:1])
    size = len(dataset)
    stream = dataset.to_iterable_dataset(num_shards=max(1, min(SAVED_DATASET_PIECES, size)))
    return Stream(_bounded(stream, modality, str(path)), str(path), modality, size if longest <= TEXT_LIMIT else None)


def _hub_stream(source: DataSource, modality: str, token: Any) -> Stream:
    import datasets

    split = source.split or "train"
    description = f"{source.data}" + (f" ({source.config})" if source.config else "") + f", split {split}"
    try:
        dataset = datasets.load_dataset(str(source.data), name=source.config, split=split, streaming=True, token=token)
        features = dataset.features or datasets.Features(
            {name: datasets.Value("string") if isinstance(value, str) else datasets.Image() for name, value in
             next(iter(dataset)).items() if isinstance(value, str) or hasattr(value, "convert")}
        )  # fmt: skip
    except (OSError, ValueError, FileNotFoundError, StopIteration) as error:
        raise ConversionError(f"Hub dataset {description}: {one_line(error)}") from None
    column = example_column(features, modality, f"Hub dataset {description}", source.column, ConversionError)
    dataset = _bounded(dataset.select_columns([column]).rename_column(column, "item"), modality, description)
    split_info = (dataset.info.splits or {}).get(split)
    return Stream(dataset, description, modality, getattr(split_info, "num_examples", None) or None)


def _bounded(stream, modality: str, description: str):
    """A `datasets` stream of `{"item": ...}` read through the bounded readers: texts cut into windows
    (`readers.cut_text`); images, where the stream's features say they are `datasets.Image`, left undecoded by
    `datasets` and read by `readers.open_image` (checked from their headers), else held by `readers.held_image`."""
    import datasets

    if modality == "text":
        return stream.map(_cut_batch, batched=True, batch_size=ENCODE_BATCH)
    if isinstance((stream.features or {}).get("item"), datasets.Image):
        stream = stream.cast_column("item", datasets.Image(decode=False))
        return stream.map(lambda example: {"item": stored_image(example["item"], f"An image of {description}")})
    return stream.map(lambda example: {"item": held_image(example["item"], f"An image of {description}")})


def _cut_batch(batch: dict[str, list]) -> dict[str, list]:
    """A batch of texts as the windows `readers.cut_text` makes of them."""
    return {"item": [window for text in batch["item"] for window in cut_text(text)]}
