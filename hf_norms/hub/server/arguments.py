"""The options of `hf-norms hub` and of `HubServer`, declared once (`HubArguments`), checked when they are made,
before anything is created on disk: one line each, exit status 2 on the command line. Imports nothing of hf-norms but
the command line's field helpers and this server's own constants."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...cli_parsing import flag, option, required
from ...errors import InputError
from .payloads import valid_name
from .store import DEFAULT_USER

MAX_BODY_BYTES = 1 << 30  # a commit's body; checkpoints of several GB go to a real Hub
MAX_CONCURRENT_WRITES = 2  # large request bodies read and stored at once; more wait for their turn


@dataclass(kw_only=True)
class HubArguments:
    """Where the Hub keeps its repos, where it listens and whom it lets in."""

    root: str | None = required(
        "folder holding the repos (created if missing; in Python None is a temporary folder that stop() removes)"
    )
    port: int = option("port on 127.0.0.1 (0: any free port)", 0)
    tokens: list[str] | None = option(
        "an accepted bearer token (repeatable; default: any non-empty token, each its own user)",
        aliases=["--token"], repeatable=True,
    )  # fmt: skip
    user: str | None = option(f"the user name the listed tokens authenticate as (default: {DEFAULT_USER})")
    max_body_bytes: int = option("the largest request body accepted; a larger one gets 400 before it is read",
                                 MAX_BODY_BYTES)  # fmt: skip
    max_concurrent_writes: int = option("request bodies over 1 MiB read and stored at once; others wait their turn",
                                        MAX_CONCURRENT_WRITES)  # fmt: skip

    def __post_init__(self) -> None:
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port < 65536:
            raise InputError(f"--port must be 0-65535, got {self.port!r}.")
        for name in ("max_body_bytes", "max_concurrent_writes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{flag(self, name)} must be a positive integer, got {value!r}.")
        if self.user is not None and not valid_name(self.user):
            raise InputError(
                f"--user must be a user name (letters, digits, '.', '_' and '-', starting with a letter or digit, at "
                f"most 96 characters, no '..'), got {self.user!r}."
            )
        if self.root is not None:
            check_root(Path(self.root))


def check_root(root: Path) -> None:
    """Refuse a `--root` that cannot hold the repos, before anything is created: a path that is not a folder, or
    whose nearest existing folder is not writable."""
    existing = root
    while not existing.exists() and not existing.is_symlink() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is" if existing == root else f"is inside {str(existing)!r}, which is"
        raise InputError(f"--root {str(root)!r} {what} not a folder: give a folder, new or holding this hub's repos.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"--root {str(root)!r}: {str(existing)!r} is not writable; give a folder you can write to.")
