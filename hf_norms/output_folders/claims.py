"""Folders written in place (`finetune --output_dir`, heal's work folder, the demo's folder): claimed for one run,
which may continue an earlier run of the same command (`resume`) or move the folder that is there aside
(`overwrite`); removed at the end only as far as this run made them (`ClaimedFolder.remove_what_this_run_made`)."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import OutputFolderError
from .markers import MARKER_NAME, Marker, made_by_hf_norms
from .places import check_output_location, listing
from .staging import move_aside

logger = logging.getLogger(__name__)


@dataclass
class ClaimedFolder:
    """A folder a run writes into, checked by `claim_folder` and made this run's by `take`; `existing` are the
    entries it held when taken (an earlier run's, when resuming), which this run never removes."""

    path: Path
    command: str
    move_aside_first: bool = False
    existing: frozenset[str] = frozenset()

    def take(self) -> ClaimedFolder:
        """Move the earlier folder aside when asked, create the folder if needed and mark it as this run's."""
        if self.move_aside_first:
            move_aside(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.existing = frozenset(entry.name for entry in self.path.iterdir() if entry.name != MARKER_NAME)
        Marker.new(self.command).write(self.path)
        return self

    def remove_what_this_run_made(self) -> None:
        """Delete the entries this run added to the folder (never following a link), then the folder itself when
        nothing else is in it; entries that were there when it was taken stay, and the folder (still marked) with
        them (one line)."""
        for entry in self.path.iterdir():
            if entry.name in self.existing or entry.name == MARKER_NAME:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        kept = sorted(entry.name for entry in self.path.iterdir() if entry.name != MARKER_NAME)
        if kept:
            logger.warning("Kept %s: it holds what this run did not make (%s).", self.path, listing(kept))
            return
        (self.path / MARKER_NAME).unlink(missing_ok=True)
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
        return ClaimedFolder(path, command)
    if overwrite:
        return ClaimedFolder(path, command, move_aside_first=True)
    if ours:
        state = f"holds an earlier hf-norms {command} run; pass {resume_flag} to continue it, or"
    else:
        state = f"holds files of no hf-norms {command} run{', nothing to continue' if resume else ''}; pass"
    raise OutputFolderError(
        f"{what} {path} {state} {overwrite_flag} to move it aside and start afresh, or choose a new folder."
    )
