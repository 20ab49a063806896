"""Does the obvious call learn? The real all-MiniLM-L6-v2, loaded into each norm_type (or a converted checkpoint
folder, loaded as a user loads it), fine-tuned with the plain transformers `Trainer` on 400 BBC News articles,
evaluated on the 445 held-out articles (chance is about 20 %), per protocol and seed, LayerNorm beside it in the run.

Each model is what a user gets from the obvious call: `AutoModelForSequenceClassification.from_pretrained(folder,
num_labels=5)` for a checkpoint folder (a stock [CLS] pooler head, the checkpoint's own config: its dropout included);
`BertNormForSequenceClassification.from_pretrained(minilm, norm_type=T, num_labels=5)` with default options (which keep
a LayerNorm checkpoint's function for DTN, SepNorm and LaPE); and for DyT and Derf named by norm_type, which cannot keep
it, `hf_norms.convert_model` of the LayerNorm model calibrated on 64 of the training articles (16 more held out to
measure it). Training: `Trainer` with its default optimiser (AdamW, linear decay), batch 16, 128 tokens; no hf-norms
Trainer subclass. Protocols (`PROTOCOLS`): `short`, the issue's (2 epochs, lr 5e-5), and `converged` (2 epochs, lr 2e-4,
where LayerNorm's accuracy stops rising). Per seed, the head's initialisation (`torch.manual_seed` before loading) and
the data order (`TrainingArguments.seed`) are the same for every model.

    python -m benchmarks.finetune_from_stock                       # every norm_type, short protocol, seed 0
    python -m benchmarks.finetune_from_stock --norm-types layernorm FOLDER_DYT FOLDER_DERF \\
        --protocols short converged --seeds 0 1 2 --output results.json        # the README table (3 seeds each)
    python -m benchmarks.finetune_from_stock --summarize results-a.json results-b.json   # one table from saved runs
    python -m benchmarks.finetune_from_stock --smoke               # a few examples, to check it runs

Prints one JSON line per fine-tune as it ends and a Markdown table per protocol: mean accuracy, standard deviation
and range over seeds, and the gap to LayerNorm's mean in points.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

import hf_norms
from benchmarks.timing import markdown_table
from hf_norms import packaged
from hf_norms.models.norms import function_preserving_options
from hf_norms.training.data import packaged_dataset

TRAIN_ARTICLES, CALIBRATION_ARTICLES, CALIBRATION_HELD_OUT = 400, 64, 16
PROTOCOLS = {
    "short": {"num_train_epochs": 2, "learning_rate": 5e-5},
    "converged": {"num_train_epochs": 2, "learning_rate": 2e-4},
}
HEADER = ["start", "how it was made", "seeds", "mean accuracy", "std", "range", "points below layernorm", "train s"]


def starting_model(norm_type: str, tokenizer, train_texts: list[str], overrides: dict) -> tuple[torch.nn.Module, str]:
    """The model a user starts from, and how it was made (for the table). `norm_type` may also be a checkpoint folder
    (e.g. a converted and healed one), loaded as it is; `overrides` are config fields set on loading (diagnostics)."""
    if Path(norm_type).is_dir():
        model = AutoModelForSequenceClassification.from_pretrained(norm_type, num_labels=5, **overrides)
        return model, f"AutoModelForSequenceClassification({Path(norm_type).name})"
    minilm = str(packaged.minilm_path())
    if function_preserving_options(norm_type) is not None:
        model = hf_norms.BertNormForSequenceClassification.from_pretrained(
            minilm, norm_type=norm_type, num_labels=5, **overrides
        )
        return model, "from_pretrained, default options"
    layernorm = hf_norms.BertNormForSequenceClassification.from_pretrained(minilm, num_labels=5, **overrides)
    texts = train_texts[: CALIBRATION_ARTICLES + CALIBRATION_HELD_OUT]
    samples = max(1, min(CALIBRATION_ARTICLES, len(texts) - CALIBRATION_HELD_OUT))
    model = hf_norms.convert_model(layernorm, norm_type, texts, processor=tokenizer, calibration_samples=samples)
    cosine = model.conversion_report["stages"]["calibrated"]["end_to_end"]["mean_cosine"]
    return model, f"convert_model, calibrated on {samples} articles (cosine {cosine:.3f})"


def fine_tune(
    model: torch.nn.Module, tokenizer, train, test, protocol: dict, seed: int, smoke: bool
) -> tuple[float, float]:
    """(accuracy on `test`, training seconds) after the plain `Trainer` on `train` under `protocol`."""
    encode = lambda rows: tokenizer(rows["text"], truncation=True, max_length=128)  # noqa: E731
    train, test = train.map(encode, batched=True), test.map(encode, batched=True)
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
        trainer = Trainer(model, args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer))
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        predictions = trainer.predict(test.remove_columns("label"))
    accuracy = float((np.argmax(predictions.predictions, axis=-1) == np.array(test["label"])).mean())
    return accuracy, seconds


def summary_tables(results: list[dict]) -> str:
    """One Markdown table per protocol: per start, the mean, standard deviation and range of the accuracy over seeds,
    and the gap to LayerNorm's mean (seeds LayerNorm was not run with are left out of its mean)."""
    tables = []
    for protocol in dict.fromkeys(r["protocol"] for r in results):
        runs = [r for r in results if r["protocol"] == protocol]
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
        tables.append(f"Protocol `{protocol}` ({settings}):\n\n{markdown_table(HEADER, rows)}")
    return "\n\n".join(tables)


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


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--norm-types", nargs="+", default=sorted(hf_norms.NORM_TYPES),
        help=f"any of {sorted(hf_norms.NORM_TYPES)}, or converted checkpoint folders to fine-tune as they are",
    )  # fmt: skip
    parser.add_argument("--protocols", nargs="+", default=["short"], choices=sorted(PROTOCOLS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--override", nargs="*", default=[], help="config fields KEY=VALUE set on every model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", help="also write the results as JSON to this file (after every fine-tune)")
    parser.add_argument("--summarize", nargs="+", help="print the tables of these saved result files, run nothing")
    parser.add_argument("--smoke", action="store_true", help="16 training and 16 test articles, a fraction of an epoch")
    args = parser.parse_args(argv)
    if args.summarize:
        results = [run for path in args.summarize for run in json.loads(Path(path).read_text())]
        print(summary_tables(results))
        return results

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    splits = packaged_dataset("bbc-news")
    train_size, test_size = (16, 16) if args.smoke else (TRAIN_ARTICLES, len(splits["test"]))
    train, test = splits["train"].select(range(train_size)), splits["test"].select(range(test_size))
    tokenizer = AutoTokenizer.from_pretrained(packaged.minilm_path())
    overrides = parse_overrides(args.override)
    norm_types = sorted(args.norm_types, key=lambda name: name != "layernorm")  # the baseline first
    results = []
    for protocol in args.protocols:
        for seed in args.seeds:
            for norm_type in norm_types:
                torch.manual_seed(seed)
                model, start = starting_model(norm_type, tokenizer, train["text"], overrides)
                accuracy, seconds = fine_tune(model, tokenizer, train, test, PROTOCOLS[protocol], seed, args.smoke)
                results.append({"norm_type": norm_type, "start": start, "protocol": protocol, "seed": seed,
                                "overrides": overrides, "accuracy": accuracy, "train_seconds": seconds})  # fmt: skip
                print(json.dumps(results[-1]), flush=True)
                if args.output:
                    Path(args.output).write_text(json.dumps(results, indent=1))
    print(summary_tables(results))
    return results


if __name__ == "__main__":
    main()
