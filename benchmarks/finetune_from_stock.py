"""Does the obvious call learn? A real LayerNorm model, loaded into each norm_type (or a converted checkpoint folder,
loaded as a user loads it), fine-tuned with the plain transformers `Trainer`, per protocol and seed, LayerNorm beside it
in the same run.

- `--task minilm` (default): all-MiniLM-L6-v2 with a new sequence-classification head ([CLS] pooler, the config's
  dropout) on 400 BBC News articles (128 tokens), evaluated on the 445 held-out articles (chance about 20 %).
- `--task dinov2-small`: DINOv2-S (the real `Dinov2Model`) with a new linear head (`Dinov2ForImageClassification`:
  [CLS] and the mean patch token) on the first 1000 Fashion-MNIST training images at 112 px (the source's processor,
  resized; 8x8 patches), evaluated on the first 1000 test images (chance 10 %).

Each model is what a user gets from the obvious call: `AutoModelFor...Classification.from_pretrained(folder,
num_labels=...)` for a checkpoint folder (a stock head, the checkpoint's own config: its dropout included);
`...NormFor...Classification.from_pretrained(source, norm_type=T, num_labels=...)` with default options (which keep a
LayerNorm checkpoint's function for DTN, SepNorm and LaPE); and for DyT and Derf named by norm_type, which cannot keep
it, `hf_norms.convert_model` of the LayerNorm model calibrated on 64 training examples (16 more held out to measure
it) and healed with its default budget on those 64. Training: `Trainer` with its default optimiser (AdamW, linear decay), batch 16; no hf-norms Trainer subclass.
Protocols (`PROTOCOLS`): `short`, issue 20's (2 epochs, lr 5e-5), and `converged` (2 epochs, lr 2e-4, where
LayerNorm's accuracy stops rising). Per seed, the head's initialisation (`torch.manual_seed` before loading) and the
data order (`TrainingArguments.seed`) are the same for every model.

    python -m benchmarks.finetune_from_stock                       # MiniLM in every norm_type, short protocol, seed 0
    python -m benchmarks.finetune_from_stock --norm-types layernorm FOLDER_DYT FOLDER_DERF \\
        --protocols short converged --seeds 0 1 2 --output results.json        # the README table (3 seeds each)
    python -m benchmarks.finetune_from_stock --task dinov2-small --norm-types layernorm FOLDER_DYT FOLDER_DERF
    python -m benchmarks.finetune_from_stock --summarize results-a.json results-b.json   # one table from saved runs
    python -m benchmarks.finetune_from_stock --smoke               # a few examples, to check it runs
    python -m benchmarks.finetune_from_stock --norm-types layernorm --cli-heal-steps 300 --seeds 0 1 2

`--cli-heal-steps N ...` adds the checkpoints a new user gets from the command line with every default but the heal
budget (MiniLM only): `hf-norms convert --heal-steps N` of all-MiniLM-L6-v2 to `--cli-norm-type` with 1256 training
articles as calibration data (calibrated on the first 256, measured on the next 64, healed on the other 936), drawn
from the training split by `--cli-data-seed` (no recipe draws them so; the test articles are never read), built once
under `--work` and fine-tuned as they are written (their own config).

Prints one JSON line per fine-tune as it ends and a Markdown table per protocol: mean accuracy, standard deviation
and range over seeds, and the gap to LayerNorm's mean in points.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import (
    AutoImageProcessor,
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

import hf_norms
from benchmarks.timing import markdown_table
from hf_norms import packaged
from hf_norms.conversion.report import REPORT_JSON, record_fine_tuning
from hf_norms.norms.build import function_preserving_options
from hf_norms.training.data import packaged_dataset

CALIBRATION_EXAMPLES, CALIBRATION_HELD_OUT = 64, 16
PROTOCOLS = {
    "short": {"num_train_epochs": 2, "learning_rate": 5e-5},
    "converged": {"num_train_epochs": 2, "learning_rate": 2e-4},
}
IMAGE_SIZE = 112  # DINOv2 fine-tunes on Fashion-MNIST at 112 px (8x8 patches of 14): a quarter of 224 px's cost
HEADER = ["start", "how it was made", "seeds", "mean accuracy", "std", "range", "points below layernorm", "train s"]


@dataclass
class Task:
    """A LayerNorm source, its head class, and its encoded train and test examples (each a dict of model inputs with
    `labels`), with the raw training inputs a calibration reads."""

    source: Path
    auto_class: type
    norm_class: type
    num_labels: int
    processor: Any
    collator: Callable
    train: list[dict]
    test: list[dict]
    raw_train: list
    description: str  # how a checkpoint is fine-tuned and scored, for the reports (`--record`)


def text_task(smoke: bool) -> Task:
    """MiniLM on BBC News: the first 400 training articles (16 in smoke mode), every held-out article (16)."""
    splits = packaged_dataset("bbc-news")
    tokenizer = AutoTokenizer.from_pretrained(packaged.minilm_path())
    sizes = (16, 16) if smoke else (400, len(splits["test"]))

    def encode(part, count: int) -> list[dict]:
        rows = part.select(range(count))
        texts, labels = list(rows["text"]), list(rows["label"])
        encoded = tokenizer(texts, truncation=True, max_length=128)
        return [{**{k: v[i] for k, v in encoded.items()}, "labels": labels[i]} for i in range(count)]

    return Task(packaged.minilm_path(), AutoModelForSequenceClassification, hf_norms.BertNormForSequenceClassification,
                5, tokenizer, DataCollatorWithPadding(tokenizer), encode(splits["train"], sizes[0]),
                encode(splits["test"], sizes[1]), list(splits["train"]["text"][: CALIBRATION_EXAMPLES + CALIBRATION_HELD_OUT]),
                f"a new `AutoModelForSequenceClassification` head (the [CLS] pooler, the checkpoint's own config and "
                f"dropout), the plain transformers `Trainer` (AdamW, batch 16, linear decay) on {sizes[0]} BBC News "
                f"training articles (128 tokens), accuracy on {sizes[1]} held-out articles; the source "
                "all-MiniLM-L6-v2 the same way, with the same head initialisation and data order per seed")  # fmt: skip


def image_task(smoke: bool) -> Task:
    """DINOv2-S on Fashion-MNIST at `IMAGE_SIZE` px: the first 1000 training and 1000 test images (16 each in smoke)."""
    from PIL import Image

    source = packaged.dinov2_small_path()
    processor = AutoImageProcessor.from_pretrained(
        source, size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    count = 16 if smoke else 1000

    def encode(split: str) -> tuple[list[dict], list]:
        images, labels = packaged.fashion_mnist(split, limit=count)
        rgb = [Image.fromarray(image).convert("RGB") for image in images]
        pixels = processor(images=rgb, return_tensors="pt")["pixel_values"]
        return [{"pixel_values": pixels[i], "labels": int(labels[i])} for i in range(count)], rgb

    (train, raw), (test, _) = encode("train"), encode("test")
    return Task(source, AutoModelForImageClassification, hf_norms.Dinov2NormForImageClassification, 10, processor,
                default_data_collator, train, test, raw[: CALIBRATION_EXAMPLES + CALIBRATION_HELD_OUT],
                f"a new linear head (`AutoModelForImageClassification`: [CLS] and mean patch token), the plain "
                f"transformers `Trainer` (AdamW, batch 16, linear decay) on the first {count} Fashion-MNIST training "
                f"images at {IMAGE_SIZE} px, accuracy on the first {count} test images; the source DINOv2-S the same "
                "way, with the same head initialisation and data order per seed")  # fmt: skip


TASKS = {"minilm": text_task, "dinov2-small": image_task}


def starting_model(norm_type: str, task: Task, overrides: dict) -> tuple[torch.nn.Module, str]:
    """The model a user starts from, and how it was made (for the table). `norm_type` may also be a checkpoint folder
    (e.g. a converted and healed one), loaded as it is; `overrides` are config fields set on loading (diagnostics)."""
    labels = {"num_labels": task.num_labels, **overrides}
    if Path(norm_type).is_dir():
        model = task.auto_class.from_pretrained(norm_type, **labels)
        return model, f"{task.auto_class.__name__}({Path(norm_type).name})"
    if function_preserving_options(norm_type) is not None:
        model = task.norm_class.from_pretrained(task.source, norm_type=norm_type, **labels)
        return model, "from_pretrained, default options"
    layernorm = task.norm_class.from_pretrained(task.source, **labels)
    samples = max(1, min(CALIBRATION_EXAMPLES, len(task.raw_train) - CALIBRATION_HELD_OUT))
    model = hf_norms.convert_model(layernorm, norm_type, task.raw_train, processor=task.processor,
                                   calibration_samples=samples)  # fmt: skip
    report = model.conversion_report
    stage = "healed" if report.get("healing") else "calibrated"
    cosine = report["stages"][stage]["end_to_end"]["mean_cosine"]
    heal = f", healed {report['healing']['steps']} steps by default" if report.get("healing") else ""
    return model, f"convert_model, calibrated on {samples} examples{heal} (cosine {cosine:.3f})"


def fine_tune(model: torch.nn.Module, task: Task, protocol: dict, seed: int, smoke: bool) -> tuple[float, float]:
    """(accuracy on the task's test examples, training seconds) after the plain `Trainer` under `protocol`."""
    with tempfile.TemporaryDirectory(prefix="hf-norms-stock-") as output:
        args = TrainingArguments(
            output_dir=output,
            use_cpu=True,
            num_train_epochs=0.25 if smoke else protocol["num_train_epochs"],
            learning_rate=protocol["learning_rate"],
            per_device_train_batch_size=16,
            per_device_eval_batch_size=64,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=seed,
            data_seed=seed,
        )
        trainer = Trainer(model, args, train_dataset=task.train, data_collator=task.collator)
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        predictions = trainer.predict(task.test)
    labels = np.array([example["labels"] for example in task.test])
    return float((np.argmax(predictions.predictions, axis=-1) == labels).mean()), seconds


def summary_tables(results: list[dict]) -> str:
    """One Markdown table per task and protocol: per start, the mean, standard deviation and range of the accuracy
    over seeds, and the gap to LayerNorm's mean."""
    tables = []
    for task, protocol in dict.fromkeys((r.get("task", "minilm"), r["protocol"]) for r in results):
        runs = [r for r in results if (r.get("task", "minilm"), r["protocol"]) == (task, protocol)]
        starts = sorted(dict.fromkeys(r["norm_type"] for r in runs), key=lambda name: name != "layernorm")
        means = {s: statistics.mean(r["accuracy"] for r in runs if r["norm_type"] == s) for s in starts}
        rows = []
        for start in starts:
            own = [r for r in runs if r["norm_type"] == start]
            accuracies = [r["accuracy"] for r in own]
            std = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
            gap = "-" if "layernorm" not in means else f"{100 * (means['layernorm'] - means[start]):+.1f}"
            rows.append([
                Path(start).name, own[0]["start"], " ".join(str(r["seed"]) for r in own), f"{means[start]:.3f}",
                f"{std:.3f}", f"{min(accuracies):.3f}-{max(accuracies):.3f}", gap,
                f"{statistics.mean(r['train_seconds'] for r in own):.0f}",
            ])  # fmt: skip
        settings = ", ".join(f"{k} {v:g}" for k, v in PROTOCOLS.get(protocol, {}).items())
        tables.append(f"{task}, protocol `{protocol}` ({settings}):\n\n{markdown_table(HEADER, rows)}")
    return "\n\n".join(tables)


def record_into_folders(results: list[dict], description: str, command: str) -> list[str]:
    """Write, into the conversion report of every checkpoint folder that was fine-tuned, its accuracy beside
    LayerNorm's per protocol (the seeds both ran; `report.record_fine_tuning`); returns the folders written."""
    written = []
    for folder in dict.fromkeys(r["norm_type"] for r in results if Path(r["norm_type"]).is_dir()):
        if not (Path(folder) / REPORT_JSON).is_file():
            continue
        protocols = []
        for name in dict.fromkeys(r["protocol"] for r in results):
            ours = {r["seed"]: r["accuracy"] for r in results if (r["norm_type"], r["protocol"]) == (folder, name)}
            source = {
                r["seed"]: r["accuracy"] for r in results if (r["norm_type"], r["protocol"]) == ("layernorm", name)
            }
            seeds = sorted(set(ours) & set(source))
            if seeds:
                protocols.append({"name": name, "epochs": PROTOCOLS[name]["num_train_epochs"],
                                  "learning_rate": PROTOCOLS[name]["learning_rate"], "seeds": seeds,
                                  "accuracy": [ours[s] for s in seeds], "source_accuracy": [source[s] for s in seeds]})  # fmt: skip
        if protocols:
            weights = hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()
            record_fine_tuning(folder, {"description": description, "command": command, "weights_sha256": weights,
                                        "protocols": protocols})  # fmt: skip
            written.append(folder)
    return written


def cli_checkpoint(norm_type: str, heal_steps: int, data_seed: int, work: Path) -> str:
    """The folder `hf-norms convert --heal-steps N` writes with every other option at its default (see the module
    docstring), built under `work` unless it is there; returns its path."""
    folder = work / f"cli-{norm_type}-seed{data_seed}-{heal_steps}steps"
    if (folder / REPORT_JSON).is_file() and (json.loads((folder / REPORT_JSON).read_text()).get("healing")):
        return str(folder)
    texts = [" ".join(text.split()) for text in packaged_dataset("bbc-news")["train"]["text"]]
    random.Random(data_seed).shuffle(texts)
    work.mkdir(parents=True, exist_ok=True)
    calibration = work / f"calibration-seed{data_seed}.txt"
    calibration.write_text("\n".join(texts[:1256]) + "\n")
    command = str(Path(sys.executable).with_name("hf-norms"))
    subprocess.run([command, "convert", str(packaged.minilm_path()), "--norm-type", norm_type, "--calibration-data",
                    str(calibration), "--heal-steps", str(heal_steps), "--output", str(folder), "--overwrite"],
                   check=True)  # fmt: skip
    return str(folder)


def parse_overrides(items: list[str]) -> dict:
    """`KEY=VALUE` config fields (numbers parsed) to set when loading every model."""
    overrides = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            overrides[key] = float(value) if "." in value or "e" in value else int(value)
        except ValueError:
            overrides[key] = value
    return overrides


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.finetune_from_stock`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--norm-types", nargs="*", default=sorted(hf_norms.NORM_TYPES),
        help=f"any of {sorted(hf_norms.NORM_TYPES)}, or converted checkpoint folders to fine-tune as they are",
    )  # fmt: skip
    parser.add_argument("--task", default="minilm", choices=sorted(TASKS))
    parser.add_argument("--protocols", nargs="+", default=["short"], choices=sorted(PROTOCOLS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--override", nargs="*", default=[], help="config fields KEY=VALUE set on every model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", help="also write the results as JSON to this file (after every fine-tune)")
    parser.add_argument("--summarize", nargs="+", help="print the tables of these saved result files, run nothing")
    parser.add_argument("--record", action="store_true",
                        help="write each checkpoint folder's accuracy beside LayerNorm's into its conversion report")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="16 training and 16 test examples, a quarter of an epoch")
    parser.add_argument("--cli-heal-steps", nargs="*", type=int, default=[],
                        help="also fine-tune what hf-norms convert writes with defaults, healed this many steps")  # fmt: skip
    statistics_free = [name for name, spec in hf_norms.NORM_TYPES.items() if spec.statistics_free]
    parser.add_argument("--cli-norm-type", default=statistics_free[0], choices=statistics_free,
                        help="the norm_type of those checkpoints")  # fmt: skip
    parser.add_argument("--cli-data-seed", type=int, default=7, help="draws their calibration and healing articles")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "hf-norms-cli-path",
                        help="where those checkpoints are built (kept, reused)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    command = "python -m benchmarks.finetune_from_stock " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.summarize:
        results = [run for path in args.summarize for run in json.loads(Path(path).read_text())]
        print(summary_tables(results))
        if args.record:
            print("recorded into", record_into_folders(results, results[0]["description"], command))
        return results

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    task = TASKS[args.task](args.smoke)
    overrides = parse_overrides(args.override)
    built = [cli_checkpoint(args.cli_norm_type, steps, args.cli_data_seed, args.work)
             for steps in args.cli_heal_steps]  # fmt: skip
    norm_types = sorted([*args.norm_types, *built], key=lambda name: name != "layernorm")  # the baseline first
    results = []
    for protocol in args.protocols:
        for seed in args.seeds:
            for norm_type in norm_types:
                torch.manual_seed(seed)
                model, start = starting_model(norm_type, task, overrides)
                accuracy, seconds = fine_tune(model, task, PROTOCOLS[protocol], seed, args.smoke)
                results.append({"task": args.task, "norm_type": norm_type, "start": start, "protocol": protocol,
                                "seed": seed, "overrides": overrides, "accuracy": accuracy,
                                "train_seconds": seconds, "description": task.description})  # fmt: skip
                print(json.dumps(results[-1]), flush=True)
                if args.output:
                    Path(args.output).write_text(json.dumps(results, indent=1))
    print(summary_tables(results))
    if args.record:
        print("recorded into", record_into_folders(results, task.description, command))
    return results


if __name__ == "__main__":
    main()
