"""Where no run may write (the working directory, home, the source, the teacher, the data), and paths resolved
without a traceback; the error every refusal of a folder raises."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import OutputFolderError
from ..redaction import redact

SHOWN_NAMES = 5  # at most this many file names in a message


# --------------------------------------------------------------------------------------------------------------------
# Places
# --------------------------------------------------------------------------------------------------------------------


def never_written(extra: Mapping[str, Path | None] = {}) -> dict[str, Path]:
    """The folders no run may write into, replace or delete, by what they are."""
    places = {"the working directory": Path.cwd(), "the home folder": Path.home(), **extra}
    return {what: resolved(Path(path), what) for what, path in places.items() if path is not None}


def resolved(path: Path, what: str = "Output") -> Path:
    """`path` made absolute with links resolved; a link loop or a name the system refuses is an `OutputFolderError`."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a link loop, before Python 3.13
        reason = error.strerror if isinstance(error, OSError) and error.strerror else "a symbolic link loop"
        raise OutputFolderError(f"{what} {shorten(str(path))} cannot be used: {reason}; give another path.") from None


def check_output_location(target: Path, protected: Mapping[str, Path | None], what: str = "Output") -> Path:
    """`target` resolved, after refusing a place that overlaps a protected one (see the module docstring)."""
    target = resolved(target, what)
    for name, place in never_written(protected).items():
        if target == place or place.is_relative_to(target):
            raise OutputFolderError(f"{what} {target} is or contains {name} ({place}); choose a new folder.")
        if name not in ("the working directory", "the home folder") and target.is_relative_to(place):
            raise OutputFolderError(f"{what} {target} lies inside {name} ({place}); choose a folder outside it.")
    try:
        is_file = target.exists() and not target.is_dir()
    except OSError as error:
        raise OutputFolderError(f"{what} {shorten(str(target))} cannot be used: {error.strerror}.") from None
    if is_file:
        raise OutputFolderError(f"{what} {target} is a file; give a folder.")
    return target


def shorten(text: str, limit: int = 160) -> str:
    """`text` cut in its middle to at most `limit` characters (and the cut's dots), the tokens being redacted replaced
    first (`redaction.redact`), so no part of one is left on either side of the cut."""
    text = redact(text)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")
