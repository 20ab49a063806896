"""How long a user waits in the first hour: each command line answering an argument error or `--help`, and the
imports, each in a fresh process, from start to exit: the CPU it uses (user + system, the default: a 2-core machine
shared with other work pays this) or wall-clock seconds (`--clock wall`).

Every candidate is a subprocess; all run once per round, in a new random order each round (`timing.time_interleaved`),
and each is reported as a ratio of medians to its baseline measured in the same rounds, with the ratio's per-round
range:

- the command lines against `python -c "import torch"` (issue 55's budget: at most 0.5x; `hf --help` is 0.3x), with
  `python -c pass` (an interpreter that starts and exits) as the control; each parses before it imports torch,
  transformers or datasets;
- the imports against `import torch, transformers` (issue 55's budget: `import hf_norms` at most 1.25x), with
  `import torch, transformers; from transformers import BertModel, ViTModel, DeiTModel, Dinov2Model`, the modeling
  code registering hf-norms' model classes with the Auto classes needs, as the second baseline.

    python -m benchmarks.first_hour_timings --rounds 5 [--clock wall]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.timing import Timing, children_cpu_seconds, markdown_table, time_interleaved

SCRIPT = Path(sys.executable).with_name("hf-norms")
STOCK_MODELS = "from transformers import BertModel, ViTModel, DeiTModel, Dinov2Model"

COMMANDS: dict[str, list[str]] = {
    "hf-norms --version": ["--version"],
    "hf-norms --help": ["--help"],
    "convert --help": ["convert", "--help"],
    "finetune --help": ["finetune", "--help"],
    "convert, option typo": ["convert", "src", "--norm_typ", "dyt", "--output", "out"],
    "convert, missing source folder": ["convert", "./no-such-folder", "--norm_type", "dyt", "--output", "out"],
    "heal, option typo": ["heal", "--bogus", "1"],
    "push, option typo": ["push", "--bogus", "1"],
    "hub, option typo": ["hub", "--bogus", "1"],
    "demo, option typo": ["demo", "--bogus", "1"],
    "finetune, option typo": ["finetune", "--norm_typ", "dyt"],
    "finetune, missing model folder": ["finetune", "--model_name_or_path", "./no-such-folder", "--output_dir", "out"],
}
IMPORTS: dict[str, str] = {
    "import torch": "import torch",
    "import torch, transformers": "import torch, transformers",
    "import hf_norms": "import hf_norms",
    "import hf_norms, torch, transformers": "import hf_norms, torch, transformers",
    "... + from transformers import AutoModel": "import hf_norms, torch, transformers; from transformers import AutoModel",
    "stock: ... + from transformers import AutoModel": "import torch, transformers; from transformers import AutoModel",
    "stock: the four stock model classes": f"import torch, transformers; {STOCK_MODELS}",
}
SMOKE = ("hf-norms --version", "convert, option typo", "import hf_norms", "import torch")
CLOCKS = {"cpu": children_cpu_seconds, "wall": time.perf_counter}


def runner(argv: list[str], workdir: str, expected: set[int]) -> Callable[[], None]:
    """Run `argv` in `workdir` with output discarded; an exit status outside `expected` is an error (a candidate that
    fails early would look fast)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def run() -> None:
        done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, check=False)
        if done.returncode not in expected:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr[-500:]}")

    return run


def candidates(workdir: str, smoke: bool) -> dict[str, Callable[[], None]]:
    found = {"control: python -c pass": runner([sys.executable, "-c", "pass"], workdir, {0})}
    for name, argv in COMMANDS.items():
        found[name] = runner([str(SCRIPT), *argv], workdir, {0} if argv[-1] in ("--help", "--version") else {2})
    for name, code in IMPORTS.items():
        found[name] = runner([sys.executable, "-c", code], workdir, {0})
    return {name: run for name, run in found.items() if not smoke or name in SMOKE or name.startswith("control")}


def rows(timings: dict[str, Timing], baseline: str, names: list[str]) -> list[list[str]]:
    """name, median s, the ratio of medians to `baseline`, the per-round ratio's range, and the difference of medians."""
    base = timings[baseline]
    table = []
    for name in names:
        timing = timings[name]
        per_round = [t / b for t, b in zip(timing.seconds, base.seconds, strict=True)]
        table.append(
            [
                name,
                f"{timing.median:.2f}",
                f"{timing.median / base.median:.2f}x",
                f"{min(per_round):.2f}-{max(per_round):.2f}",
                f"{timing.median - base.median:+.2f}",
            ]
        )
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="four candidates, one round, no warm-up")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu", help="CPU seconds (default) or wall-clock")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="first-hour-") as workdir:
        found = candidates(workdir, args.smoke)
        rounds, warmup = (1, 0) if args.smoke else (args.rounds, 1)
        timings = time_interleaved(found, rounds=rounds, warmup=warmup, clock=CLOCKS[args.clock])
    header = ["", f"median {args.clock} s", "ratio", "ratio range (per round)", "difference s"]
    commands = ["control: python -c pass", *(name for name in timings if name in COMMANDS)]
    print(f"Command lines against `import torch` ({statistics.median(timings['import torch'].seconds):.2f} s):")
    print(markdown_table(header, rows(timings, "import torch", commands)))
    imports = [name for name in timings if name in IMPORTS]
    if "import torch, transformers" in timings:
        print("\nImports against `import torch, transformers`:")
        print(markdown_table(header, rows(timings, "import torch, transformers", imports)))
    else:
        print(markdown_table(header, rows(timings, "control: python -c pass", imports)))


if __name__ == "__main__":
    main()
