"""The errors hf-norms raises on purpose, and how the command line reports them.

Every such error's message says what is wrong and what to do. `InputError`s are mistakes in what the user gave (exit
status 2 on the command line); other `HfNormsError`s are failures of a step that was valid to ask for (exit status 1).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

DEBUG_VARIABLE = "HF_NORMS_DEBUG"


class HfNormsError(Exception):
    """A failure hf-norms detected and explained; the command line exits with `exit_code`."""

    exit_code = 1


class InputError(HfNormsError, ValueError):
    """Input that cannot be used: a wrong path, option, data set or checkpoint."""

    exit_code = 2


class ConversionError(InputError):
    """An input that a conversion, a healing or a fine-tuning reads is unusable (a checkpoint, its files, the data);
    the message names the problem and the fix."""


class OutputFolderError(InputError):
    """An output or work folder that hf-norms will not write to; the message says why and what to do."""


class FinetuneInputError(InputError):
    """Input that cannot be fine-tuned on, found before training starts; the message names the problem and the fix."""


class CheckpointRefused(InputError):
    """The push cannot be made as asked (the folder, repo id, token, options or commit message); nothing was
    uploaded. The message names the problem and the fix."""


class PushError(HfNormsError, RuntimeError):
    """The Hub endpoint could not be reached or failed; the local folder is untouched and the push can be retried."""


class MissingPackageError(ModuleNotFoundError):
    """An optional package that a packaged model or data set is read with is not installed; the message is one line
    naming the call that needs it and the install command. A `ModuleNotFoundError`, so `except ImportError` catches it."""


class HubError(Exception):
    """An error the loopback Hub answers to its client as JSON, with the `X-Error-Code` header `huggingface_hub`
    dispatches on (`status`, `message`, `code`)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class ArgumentTypeError(InputError, TypeError):
    """A Python API argument of the wrong type (`convert(None, ...)`): a `TypeError` that is also an input error."""


def require_type(name: str, value: object, kinds: type | tuple[type, ...], expected: str) -> None:
    """Raise `ArgumentTypeError` unless `value` is an instance of `kinds` (a bool is never taken for a number)."""
    if not isinstance(value, kinds) or (
        isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,))
    ):
        raise ArgumentTypeError(f"{name} must be {expected}, got {type(value).__name__} {value!r:.60}.")


def one_line(error: BaseException) -> str:
    """The last line of an error's message: where a validation error wraps the reason (as transformers' strict
    configs do: "Class validation error for validator ...:\n    ValueError: <reason>"), the reason."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


# Errors of the operating system that say a path the user gave cannot be used as it is.
PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES,
                         errno.EPERM, errno.EROFS})  # fmt: skip


def path_error(error: BaseException) -> str | None:
    """The one-line message for an error that a path the user gave causes (too long, a link loop, missing, not
    writable, ...), or None for any other error."""
    if isinstance(error, RuntimeError) and str(error).startswith("Symlink loop"):  # pathlib before Python 3.13
        return f"{error}: a symbolic link leads to itself; give another path."
    if not isinstance(error, OSError) or error.errno not in PATH_ERRNOS or error.filename is None:
        return None
    return f"{error.strerror}: {error.filename}; check the path."


# The most characters an error line shows of one value it echoes (a run without spaces: a path, a name, a quoted
# value), and of the whole line; a longer one keeps its start and its end (where the fix is named) around `...`.
VALUE_LIMIT, LINE_LIMIT = 300, 2000
LONG_VALUE = re.compile(rf"\S{{{VALUE_LIMIT + 1},}}")
WORD, WORD_END, WORD_START = re.compile(r"\w\w"), re.compile(r"\w+$"), re.compile(r"^\w+")


def shortened(text: str, limit: int) -> str:
    """`text` when at most `limit` characters, else its first two thirds and last third of them around `...`, each cut
    moved to a word's edge: part of a word (of a token, a key) is never shown."""
    if len(text) <= limit:
        return text
    end = (limit - 3) * 2 // 3
    start = len(text) - (limit - 3 - end)
    head, tail = text[:end], text[start:]
    if WORD.match(text, end - 1):
        head = WORD_END.sub("", head)
    if WORD.match(text, start - 1):
        tail = WORD_START.sub("", tail)
    return f"{head}...{tail}"


