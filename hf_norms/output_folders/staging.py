"""Outputs built whole (`convert`, `heal`): built in a staging folder this run creates beside the target, and moved
into place when complete, only while the target is still what the run saw at its start. An earlier output at the
target is moved aside (`move_aside`), never deleted; one run per output."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import OutputFolderError
from .markers import Marker, made_by_hf_norms
from .places import check_output_location, shorten

logger = logging.getLogger(__name__)

STAGING_INFIX = ".hf-norms-staging"


def staging_folder(target: Path, command: str) -> Path:
    """A new staging folder beside `target`, marked as this run's; a name too long for the system or a parent folder
    it cannot be made in (read-only, immutable) is an `OutputFolderError` naming the fix."""
    prefix = f".{target.name}{STAGING_INFIX}."
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputFolderError(
            f"Output {shorten(str(target))} cannot be written: its folder cannot be made ({error.strerror}); choose "
            "a folder you can write to."
        ) from None
    try:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            longest = os.pathconf(target.parent, "PC_NAME_MAX") - len(prefix) + len(target.name) - 8
            fix = f"its staging folder's name would be too long; choose an output name of at most {longest} characters"
        else:
            fix = f"no staging folder can be made in {target.parent} ({error.strerror}); choose a folder you can write"
        raise OutputFolderError(f"Output {shorten(str(target))} cannot be written: {fix}.") from None
    path.chmod(0o755)
    Marker.new(command).write(path)
    return path


def staging_folders(target: Path) -> Iterator[tuple[Path, Marker | None]]:
    """The staging folders beside `target`, with their markers."""
    pattern = re.compile(rf"\.{re.escape(target.name)}{re.escape(STAGING_INFIX)}\.[A-Za-z0-9_]+")
    for candidate in target.parent.iterdir():
        if pattern.fullmatch(candidate.name) and candidate.is_dir() and not candidate.is_symlink():
            yield candidate, Marker.read(candidate)


def note_abandoned_staging(target: Path) -> list[Path]:
    """Say (one line each) which staging folders beside `target` interrupted runs left; they are not deleted (another
    run wrote them) and do not stop this run. Returns them."""
    abandoned = [path for path, marker in staging_folders(target) if marker is None or not marker.run_is_alive()]
    for path in abandoned:
        logger.warning("%s was left by an interrupted hf-norms run; it is not used: remove it to free its space.", path)
    return abandoned


def refuse_concurrent_runs(target: Path, ours: Path) -> None:
    """Stop this run when another live run stages the same output and started first (the earlier one goes on)."""
    mine = Marker.read(ours)
    for candidate, marker in staging_folders(target):
        if candidate == ours or marker is None or not marker.run_is_alive():
            continue
        if (marker.started_ns, marker.run_id) < (mine.started_ns, mine.run_id):
            raise OutputFolderError(
                f"Another hf-norms run (process {marker.pid}) is writing {target} now; wait for it to finish, or "
                "choose another output."
            )


def move_aside(path: Path, stem: str | None = None) -> Path:
    """Rename `path` to a new sibling `stem-YYYYMMDD-HHMMSS[-N]` (default stem: `NAME.replaced`), say so in one line,
    and return it."""
    stem = f"{stem or path.name + '.replaced'}-{time.strftime('%Y%m%d-%H%M%S')}"
    for attempt in range(1, 1000):
        aside = path.with_name(stem if attempt == 1 else f"{stem}-{attempt}")
        try:
            rename_no_replace(path, aside)
        except FileExistsError:
            continue
        logger.warning("Moved %s to %s (hf-norms never deletes it); remove it once not needed.", path, aside)
        return aside
    raise OutputFolderError(f"{path} cannot be moved aside: too many {stem}-N entries exist; remove some.")


def check_replaceable(target: Path, overwrite: bool) -> None:
    """Refuse an existing `target` unless `overwrite` and it is empty or hf-norms made it (it is then moved aside)."""
    if not target.exists():
        return
    if not overwrite:
        raise OutputFolderError(
            f"Output {target} already exists; pass --overwrite (overwrite=True) to move it aside and write a new one."
        )
    if any(target.iterdir()) and not made_by_hf_norms(target):
        raise OutputFolderError(
            f"Output {target} exists and hf-norms did not write it, so --overwrite does not move it aside; choose a "
            "new folder, or move it away yourself."
        )


@dataclass(frozen=True)
class PlannedOutput:
    """An output folder checked when a run starts (`check`), built later in a staging folder (`staged`); `seen` is
    what was at the target then ((device, inode), or None)."""

    target: Path
    overwrite: bool
    protected: Mapping[str, Path | None]
    seen: tuple[int, int] | None

    @classmethod
    def check(
        cls, output: str | os.PathLike, overwrite: bool, protected: Mapping[str, Path | None] = {}
    ) -> PlannedOutput:
        """Refuse a protected place (`check_output_location`) or an existing folder that may not be replaced."""
        target = check_output_location(Path(output), protected)
        check_replaceable(target, overwrite)
        return cls(target, overwrite, dict(protected), folder_identity(target))

    @contextlib.contextmanager
    def staged(self, command: str) -> Iterator[Path]:
        """Yield a new staging folder beside the target; on success it moves into place (`move_into_place`), on an
        error it is removed (this run made it). This run stops first when another live run on the same output started
        before it; staging folders interrupted runs left are named, not touched."""
        check_output_location(self.target, self.protected)
        staging = staging_folder(self.target, command)
        try:
            note_abandoned_staging(self.target)
            refuse_concurrent_runs(self.target, staging)
            yield staging
            move_into_place(staging, self)
        finally:
            if staging.exists():
                shutil.rmtree(staging)


def folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder at `path`, or None when there is nothing there."""
    try:
        status = path.lstat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def move_into_place(staging: Path, planned: PlannedOutput) -> None:
    """Move the complete `staging` folder to the planned target, which must still be what the run saw at its start:
    absent, or the same folder, which is then moved aside (`move_aside`)."""
    target = planned.target
    changed = OutputFolderError(
        f"Output {target} was {'created' if planned.seen is None else 'replaced or removed'} by someone else while "
        "this run worked, so it was left as it is; run again, or choose another output."
    )
    if folder_identity(target) != planned.seen:
        raise changed
    if planned.seen is not None:
        check_replaceable(target, planned.overwrite)
        move_aside(target)
    try:
        rename_no_replace(staging, target)
    except FileExistsError:
        raise changed from None


_RENAME_NOREPLACE, _AT_FDCWD = 1, -100
_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)


def rename_no_replace(source: Path, target: Path) -> None:
    """Rename `source` to `target`, raising `FileExistsError` when anything is at `target` (`os.rename` would silently
    replace an empty folder there). Atomic where the system has `renameat2(RENAME_NOREPLACE)` (Linux)."""
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without RENAME_NOREPLACE
            raise (FileExistsError if code in (errno.EEXIST, errno.ENOTEMPTY) else OSError)(
                code, os.strerror(code), str(target)
            )
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    os.rename(source, target)
