"""Outputs built whole: a marked staging folder beside the target, moved into place when complete and only when the
target is still what the run saw at its start; one run per output; the remains of killed runs removed."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .ownership import Marker, check_replaceable, foreign_entries, written_files
from .places import OutputFolderError, check_output_location

logger = logging.getLogger(__name__)

STAGING_INFIX = ".hf-norms-staging"
# What earlier hf-norms releases left beside an output when killed: `.<name>.tmp-XXXXXXXX`, `.<name>.old-XXXXXXXX`
# (tempfile.mkdtemp) and `.<name>.healed-<nanoseconds>`.
LEGACY_STAGING = r"\.(?:tmp|old)-[a-z0-9_]{8}|\.healed-\d+"


def make_marked_folder(path: Path | None = None, *, prefix: str = "", parent: Path | None = None,
                       command: str = "staging") -> Path:  # fmt: skip
    """Create `path` (or a new folder named `prefix<random>` in `parent`) with a marker naming this run."""
    if path is None:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    else:
        path.mkdir(parents=True)
    path.chmod(0o755)
    Marker.new(command).write(path)
    return path


def staging_folder(target: Path, command: str = "staging") -> Path:
    """A new marked staging folder beside `target`."""
    return make_marked_folder(prefix=f".{target.name}{STAGING_INFIX}.", parent=target.parent, command=command)


def staging_folders(target: Path) -> Iterator[tuple[Path, Marker | None]]:
    """The staging folders beside `target` (of this release, and of earlier ones), with their markers."""
    if not target.parent.is_dir():
        return
    name = re.escape(target.name)
    pattern = re.compile(rf"\.{name}(?:{re.escape(STAGING_INFIX)}\.[A-Za-z0-9_]+|{LEGACY_STAGING})")
    for candidate in target.parent.iterdir():
        if pattern.fullmatch(candidate.name) and candidate.is_dir() and not candidate.is_symlink():
            yield candidate, Marker.read(candidate)


def remove_abandoned_staging(target: Path) -> list[Path]:
    """Remove the staging folders that killed runs left beside `target`; returns them (each is logged)."""
    removed = []
    for candidate, marker in staging_folders(target):
        legacy = STAGING_INFIX not in candidate.name
        if (legacy and marker is None) or (not legacy and marker is not None and not marker.run_is_alive()):
            shutil.rmtree(candidate)
            logger.warning("Removed %s, the staging folder of an interrupted run on %s.", candidate, target)
            removed.append(candidate)
    return removed


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


@dataclass
class Staging:
    """A staging folder (`path`) and the files copied into it that the user wrote (`kept`: they stay the user's)."""

    path: Path
    kept: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class PlannedOutput:
    """An output folder checked when a run starts (`check`), built later in a staging folder (`staged`).

    `seen` is what was at the target then ((device, inode), or None); `carried` are the user's files in it that the run
    copies into what replaces it (healing a folder in place keeps them).
    """

    target: Path
    overwrite: bool
    protected: Mapping[str, Path | None]
    seen: tuple[int, int] | None
    carried: frozenset[str]

    @classmethod
    def check(cls, output: str | os.PathLike, overwrite: bool, protected: Mapping[str, Path | None] = {},
              carry_user_files: bool = False) -> PlannedOutput:  # fmt: skip
        """Refuse a protected place (`check_output_location`) or an existing folder that may not be replaced
        (`check_replaceable`, the user's files allowed when `carry_user_files`)."""
        target = check_output_location(Path(output), protected)
        carried = frozenset(foreign_entries(target) if carry_user_files and target.is_dir() else ())
        check_replaceable(target, overwrite, carried)
        return cls(target, overwrite, dict(protected), folder_identity(target), carried)

    @contextlib.contextmanager
    def staged(self, command: str) -> Iterator[Staging]:
        """Yield an empty `Staging` folder beside the target; on success it replaces the target, on error it is removed.

        Leftovers of killed runs on the same output are removed first, and this run stops when another live run on the
        same output started before it. At the end, the files in the staging folder (but the `kept` ones) are recorded
        in its marker, and it moves into place (`move_into_place`).
        """
        check_output_location(self.target, self.protected)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_staging(self.target)
        staging = Staging(staging_folder(self.target, command))
        try:
            refuse_concurrent_runs(self.target, staging.path)
            yield staging
            marker = Marker.read(staging.path)
            marker.files = {name: s for name, s in written_files(staging.path).items() if name not in staging.kept}
            marker.write(staging.path)
            move_into_place(staging.path, self)
        finally:
            if staging.path.exists():
                shutil.rmtree(staging.path)


def staged_output(
    output: str | os.PathLike, overwrite: bool, protected: Mapping[str, Path | None] = {}, command: str = "convert"
) -> contextlib.AbstractContextManager[Staging]:
    """`PlannedOutput.check(...).staged(command)`: check `output` now and build it in a staging folder."""
    return PlannedOutput.check(output, overwrite, protected).staged(command)


def folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder at `path`, or None when there is nothing there."""
    try:
        status = path.lstat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def move_into_place(staging: Path, planned: PlannedOutput) -> None:
    """Move the complete `staging` folder to the planned target, which must still be what the run saw at its start:
    absent, or the same folder, still replaceable. A replaced folder is moved aside into a marked folder first, and
    removed once `staging` is in place."""
    target, seen = planned.target, planned.seen
    changed = OutputFolderError(
        f"Output {target} was {'created' if seen is None else 'replaced or removed'} by someone else while this run "
        "worked, so it was left as it is; run again, or choose another output."
    )
    if folder_identity(target) != seen:
        raise changed
    if seen is None:
        try:
            rename_no_replace(staging, target)
        except FileExistsError:
            raise changed from None
        return
    check_replaceable(target, planned.overwrite, planned.carried)  # the user may have added files meanwhile
    retired = staging_folder(target, "retired")
    os.rename(target, retired / "folder")
    try:
        rename_no_replace(staging, target)
    except FileExistsError:
        rename_no_replace(retired / "folder", target)
        raise changed from None
    shutil.rmtree(retired)


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
