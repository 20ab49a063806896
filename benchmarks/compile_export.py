"""Compile and export cost per norm_type, as ratios to the `layernorm` model of the same family: the wall time of the
first `torch.compile` inference call (inductor, default mode) and of `torch.onnx.export(dynamo=True)` with a dynamic
batch (text: and length), for the models of `benchmarks.whole_models` (ViT-S/16 size, the real MiniLM, the real
DINOv2-S/14).

    python -m benchmarks.compile_export                                  # every family, layernorm and dtn
    python -m benchmarks.compile_export --families vit --norm-types dtn dyt --jobs compile

Every measurement runs in a fresh process with an empty inductor cache (`TORCHINDUCTOR_CACHE_DIR`, FX graph cache
off), after a throwaway compile that pays inductor's one-time start-up, so each model pays for its own kernels and
nothing else; rounds alternate the norm types. On 2 shared cores one compile takes one to several minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from benchmarks.timing import markdown_table
from benchmarks.whole_models import FAMILIES, NORM_VARIANTS

JOBS = ("compile", "export")


def measure(family: str, norm_type: str, job: str) -> float:
    """Seconds of one `job` on a fresh model (run inside the child process)."""
    models, inputs = FAMILIES[family][1](False, [norm_type])
    model = models[norm_type].eval()
    features = {name: value for name, value in inputs.items() if name != "labels"}
    torch.compile(lambda t: (t * 2).sin())(torch.randn(8))  # inductor's one-time start-up, not the model's cost
    start = time.perf_counter()
    if job == "compile":
        with torch.inference_mode():
            torch.compile(model)(**features)
    else:
        dims = {0: torch.export.Dim.DYNAMIC, **({1: torch.export.Dim.DYNAMIC} if family == "bert" else {})}
        dynamic_shapes = {name: dims for name in features}
        torch.onnx.export(model, kwargs=features, dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False)
    return time.perf_counter() - start


def run_child(family: str, norm_type: str, job: str) -> float:
    with tempfile.TemporaryDirectory(prefix="hf-norms-inductor-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
        command = [sys.executable, "-m", "benchmarks.compile_export", "--child", family, norm_type, job]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def table(families: list[str], norm_types: list[str], jobs: list[str], rounds: int) -> str:
    names = ["layernorm", *(name for name in norm_types if name != "layernorm")]
    seconds = {(family, name, job): [] for family in families for name in names for job in jobs}
    for round_index in range(rounds):
        for family in families:
            for job in jobs:
                for name in names if round_index % 2 == 0 else reversed(names):
                    seconds[family, name, job].append(run_child(family, name, job))
    rows = []
    for family in families:
        for name in names:
            row = [f"{FAMILIES[family][0]} {name}"]
            for job in jobs:
                median = statistics.median(seconds[family, name, job])
                baseline = statistics.median(seconds[family, "layernorm", job])
                row += [f"{median:.1f} s", f"{median / baseline:.2f}x"]
            rows.append(row)
    header = [""] + [f"{job} {column}" for job in jobs for column in ("time", "ratio to layernorm")]
    threads = torch.get_num_threads()
    return f"Compile and export, {threads} threads, median of {rounds} round(s).\n\n" + markdown_table(header, rows)


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.compile_export`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--norm-types", nargs="+", choices=list(NORM_VARIANTS), default=["dtn"])
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", nargs=3, metavar=("FAMILY", "NORM_TYPE", "JOB"), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:
        print(measure(*args.child))
        return
    print(table(args.families, args.norm_types, args.jobs, args.rounds))


if __name__ == "__main__":
    main()
