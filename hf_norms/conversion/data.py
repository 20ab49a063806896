"""Calibration and evaluation data for conversions, and the model inputs made from it.

`load_examples` reads texts or images from a `.txt` file, a folder of images, a saved `datasets` folder, a
`datasets.Dataset` or a list, only as many as are asked for, through the bounded readers (`hf_norms.readers`);
`probe_examples` gives built-in inputs when no data is given; `encode_batches` turns examples into model inputs with
the checkpoint's tokenizer or image processor. `run_model` and `real_token_mask` are
how every conversion step runs a model on such a batch.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import ConversionError
from ..readers import check_document, check_regular, cut_text, open_image, text_lines
from .data_files import FORMATS, example_column, file_builder, is_saved_dataset, load_data_files, missing_path

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
PROBE_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Shares in the company rose sharply after the results were announced on Monday.",
    "A new exhibition of early photographs opens at the city museum this weekend.",
    "The minister said the plan would be published before the end of the year.",
    "Scientists have found a way to store energy in cheap and abundant materials.",
    "She scored twice in the second half to give her team a comfortable win.",
    "Heavy rain is expected across the north, with strong winds along the coast.",
    "The software update fixes a bug that drained the battery of older phones.",
)


@dataclass
class Examples:
    """Raw examples (texts or PIL images) and a description of where they came from, for the report."""

    items: list
    description: str
    modality: str  # "text" | "image"

    def __len__(self) -> int:
        return len(self.items)

    def take(self, start: int, count: int | None) -> Examples:
        stop = None if count is None else start + count
        return Examples(self.items[start:stop], self.description, self.modality)


def load_examples(data: Any, modality: str, count: int | None = None, column: str | None = None) -> Examples:
    """The first `count` (default: all) texts (`modality="text"`) or RGB images (`"image"`) of a calibration or
    evaluation data source; a `.txt` file or an image folder is read only as far as that.

    `data` is one of: a `.txt` file (one text per non-empty line); a `.csv`, `.tsv`, `.json`, `.jsonl` or `.parquet`
    file, read by `datasets.load_dataset` as `heal` and `finetune` read it (`data_files.load_data_files`); a folder of image files (searched recursively, sorted by
    path); a folder written by `datasets.Dataset.save_to_disk`; a `datasets.Dataset`; a list of strings or of PIL
    images. A data set's column is `column` when given, else `text`/`sentence`/`content`/`document` or `image`/`img`,
    else the first column of the right kind (`data_files.example_column`). Everything goes through the bounded readers (`hf_norms.readers`): a text longer than
    `TEXT_LIMIT` characters (a line, a dataset's document, a text of the list) gives several examples, and every image
    file is checked from its header before it is decoded.
    """
    if isinstance(data, (str, os.PathLike)):
        path = Path(data).expanduser().resolve()  # reports name absolute paths
        return Examples(list(itertools.islice(_path_items(path, modality, column), count)), str(path), modality)
    if _is_dataset(data):
        return Examples(
            list(itertools.islice(dataset_items(data, modality, "datasets.Dataset", column), count)),
            _describe_dataset(data),
            modality,
        )
    if isinstance(data, Sequence) and len(data) > 0:
        _check_items(data, modality, "the given list")
        windows = (window for text in data for window in cut_text(text)) if modality == "text" else iter(data)
        items = list(itertools.islice(windows, count))
        return Examples(
            items, f"in-memory list of {len(items)} {'texts' if modality == 'text' else 'images'}", modality
        )
    raise ConversionError(
        f"Unsupported data source {type(data).__name__}: give a {FORMATS} file, a folder of images, a folder saved by datasets' save_to_disk, a datasets.Dataset, or a non-empty list of texts or "
        "images."
    )


def check_data(data: Any, modality: str, column: str | None = None) -> None:
    """Refuse, in one line, a data path that does not exist, is of a format no command reads, lacks the named column
    or holds no example, by reading its first example (`load_examples`): so a mistake is answered before a model
    loads. Data in memory is checked where it is read."""
    if isinstance(data, (str, os.PathLike)):
        load_examples(data, modality, 1, column)


def _path_items(path: Path, modality: str, column: str | None) -> Iterator[Any]:
    """The examples of a local data source, read one at a time (checked to hold at least one)."""
    if not path.exists():
        raise missing_path(path, ConversionError)
    check_regular(path, folder=True)
    if path.is_file() and file_builder(path, ConversionError) != "text":
        dataset = load_data_files([path], ConversionError)
        items, what = dataset_items(dataset, modality, str(path), column), f"{modality} examples"
    elif path.is_file():
        if modality != "text":
            raise ConversionError(f"{path} holds texts, but this model takes images: give a folder of images.")
        items, what = text_lines(path), "text lines"
    elif is_saved_dataset(path):
        import datasets

        dataset = datasets.load_from_disk(str(path))
        if isinstance(dataset, datasets.DatasetDict):
            dataset = dataset["train" if "train" in dataset else next(iter(dataset))]
        items, what = dataset_items(dataset, modality, str(path), column), f"{modality} examples"
    else:
        files = image_files(path)
        if not files:
            raise ConversionError(
                f"{path} holds no image files ({', '.join(IMAGE_SUFFIXES)}) and is not a saved dataset."
            )
        if modality != "image":
            raise ConversionError(
                f"{path} holds images, but this model takes text: give a .txt file or a text dataset."
            )
        items, what = (load_image(file, path) for file in files), "images"
    first = next(items, None)
    if first is None:
        raise ConversionError(f"{path} holds no {what}.")
    yield first
    yield from items


def image_files(folder: Path) -> list[Path]:
    """The image files of `folder` and its sub-folders, sorted by path."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def load_image(file: Path | Any, folder: Path) -> Any:
    """The RGB PIL image in `file` (a path or a binary stream) of the data source `folder` (`readers.open_image`)."""
    return open_image(file, str(file), f"remove it from {folder} or fix it")


def _is_dataset(data: Any) -> bool:
    return type(data).__module__.startswith("datasets.") and hasattr(data, "column_names")


def _describe_dataset(dataset) -> str:
    name = getattr(dataset.info, "dataset_name", None) or getattr(dataset.info, "builder_name", None) or "dataset"
    return f"datasets:{name} ({dataset.num_rows} rows)"


def dataset_items(dataset, modality: str, repr_name: str, column: str | None = None) -> Iterator[Any]:
    """The examples of a `datasets.Dataset`'s column (`data_files.example_column`), one row at a time: its texts cut into windows
    (`readers.cut_text`, after `check_text_column`), or its images read by `readers.open_image`."""
    column = example_column(dataset.features, modality, repr_name, column, ConversionError)
    if modality == "text":
        check_text_column(dataset, column, repr_name)
        for example in dataset.select_columns([column]):
            if not isinstance(example[column], str):
                raise ConversionError(f"{repr_name} must hold texts (str) for a text model.")
            yield from cut_text(example[column])
        return
    import datasets

    if not isinstance(dataset.features[column], datasets.Image):
        raise ConversionError(f"{repr_name} must hold PIL images for a vision model.")
    undecoded = dataset.select_columns([column]).cast_column(column, datasets.Image(decode=False))
    for row, example in enumerate(undecoded):
        yield stored_image(example[column], f"Image {row} of {repr_name}")


def check_text_column(dataset, column: str, repr_name: str) -> int:
    """The bytes of the longest text of a column, after refusing a column that does not hold texts, or holds a text
    larger than `readers.DOCUMENT_LIMIT` bytes (from its Arrow lengths, before any text is read)."""
    import datasets
    import pyarrow.compute as pc

    feature = dataset.features[column]
    if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise ConversionError(f"{repr_name} must hold texts (str) for a text model (its {column!r} holds {feature}).")
    longest = pc.max(pc.binary_length(dataset.data.column(column))).as_py() or 0
    check_document(longest, f"{repr_name} ({column!r})")
    return longest


def stored_image(stored: dict, where: str) -> Any:
    """The RGB image of a `datasets.Image(decode=False)` value (`{"bytes": ..., "path": ...}`), read by `open_image`."""
    source = io.BytesIO(stored["bytes"]) if stored.get("bytes") is not None else stored.get("path")
    return open_image(source, where, "remove it from the data set or fix it")


def _check_items(items: Sequence, modality: str, what: str) -> None:
    if modality == "text" and not all(isinstance(item, str) for item in items):
        raise ConversionError(f"{what} must hold texts (str) for a text model.")
    if modality == "image" and not all(hasattr(item, "convert") for item in items):
        raise ConversionError(f"{what} must hold PIL images for a vision model.")


def probe_examples(modality: str, count: int = 8) -> Examples:
    """Built-in inputs for evaluating an exact conversion when no data is given: fixed English sentences, or
    deterministic synthetic photos-like images (smooth colour gradients with texture)."""
    if modality == "text":
        return Examples(list(PROBE_SENTENCES[:count]), "built-in probe sentences", modality)
    from PIL import Image

    generator = np.random.default_rng(0)
    ys, xs = np.mgrid[0:224, 0:224] / 223.0
    images = []
    for _ in range(count):
        colours = generator.uniform(0, 255, size=(3, 3))
        base = colours[:, 0] * xs[..., None] + colours[:, 1] * ys[..., None] + colours[:, 2] * (1 - xs[..., None])
        noisy = base / 2 + generator.normal(0, 20, size=base.shape)
        images.append(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB"))
    return Examples(images, "built-in synthetic probe images", modality)


def fitting_max_length(config, max_length: int) -> int:
    """`max_length` capped at a text model's `max_position_embeddings`: a longer input has no position embedding (a
    64-position BERT fed 128 tokens fails in its embeddings). Image models have no such limit here."""
    positions = getattr(config, "max_position_embeddings", None)
    if getattr(config, "vocab_size", None) and isinstance(positions, int) and positions > 0:
        return min(max_length, positions)
    return max_length


def encode_batches(processor, examples: Examples, batch_size: int = 16, max_length: int = 128) -> list[dict]:
    """Model inputs for `examples` in batches: `input_ids`/`attention_mask` (padded per batch) and the
    `SPECIAL_TOKENS_MASK` (which `run_model` does not pass on), or `pixel_values`."""
    batches = []
    for start in range(0, len(examples), batch_size):
        chunk = examples.items[start : start + batch_size]
        if examples.modality == "text":
            batch = processor(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                              return_special_tokens_mask=True)  # fmt: skip
        else:
            batch = processor(images=chunk, return_tensors="pt")
        batches.append(dict(batch))
    return batches


def real_token_mask(batch: dict) -> torch.Tensor | None:
    """`[batch, seq_len]` bool mask of real tokens for text (None for images: every token is real)."""
    mask = batch.get("attention_mask")
    return mask.bool() if mask is not None else None


TOKEN_TYPES = ("prefix", "special", "ordinary")
SPECIAL_TOKENS_MASK = "special_tokens_mask"  # carried by text batches beside the model inputs; `run_model` drops it


def model_inputs(batch: dict) -> dict:
    """`batch` without the keys that describe it rather than feed the model (`SPECIAL_TOKENS_MASK`)."""
    return {key: value for key, value in batch.items() if key != SPECIAL_TOKENS_MASK}


def token_type_masks(batch: dict, seq_len: int, prefix_tokens: int = 1) -> dict[str, torch.Tensor]:
    """`{type: [batch, seq_len] bool}` for the `TOKEN_TYPES` among the real tokens of `batch`: `prefix`, the first
    `prefix_tokens` positions ([CLS], DeiT's distillation token); `special`, the other tokens the tokenizer added
    ([SEP], ...: the batch's `special_tokens_mask`; none for images or without it); `ordinary`, the rest. `seq_len` is
    the models' sequence length (for images, patches plus prefix tokens)."""
    first = next(iter(batch.values()))
    mask = real_token_mask(batch)
    if mask is None:
        mask = torch.ones(first.shape[0], seq_len, dtype=torch.bool, device=first.device)
    prefix = torch.zeros_like(mask)
    prefix[:, :prefix_tokens] = True
    prefix &= mask
    special = batch[SPECIAL_TOKENS_MASK].bool() & mask & ~prefix if SPECIAL_TOKENS_MASK in batch else ~mask
    return {"prefix": prefix, "special": special, "ordinary": mask & ~prefix & ~special}


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def on_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """`batch` with its tensors on `device` (the same dict when they already are there)."""
    if all(not isinstance(v, torch.Tensor) or v.device == device for v in batch.values()):
        return batch
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


def run_model(model: nn.Module, batch: dict) -> Any:
    """`model(**batch)` on the model's device (without `SPECIAL_TOKENS_MASK`), giving a multiple-choice head its
    `[batch, 1, seq_len]` inputs."""
    batch = on_device(model_inputs(batch), model_device(model))
    if type(model).__name__.endswith("ForMultipleChoice"):
        batch = {key: value.unsqueeze(1) for key, value in batch.items()}
    return model(**batch)
