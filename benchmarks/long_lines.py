"""Peak memory of a heal and of a calibration whose data is one enormous line, against the same on a normal file.

    python -m benchmarks.long_lines                # lines of 0.2 and 2 GB against 1 MB of lines, on the real MiniLM
    python -m benchmarks.long_lines --line-gb 0.5  # a line of 500 MB
    python -m benchmarks.long_lines --smoke        # a tiny BERT and a 20 MB line, to check the benchmark runs

The real MiniLM (`hf_norms.packaged.minilm_path()`) is converted to DyT, calibrated on 64 BBC News articles. The data
files are written in `/tmp` (deleted afterwards): `normal`, 1 MB of BBC News sentences one per line (the base);
`long lines`, 1 MB of lines of 25 such sentences (about 3,000 characters: what examples of full windows cost);
`one line of N GB`, for each `--line-gb`, the same sentences joined by spaces with no line break at all. On each, the
`hf-norms` command runs under `/usr/bin/time -f %M`, which reports its peak resident set size:

- `heal`: `hf-norms heal DYT --data FILE --max-steps 2 --output OUT` (the data streamed, every default kept);
- `calibration`: `hf-norms convert MINILM --norm-type dyt --calibration-data FILE --output OUT`.

The bounded readers (`hf_norms.readers`) cut the line into windows of `TEXT_LIMIT` bytes as it is read, so the peaks
do not grow with the line: the same for 0.2 and 2 GB, and under 1.5x the normal file's (the target). Before them, a
200 MB line took a heal to 8.6 GB.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import markdown_table

TIME = "/usr/bin/time"  # GNU time: `-f %M` prints the peak RSS of the command, in KiB
HEADER = ["command", "data", "data size", "exit status", "seconds", "peak RSS MiB", "vs the normal file"]


def sentences() -> list[str]:
    from hf_norms import packaged

    return [s.strip() + "." for text, _ in packaged.bbc_news() for s in text.split(". ") if len(s.split()) > 3]


def write_data(path: Path, size: int, per_line: int) -> int:
    """`size` bytes (about) of BBC News sentences in random order, `per_line` to a line (0: all on one line); returns
    the bytes written."""
    generator, pool, written = random.Random(0), sentences(), 0
    with open(path, "w", encoding="utf-8") as stream:
        while written < size:
            chosen = generator.choices(pool, k=min(10_000, 1 + size // 1000))
            lines = [" ".join(chosen[i : i + per_line]) for i in range(0, len(chosen), per_line)] if per_line else []
            block = "\n".join(lines) + "\n" if per_line else " ".join(chosen) + " "
            stream.write(block)
            written += len(block.encode("utf-8"))
    return written


def converted(work: Path, smoke: bool) -> tuple[Path, Path]:
    """The source (MiniLM, or for `--smoke` a tiny BERT with its tokenizer) and its DyT conversion."""
    from benchmarks.healing_scale import tiny_bert
    from hf_norms import packaged
    from hf_norms.conversion.convert import convert

    texts = [" ".join(text.split()) for text, _ in packaged.bbc_news()]
    calibration = work / "calibration.txt"
    calibration.write_text("\n".join(texts[:128]) + "\n", encoding="utf-8")
    source = tiny_bert(work / "tiny-bert", packaged.minilm_path()) if smoke else packaged.minilm_path()
    convert(source, "dyt", work / "dyt", calibration_data=calibration, calibration_samples=64, evaluation_samples=64)
    return source, work / "dyt"


def measured(argv: list[str]) -> dict:
    """`hf-norms ARGV` (the console script beside this Python) under `/usr/bin/time`: its exit status, seconds and
    peak RSS in MiB. (A child's own `ru_maxrss` would not do: Linux carries the peak of the process it was forked from,
    this one with MiniLM loaded, over into it.)"""
    script = Path(sys.executable).with_name("hf-norms")
    started = time.perf_counter()
    finished = subprocess.run([TIME, "-f", "%M", str(script), *argv], capture_output=True, text=True, check=False,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    peak_kib = finished.stderr.strip().splitlines()[-1]
    if not peak_kib.isdigit():
        raise RuntimeError(f"hf-norms {' '.join(argv)} died:\n{finished.stderr[-3000:]}")
    return {
        "status": finished.returncode,
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": int(peak_kib) / 1024,
    }


def table(work: Path, line_sizes: list[int], smoke: bool) -> list[list[str]]:
    source, dyt = converted(work, smoke)
    data = Path(tempfile.mkdtemp(prefix="hf-norms-long-line-", dir="/tmp"))
    rows = []
    try:
        files = {"normal": (1 << 20, 1), "long lines": (1 << 20, 25)}
        files |= {f"one line of {size / 1e9:g} GB": (size, 0) for size in line_sizes}
        written = {name: write_data(data / f"{index}.txt", size, per_line)
                   for index, (name, (size, per_line)) in enumerate(files.items())}  # fmt: skip
        commands = {
            "heal": lambda file, out: ["heal", str(dyt), "--data", str(file), "--max-steps", "2", "--output", out],
            "calibration": lambda file, out: ["convert", str(source), "--norm-type", "dyt", "--calibration-data",
                                              str(file), "--output", out],
        }  # fmt: skip
        for command, argv in commands.items():
            base = None
            for index, name in enumerate(files):
                output = work / f"{command}-{index}"
                result = measured(argv(data / f"{index}.txt", str(output)))
                shutil.rmtree(output, ignore_errors=True)
                base = base or result["peak_rss_mib"]
                rows.append([command, name, f"{written[name] / 1e6:,.1f} MB", str(result["status"]),
                             f"{result['seconds']:.0f}", f"{result['peak_rss_mib']:.0f}",
                             f"{result['peak_rss_mib'] / base:.3f}x"])  # fmt: skip
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return rows


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.long_lines`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--line-gb", type=float, nargs="+", default=[0.2, 2.0],
                        help="the sizes of the one line, in GB (default: 0.2 2)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="a tiny BERT and a line of 20 MB")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hf-norms-long-lines-bench-") as work:
        sizes = [int(gigabytes * 1e9) for gigabytes in ([0.02] if args.smoke else args.line_gb)]
        rows = table(Path(work), sizes, args.smoke)
    print(markdown_table(HEADER, rows))
    print(f"{time.perf_counter() - started:.0f} s; load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
          "CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
