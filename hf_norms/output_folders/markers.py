"""The marker file of every folder hf-norms makes: which run made it, validated as data.

A marker (`.hf-norms-made-this`, JSON) records the run's id, its process id, when the run and its process started and
its command. It is read with fixed bounds (at most `MARKER_BYTES`), never through a link, and every field is checked
(`Marker.read`): a marker that is not a small JSON object of those fields, each in range, is no marker. It names no
file: nothing is ever deleted or replaced because a marker says so. It answers two questions only: did hf-norms make
this folder (`made_by_hf_norms`), and is the run that made it still going on (`Marker.is_running_elsewhere`, which
takes a live process for the run only when it started when the marker says).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER_NAME = ".hf-norms-made-this"
MARKER_BYTES = 4096  # a marker is a few dozen bytes; anything longer is not one
COMMANDS = frozenset({"convert", "heal", "finetune", "demo"})
PID_MAX = 1 << 22  # the largest process id Linux hands out (/proc/sys/kernel/pid_max at most 4194304)
RUN_ID = re.compile(r"[0-9a-f]{16}")
REPORT_NAME = "conversion_report.json"


@dataclass(frozen=True)
class Marker:
    """A run that made a folder: `run_id` (16 hex digits), `pid` (1..PID_MAX), `command` (one of COMMANDS),
    `started_ns` (when the run wrote the marker, nanoseconds since the epoch, not in the future),
    `process_started_ns` (when its process started, where the system says; None in markers of earlier releases) and
    `made_folder` (for a folder written in place: whether the run created the folder itself, so that a run continuing
    it may remove it; None where not said)."""

    run_id: str
    pid: int
    command: str
    started_ns: int
    process_started_ns: int | None = None
    made_folder: bool | None = None

    @classmethod
    def new(cls, command: str, made_folder: bool | None = None) -> Marker:
        pid = os.getpid()
        return cls(uuid.uuid4().hex[:16], pid, command, time.time_ns(), process_start_ns(pid), made_folder)

    @classmethod
    def read(cls, folder: Path) -> Marker | None:
        """The marker of `folder`, or None when there is none, it is not a regular file (a link is never taken for a
        marker), or it does not hold valid data."""
        path = folder / MARKER_NAME
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                return None
            with open(path, "rb") as stream:
                raw = stream.read(MARKER_BYTES + 1)
            data = json.loads(raw) if len(raw) <= MARKER_BYTES else None
            if isinstance(data, dict):
                data.pop("files", None)  # the file list of markers before this release, never used
                marker = cls(**data)
            else:
                marker = None
        except (OSError, ValueError, TypeError, RecursionError):
            return None
        return marker if marker is not None and marker.is_valid() else None

    def is_valid(self) -> bool:
        optional_int, optional_bool = (int, type(None)), (bool, type(None))
        types = [(self.run_id, (str,)), (self.pid, (int,)), (self.command, (str,)), (self.started_ns, (int,)),
                 (self.process_started_ns, optional_int), (self.made_folder, optional_bool)]  # fmt: skip
        if not all(type(value) in kinds for value, kinds in types):  # bool is not an int here
            return False
        latest = time.time_ns() + 86400 * 10**9
        return (
            RUN_ID.fullmatch(self.run_id) is not None
            and 1 <= self.pid <= PID_MAX
            and self.command in COMMANDS
            and 0 < self.started_ns <= latest
            and (self.process_started_ns is None or 0 < self.process_started_ns <= latest)
        )

    def write(self, folder: Path) -> None:
        """Write the marker atomically (a new file moved over the old one, never written through a link)."""
        handle, temporary = tempfile.mkstemp(prefix=f"{MARKER_NAME}.", dir=folder)
        with os.fdopen(handle, "w") as stream:
            json.dump(asdict(self), stream)
        os.replace(temporary, folder / MARKER_NAME)

    def is_running_elsewhere(self) -> bool:
        """Whether the run that made the folder is another process that is still alive."""
        return self.pid != os.getpid() and self.run_is_alive()

    def run_is_alive(self) -> bool:
        """Whether the process that wrote this marker still runs: its process id is alive and, where the system says
        when a process started (Linux), it started when the marker says its process started (within a second) and
        before the marker was written. Any other process given that id (a later one, pid 1, a marker that does not say
        when its process started) is not the run."""
        if not process_alive(self.pid):
            return False
        started = process_start_ns(self.pid)
        if started is None:
            return True
        recorded = self.process_started_ns
        return recorded is not None and abs(started - recorded) <= 10**9 and started <= self.started_ns + 10**9


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


def is_earlier_release_output(folder: Path) -> bool:
    """An output of a release that wrote no marker: a `config.json` beside a conversion report naming hf-norms."""
    try:
        with open(folder / REPORT_NAME, "rb") as stream:
            head = stream.read(MARKER_BYTES)
    except OSError:
        return False
    return (folder / "config.json").is_file() and b'"hf_norms_version"' in head


def made_by_hf_norms(folder: Path, command: str | None = None) -> bool:
    """Whether hf-norms made `folder` (with `command`, when given): it holds a valid marker, or, for `convert`'s
    outputs, it is one of a release that wrote none."""
    marker = Marker.read(folder)
    if marker is not None:
        return command is None or marker.command == command
    return command in (None, "convert", "heal") and is_earlier_release_output(folder)
