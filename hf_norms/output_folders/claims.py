"""Folders written in place (`finetune --output_dir`, heal's work folder, the demo's folder): claimed for one run,
which may continue an earlier run of the same command (`resume`) or move the folder that is there aside
(`overwrite`); removed at the end only as far as this run made them and recorded so
(`ClaimedFolder.remove_what_this_run_made`)."""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import OutputFolderError
from .markers import MARKER_NAME, Marker, made_by_hf_norms
from .places import check_output_location, listing
from .staging import move_aside

logger = logging.getLogger(__name__)


@dataclass
class ClaimedFolder:
    """A folder a run writes into, checked by `claim_folder` and made this run's by `take`: `created` says whether
    this run made the folder itself (or, when it `continues` an earlier run, whether that run did), `made` what the
    run recorded as made in it (`record`), {path: (device, inode)}; the run removes nothing else
    (`remove_what_this_run_made`)."""

    path: Path
    command: str
    move_aside_first: bool = False
    continues: bool = False
    created: bool = False
    made: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def take(self) -> ClaimedFolder:
        """Move the earlier folder aside when asked, create the folder if needed and mark it as this run's."""
        if self.move_aside_first:
            move_aside(self.path)
        earlier = Marker.read(self.path) if self.continues else None
        self.created = not self.path.exists() or (earlier is not None and earlier.made_folder is True)
        self.path.mkdir(parents=True, exist_ok=True)
        Marker.new(self.command, made_folder=self.created).write(self.path)
        return self

    def record(self, made: Path, names: Sequence[str] = ("*",)) -> None:
        """Record `made` (a file or folder this run just wrote into the folder) and everything in it whose path inside
        it matches one of `names` (fnmatch patterns: what the run writes there, so that a file someone else wrote
        into it meanwhile is not taken for the run's) as this run's, each by its identity: a file replaced afterwards
        is someone else's."""
        inside = made.rglob("*") if made.is_dir() and not made.is_symlink() else []
        chosen = [path for path in inside if any(fnmatch.fnmatch(path.relative_to(made).as_posix(), n) for n in names)]
        for path in [made, *chosen]:
            status = path.lstat()
            self.made[path] = (status.st_dev, status.st_ino)

    def remove_recorded(self, under: Path | None = None) -> None:
        """Delete what this run recorded (`record`), or only what it recorded at or under `under`: each file only
        while it is the one recorded, each folder only once empty; never anything else, never through a link."""
        chosen = {path: identity for path, identity in self.made.items() if under is None or path.is_relative_to(under)}
        for path, identity in sorted(chosen.items(), key=lambda item: len(item[0].parts), reverse=True):
            del self.made[path]
            try:
                status = path.lstat()
                if (status.st_dev, status.st_ino) != identity:
                    continue
                if stat.S_ISDIR(status.st_mode):
                    path.rmdir()
                else:
                    path.unlink()
            except OSError:  # gone already, or a folder someone added to
                continue

    def remove_what_this_run_made(self) -> None:
        """Delete what this run recorded (`remove_recorded`), then the marker and, when this run created it and it is
        no mount point, the folder itself, once nothing else is in it; else the folder stays, still marked (one
        line)."""
        self.remove_recorded()
        kept = self.others()
        if kept:
            logger.warning("Kept %s: it holds what this run did not make (%s).", self.path, listing(kept))
        else:
            self.remove_marker_and_folder()

    def release_if_unused(self) -> None:
        """After a run that failed before it recorded anything: leave the folder as the run found it (its marker
        removed, and the folder when the run created it), unless something else is in it now."""
        if not self.made and not self.others():
            self.remove_marker_and_folder()

    def others(self) -> list[str]:
        """The names in the folder but its marker."""
        return sorted(entry.name for entry in self.path.iterdir() if entry.name != MARKER_NAME)

    def remove_marker_and_folder(self) -> None:
        """Remove this run's marker, then the folder when this run created it and it is no mount point."""
        (self.path / MARKER_NAME).unlink(missing_ok=True)
        if self.created and not os.path.ismount(self.path):
            self.path.rmdir()


def claim_folder(
    folder: str | os.PathLike,
    *,
    command: str,
    protected: Mapping[str, Path | None] = {},
    overwrite: bool = False,
    resume: bool = False,
    what: str = "Output",
    flags: tuple[str, str] = ("--overwrite", "--resume"),
) -> ClaimedFolder:
    """Check that this run may write into `folder`, writing nothing yet (`ClaimedFolder.take` does). Refused: a
    protected place, and a folder another live run writes into. A new folder, an empty one, or one holding only a
    marker is taken as it is. A non-empty folder is continued with `resume` when an earlier run of `command` made it
    (and it holds no symbolic link a write could go through), moved aside with `overwrite` when it is not resumed, and
    refused otherwise, naming both flags."""
    overwrite_flag, resume_flag = flags
    path = check_output_location(Path(folder), protected, what)
    if not path.exists():
        return ClaimedFolder(path, command)
    earlier = Marker.read(path)
    if earlier is not None and earlier.is_running_elsewhere():
        raise OutputFolderError(
            f"Another hf-norms {earlier.command} run (process {earlier.pid}) is writing into {path} now; wait for it "
            "to finish, or choose another folder."
        )
    if not [entry for entry in path.iterdir() if entry.name != MARKER_NAME]:
        return ClaimedFolder(path, command)
    ours = made_by_hf_norms(path, command)
    if resume and ours:
        links = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_symlink())
        if links:
            raise OutputFolderError(
                f"{what} {path} holds symbolic links ({listing(links)}), which hf-norms never writes through; remove "
                f"them, or pass {overwrite_flag} to move the folder aside and start afresh."
            )
        return ClaimedFolder(path, command, continues=True)
    if overwrite:
        return ClaimedFolder(path, command, move_aside_first=True)
    if ours:
        state = f"holds an earlier hf-norms {command} run; pass {resume_flag} to continue it, or"
    else:
        state = f"holds files of no hf-norms {command} run{', nothing to continue' if resume else ''}; pass"
    raise OutputFolderError(
        f"{what} {path} {state} {overwrite_flag} to move it aside and start afresh, or choose a new folder."
    )
