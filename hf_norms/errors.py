"""The errors hf-norms raises on purpose, and how the command line reports them.

Every such error's message says what is wrong and what to do. `InputError`s are mistakes in what the user gave (exit
status 2 on the command line); other `HfNormsError`s are failures of a step that was valid to ask for (exit status 1).
"""

from __future__ import annotations

import contextlib
import errno
import os
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
    name = str(error.filename)
    name = name if len(name) <= 160 else f"{name[:80]}...{name[-80:]}"
    return f"{error.strerror}: {name}; check the path."


@dataclass
class Outcome:
    status: int = 0


@contextlib.contextmanager
def handled_errors(program: str) -> Iterator[Outcome]:
    """Run a command so that every error is one line on stderr: an `HfNormsError` with its own exit status (2 for
    input errors), anything unexpected with status 1, an interrupt with 130. `HF_NORMS_DEBUG=1` re-raises instead,
    for the traceback."""
    outcome = Outcome()
    try:
        yield outcome
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        outcome.status = 130
    except Exception as error:
        if os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        if isinstance(error, HfNormsError):
            message, outcome.status = " ".join(str(error).split()), error.exit_code
        elif path_error(error):
            message, outcome.status = path_error(error), InputError.exit_code
        else:
            message = f"{type(error).__name__}: {one_line(error)} ({DEBUG_VARIABLE}=1 shows the traceback)"
            outcome.status = 1
        print(f"{program}: error: {message}", file=sys.stderr)
