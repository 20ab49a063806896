"""Does the obvious call learn? The real all-MiniLM-L6-v2, loaded into each norm_type, fine-tuned with the plain
transformers `Trainer` on 400 BBC News articles for 2 epochs, evaluated on the 445 held-out articles (chance is about
20 %).

Each model is what a user gets from the obvious call: `BertNormForSequenceClassification.from_pretrained(minilm,
norm_type=T, num_labels=5)` with default options (which keep a LayerNorm checkpoint's function for DTN, SepNorm and
LaPE), and for DyT and Derf, which cannot keep it, `hf_norms.convert_model` of the LayerNorm model calibrated on 64 of the
training articles (16 more held out to measure it). Training: `Trainer` with its default optimiser and learning rate
(AdamW, 5e-5, linear decay), batch 16, 128 tokens, seed 0; no hf-norms Trainer subclass.

    python -m benchmarks.finetune_from_stock                       # every norm_type (about 10 min on 2 quiet cores)
    python -m benchmarks.finetune_from_stock --norm-types layernorm dyt
    python -m benchmarks.finetune_from_stock --norm-types layernorm path/to/healed-minilm-derf   # a converted folder
    python -m benchmarks.finetune_from_stock --smoke               # a few examples, to check it runs
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments

import hf_norms
from benchmarks.timing import markdown_table
from hf_norms import packaged
from hf_norms.models.norms import function_preserving_options
from hf_norms.training.data import packaged_dataset

TRAIN_ARTICLES, CALIBRATION_ARTICLES, CALIBRATION_HELD_OUT = 400, 64, 16
HEADER = ["norm_type", "start", "accuracy", "points below layernorm", "train s"]


def starting_model(norm_type: str, tokenizer, train_texts: list[str]) -> tuple[torch.nn.Module, str]:
    """The model a user starts from, and how it was made (for the table). `norm_type` may also be a checkpoint folder
    (e.g. a converted and healed one), loaded as it is."""
    if Path(norm_type).is_dir():
        model = hf_norms.BertNormForSequenceClassification.from_pretrained(norm_type, num_labels=5)
        return model, f"from_pretrained({Path(norm_type).name})"
    minilm = str(packaged.minilm_path())
    if function_preserving_options(norm_type) is not None:
        model = hf_norms.BertNormForSequenceClassification.from_pretrained(minilm, norm_type=norm_type, num_labels=5)
        return model, "from_pretrained, default options"
    layernorm = hf_norms.BertNormForSequenceClassification.from_pretrained(minilm, num_labels=5)
    texts = train_texts[: CALIBRATION_ARTICLES + CALIBRATION_HELD_OUT]
    samples = max(1, min(CALIBRATION_ARTICLES, len(texts) - CALIBRATION_HELD_OUT))
    model = hf_norms.convert_model(layernorm, norm_type, texts, processor=tokenizer, calibration_samples=samples)
    cosine = model.conversion_report["stages"]["calibrated"]["end_to_end"]["mean_cosine"]
    return model, f"convert_model, calibrated on {samples} articles (cosine {cosine:.3f})"


def fine_tune(model: torch.nn.Module, tokenizer, train, test, epochs: float) -> tuple[float, float]:
    """(accuracy on `test`, training seconds) after the plain `Trainer` on `train`."""
    encode = lambda rows: tokenizer(rows["text"], truncation=True, max_length=128)  # noqa: E731
    train, test = train.map(encode, batched=True), test.map(encode, batched=True)
    with tempfile.TemporaryDirectory(prefix="hf-norms-stock-") as output:
        args = TrainingArguments(
            output_dir=output,
            use_cpu=True,
            num_train_epochs=epochs,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=64,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=0,
            data_seed=0,
        )
        trainer = Trainer(model, args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer))
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        predictions = trainer.predict(test.remove_columns("label"))
    accuracy = float((np.argmax(predictions.predictions, axis=-1) == np.array(test["label"])).mean())
    return accuracy, seconds


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.finetune_from_stock`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--norm-types", nargs="+", default=sorted(hf_norms.NORM_TYPES),
        help=f"any of {sorted(hf_norms.NORM_TYPES)}, or converted checkpoint folders to fine-tune as they are",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", help="also write the results as JSON to this file")
    parser.add_argument("--smoke", action="store_true", help="16 training and 16 test articles, a fraction of an epoch")
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    splits = packaged_dataset("bbc-news")
    train_size, test_size = (16, 16) if args.smoke else (TRAIN_ARTICLES, len(splits["test"]))
    train, test = splits["train"].select(range(train_size)), splits["test"].select(range(test_size))
    tokenizer = AutoTokenizer.from_pretrained(packaged.minilm_path())
    norm_types = sorted(args.norm_types, key=lambda name: name != "layernorm")  # the baseline first
    results = []
    for norm_type in norm_types:
        torch.manual_seed(0)
        model, start = starting_model(norm_type, tokenizer, train["text"])
        accuracy, seconds = fine_tune(model, tokenizer, train, test, 0.25 if args.smoke else 2)
        results.append({"norm_type": norm_type, "start": start, "accuracy": accuracy, "train_seconds": seconds})
        print(json.dumps(results[-1]), flush=True)
    baseline = next((r["accuracy"] for r in results if r["norm_type"] == "layernorm"), None)
    rows = [
        [r["norm_type"], r["start"], f"{r['accuracy']:.3f}",
         "-" if baseline is None else f"{100 * (baseline - r['accuracy']):+.1f}", f"{r['train_seconds']:.0f}"]
        for r in results
    ]  # fmt: skip
    print(markdown_table(HEADER, rows))
    if args.output:
        with open(args.output, "w") as stream:
            json.dump(results, stream, indent=1)
    return results


if __name__ == "__main__":
    main()
