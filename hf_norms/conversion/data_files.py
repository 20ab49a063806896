"""The one grammar of data files every command reads (`convert --calibration-data`/`--eval-data`, `heal --data`,
`finetune --dataset`): which file suffix `datasets.load_dataset` reads with which builder, the load itself, the choice
and check of the column examples come from (`--text-column` / `--image-column`, both spellings), and the one-line
errors for a missing path, an unsupported format, a file without rows and an unknown column.

`datasets` never reads a user's text data file itself: each is first read whole by the bounded reader into a checked
copy in a temporary folder (`checked_files`, `readers.checked_copy`), and the copy is what `datasets` (and `pyarrow`
under it) reads; its Arrow cache is kept in that folder too, which is removed when the load or the stream ends.

The three readers (`conversion.data`, `conversion.streaming`, `training.data`) go through this module; each raises its
own `InputError` kind (`ConversionError`, `FinetuneInputError`), passed as `error"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConversionError, InputError, one_line
from ..readers import DATA_SUFFIXES, check_regular, checked_copy

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


def load_data_files(files: Sequence[Path], error: type[InputError] = InputError, *, split: str | None = "train") -> Any:
    """`datasets.load_dataset(builder, data_files=...)` of `files` (one format), held in memory: split `split`, or a
    `DatasetDict` of it when `split` is None. What `datasets` reads is the checked copies (`checked_files`), and its
    Arrow cache lies beside them: the temporary folder is removed before this returns, so nothing is left in the
    cache of `datasets` (`HF_HOME`). A file that is not of its format, or has no rows, is one line."""
    import datasets

    with checked_files(files, error) as (builder, data_files, options, scratch):
        try:
            with quiet_datasets():  # local files are read in moments: no progress bars around a possible error line
                return datasets.load_dataset(builder, data_files={split or "train": data_files}, split=split,
                                             cache_dir=str(scratch / "cache"), keep_in_memory=True, **options)  # fmt: skip
        except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as problem:  # no rows, not the format
            raise unreadable(files, builder, problem, error) from None


def data_file_rows(path: Path, error: type[InputError] = InputError) -> Iterator[dict[str, Any]]:
    """The rows of one data file, streamed by `datasets.load_dataset(..., streaming=True)` from its checked copy
    (`checked_files`, removed when the rows end); a part that does not read, wherever it lies, is one line."""
    import datasets

    with checked_files([path], error) as (builder, data_files, options, _):
        rows = iter(datasets.load_dataset(builder, data_files={"train": data_files}, split="train", streaming=True,
                                          **options))  # fmt: skip
        while True:
            try:
                row = next(rows, None)
            except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as problem:
                raise unreadable([path], builder, problem, error) from None
            if row is None:
                return
            yield row


@contextlib.contextmanager
def checked_files(files: Sequence[Path], error: type[InputError]) -> Iterator[tuple[str, list[str], dict, Path]]:
    """`(builder, data files, builder options, scratch folder)` for `files` of one format: each text data file
    (`readers.DATA_SUFFIXES`) read whole by the bounded reader into a copy in a temporary folder
    (`readers.checked_copy`: every record checked before it is written), so that `datasets` reads only what was
    checked; a Parquet file (binary) as it is, once it is known to be a regular file. The folder is removed at the
    end. A refusal is one line (`error`)."""
    readers = {(file_builder(file, error), BUILDER_OPTIONS.get(file.suffix.lower())) for file in files}
    if len(readers) != 1:
        found = ", ".join(sorted({file.suffix for file in files}))
        raise error(f"{files[0].parent} mixes data formats ({found}): give files of one kind.")
    builder, options = readers.pop()
    with tempfile.TemporaryDirectory(prefix="hf-norms-data-") as scratch:
        data_files = []
        for index, file in enumerate(files):
            copy = Path(scratch) / f"{index}{file.suffix.lower()}"
            try:
                if file.suffix.lower() in DATA_SUFFIXES:
                    checked_copy(file, copy)
                else:
                    check_regular(file)
            except ConversionError as refused:
                raise error(str(refused)) from None
            data_files.append(str(copy if copy.exists() else file))
        yield builder, data_files, dict(options or ()), Path(scratch)


def unreadable(files: Sequence[Path], builder: str, problem: BaseException, error: type[InputError]) -> InputError:
    """The error for data files that `datasets` cannot read as `builder` files with rows."""
    where = files[0] if len(files) == 1 else files[0].parent
    return error(
        f"Cannot read {where} as a {builder} file with rows of data ({one_line(problem)}); check its contents."
    )


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
