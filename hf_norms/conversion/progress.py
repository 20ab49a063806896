"""Numbered stage lines of the long commands, on stderr, as transformers' example scripts log their steps:

    hf-norms convert: stage 3/6: measuring the naive conversion on 64 examples (at 21 s)

Each stage that can take more than a few seconds (loading, encoding data, measuring, calibrating, writing) announces
itself, so a run is never silent for long without saying what it is doing; stages with many steps show a tqdm bar
besides (calibration, healing).
"""

from __future__ import annotations

import sys
import time


class StageLines:
    """Announces stage k of `total` of `command`, with the time since the command started, when `enabled`. Each part
    of a command adds the stages it will run (`expect`) before announcing any."""

    def __init__(self, command: str, enabled: bool) -> None:
        self.command, self.enabled = command, enabled
        self.total, self.count, self.started = 0, 0, time.monotonic()

    def expect(self, stages: int) -> None:
        self.total += stages

    def __call__(self, what: str) -> None:
        self.count += 1
        if self.enabled:
            elapsed = time.monotonic() - self.started
            line = f"{self.command}: stage {self.count}/{self.total}: {what} (at {elapsed:.0f} s)"
            print(line, file=sys.stderr, flush=True)
