"""The errors hf-norms raises on purpose, and how the command line reports them.

Every such error's message says what is wrong and what to do. `InputError`s are mistakes in what the user gave (exit
status 2 on the command line); other `HfNormsError`s are failures of a step that was valid to ask for (exit status 1).
"""

from __future__ import annotations

import contextlib
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


def one_line(error: BaseException) -> str:
    """The last line of an error's message: where a validation error wraps the reason (as transformers' strict
    configs do: "Class validation error for validator ...:\n    ValueError: <reason>"), the reason."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


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
        else:
            message = f"{type(error).__name__}: {one_line(error)} ({DEBUG_VARIABLE}=1 shows the traceback)"
            outcome.status = 1
        print(f"{program}: error: {message}", file=sys.stderr)
