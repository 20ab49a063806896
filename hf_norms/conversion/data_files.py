"""The one grammar of data files every command reads (`convert --calibration-data`/`--eval-data`, `heal --data`,
`finetune --dataset`): which file suffix `datasets.load_dataset` reads with which builder, the load itself, the choice
and check of the column examples come from (`--text-column` / `--image-column`, both spellings), and the one-line
errors for a missing path, an unsupported format, a file without rows and an unknown column.

The three readers (`conversion.data`, `conversion.streaming`, `training.data`) go through this module; each raises its
own `InputError` kind (`ConversionError`, `FinetuneInputError`), passed as `error`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, one_line

# suffix -> the `datasets` packaged builder that reads it (and its options)
FILE_BUILDERS = {".txt": "text", ".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
BUILDER_OPTIONS = {".tsv": (("delimiter", "\t"),)}  # hashable: (name, value) pairs
FORMATS = ".txt, .csv, .tsv, .json, .jsonl or .parquet"
TEXT_COLUMNS = ("text", "sentence", "content", "document")
IMAGE_COLUMNS = ("image", "img", "pixel_values")
STRING_DTYPES = ("string", "large_string")


def file_builder(path: Path, error: type[InputError] = InputError) -> str:
    """The `datasets` builder of the data file `path` (by its suffix), or one line naming the formats read."""
    builder = FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise error(f"{path} is not a data file hf-norms reads: save it as a {FORMATS} file.")
    return builder


def missing_path(path: Path | str, error: type[InputError] = InputError) -> InputError:
    """The error for a data path that does not exist."""
    return error(f"There is no file or folder {Path(path).expanduser().absolute()}; check the data path.")


def load_data_files(
    files: Sequence[Path],
    error: type[InputError] = InputError,
    *,
    split: str | None = "train",
    streaming: bool = False,
) -> Any:
    """`datasets.load_dataset(builder, data_files=...)` of `files` (one format; several are the shards of a stream):
    split `split`, or a `DatasetDict` of it when `split` is None; streamed (an `IterableDataset`) when `streaming`.
    A file that is not of its format, or has no rows, is one line."""
    import datasets

    readers = {(file_builder(file, error), BUILDER_OPTIONS.get(file.suffix.lower())) for file in files}
    if len(readers) != 1:
        found = ", ".join(sorted({file.suffix for file in files}))
        raise error(f"{files[0].parent} mixes data formats ({found}): give files of one kind.")
    builder, options = readers.pop()
    data_files = [str(file) for file in files]
    try:
        with quiet_datasets():  # local files are read in moments: no progress bars around a possible error line
            return datasets.load_dataset(builder, data_files={split or "train": data_files}, streaming=streaming,
                                         split=split, **dict(options or ()))  # fmt: skip
    except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as problem:  # no rows, not the format
        where = files[0] if len(files) == 1 else files[0].parent
        raise error(
            f"Cannot read {where} as a {builder} file with rows of data ({one_line(problem)}); check its contents."
        ) from None


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """datasets' progress bars off for the duration, as they were after."""
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def is_saved_dataset(folder: Path) -> bool:
    """Whether `folder` was written by `datasets`' `save_to_disk` (a `Dataset` or a `DatasetDict`)."""
    return any((folder / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def missing_column(where: str, column: str, role: str, columns: Sequence[str], option: str,
                   error: type[InputError] = InputError) -> InputError:  # fmt: skip
    """The error for a column a data set does not have (`role`: text, image, label)."""
    return error(
        f"{where} has no {role} column {column!r}; its columns are {list(columns)}. Name the right one with --{option}"
        f" (or {option.replace('-', '_')}=... in the Python API)."
    )


def example_column(features: dict[str, Any], modality: str, where: str, column: str | None = None,
                   error: type[InputError] = InputError) -> str:  # fmt: skip
    """The column of a data set (`features`: column -> `datasets` feature) that holds the examples of a `modality`
    ("text" or "image") model: `column` when given (checked), else `text`/`sentence`/`content`/`document` or
    `image`/`img`/`pixel_values`, else the first column of the right kind."""
    import datasets

    option = f"{modality}-column"
    if column is not None:
        if column not in features:
            raise missing_column(where, column, modality, list(features), option, error)
        return column
    if modality == "text":
        preferred = [c for c in TEXT_COLUMNS if c in features]
        kind = [c for c, f in features.items() if isinstance(f, datasets.Value) and f.dtype in STRING_DTYPES]
    else:
        preferred = [c for c in IMAGE_COLUMNS if c in features]
        kind = [c for c, f in features.items() if isinstance(f, datasets.Image)]
    columns = preferred + kind
    if not columns:
        raise error(f"{where} has no {modality} column (columns: {list(features)}); name it with --{option}.")
    return columns[0]
