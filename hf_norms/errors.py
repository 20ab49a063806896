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


@dataclass
class Outcome:
    status: int = 0


@contextlib.contextmanager
def handled_errors(program: str) -> Iterator[Outcome]:
    """Run a command; an `HfNormsError` becomes one line on stderr and its exit status (the traceback too with
    `HF_NORMS_DEBUG=1`)."""
    outcome = Outcome()
    try:
        yield outcome
    except HfNormsError as error:
        if os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        print(f"{program}: error: {error}", file=sys.stderr)
        outcome.status = error.exit_code
