"""Folders written in place (`finetune --output_dir`, heal's work folder, the demo's folder): claimed for a run,
the files it writes recorded after each save, and removed file by file, keeping the user's."""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .ownership import MARKER_NAME, Marker, folder_entries, foreign_entries, written_files
from .places import OutputFolderError, check_output_location, listing

logger = logging.getLogger(__name__)


@dataclass
class ClaimedFolder:
    """A folder a run writes into, checked by `claim_folder` and made this run's by `take`; `foreign` are the entries
    the user had there."""

    path: Path
    command: str
    earlier: Marker | None
    foreign: frozenset[str]
    marker: Marker | None = None

    def take(self) -> ClaimedFolder:
        """Create the folder if needed and mark it as this run's (the files earlier runs wrote stay recorded)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.marker = Marker.new(self.command)
        recorded = self.earlier.files if self.earlier else {}
        self.marker.files = {name: s for name, s in recorded.items() if name not in self.foreign}
        self.marker.write(self.path)
        return self

    def record(self) -> None:
        """Record every file now in the folder, but the user's, as written by hf-norms (call it after each save)."""
        self.marker.files = {n: s for n, s in written_files(self.path).items() if n not in self.foreign}
        self.marker.write(self.path)


def claim_folder(
    folder: str | os.PathLike,
    *,
    command: str,
    protected: Mapping[str, Path | None] = {},
    writes: Sequence[str] = (),
    overwrite: bool = False,
    resume: bool = False,
    what: str = "Output",
    flags: tuple[str, str] = ("--overwrite", "--resume"),
) -> ClaimedFolder:
    """Check that `folder` may be written into by this run, writing nothing yet (`ClaimedFolder.take` does). Refused:
    a protected place, a folder holding symbolic links (a write would go through them), a folder another live run
    writes into, an earlier hf-norms run's folder unless `resume` or `overwrite`, a user's non-empty folder unless
    `overwrite`, and any entry of the user's whose name matches `writes` (glob patterns of what the run writes: it
    would be replaced or, for `checkpoint-*`, deleted by the Trainer's checkpoint rotation)."""
    overwrite_flag, resume_flag = flags
    path = check_output_location(Path(folder), protected, what)
    if not path.exists():
        return ClaimedFolder(path, command, None, frozenset())
    links = [name for name, status in folder_entries(path).items() if stat.S_ISLNK(status.st_mode)]
    if links:
        raise OutputFolderError(
            f"{what} {path} holds symbolic links ({listing(sorted(links))}), which hf-norms never writes through; "
            "remove them, or choose a new folder."
        )
    earlier = Marker.read(path)
    if earlier is not None and earlier.is_running_elsewhere():
        raise OutputFolderError(
            f"Another hf-norms {earlier.command} run (process {earlier.pid}) is writing into {path} now; wait for it "
            "to finish, or choose another folder."
        )
    if earlier is not None and [entry.name for entry in path.iterdir()] == [MARKER_NAME]:
        return ClaimedFolder(path, command, None, frozenset())  # a run stopped before it wrote anything: start afresh
    if earlier is not None and not (resume or overwrite):
        raise OutputFolderError(
            f"{what} {path} holds an earlier hf-norms {earlier.command} run; pass {resume_flag} to continue it, "
            f"{overwrite_flag} to write into it again, or choose a new folder."
        )
    if earlier is None and any(path.iterdir()) and not overwrite:
        raise OutputFolderError(
            f"{what} {path} exists, is not empty and hf-norms did not make it; choose a new folder, or pass "
            f"{overwrite_flag} to write beside its files (none of them is replaced)."
        )
    foreign = foreign_entries(path, edits_are_foreign=False)  # the run may rewrite its own files, edited or not
    clashes = [name for name in foreign if any(fnmatch.fnmatch(name.split("/")[0], p) for p in writes)]
    if clashes:
        raise OutputFolderError(
            f"{what} {path} holds files hf-norms did not write that this run would replace or delete "
            f"({listing(clashes)}); move them out of it, or choose a new folder."
        )
    return ClaimedFolder(path, command, earlier, frozenset(foreign))


def remove_written_files(folder: Path) -> list[str]:
    """Delete what hf-norms recorded writing in `folder` (unchanged since), then its empty sub-folders and the folder
    itself when nothing else is left; returns the entries kept, which are the user's (and logs them)."""
    marker = Marker.read(folder)
    if marker is None:
        return sorted(folder_entries(folder))
    kept = foreign_entries(folder)
    for name in marker.files:
        if name not in kept and (folder / name).is_file():
            (folder / name).unlink()
    for directory, _, _ in sorted(os.walk(folder), key=lambda item: -len(item[0])):
        with contextlib.suppress(OSError):
            if Path(directory) != folder:
                Path(directory).rmdir()  # only empty ones
    if kept:
        logger.warning("Kept %s: it holds files hf-norms did not write (%s).", folder, listing(kept))
        return kept
    (folder / MARKER_NAME).unlink()
    folder.rmdir()
    return []


def record_on_save(claimed: ClaimedFolder):
    """A `transformers.TrainerCallback` recording the files of `claimed` after each checkpoint and at the end."""
    from transformers import TrainerCallback

    class RecordWrittenFiles(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                claimed.record()

        on_train_end = on_save

    return RecordWrittenFiles()
