"""Where hf-norms writes, and how it writes there without ever losing what the user owns.

Every command that writes (`convert`, `heal`, `finetune`, `demo`) goes through this package, built on one rule:
**an hf-norms command deletes only what it created in the same run.** An earlier output, a user's folder or the
remains of an interrupted run are moved aside or left alone, never deleted, and no file on disk can make hf-norms
delete anything (a marker names no file). The rest follows:

- **Never written**: the working directory and its ancestors, the home folder and its ancestors, the source
  checkpoint, the teacher and the data, nor anything inside or around them (`check_output_location`).
- **Markers are validated data** (`markers.Marker`): every folder hf-norms makes carries one with the run's id,
  process, start time and command, read with fixed bounds and checked field by field. It says whether hf-norms made
  a folder and whether that run still goes on; nothing more.
- **Outputs built whole** (`convert`, `heal`): built in a staging folder this run creates beside the target before its
  slow part (a name or parent it cannot be made in stops the run at once) and moved into place when complete, only while the target is still what the run saw at its start (`PlannedOutput`). With
  `overwrite`, an existing output that hf-norms made (or an empty folder) is moved aside to
  `NAME.replaced-<time>` (`move_aside`, said in one line); a user's folder is refused. Of two runs on one output, the
  later one stops at once. Staging folders that killed runs left are named, not touched, and block nothing.
- **Folders written in place** (`finetune --output_dir`, heal's work folder, the demo's folder, `claim_folder`): a
  new or empty folder is taken; an earlier run's is continued (`resume`) or moved aside (`overwrite`); anything else
  is refused, naming both. At the end a run removes only what it recorded as made (`ClaimedFolder.record`,
  `remove_what_this_run_made`), and the folder only when it made it.
- **Copies never follow a link out of a checkpoint folder** (`copy_checkpoint_files`), and read and write only inside
  the folders they copy between, whatever names a data file gives (`inside`).
"""

from __future__ import annotations

from ..errors import OutputFolderError
from .claims import ClaimedFolder, claim_folder
from .copies import checkpoint_files, copy_checkpoint_files, link_root, readable_inside
from .markers import MARKER_NAME, Marker, made_by_hf_norms
from .places import check_output_location, never_written, resolved
from .staging import PlannedOutput, move_aside, rename_no_replace, staging_folder

__all__ = [
    "MARKER_NAME",
    "ClaimedFolder",
    "Marker",
    "OutputFolderError",
    "PlannedOutput",
    "check_output_location",
    "checkpoint_files",
    "claim_folder",
    "copy_checkpoint_files",
    "link_root",
    "made_by_hf_norms",
    "move_aside",
    "never_written",
    "readable_inside",
    "rename_no_replace",
    "resolved",
    "staging_folder",
]
