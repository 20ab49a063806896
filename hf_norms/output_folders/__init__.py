"""Where hf-norms writes, and how it writes there without ever losing what the user owns.

Every command that writes (`convert`, `heal`, `finetune`, `demo`) goes through this module; the rules:

- **Never written**: the working directory and its ancestors, the home folder and its ancestors, the source checkpoint,
  the teacher and the data, nor anything inside or around them (`check_output_location`).
- **Ownership is recorded**: every folder hf-norms makes or writes into carries a marker file (`MARKER_NAME`, JSON)
  with the run's id, its process, the command, and the files hf-norms wrote there (size and modification time). A file
  that is not listed, or has changed since, is the user's (`foreign_entries`). Outputs of earlier releases, which had
  no marker, are recognised by their conversion report, and only the file names hf-norms writes count as theirs.
- **Outputs built whole** (`convert`, `heal`): built in a marked staging folder beside the target and moved into place
  when complete (`staged_output`). An existing output is replaced only with `overwrite`, only when hf-norms wrote it,
  and only when it holds nothing of the user's; this is checked when the run starts and again at the move, where the
  target must still be what the run saw at its start. The move never replaces a folder that appeared meanwhile, and of
  two runs on one output the later one stops at once, naming the other.
- **Folders written in place** (`finetune --output_dir`, heal's work folder, the demo's folder): claimed with a marker
  (`claim_folder`), refused when they hold links, or user files with the names the run writes; the files written are
  recorded after each save, and removal deletes only recorded files (`remove_written_files`), keeping the user's.
- **Copies never follow a link out of a checkpoint folder** (`copy_checkpoint_files`).
- **Killed runs leave nothing for good**: a later run on the same output removes the staging folders whose process is
  gone (and those of earlier releases), and says so.
"""

from __future__ import annotations

from .claims import ClaimedFolder, claim_folder, record_on_save, remove_written_files
from .copies import checkpoint_files, copy_checkpoint_files, readable_inside
from .ownership import MARKER_NAME, Marker, check_replaceable, foreign_entries, made_by_hf_norms
from .places import OutputFolderError, check_output_location, never_written, resolved
from .staging import (
    PlannedOutput,
    Staging,
    make_marked_folder,
    remove_abandoned_staging,
    rename_no_replace,
    staged_output,
    staging_folder,
)

__all__ = [
    "MARKER_NAME",
    "ClaimedFolder",
    "Marker",
    "OutputFolderError",
    "PlannedOutput",
    "Staging",
    "check_output_location",
    "check_replaceable",
    "checkpoint_files",
    "claim_folder",
    "copy_checkpoint_files",
    "foreign_entries",
    "made_by_hf_norms",
    "make_marked_folder",
    "never_written",
    "readable_inside",
    "record_on_save",
    "remove_abandoned_staging",
    "remove_written_files",
    "rename_no_replace",
    "resolved",
    "staged_output",
    "staging_folder",
]
