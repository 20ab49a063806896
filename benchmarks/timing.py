"""Interleaved timing: every candidate runs once per round, in a new random order each round (a fixed order biased
ratios by ~8 % here: a candidate inherits the cache and frequency state its predecessor leaves), rounds repeat, and
each is reported as a ratio to the baseline measured in the same rounds (these machines are noisy; ratios from one run
are what we compare)."""

from __future__ import annotations

import random
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Timing:
    name: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        quartiles = statistics.quantiles(self.seconds, n=4) if len(self.seconds) > 1 else [self.median] * 3
        return (quartiles[2] - quartiles[0]) / self.median


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished child processes (`/usr/bin/time`'s %U + %S)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_interleaved(
    candidates: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int = 2,
    inner: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Run each candidate `warmup` times, then `rounds` rounds in which every candidate runs `inner` times, in an order
    shuffled anew each round (seeded, so runs are repeatable), each timed by `clock` (wall-clock seconds, or
    `children_cpu_seconds` for the CPU that candidates run as subprocesses use)."""
    for function in candidates.values():
        for _ in range(warmup):
            function()
    timings = {name: Timing(name, []) for name in candidates}
    order = list(candidates)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            function = candidates[name]
            start = clock()
            for _ in range(inner):
                function()
            timings[name].seconds.append((clock() - start) / inner)
    return timings


def ratio_rows(timings: dict[str, Timing], baseline: str) -> list[list[str]]:
    """Table rows: name, median ms, spread, ratio of medians to `baseline`, and the ratio's range over rounds."""
    base = timings[baseline]
    rows = []
    for name, timing in timings.items():
        per_round = sorted(t / b for t, b in zip(timing.seconds, base.seconds, strict=True))
        low, high = per_round[len(per_round) // 4], per_round[(3 * len(per_round)) // 4]
        rows.append(
            [
                name,
                f"{timing.median * 1e3:.3f}",
                f"{timing.spread * 100:.0f} %",
                f"{timing.median / base.median:.3f}x",
                f"{low:.2f}-{high:.2f}",
            ]
        )
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


TIMING_HEADER = ["", "median ms", "IQR", "ratio to layernorm", "ratio IQR (per round)"]
