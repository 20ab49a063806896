"""Short CPU fine-tunes of every norm_type on real data: does each one learn, and how fast?

- ViT and DeiT from scratch on Fashion-MNIST (28x28 grayscale, patch 7: a 4x4 grid; hidden 64, 4 layers, 4 heads),
  evaluated on the first 2000 test images; chance is 10 %.
- BERT: the real all-MiniLM-L6-v2, converted to each norm_type as it loads (`from_pretrained(..., norm_type=...)` with
  the default options, a new classification head), fine-tuned on the BBC News train split and evaluated on its 445
  held-out articles; chance is about 20 %. With `--converted`, BERT starts instead from `hf_norms.convert.convert` of
  MiniLM: exact for DTN (gates at 1), SepNorm (LayerNorm prefix norm) and LaPE (input PE kept), DyT calibrated on 64
  training articles, so fine-tuning starts from (close to) MiniLM's function.

Every run goes through `hf_norms.finetune.finetune`, i.e. the same path as `hf-norms finetune`, with fixed seeds.

    python -m benchmarks.finetune_norm_types                      # the docs/fine-tuning.md tables (about 20 min on 2 busy cores)
    python -m benchmarks.finetune_norm_types --families vit       # one family
    python -m benchmarks.finetune_norm_types --families bert --norm-types dyt dtn sepnorm lape --converted
    python -m benchmarks.finetune_norm_types --smoke              # a few steps on tiny data, to check it runs
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass

import torch
import transformers
from transformers import TrainingArguments

import hf_norms
from benchmarks.timing import markdown_table
from hf_norms import packaged
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune
from hf_norms.training.trainer import NORM_STATE_PREFIX

VISION_CONFIG = (
    "image_size=28,patch_size=7,num_channels=1,hidden_size=64,num_hidden_layers=4,num_attention_heads=4,"
    "intermediate_size=128"
)
CALIBRATION_ARTICLES, CONVERSION_EVAL_ARTICLES = 64, 32  # from the start of the BBC News train split
HEADER = ["family", "norm_type", "accuracy", "macro F1", "steps", "train s", "s / step", "learned norm state (mean)"]


@dataclass(frozen=True)
class Recipe:
    """One family's fine-tune: model source, data, and optimisation."""

    family: str
    steps: int
    batch_size: int
    learning_rate: float
    max_train_samples: int | None
    max_eval_samples: int | None
    converted: bool = False

    def model_args(self, norm_type: str, converted_dir: str | None) -> ModelArguments:
        if converted_dir is not None:
            return ModelArguments(model_name_or_path=converted_dir)
        if self.family == "bert":
            return ModelArguments(model_name_or_path=str(packaged.minilm_path()), norm_type=norm_type)
        return ModelArguments(model_type=f"{self.family}_norm", norm_type=norm_type, config_overrides=VISION_CONFIG)

    def data_args(self) -> DataArguments:
        dataset = "packaged:bbc-news" if self.family == "bert" else "packaged:fashion-mnist"
        return DataArguments(
            dataset=dataset,
            max_train_samples=self.max_train_samples,
            max_eval_samples=self.max_eval_samples,
            max_seq_length=128,
        )

    def training_args(self, output_dir: str) -> TrainingArguments:
        return TrainingArguments(
            output_dir=output_dir,
            use_cpu=True,
            max_steps=self.steps,
            per_device_train_batch_size=self.batch_size,
            per_device_eval_batch_size=64,
            learning_rate=self.learning_rate,
            warmup_steps=max(1, self.steps // 10),
            weight_decay=0.05,
            logging_steps=max(1, self.steps // 4),
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
            data_seed=0,
        )


def recipes(smoke: bool, converted: bool = False) -> dict[str, Recipe]:
    if smoke:
        return {family: Recipe(family, 2, 8, 1e-3, 32, 16, converted) for family in ("vit", "deit", "bert")}
    vision = dict(steps=600, batch_size=64, learning_rate=3e-3, max_train_samples=10_000, max_eval_samples=2000)
    return {
        "vit": Recipe("vit", **vision),
        "deit": Recipe("deit", **vision),
        "bert": Recipe("bert", 60, 16, 1e-4, max_train_samples=None, max_eval_samples=None, converted=converted),
    }


def summarise_norm_state(log_entry: dict[str, float]) -> str:
    """Mean of each logged quantity over the model's norms, e.g. `alpha 0.61`, `mean_gate 0.47, var_gate 0.52`."""
    values: dict[str, list[float]] = {}
    for key, value in log_entry.items():
        if key.startswith(NORM_STATE_PREFIX):
            values.setdefault(key.rsplit(".", 1)[1], []).append(value)
    return ", ".join(f"{name} {sum(found) / len(found):.3f}" for name, found in sorted(values.items())) or "-"


def convert_minilm(norm_type: str, folder: str) -> str:
    """`hf_norms.convert.convert` of MiniLM to `norm_type` in `folder`; returns how it went, for the table."""
    from hf_norms.conversion.convert import convert
    from hf_norms.training.data import packaged_dataset

    texts = packaged_dataset("bbc-news")["train"]["text"][: CALIBRATION_ARTICLES + CONVERSION_EVAL_ARTICLES]
    started = time.perf_counter()
    report = convert(
        str(packaged.minilm_path()),
        norm_type,
        folder,
        calibration_data=texts,
        calibration_samples=CALIBRATION_ARTICLES,
        evaluation_samples=CONVERSION_EVAL_ARTICLES,
    )
    if report["exact"]:
        return "converted exactly"
    cosine = list(report["stages"].values())[-1]["end_to_end"]["mean_cosine"]
    return f"converted, calibrated in {time.perf_counter() - started:.0f} s, cosine to MiniLM {cosine:.3f}"


def run(recipe: Recipe, norm_type: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="hf-norms-finetune-") as work:
        label = norm_type
        converted_dir = None
        if recipe.converted and recipe.family == "bert" and norm_type != "layernorm":
            converted_dir = f"{work}/converted"
            label = f"{norm_type} ({convert_minilm(norm_type, converted_dir)})"
        started = time.perf_counter()
        result = finetune(
            recipe.model_args(norm_type, converted_dir), recipe.data_args(), recipe.training_args(f"{work}/run")
        )
        wall = time.perf_counter() - started
    train_logs = [entry for entry in result.trainer.state.log_history if "loss" in entry]
    return {
        "family": recipe.family,
        "norm_type": label,
        "accuracy": result.eval_metrics["eval_accuracy"],
        "f1": result.eval_metrics["eval_f1"],
        "steps": recipe.steps,
        "train_seconds": result.train_metrics["train_runtime"],
        "wall_seconds": wall,
        "losses": [entry["loss"] for entry in train_logs],
        "norm_state": summarise_norm_state(train_logs[-1]) if train_logs else "-",
    }


def table(results: list[dict]) -> str:
    rows = [
        [
            result["family"],
            result["norm_type"],
            f"{result['accuracy']:.3f}",
            f"{result['f1']:.3f}",
            str(result["steps"]),
            f"{result['train_seconds']:.0f}",
            f"{result['train_seconds'] / result['steps']:.2f}",
            result["norm_state"],
        ]
        for result in results
    ]
    return markdown_table(HEADER, rows)


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.finetune_norm_types`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=["vit", "deit", "bert"], choices=["vit", "deit", "bert"])
    parser.add_argument(
        "--norm-types", nargs="+", default=sorted(hf_norms.NORM_TYPES), choices=sorted(hf_norms.NORM_TYPES)
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest on busy cores)")
    parser.add_argument("--output", help="also write the results as JSON to this file")
    parser.add_argument("--converted", action="store_true", help="BERT: start from hf_norms.convert of MiniLM")
    parser.add_argument("--smoke", action="store_true", help="2 steps on tiny data subsets")
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    results = []
    for family in args.families:
        recipe = recipes(args.smoke, args.converted)[family]
        for norm_type in args.norm_types:
            results.append(run(recipe, norm_type))
            print(json.dumps({key: value for key, value in results[-1].items() if key != "losses"}), flush=True)
    print(table(results))
    if args.output:
        with open(args.output, "w") as stream:
            json.dump(results, stream, indent=1)
    return results


if __name__ == "__main__":
    main()
