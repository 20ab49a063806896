"""Where conversion and healing may write, and how they write there without ever losing a folder the user owns.

The rules:

- An output folder is built in a staging folder beside it and moved into place only when complete (`staged_output`).
- An existing output is replaced only with `overwrite`, and only when hf-norms wrote it (it holds a
  `conversion_report.json` that hf-norms wrote next to a `config.json`) or it is empty; any other folder is refused.
- Whatever the flags, these are never written, replaced or deleted: the working directory and its ancestors, the home
  folder and its ancestors, the source checkpoint, the teacher and the data (nor anything inside or around them).
- Every staging or work folder hf-norms makes carries a marker file naming the process that made it. A later run on
  the same output removes the staging folders of runs that were killed (their process is gone) and says so.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from .checkpoint_io import ConversionError

logger = logging.getLogger(__name__)

REPORT_NAME = "conversion_report.json"
MARKER_NAME = ".hf-norms-made-this"
STAGING_INFIX = ".hf-norms-staging"
# What earlier hf-norms releases left beside an output when killed: `.<name>.tmp-XXXXXXXX`, `.<name>.old-XXXXXXXX`
# (tempfile.mkdtemp) and `.<name>.healed-<nanoseconds>`.
LEGACY_STAGING = r"\.(?:tmp|old)-[a-z0-9_]{8}|\.healed-\d+"


def is_hf_norms_output(folder: Path) -> bool:
    """Whether `folder` is a checkpoint hf-norms wrote: a `config.json` and a conversion report that names hf-norms."""
    report = folder / REPORT_NAME
    if not (folder / "config.json").is_file() or not report.is_file():
        return False
    try:
        return "hf_norms_version" in json.loads(report.read_text())
    except (OSError, ValueError):
        return False


def never_written(extra: Mapping[str, Path | None] = {}) -> dict[str, Path]:
    """The folders no run may write into, replace or delete, by what they are."""
    places = {"the working directory": Path.cwd(), "the home folder": Path.home(), **extra}
    return {what: Path(path).expanduser().resolve() for what, path in places.items() if path is not None}


def check_output_location(target: Path, protected: Mapping[str, Path | None], what: str = "Output") -> Path:
    """`target` resolved, after refusing a place that overlaps a protected one (see the module docstring)."""
    target = Path(target).expanduser().resolve()
    for name, place in never_written(protected).items():
        if target == place or place.is_relative_to(target):
            raise ConversionError(f"{what} {target} is or contains {name} ({place}); choose a new folder.")
        if name not in ("the working directory", "the home folder") and target.is_relative_to(place):
            raise ConversionError(f"{what} {target} lies inside {name} ({place}); choose a folder outside it.")
    if target.exists() and not target.is_dir():
        raise ConversionError(f"{what} {target} is a file; give a folder.")
    return target


def check_replaceable(target: Path, overwrite: bool) -> None:
    """Refuse an existing `target` unless `overwrite` and hf-norms wrote it (or it is empty)."""
    if not target.exists():
        return
    if not overwrite:
        raise ConversionError(f"Output {target} already exists; pass --overwrite (overwrite=True) to replace it.")
    if any(target.iterdir()) and not is_hf_norms_output(target):
        raise ConversionError(
            f"Output {target} exists and hf-norms did not write it (no conversion report beside a config.json), so "
            "--overwrite will not replace it; choose a new folder or remove it yourself."
        )


# --------------------------------------------------------------------------------------------------------------------
# Folders that hf-norms makes, and the remains of killed runs
# --------------------------------------------------------------------------------------------------------------------


def make_marked_folder(path: Path | None = None, *, prefix: str = "", parent: Path | None = None) -> Path:
    """Create `path` (or a new folder named `prefix<random>` in `parent`) with a marker naming this process."""
    if path is None:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    else:
        path.mkdir(parents=True)
    path.chmod(0o755)
    (path / MARKER_NAME).write_text(json.dumps({"pid": os.getpid()}))
    return path


def marker_pid(folder: Path) -> int | None:
    """The process that made `folder`, from its marker; None when hf-norms did not mark it."""
    try:
        return int(json.loads((folder / MARKER_NAME).read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_abandoned_staging(target: Path) -> list[Path]:
    """Remove the staging folders that killed runs left beside `target`; returns them (each is logged)."""
    if not target.parent.is_dir():
        return []
    name = re.escape(target.name)
    ours = re.compile(rf"\.{name}{re.escape(STAGING_INFIX)}\.[A-Za-z0-9_]+")
    legacy = re.compile(rf"\.{name}(?:{LEGACY_STAGING})")
    removed = []
    for candidate in target.parent.iterdir():
        if not candidate.is_dir() or candidate.is_symlink():
            continue
        pid = marker_pid(candidate)
        abandoned = (ours.fullmatch(candidate.name) and pid is not None and not process_alive(pid)) or (
            legacy.fullmatch(candidate.name) and pid is None
        )
        if abandoned:
            shutil.rmtree(candidate)
            logger.warning("Removed %s, the staging folder of an interrupted run on %s.", candidate, target)
            removed.append(candidate)
    return removed


def staging_folder(target: Path) -> Path:
    """A new marked staging folder beside `target`."""
    return make_marked_folder(prefix=f".{target.name}{STAGING_INFIX}.", parent=target.parent)


@contextlib.contextmanager
def staged_output(
    output: str | os.PathLike, overwrite: bool, protected: Mapping[str, Path | None] = {}
) -> Iterator[Path]:
    """Yield an empty staging folder beside `output`; on success it replaces `output`, on error it is removed.

    `output` is checked first (`check_output_location`, `check_replaceable`); leftovers of killed runs on the same
    output are removed. The marker file is taken out of the staging folder before it moves into place.
    """
    target = check_output_location(Path(output), protected)
    check_replaceable(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(target)
    staging = staging_folder(target)
    try:
        yield staging
        (staging / MARKER_NAME).unlink()
        replace_folder(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def replace_folder(staging: Path, target: Path) -> None:
    """Move the complete `staging` folder to `target`; an existing `target` (checked replaceable by the caller) is
    moved aside into a marked folder first and removed once `staging` is in place."""
    if not target.exists():
        os.replace(staging, target)
        return
    retired = staging_folder(target)
    os.replace(target, retired / "folder")
    os.replace(staging, target)
    shutil.rmtree(retired)
