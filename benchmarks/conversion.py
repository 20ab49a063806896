"""Conversion cost: wall time and peak RSS of `hf_norms.convert` per norm_type, as ratios to a plain `from_pretrained`
+ `save_pretrained` round trip of the same checkpoint, and DyT calibration seconds per 100 samples.

    python -m benchmarks.conversion                  # real MiniLM BERT and DINOv2-S ViT, 3 rounds
    python -m benchmarks.conversion --smoke          # a tiny ViT checkpoint, 1 round (run by the test suite)

Every measurement runs in a fresh Python process (so peak RSS is that job's own), and rounds interleave the jobs.
Reported per job, as medians and median ratios to `load+save`: the whole command's wall time (what a user waits for,
Python and library imports included), the seconds from the first model load to the saved output (imports excluded),
and the peak resident set size (`ru_maxrss`). Conversions evaluate on the built-in probe inputs, as
`hf-norms convert SRC --norm-type T` does without data; DyT calibrates on 100 examples (BBC News articles or
Fashion-MNIST images) and is evaluated on the next 16.
"""

from __future__ import annotations

import argparse
import json
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
CALIBRATION_SAMPLES = 100


def child(job: str, source: Path, output: Path, calibration: Path | None) -> dict:
    """Run one job in this process; returns its seconds (after imports) and this process's peak RSS in MiB."""
    from transformers import AutoModel

    from hf_norms.conversion.convert import convert

    started = time.perf_counter()
    calibration_seconds = None
    if job == "load+save":
        AutoModel.from_pretrained(source).save_pretrained(output)
    else:
        norm_type = job.removeprefix("convert ")
        data = {"calibration_data": calibration, "calibration_samples": CALIBRATION_SAMPLES} if calibration else {}
        report = convert(source, norm_type, output, evaluation_samples=16, **data)
        if report["calibration"]:
            calibration_seconds = report["calibration"]["seconds"]
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return {"seconds": seconds, "peak_rss_mib": peak_mib, "calibration_seconds": calibration_seconds}


def run_child(job: str, source: Path, work: Path, calibration: Path | None) -> dict:
    output = work / "output"
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "benchmarks.conversion", "--child", job, "--source", str(source)]
    command += ["--output", str(output)] + (["--calibration", str(calibration)] if calibration else [])
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    command_seconds = time.perf_counter() - started
    if finished.returncode != 0:
        raise RuntimeError(f"{job} on {source} failed:\n{finished.stderr[-3000:]}")
    shutil.rmtree(output, ignore_errors=True)
    return {**json.loads(finished.stdout.strip().splitlines()[-1]), "command_seconds": command_seconds}


def calibration_data(name: str, work: Path) -> Path:
    """100 calibration examples and 16 more for evaluation: a text file (MiniLM) or an image folder (ViT)."""
    from hf_norms import packaged

    count = CALIBRATION_SAMPLES + 16
    if name == "minilm":
        path = work / "calibration.txt"
        texts = [" ".join(text.split()) for text, _ in packaged.bbc_news()[:count]]
        path.write_text("\n".join(texts) + "\n", encoding="utf-8")
        return path
    from PIL import Image

    folder = work / "calibration-images"
    folder.mkdir(exist_ok=True)
    images, _ = packaged.fashion_mnist("train", limit=count)
    for index, image in enumerate(images):
        Image.fromarray(image).save(folder / f"{index:04d}.png")
    return folder


def tiny_vit(folder: Path) -> Path:
    """A small random ViT checkpoint with an image processor, for the smoke run."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32)
    ViTModel(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def measure(name: str, source: Path, work: Path, rounds: int, norm_types: tuple[str, ...]) -> list[list[str]]:
    calibration = calibration_data(name, work) if "dyt" in norm_types else None
    jobs = ["load+save"] + [f"convert {norm_type}" for norm_type in norm_types]
    results: dict[str, list[dict]] = {job: [] for job in jobs}
    for _ in range(rounds):
        for job in jobs:
            results[job].append(run_child(job, source, work, calibration if job == "convert dyt" else None))
    base = results["load+save"]

    def median_and_ratio(runs: list[dict], key: str) -> list[str]:
        ratios = [r[key] / b[key] for r, b in zip(runs, base, strict=True)]
        return [f"{statistics.median(r[key] for r in runs):.2f}", f"{statistics.median(ratios):.2f}x"]

    rows = []
    for job, runs in results.items():
        calibration_seconds = [r["calibration_seconds"] for r in runs if r["calibration_seconds"] is not None]
        per_100 = (
            f"{statistics.median(calibration_seconds) * 100 / CALIBRATION_SAMPLES:.1f}" if calibration_seconds else "-"
        )
        rows.append(
            [
                f"{name}: {job}",
                *median_and_ratio(runs, "command_seconds"),
                *median_and_ratio(runs, "seconds"),
                *median_and_ratio(runs, "peak_rss_mib"),
                per_100,
            ]
        )
    return rows


HEADER = [
    "job",
    "command s",
    "ratio",
    "s after imports",
    "ratio",
    "peak RSS MiB",
    "ratio",
    "DyT calibration s / 100 samples",
]


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.conversion`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny ViT, one round, exact types only")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["minilm", "dinov2"], choices=["minilm", "dinov2"])
    parser.add_argument("--norm-types", nargs="+", default=["dyt", *EXACT_TYPES], choices=["dyt", *EXACT_TYPES])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--calibration", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.source, args.output, args.calibration)))
        return
    with tempfile.TemporaryDirectory(prefix="hf-norms-conversion-bench-") as work:
        work = Path(work)
        if args.smoke:
            rows = measure("tiny ViT", tiny_vit(work / "tiny-vit"), work, rounds=1, norm_types=EXACT_TYPES)
        else:
            from hf_norms import packaged

            sources = {"minilm": packaged.minilm_path, "dinov2": packaged.dinov2_small_path}
            rows = []
            for name in args.models:
                rows += measure(name, sources[name](), work, args.rounds, tuple(args.norm_types))
    print(markdown_table(HEADER, rows))


if __name__ == "__main__":
    main()
