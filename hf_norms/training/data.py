"""Datasets for fine-tuning: where they come from, the checks they must pass before training, and batch preparation.

Sources (`load_dataset_source`): a `datasets` dataset saved with `save_to_disk`, an imagefolder (one sub-folder per
class), a .txt, .csv, .tsv, .json, .jsonl or .parquet file (`conversion.data_files`, the grammar of every command's
data), a Hub dataset id, or one of the real datasets that ship in packages
(`packaged:fashion-mnist`, `packaged:bbc-news`; see `hf_norms.packaged`).

Every check that can fail on the data runs in `validate_...` before the Trainer starts: missing columns, labels that are
not class indices or lie outside `num_labels`, images whose channel count the model does not take, empty texts. Batches
are prepared lazily (`datasets.Dataset.with_transform`): `ImageClassificationTransform` and `TextTransform` turn raw
rows into model inputs, so large image datasets are never materialised as tensors.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from PIL import Image

from .. import packaged
from ..conversion.data_files import (
    FILE_BUILDERS,
    STRING_DTYPES,
    is_saved_dataset,
    load_data_files,
    missing_column,
    missing_path,
    quiet_datasets,
)
from ..errors import FinetuneInputError
from ..readers import TEXT_LIMIT, check_pixels, opened_image

PACKAGED_PREFIX = "packaged:"
PACKAGED_DATASETS = ("bbc-news", "fashion-mnist")
EVAL_SPLIT_NAMES = ("validation", "test")
IMAGE_CHECK_COUNT = 16  # images per split whose channel count is checked before training


def packaged_dataset(name: str, max_train_samples: int | None = None) -> datasets.DatasetDict:
    """A real dataset shipped in a package, as `train` and `test` splits with a `ClassLabel` column `label`.

    - `fashion-mnist`: 28x28 grayscale images (`image`, PIL mode L), 10 classes; 60,000 train (or the first
      `max_train_samples`), 10,000 test.
    - `bbc-news`: 2225 articles (`text`), 5 classes, split 80/20 by `packaged.split_train_test(seed=0)`.
    """
    if name == "fashion-mnist":
        features = datasets.Features(
            image=datasets.Image(), label=datasets.ClassLabel(names=list(packaged.FASHION_MNIST_LABELS))
        )

        def split(split_name: str, limit: int | None) -> datasets.Dataset:
            images, labels = packaged.fashion_mnist(split_name, limit)
            return datasets.Dataset.from_dict(
                {"image": [Image.fromarray(image) for image in images], "label": labels}, features=features
            )

        return datasets.DatasetDict(train=split("train", max_train_samples), test=split("test", None))
    if name == "bbc-news":
        features = datasets.Features(
            text=datasets.Value("string"), label=datasets.ClassLabel(names=packaged.BBC_NEWS_LABELS)
        )
        train, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
        return datasets.DatasetDict(
            {
                split_name: datasets.Dataset.from_dict(
                    {"text": [text for text, _ in items], "label": [label for _, label in items]}, features=features
                )
                for split_name, items in (("train", train), ("test", test))
            }
        )
    raise FinetuneInputError(f"No packaged dataset {name!r}; choose one of {PACKAGED_DATASETS} (as packaged:<name>).")


def load_dataset_source(
    source: str,
    config_name: str | None = None,
    max_train_samples: int | None = None,
    token: str | None = None,
) -> datasets.DatasetDict:
    """The splits of `source`, resolved in this order (`token` authenticates a Hub dataset; None: HF_TOKEN or the stored
    login):

    1. `packaged:<name>`: `packaged_dataset(name)`.
    2. A folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk` (a lone dataset becomes split `train`).
    3. Any other folder: an imagefolder (`<folder>/<class name>/<image>`, or `train/`, `validation/` sub-folders).
    4. A `.txt`/`.csv`/`.tsv`/`.json`/`.jsonl`/`.parquet` file: split `train` (`data_files.load_data_files`, as
       `convert` and `heal` read it).
    5. Otherwise a dataset id for `datasets.load_dataset` (the Hub, or a local loading script).
    """
    if source.startswith(PACKAGED_PREFIX):
        return packaged_dataset(source.removeprefix(PACKAGED_PREFIX), max_train_samples)
    path = Path(source)
    if path.is_dir():
        if is_saved_dataset(path):
            loaded = datasets.load_from_disk(str(path))
            return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict(train=loaded)
        with quiet_datasets():  # a local folder: no progress bars around a possible error line
            return datasets.load_dataset("imagefolder", data_dir=str(path))
    if path.exists():  # a file, or a FIFO or device that the reader refuses
        return load_data_files([path], FinetuneInputError, split=None)
    if path.suffix.lower() in FILE_BUILDERS or source.startswith((".", "/", "~")) or source.count("/") > 1:
        raise missing_path(path, FinetuneInputError)
    return datasets.load_dataset(source, config_name, token=token)


def select_splits(
    splits: datasets.DatasetDict,
    train_split: str,
    eval_split: str | None,
    eval_fraction: float,
    seed: int,
    eval_splits: datasets.DatasetDict | None = None,
) -> tuple[datasets.Dataset, datasets.Dataset | None]:
    """`(train, eval)` datasets.

    The eval set is `eval_split` of `eval_splits` (a separate source) or of `splits`; without a name, the first of
    `validation`/`test` that exists (the only split of `eval_splits`); failing that, a seeded `eval_fraction` of the
    train split (none when `eval_fraction` is 0).
    """
    if train_split not in splits:
        raise FinetuneInputError(
            f"The dataset has no split {train_split!r} (it has {list(splits)}): pass --train_split."
        )
    train = splits[train_split]
    source = splits if eval_splits is None else eval_splits
    name = eval_split
    if name is None and eval_splits is not None and len(eval_splits) == 1:
        name = next(iter(eval_splits))
    if name is None:
        name = next((candidate for candidate in EVAL_SPLIT_NAMES if candidate in source), None)
    if name is None and eval_splits is not None:
        raise FinetuneInputError(
            f"The eval dataset has splits {list(eval_splits)}: name the one to use with --eval_split."
        )
    if name is not None:
        if name not in source:
            raise FinetuneInputError(
                f"The eval dataset has no split {name!r} (it has {list(source)}): pass --eval_split."
            )
        return train, source[name]
    if eval_fraction <= 0:
        return train, None
    if not 0 < eval_fraction < 1:
        raise FinetuneInputError(f"eval_fraction must lie in [0, 1), got {eval_fraction}.")
    divided = train.train_test_split(test_size=eval_fraction, seed=seed)
    return divided["train"], divided["test"]


def subsample(dataset: datasets.Dataset, max_samples: int | None, seed: int) -> datasets.Dataset:
    """A seeded random subset of `max_samples` rows (imagefolders are sorted by class, so never just the first rows)."""
    if max_samples is None or max_samples >= len(dataset):
        return dataset
    return dataset.shuffle(seed=seed).select(range(max_samples))


# --------------------------------------------------------------------------------------------------------------------
# Checks before training
# --------------------------------------------------------------------------------------------------------------------


def require_column(dataset: datasets.Dataset, column: str, role: str, option: str, split: str) -> None:
    """Refuse a data set without `column` (`data_files.missing_column`, the line every command gives)."""
    if column not in dataset.column_names:
        raise missing_column(f"The {split} data", column, role, dataset.column_names, option, FinetuneInputError)


def resolve_label_names(
    splits: dict[str, datasets.Dataset],
    label_column: str,
    num_labels: int | None = None,
) -> list[str]:
    """The class names, index order, of `label_column` across all `splits` (`{"train": ..., "eval": ...}`).

    A `ClassLabel` column gives its names; string labels give their sorted distinct values (cast to class indices with
    `encode_labels`); integer labels are class indices `0 .. num_labels - 1` (`num_labels` defaults to the largest
    label + 1). Raises a `FinetuneInputError` naming the fix for a missing column, non-class labels, negative labels or labels
    `>= num_labels`.
    """
    for split, dataset in splits.items():
        require_column(dataset, label_column, "label", "label_column", split)
    feature = next(iter(splits.values())).features[label_column]
    if isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
        if num_labels is not None and num_labels != len(names):
            raise FinetuneInputError(
                f"num_labels={num_labels}, but the label column {label_column!r} has {len(names)} classes {names}."
            )
        _check_label_range(splits, label_column, len(names))
        return names
    dtype = getattr(feature, "dtype", None)
    if dtype in STRING_DTYPES:
        names = sorted({value for dataset in splits.values() for value in dataset[label_column] if value is not None})
        if num_labels is not None and len(names) > num_labels:
            raise FinetuneInputError(
                f"The label column {label_column!r} has {len(names)} distinct labels {names[:20]}, more than "
                f"num_labels={num_labels}: raise num_labels or drop the extra classes."
            )
        _check_no_missing_labels(splits, label_column)
        return names
    if dtype is None or not (dtype.startswith("int") or dtype.startswith("uint")):
        raise FinetuneInputError(
            f"The label column {label_column!r} holds {feature}, not class labels: use integer class indices "
            "0..num_labels-1 or class-name strings."
        )
    _check_no_missing_labels(splits, label_column)
    largest = max(max(dataset[label_column], default=0) for dataset in splits.values())
    count = num_labels if num_labels is not None else largest + 1
    _check_label_range(splits, label_column, count)
    return [str(index) for index in range(count)]


def _check_no_missing_labels(splits: dict[str, datasets.Dataset], label_column: str) -> None:
    for split, dataset in splits.items():
        missing = [row for row, value in enumerate(dataset[label_column]) if value is None]
        if missing:
            raise FinetuneInputError(
                f"{len(missing)} row(s) of the {split} data have no label in column {label_column!r} "
                f"(first: row {missing[0]}); drop or label them."
            )


def _check_label_range(splits: dict[str, datasets.Dataset], label_column: str, num_labels: int) -> None:
    for split, dataset in splits.items():
        labels = torch.tensor(dataset[label_column])
        bad = ((labels < 0) | (labels >= num_labels)).nonzero().flatten()
        if len(bad):
            row = int(bad[0])
            raise FinetuneInputError(
                f"{len(bad)} label(s) of the {split} data lie outside 0..{num_labels - 1} (num_labels={num_labels}); "
                f"first: row {row}, label {int(labels[row])}. Fix the labels or set num_labels to the number of classes."
            )


def encode_labels(dataset: datasets.Dataset, label_column: str, names: Sequence[str]) -> datasets.Dataset:
    """`dataset` with string labels cast to class indices of `names` (integer and `ClassLabel` columns unchanged),
    without a progress bar before the checks that follow (a mistake there is one line)."""
    if getattr(dataset.features[label_column], "dtype", None) not in STRING_DTYPES:
        return dataset
    with quiet_datasets():
        return dataset.cast_column(label_column, datasets.ClassLabel(names=list(names)))


def validate_text_column(dataset: datasets.Dataset, column: str, split: str, option: str = "text_column") -> None:
    """The column exists, holds strings, and no row is empty."""
    require_column(dataset, column, "text", option, split)
    feature = dataset.features[column]
    if getattr(feature, "dtype", None) not in STRING_DTYPES:
        raise FinetuneInputError(
            f"The {split} text column {column!r} holds {feature}, not strings: name a text column with --{option}."
        )
    empty = [row for row, text in enumerate(dataset[column]) if text is None or not text.strip()]
    if empty:
        raise FinetuneInputError(
            f"{len(empty)} row(s) of the {split} text column {column!r} are empty (first: row {empty[0]}); drop them."
        )


def image_channels(image: Image.Image) -> int:
    """Channels of a PIL image as the image processor sees them: 1 (L, I, F, P), 2 (LA), 3 (RGB), 4 (RGBA, CMYK)."""
    return len(image.getbands())


def channel_error(channels: int, mode: str, num_channels: int, where: str) -> FinetuneInputError:
    suggestion = {1: "L", 3: "RGB"}.get(num_channels)
    fix = (
        f"pass image_mode={suggestion!r} (--image_mode {suggestion}) to convert them" if suggestion else "convert them"
    )
    return FinetuneInputError(
        f"{where} has {channels} channel(s) (PIL mode {mode}), but the model takes {num_channels} "
        f"(config.num_channels): {fix}, or use a model built with num_channels={channels}."
    )


def validate_image_column(
    dataset: datasets.Dataset,
    column: str,
    split: str,
    num_channels: int,
    image_mode: str | None,
) -> None:
    """The column exists and holds images; without `image_mode`, the first images have `num_channels` channels.

    Every image is checked again when its batch is prepared (`ImageClassificationTransform`), with the same message.
    """
    require_column(dataset, column, "image", "image_column", split)
    feature = dataset.features[column]
    if not isinstance(feature, datasets.Image):
        raise FinetuneInputError(
            f"The {split} image column {column!r} holds {feature}, not images: cast it with "
            f"dataset.cast_column({column!r}, datasets.Image()) or name the image column with --image_column."
        )
    check_images_readable(dataset, column, split)
    if image_mode is not None:
        return
    for row in range(min(IMAGE_CHECK_COUNT, len(dataset))):
        image = dataset[row][column]
        if image_channels(image) != num_channels:
            raise channel_error(image_channels(image), image.mode, num_channels, f"Image {row} of the {split} data")


def check_images_readable(dataset: datasets.Dataset, column: str, split: str) -> None:
    """Every image of the column opens, has at most `readers.IMAGE_PIXELS` pixels (from its header) and passes PIL's
    integrity check (`Image.verify`, which reads the file's structure without decoding every pixel), so a corrupt or
    oversized file stops the run before training, naming its row."""
    undecoded = dataset.select_columns([column]).cast_column(column, datasets.Image(decode=False))
    for row, example in enumerate(undecoded):
        stored = example[column]
        source = io.BytesIO(stored["bytes"]) if stored.get("bytes") is not None else stored.get("path")
        where = f"Image {row} of the {split} data" + (f" ({stored['path']})" if stored.get("path") else "")
        try:
            with opened_image(source) as image:
                size = image.size
                image.verify()
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
            raise FinetuneInputError(f"{where} is not a readable image ({error}); remove or fix it.") from None
        check_pixels(size, where)


def check_batch_norm_batches(num_examples: int, batch_size: int, world_size: int, num_prefix_tokens: int) -> None:
    """SepNorm's BatchNorm needs more than one value per channel in every training batch.

    A batch of `b` images gives `b * num_prefix_tokens * world_size` values (synchronised across processes). Raises for a
    batch size, or a last batch, that gives fewer than 2.
    """
    per_process = math.ceil(num_examples / world_size)
    last = per_process % batch_size
    for size, which in ((batch_size, "per-device batch"), (last, "last batch")):
        if 0 < size * num_prefix_tokens * world_size < 2:
            raise FinetuneInputError(
                f"SepNorm's BatchNorm prefix norm needs at least 2 values per channel, but the {which} has {size} "
                f"example(s) ({num_examples} training examples, batch size {batch_size}, {world_size} process(es)): "
                "use a batch size of 2 or more, set dataloader_drop_last=True, or use sepnorm_prefix_norm='layernorm'."
            )


# --------------------------------------------------------------------------------------------------------------------
# Batch preparation
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class ImageClassificationTransform:
    """`Dataset.with_transform` function: raw rows -> `pixel_values` `[b, C, H, W]` (the image processor's) and `labels` `[b]`.

    With `image_mode` each image is converted first (`Image.convert(image_mode)`); without it an image whose channel
    count is not `num_channels` raises the same error as `validate_image_column`.
    """

    image_processor: Any
    image_column: str
    label_column: str
    num_channels: int
    image_mode: str | None = None

    def prepare(self, image: Image.Image) -> Image.Image:
        if self.image_mode is not None:
            return image.convert(self.image_mode)
        if image_channels(image) != self.num_channels:
            raise channel_error(image_channels(image), image.mode, self.num_channels, "An image")
        return image

    def __call__(self, batch: dict[str, list]) -> dict[str, torch.Tensor]:
        images = [self.prepare(image) for image in batch[self.image_column]]
        pixel_values = self.image_processor(images=images, return_tensors="pt")["pixel_values"]
        return {"pixel_values": pixel_values, "labels": torch.tensor(batch[self.label_column], dtype=torch.long)}


@dataclass
class TextTransform:
    """`Dataset.with_transform` function: raw rows -> token ids (truncated, padded later by the collator) [+ labels].

    Each text is cut to its first `readers.TEXT_LIMIT` characters before it is tokenised: more than the tokens kept
    (`max_length`, at most the model's positions), so the ids are the same, and a huge row costs no more than another.

    `text_pair_column` adds a second segment (sentence-pair tasks); `label_column` None gives no labels (masked LM,
    whose collator makes them).
    """

    tokenizer: Any
    text_column: str
    max_length: int
    label_column: str | None = None
    text_pair_column: str | None = None

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        texts = [text[:TEXT_LIMIT] for text in batch[self.text_column]]  # the tokenizer reads no more than it keeps
        pairs = [text[:TEXT_LIMIT] for text in batch[self.text_pair_column]] if self.text_pair_column else None
        encoded = dict(
            self.tokenizer(
                texts,
                pairs,
                truncation=True,
                max_length=self.max_length,
                return_special_tokens_mask=self.label_column is None,
            )
        )
        if self.label_column is not None:
            encoded["labels"] = list(batch[self.label_column])
        return encoded
