"""Large checkpoints: peak memory and time of exact conversions of a random BERT-large (335M parameters, 1.34 GB in
three safetensors files), against loading and saving it with transformers.

    python -m benchmarks.large_checkpoints                 # BERT-large in 3 files, 3 rounds
    python -m benchmarks.large_checkpoints --threads 1     # one torch thread per job (a machine shared with others)
    python -m benchmarks.large_checkpoints --smoke         # a tiny BERT in 3 files, 1 round (run by the test suite)

The checkpoint is built in a temporary folder (removed at the end; the run needs about 4 GB of free disk). Every job
runs in a fresh Python process, so its peak resident set size (`ru_maxrss`: libraries, weights, mapped file pages) is
its own; rounds run the jobs in a new random order each:

- `load+save`: `AutoModel.from_pretrained(SRC).save_pretrained(OUT)`;
- `convert T`: `hf-norms convert SRC --norm-type T --output OUT` (the command's `main`, in the child process), for the
  exact types sepnorm, dtn and lape; they evaluate on the built-in probe inputs (the checkpoint has no tokenizer).

Reported per job: the median peak RSS and its ratio to the checkpoint's size and to load+save's; the seconds after
imports and of the whole process, each with its range over rounds and the range of its per-round ratio to load+save's
(time ratios are noisy where the machine is shared; peak RSS does not depend on the load); the files written. Where
other processes keep the cores busy, torch's threads wait for each other at every operation: there `--threads 1` runs
the conversions several times faster and measures the work rather than the waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import markdown_table

EXACT_TYPES = ("sepnorm", "dtn", "lape")
LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
SMOKE = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=256, vocab_size=500)
HEADER = ["job", "peak RSS MiB", "/ checkpoint", "/ load+save", "s after imports", "ratio", "command s", "ratio",
          "weight files"]  # fmt: skip


def make_source(folder: Path, smoke: bool) -> None:
    """A random BERT (BERT-large sizes, or tiny) saved by transformers in 3 safetensors files."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(**(SMOKE if smoke else LARGE)))
    size = sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())
    model.save_pretrained(folder, max_shard_size=size // 3 + (size // 100))


def child(job: str, source: Path, output: Path, threads: int | None) -> dict:
    """Run one job in this process; returns its seconds after imports and this process's peak RSS in bytes."""
    import torch
    from transformers import AutoModel

    if threads:
        torch.set_num_threads(threads)
    if job != "load+save":  # what the command imports, before the clock starts
        import hf_norms.conversion.convert  # noqa: F401
        from hf_norms import cli
    started = time.perf_counter()
    if job == "load+save":
        AutoModel.from_pretrained(source).save_pretrained(output)
    elif cli.main(["convert", str(source), "--norm-type", job.removeprefix("convert "), "--output", str(output)]):
        raise SystemExit(f"{job} failed")
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {"seconds": seconds, "peak_rss": peak, "files": len(list(output.glob("*.safetensors")))}


def run_child(job: str, source: Path, work: Path, threads: int | None) -> dict:
    output = work / "output"
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "benchmarks.large_checkpoints", "--child", job, "--source", str(source)]
    command += ["--threads", str(threads)] if threads else []
    started = time.perf_counter()
    finished = subprocess.run([*command, "--output", str(output)], capture_output=True, text=True, check=False)
    command_seconds = time.perf_counter() - started
    shutil.rmtree(output, ignore_errors=True)
    if finished.returncode != 0:
        raise RuntimeError(f"{job} failed:\n{finished.stderr[-3000:]}")
    return {**json.loads(finished.stdout.strip().splitlines()[-1]), "command_seconds": command_seconds}


def checkpoint_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.glob("*.safetensors"))


def measure(source: Path, work: Path, rounds: int, norm_types: tuple[str, ...], threads: int | None) -> list[list[str]]:
    jobs = ["load+save", *(f"convert {norm_type}" for norm_type in norm_types)]
    results: dict[str, list[dict]] = {job: [] for job in jobs}
    order, shuffle = list(jobs), random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for job in order:
            results[job].append(run_child(job, source, work, threads))
    size, base = checkpoint_bytes(source), results["load+save"]
    base_rss = statistics.median(run["peak_rss"] for run in base)

    def spread(runs: list[dict], key: str) -> list[str]:
        values = [run[key] for run in runs]
        ratios = [run[key] / other[key] for run, other in zip(runs, base, strict=True)]
        return [f"{min(values):.1f}-{max(values):.1f}", f"{min(ratios):.2f}-{max(ratios):.2f}x"]

    rows = []
    for job, runs in results.items():
        rss = statistics.median(run["peak_rss"] for run in runs)
        rows.append([job, f"{rss / 2**20:.0f}", f"{rss / size:.2f}x", f"{rss / base_rss:.2f}x",
                     *spread(runs, "seconds"), *spread(runs, "command_seconds"),
                     str(statistics.median(run["files"] for run in runs))])  # fmt: skip
    return rows


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.large_checkpoints`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny BERT in 3 files, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--norm-types", nargs="+", default=list(EXACT_TYPES), choices=EXACT_TYPES)
    parser.add_argument("--work", type=Path, help="where to make the temporary folder (default: the system's)")
    parser.add_argument("--threads", type=int, help="torch threads per job (default: torch's, one per core)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--make-source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.source, args.output, args.threads)))
        return
    if args.make_source:
        make_source(args.make_source, args.smoke)
        return
    with tempfile.TemporaryDirectory(prefix="hf-norms-large-bench-", dir=args.work) as work:
        work = Path(work)
        if not args.smoke and shutil.disk_usage(work).free < 4 * 10**9:
            raise SystemExit(f"{work} has {shutil.disk_usage(work).free / 1e9:.1f} GB free; the run needs 4 GB.")
        command = [sys.executable, "-m", "benchmarks.large_checkpoints", "--make-source", str(work / "source")]
        subprocess.run(command + (["--smoke"] if args.smoke else []), check=True, capture_output=True)
        source = work / "source"
        load = os.getloadavg()[0]
        rows = measure(source, work, 1 if args.smoke else args.rounds, tuple(args.norm_types), args.threads)
        files = len(list(source.glob("*.safetensors")))
        print(f"checkpoint: {checkpoint_bytes(source) / 1e6:.1f} MB in {files} files; {os.cpu_count()} CPUs, "
              f"{args.threads or 'default'} torch threads, "
              f"load average {load:.1f} before and {os.getloadavg()[0]:.1f} after")  # fmt: skip
    print(markdown_table(HEADER, rows))


if __name__ == "__main__":
    main()
