"""Which files of a folder hf-norms wrote: the marker file that every folder hf-norms makes or writes into carries
(the run, its process, the command, and the files written with their size and modification time), and the entries
that are the user's (`foreign_entries`)."""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..readers import read_json_object
from .places import OutputFolderError, listing

MARKER_NAME = ".hf-norms-made-this"
REPORT_NAME = "conversion_report.json"
# The files an output of an earlier release (no marker) may hold as hf-norms' own.
LEGACY_OUTPUT_FILES = (
    "config.json", "model.safetensors", "model-*.safetensors", "model.safetensors.index.json", "conversion_report.*",
    "*.py", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "added_tokens.json",
    "preprocessor_config.json", "processor_config.json", "modules.json", "sentence_bert_config.json",
    "config_sentence_transformers.json", "[0-9]_*/*",
)  # fmt: skip


@dataclass
class Marker:
    """What the marker file of a folder hf-norms made says: which run made it, and which files it wrote there."""

    run_id: str
    pid: int
    command: str
    started_ns: int
    files: dict[str, list[int]] = field(default_factory=dict)  # relative path -> [size, mtime_ns]

    @classmethod
    def new(cls, command: str) -> Marker:
        return cls(uuid.uuid4().hex[:16], os.getpid(), command, time.time_ns())

    @classmethod
    def read(cls, folder: Path) -> Marker | None:
        """The marker of `folder`, or None when there is none (a link is never taken for a marker)."""
        path = folder / MARKER_NAME
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                return None
            data = read_json_object(path, "it is no marker")  # refused: read as none
            files = data.get("files") or {}
            return cls(str(data.get("run_id", "")), int(data["pid"]), str(data.get("command", "")),
                       int(data.get("started_ns", 0)), {str(k): list(v) for k, v in files.items()})  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def write(self, folder: Path) -> None:
        """Write the marker atomically (a new file moved over the old one, never written through a link)."""
        handle, temporary = tempfile.mkstemp(prefix=f"{MARKER_NAME}.", dir=folder)
        with os.fdopen(handle, "w") as stream:
            json.dump(self.__dict__, stream)
        os.replace(temporary, folder / MARKER_NAME)

    def is_running_elsewhere(self) -> bool:
        """Whether the run that made the folder is another process that is still alive."""
        return self.pid != os.getpid() and self.run_is_alive()

    def run_is_alive(self) -> bool:
        """Whether the process that wrote this marker still runs: its process id is alive and, where the system says
        when a process started (Linux), it started before the marker was written (not a later process given the same
        id)."""
        started = process_start_ns(self.pid)
        return process_alive(self.pid) and (started is None or started <= self.started_ns + 10**9)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def process_start_ns(pid: int) -> int | None:
    """When process `pid` started, in nanoseconds since the epoch, from /proc (Linux); None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return (boot * 10**9) + int(fields[19]) * 10**9 // os.sysconf("SC_CLK_TCK")  # field 22: start time in ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def folder_entries(folder: Path) -> dict[str, os.stat_result]:
    """`{relative path: lstat}` of every file, link and empty folder under `folder` (links are not followed), without
    the marker."""
    entries = {}
    for directory, folders, files in os.walk(folder):
        base = Path(directory)
        names = files + [name for name in folders if (base / name).is_symlink()]
        if not files and not folders and base != folder:
            entries[base.relative_to(folder).as_posix() + "/"] = base.lstat()
        for name in names:
            relative = (base / name).relative_to(folder).as_posix()
            if relative != MARKER_NAME and not relative.startswith(f"{MARKER_NAME}."):
                entries[relative] = (base / name).lstat()
    return entries


def stamp(status: os.stat_result) -> list[int]:
    return [status.st_size, status.st_mtime_ns]


def written_files(folder: Path) -> dict[str, list[int]]:
    """The stamps of the regular files under `folder` (what a marker records)."""
    return {name: stamp(status) for name, status in folder_entries(folder).items() if stat.S_ISREG(status.st_mode)}


def is_legacy_output(folder: Path) -> bool:
    """An output of an earlier release: a `config.json` beside a conversion report that names hf-norms, no marker."""
    try:
        return (folder / "config.json").is_file() and "hf_norms_version" in read_json_object(
            folder / REPORT_NAME, "ignored"
        )
    except (OSError, ValueError, TypeError):
        return False


def made_by_hf_norms(folder: Path) -> bool:
    return Marker.read(folder) is not None or is_legacy_output(folder)


def foreign_entries(folder: Path, edits_are_foreign: bool = True) -> list[str]:
    """The entries under `folder` that hf-norms did not write (or, with `edits_are_foreign`, that changed since),
    sorted: all of them when hf-norms did not make the folder."""
    marker = Marker.read(folder)
    entries = folder_entries(folder)
    if marker is not None:
        return sorted(
            name
            for name, status in entries.items()
            if name not in marker.files or (edits_are_foreign and marker.files[name] != stamp(status))
        )
    if is_legacy_output(folder):
        return sorted(
            name
            for name, status in entries.items()
            if not stat.S_ISREG(status.st_mode) or not any(fnmatch.fnmatch(name, p) for p in LEGACY_OUTPUT_FILES)
        )
    return sorted(entries)


def check_replaceable(target: Path, overwrite: bool, carried: frozenset[str] = frozenset()) -> None:
    """Refuse an existing `target` unless `overwrite`, hf-norms wrote it (or it is empty) and it holds nothing of the
    user's but the `carried` files, which the run copies into what replaces it."""
    if not target.exists():
        return
    if not overwrite:
        raise OutputFolderError(f"Output {target} already exists; pass --overwrite (overwrite=True) to replace it.")
    if not made_by_hf_norms(target):
        if any(target.iterdir()):
            raise OutputFolderError(
                f"Output {target} exists and hf-norms did not write it, so --overwrite will not replace it; choose a "
                "new folder or remove it yourself."
            )
        return
    foreign = [name for name in foreign_entries(target) if name not in carried]
    if foreign:
        raise OutputFolderError(
            f"Output {target} holds files hf-norms did not write ({listing(foreign)}), which --overwrite never "
            "deletes; move them out of it, or choose a new folder."
        )