def bounded_line(message: str) -> str:
    """`message` as one line an error prints: its whitespace runs as single spaces, a URL's user and password as
    `***`, each value it echoes (a run without spaces) cut to `VALUE_LIMIT` characters and the whole to `LINE_LIMIT`
    (`shortened`), so no file, option or key a user gives makes an error line long."""
    line = URL_USERINFO.sub(r"\1***@", " ".join(message.split()))
    return shortened(LONG_VALUE.sub(lambda value: shortened(value.group(), VALUE_LIMIT), line), LINE_LIMIT)


# A URL's scheme, and its user information up to the last `@` of its authority (which ends at `/`, `?` or `#`); each
# part bounded, so that a 600,000-character run is searched in linear time
URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^\s/?#]*@")
# The connection errors of the HTTP clients hf-norms downloads through (httpx's and its fork httpx2's, which
# huggingface_hub uses; the standard library's), by class name: this module imports no client
TRANSPORT_ERRORS = {"TransportError", "ConnectionError", "IncompleteRead"}
HUB_DOWNLOAD = re.compile(r"/(?:(datasets|spaces)/)?([^/]+/[^/]+)/resolve/[^/]+/(.+)")


def lost_connection(error: BaseException) -> BaseException | None:
    """The connection error (`TRANSPORT_ERRORS`) `error` was raised from, itself included, or None: transformers
    raises a download's `httpx.RemoteProtocolError` as an `OSError` that says nothing of the connection."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if TRANSPORT_ERRORS & {kind.__name__ for kind in type(error).__mro__}:
            return error
        error = error.__cause__ or error.__context__
    return None


def lost_connection_line(error: BaseException) -> str:
    """The one line for a download the network cut off (`lost_connection`): what was read (a Hub repo's file, or the
    URL) and what to do."""
    try:
        url = error.request.url  # httpx's errors name the request they failed in
    except (AttributeError, RuntimeError):  # RuntimeError: an httpx error raised outside a request
        url = None
    what = "from the Hub"
    if url is not None:
        found = HUB_DOWNLOAD.fullmatch(url.path)
        what = f"{found[3]} of {found[1] or 'model'} {found[2]!r}" if found else f"{url.copy_with(query=None)}"
    return (
        f"The connection was lost while downloading {what} ({type(error).__name__}: {one_line(error)}); check the "
        "network and HF_ENDPOINT and run the command again (the download goes on where it stopped)."
    )


class QuietRetries(logging.Filter):
    """Holds back huggingface_hub's warnings of a download it retries: a retry that works needs no line, and one that
    fails ends in the command's one error line (`lost_connection_line`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Error while downloading from")


@dataclass
class Outcome:
    status: int = 0


@contextlib.contextmanager
def handled_errors(program: str) -> Iterator[Outcome]:
    """Run a command so that every error is one bounded line on stderr (`bounded_line`): an `HfNormsError` with its
    own exit status (2 for input errors), anything unexpected with status 1, an interrupt with 130. `HF_NORMS_DEBUG=1`
    re-raises instead, for the traceback."""
    outcome, quiet = Outcome(), QuietRetries()
    downloads = logging.getLogger("huggingface_hub.file_download")
    downloads.addFilter(quiet)
    try:
        yield outcome
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        outcome.status = 130
    except Exception as error:
        if os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        if isinstance(error, HfNormsError):
            message, outcome.status = str(error), error.exit_code
        elif path_error(error):
            message, outcome.status = path_error(error), InputError.exit_code
        elif lost_connection(error):
            message, outcome.status = lost_connection_line(lost_connection(error)), InputError.exit_code
        else:
            message = f"{type(error).__name__}: {one_line(error)} ({DEBUG_VARIABLE}=1 shows the traceback)"
            outcome.status = 1
        print(f"{program}: error: {bounded_line(message)}", file=sys.stderr)
    finally:
        downloads.removeFilter(quiet)
