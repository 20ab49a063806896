"""Healing at scale: data-parallel processes, a streamed corpus larger than memory should matter, and the GPU.

    python -m benchmarks.healing_scale processes      # MiniLM DyT: 1 vs 2 CPU processes (torchrun, gloo)
    python -m benchmarks.healing_scale memory         # peak RSS of a streamed heal over a 0.25 GB and a 1 GB corpus
    python -m benchmarks.healing_scale gpu            # where there is a GPU: the same heal there, and on 2 if there are
    python -m benchmarks.healing_scale processes memory --smoke   # tiny sizes, to check the benchmark runs

`processes`: the real MiniLM, converted to DyT and calibrated on 64 BBC News articles, healed for `--steps` steps on
the same 200 articles in memory (their 128-token windows) in three runs, each a fresh `python -m
hf_norms.conversion.heal` with one thread per process: 1 process with a batch of 8; 2 processes (`torchrun
--nproc_per_node 2`) with 8 each; 1 process with the global batch of 16. Reported: the examples per second of the
training (the heal report's `examples_per_second`, the training loop without loading), the ratio of the 2-process run
to the 1-process run at the same per-process batch, and the healed cosine of the 2-process run against the 1-process
run with the same global batch and steps.

`memory`: two corpora of BBC News sentences in random order, `--small-gb` and `--large-gb` of text in `/tmp` (deleted
afterwards), each healed for `--steps` steps from the stream (no `--samples`) in a fresh process that reports its peak
resident set size (`ru_maxrss`); the ratio of the two shows the memory does not grow with the corpus.

`gpu`: the `processes` heal with `--device cuda` (bf16 where the GPU supports it), 1 GPU and, when torch sees two,
2 GPUs (`torchrun --nproc_per_node 2`), against the 1-process CPU run.

The machine these numbers come from is shared and busy: the load average over the runs is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import markdown_table

HEAL_MODULE = ["-m", "hf_norms.conversion.heal"]


def converted_minilm(work: Path, smoke: bool) -> tuple[Path, Path]:
    """MiniLM (or, for `--smoke`, a tiny BERT with its tokenizer) converted to DyT, and a file of healing texts."""
    from hf_norms import packaged
    from hf_norms.conversion.convert import convert

    texts = [" ".join(text.split()) for text, _ in packaged.bbc_news()]
    work.mkdir(parents=True, exist_ok=True)
    calibration, healing = work / "calibration.txt", work / "healing.txt"
    calibration.write_text("\n".join(texts[:128]) + "\n", encoding="utf-8")
    healing.write_text("\n".join(texts[200:400]) + "\n", encoding="utf-8")
    source = packaged.minilm_path() if not smoke else tiny_bert(work / "tiny-bert", packaged.minilm_path())
    convert(source, "dyt", work / "dyt", calibration_data=calibration, calibration_samples=64,
            evaluation_samples=16 if smoke else 64)  # fmt: skip
    return work / "dyt", healing


def tiny_bert(folder: Path, tokenizer_source: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64)).save_pretrained(folder)  # fmt: skip
    tokenizer.save_pretrained(folder)
    return folder


def heal_run(folder: Path, data: Path, output: Path, processes: int, options: list[str], device: str = "cpu") -> dict:
    """One heal in fresh processes (`torchrun` for more than one); returns its report's `healing` and healed stage."""
    shutil.rmtree(output, ignore_errors=True)
    launcher = [sys.executable, *HEAL_MODULE] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes), *HEAL_MODULE]  # fmt: skip
    command = [*launcher, str(folder), "--data", str(data), "--output", str(output), "--device", device, *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    finished = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{finished.stderr[-3000:]}")
    report = json.loads((output / "conversion_report.json").read_text())
    return {**report["healing"], "cosine": report["stages"]["healed"]["end_to_end"]["mean_cosine"]}


def processes_table(work: Path, steps: int, smoke: bool, device: str = "cpu", gpus: int = 0) -> list[list[str]]:
    folder, data = converted_minilm(work, smoke)
    options = ["--samples", "200", "--max-steps", str(steps), "--save-steps", str(10 * steps), "--max-length", "128"]
    runs = {"1 process, batch 8": heal_run(folder, data, work / "one", 1, [*options, "--batch-size", "8"]),
            "2 processes, batch 8 each": heal_run(folder, data, work / "two", 2, [*options, "--batch-size", "8"]),
            "1 process, batch 16": heal_run(folder, data, work / "one16", 1, [*options, "--batch-size", "16"])}  # fmt: skip
    if device == "cuda":
        runs["1 GPU, batch 8"] = heal_run(folder, data, work / "gpu", 1, [*options, "--batch-size", "8"], "cuda")
        if gpus >= 2:
            runs["2 GPUs, batch 8 each"] = heal_run(folder, data, work / "gpu2", 2, [*options, "--batch-size", "8"],
                                                   "cuda")  # fmt: skip
    base = runs["1 process, batch 8"]["examples_per_second"]
    same_global = runs["1 process, batch 16"]["cosine"]
    return [
        [name, run["device"], str(run["processes"]), str(run["global_batch_size"]), str(run["steps"]),
         f"{run['examples_per_second']:.2f}", f"{run['examples_per_second'] / base:.2f}x", f"{run['cosine']:.4f}",
         f"{run['cosine'] - same_global:+.4f}" if run["global_batch_size"] == 16 else "", str(run["bf16"])]
        for name, run in runs.items()
    ]  # fmt: skip


PROCESS_HEADER = ["run", "device", "processes", "global batch", "steps", "examples/s", "vs 1 process",
                  "healed cosine", "vs 1 process, batch 16", "bf16"]  # fmt: skip


def write_corpus(path: Path, gigabytes: float) -> int:
    """`gigabytes` of BBC News sentences, one per line, in random order; returns the bytes written."""
    from hf_norms import packaged

    sentences = [s.strip() + "." for text, _ in packaged.bbc_news() for s in text.split(". ") if len(s.split()) > 3]
    generator, target, written = random.Random(0), int(gigabytes * 1e9), 0
    with open(path, "w", encoding="utf-8") as stream:
        while written < target:
            block = "\n".join(generator.choices(sentences, k=10_000)) + "\n"
            stream.write(block)
            written += len(block.encode("utf-8"))
    return written


def child(folder: Path, data: Path, output: Path, steps: int) -> dict:
    """A streamed heal in this process; returns its peak RSS in MiB."""
    from hf_norms.conversion.healing import heal

    report = heal(folder, data, output=output, max_steps=steps, batch_size=8, save_steps=10 * steps, progress=False,
                  device="cpu")  # fmt: skip
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return {"peak_rss_mib": peak_mib, "steps": report["healing"]["steps"], "streamed": report["healing"]["streamed"],
            "examples_per_second": report["healing"]["examples_per_second"]}  # fmt: skip


def memory_table(work: Path, steps: int, sizes: tuple[float, float], smoke: bool) -> list[list[str]]:
    folder, _ = converted_minilm(work, smoke)
    rows, peaks = [], []
    corpus_folder = Path(tempfile.mkdtemp(prefix="hf-norms-corpus-", dir="/tmp"))
    try:
        for gigabytes in sizes:
            corpus = corpus_folder / f"corpus-{gigabytes:g}GB.txt"
            size = write_corpus(corpus, gigabytes)
            output = work / "streamed"
            shutil.rmtree(output, ignore_errors=True)
            command = [sys.executable, "-m", "benchmarks.healing_scale", "--child", str(folder), str(corpus),
                       str(output), str(steps)]  # fmt: skip
            finished = subprocess.run(command, capture_output=True, text=True, check=False)
            corpus.unlink()
            if finished.returncode != 0:
                raise RuntimeError(finished.stderr[-3000:])
            result = json.loads(finished.stdout.strip().splitlines()[-1])
            peaks.append(result["peak_rss_mib"])
            rows.append([f"{size / 1e9:.3f} GB", str(result["steps"]), str(result["streamed"]),
                         f"{result['peak_rss_mib']:.0f}", f"{result['peak_rss_mib'] / peaks[0]:.3f}x"])  # fmt: skip
    finally:
        shutil.rmtree(corpus_folder, ignore_errors=True)
    return rows


MEMORY_HEADER = ["corpus (text)", "steps", "streamed", "peak RSS MiB", "vs the smaller corpus"]


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.healing_scale`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", help="processes, memory, gpu (default: processes memory)")
    parser.add_argument("--steps", type=int, default=None, help="healing steps (default: 40; 20 for memory)")
    parser.add_argument("--small-gb", type=float, default=0.25)
    parser.add_argument("--large-gb", type=float, default=1.0)
    parser.add_argument("--smoke", action="store_true", help="a tiny BERT, 2 steps, corpora of a few MB")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:
        folder, data, output, steps = args.child
        print(json.dumps(child(Path(folder), Path(data), Path(output), int(steps))))
        return
    args.parts = args.parts or ["processes", "memory"]
    if set(args.parts) - {"processes", "memory", "gpu"}:  # (argparse's choices refuse an empty nargs="*" list)
        parser.error(f"parts are processes, memory and gpu, not {' '.join(args.parts)}")
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="hf-norms-healing-bench-") as work:
        work = Path(work)
        started = time.perf_counter()
        if "processes" in args.parts or "gpu" in args.parts:
            import torch

            gpus = torch.cuda.device_count()
            if "gpu" in args.parts and not gpus:
                print("gpu: torch sees no CUDA GPU here; skipped")
            device = "cuda" if "gpu" in args.parts and gpus else "cpu"
            rows = processes_table(work / "processes", 2 if args.smoke else args.steps or 40, args.smoke, device, gpus)
            loads.append(os.getloadavg()[0])
            print(markdown_table(PROCESS_HEADER, rows))
        if "memory" in args.parts:
            sizes = (0.002, 0.008) if args.smoke else (args.small_gb, args.large_gb)
            rows = memory_table(work / "memory", 2 if args.smoke else args.steps or 20, sizes, args.smoke)
            loads.append(os.getloadavg()[0])
            print(markdown_table(MEMORY_HEADER, rows))
    print(f"{time.perf_counter() - started:.0f} s; load average (1 min) {', '.join(f'{x:.1f}' for x in loads)} on "
          f"{os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
