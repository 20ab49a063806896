"""The options of `hf-norms hub` and of `HubServer`, declared once (`HubArguments`). Imports nothing of hf-norms but
the command line's field helpers and this server's own constants."""

from __future__ import annotations

from dataclasses import dataclass

from ...cli_parsing import flag, option, required
from ...errors import InputError
from .store import DEFAULT_USER

MAX_BODY_BYTES = 1 << 30  # a commit's body; checkpoints of several GB go to a real Hub


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

    def __post_init__(self) -> None:
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port < 65536:
            raise InputError(f"--port must be 0-65535, got {self.port!r}.")
        if isinstance(self.max_body_bytes, bool) or not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 1:
            raise InputError(f"{flag(self, 'max_body_bytes')} must be a positive integer, got {self.max_body_bytes!r}.")
