"""Calibration and evaluation data for conversions, and the model inputs made from it.

`load_examples` reads texts or images from a `.txt` file, a folder of images, a saved `datasets` folder, a
`datasets.Dataset` or a list; `probe_examples` gives built-in inputs when no data is given; `encode_batches` turns
examples into model inputs with the checkpoint's tokenizer or image processor. `run_model` and `real_token_mask` are
how every conversion step runs a model on such a batch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .checkpoint_io import ConversionError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
TEXT_COLUMNS = ("text", "sentence", "content", "document")
IMAGE_COLUMNS = ("image", "img", "pixel_values")
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


def load_examples(data: Any, modality: str) -> Examples:
    """Texts (`modality="text"`) or RGB images (`"image"`) from a calibration or evaluation data source.

    `data` is one of: a `.txt` file (one text per non-empty line); a folder of image files (searched recursively,
    sorted by path); a folder written by `datasets.Dataset.save_to_disk`; a `datasets.Dataset`; a list of strings or
    of PIL images. A dataset's column is `text`/`sentence`/`content`/`document` or `image`/`img`, else the first
    column of the right kind.
    """
    if isinstance(data, (str, os.PathLike)):
        return _load_path(Path(data).expanduser().resolve(), modality)  # reports name absolute paths
    if _is_dataset(data):
        return Examples(
            _dataset_column(data, modality, repr_name="datasets.Dataset"), _describe_dataset(data), modality
        )
    if isinstance(data, Sequence) and len(data) > 0:
        items = list(data)
        _check_items(items, modality, "the given list")
        return Examples(
            items, f"in-memory list of {len(items)} {'texts' if modality == 'text' else 'images'}", modality
        )
    raise ConversionError(
        f"Unsupported data source {type(data).__name__}: give a .txt file, a folder of images, a folder saved by "
        "datasets' save_to_disk, a datasets.Dataset, or a non-empty list of texts or images."
    )


def _load_path(path: Path, modality: str) -> Examples:
    if not path.exists():
        raise ConversionError(f"Data source {path} does not exist.")
    if path.is_file():
        if path.suffix != ".txt":
            raise ConversionError(f"Data file {path} is not a .txt file (one text per line).")
        if modality != "text":
            raise ConversionError(f"{path} holds texts, but this model takes images: give a folder of images.")
        try:
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as error:
            raise ConversionError(
                f"{path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start}): give a "
                "UTF-8 .txt file with one text per line."
            ) from None
        if not lines:
            raise ConversionError(f"{path} holds no text lines.")
        return Examples(lines, str(path), modality)
    if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
        import datasets

        dataset = datasets.load_from_disk(str(path))
        if isinstance(dataset, datasets.DatasetDict):
            split = "train" if "train" in dataset else next(iter(dataset))
            dataset = dataset[split]
        return Examples(_dataset_column(dataset, modality, repr_name=str(path)), str(path), modality)
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise ConversionError(f"{path} holds no image files ({', '.join(IMAGE_SUFFIXES)}) and is not a saved dataset.")
    if modality != "image":
        raise ConversionError(f"{path} holds images, but this model takes text: give a .txt file or a text dataset.")
    from PIL import Image

    def load(file: Path) -> Image.Image:
        try:
            with Image.open(file) as image:
                return image.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError) as error:  # UnidentifiedImageError is an OSError
            raise ConversionError(
                f"{file} is not a readable image ({error}); remove it from {path} or fix it."
            ) from None

    return Examples([load(file) for file in files], str(path), modality)


def _is_dataset(data: Any) -> bool:
    return type(data).__module__.startswith("datasets.") and hasattr(data, "column_names")


def _describe_dataset(dataset) -> str:
    name = getattr(dataset.info, "dataset_name", None) or getattr(dataset.info, "builder_name", None) or "dataset"
    return f"datasets:{name} ({dataset.num_rows} rows)"


def _dataset_column(dataset, modality: str, repr_name: str) -> list:
    import datasets

    features = dataset.features
    if modality == "text":
        preferred = [c for c in TEXT_COLUMNS if c in features]
        kind = [
            c for c, f in features.items() if isinstance(f, datasets.Value) and f.dtype in ("string", "large_string")
        ]
    else:
        preferred = [c for c in IMAGE_COLUMNS if c in features]
        kind = [c for c, f in features.items() if isinstance(f, datasets.Image)]
    columns = preferred + kind
    if not columns:
        raise ConversionError(
            f"{repr_name} has no {'text' if modality == 'text' else 'image'} column (columns: {list(features)})."
        )
    items = list(dataset[columns[0]])
    if modality == "image":
        items = [item.convert("RGB") for item in items]
    _check_items(items, modality, repr_name)
    return items


def _check_items(items: list, modality: str, what: str) -> None:
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


def run_model(model: nn.Module, batch: dict) -> Any:
    """`model(**batch)` (without `SPECIAL_TOKENS_MASK`), giving a multiple-choice head its `[batch, 1, seq_len]`
    inputs."""
    batch = model_inputs(batch)
    if type(model).__name__.endswith("ForMultipleChoice"):
        batch = {key: value.unsqueeze(1) for key, value in batch.items()}
    return model(**batch)
