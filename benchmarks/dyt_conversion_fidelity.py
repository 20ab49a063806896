"""How close converted checkpoints stay to the real MiniLM BERT and DINOv2-S: exact variants, and DyT or Derf naive,
calibrated and healed, through the same `convert` and `heal` calls as `hf-norms convert` / `hf-norms heal`.

    python -m benchmarks.dyt_conversion_fidelity                        # both models, 15 min of healing each
    python -m benchmarks.dyt_conversion_fidelity --models minilm --heal-minutes 5 --heal-steps 150
    python -m benchmarks.dyt_conversion_fidelity --models minilm --norm-type derf --keep-layernorm 4,5 --skip-exact
    python -m benchmarks.dyt_conversion_fidelity --smoke                 # tiny data and budgets, minutes

MiniLM: BBC News (`packaged.split_train_test`, seed 0): DyT calibrated on 64 training articles, healed on the other
training articles, evaluated on held-out test articles (first 128 tokens): mean cosine of mean-pooled embeddings
to the original's, and a logistic regression trained on the original's embeddings of training articles, scored on the
test articles embedded by the original and by each converted model (accuracy kept = converted / original).
DINOv2: Fashion-MNIST (64 training images for calibration, the next ones for healing, test images for evaluation),
cosine of the final [CLS] features and the same linear-probe retention; exact variants on real photos.
Prints Markdown tables and writes `results.json` into the work folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from hf_norms import packaged
from hf_norms.conversion.arguments import HealArguments
from hf_norms.conversion.convert import convert
from hf_norms.conversion.data import encode_batches, load_examples
from hf_norms.conversion.fidelity import pooled
from hf_norms.conversion.healing import heal
from hf_norms.conversion.sources import load_processor

EXACT_TYPES = ("sepnorm", "dtn", "lape")


def write_texts(path: Path, texts: list[str]) -> Path:
    path.write_text("\n".join(" ".join(text.split()) for text in texts) + "\n", encoding="utf-8")
    return path


def write_images(folder: Path, images) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index, image in enumerate(images):
        (image if isinstance(image, Image.Image) else Image.fromarray(image)).save(folder / f"{index:05d}.png")
    return folder


def embed(model_folder: Path, data: Path | list, modality: str, max_length: int = 128, **load_kwargs) -> np.ndarray:
    """`[examples, hidden]` embeddings: mean-pooled final states (text) or final [CLS] states (images)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_folder, **load_kwargs).eval()
    processor = load_processor(model_folder, modality)
    rows = []
    for batch in encode_batches(processor, load_examples(data, modality), batch_size=32, max_length=max_length):
        with torch.no_grad():
            final = model(**batch).last_hidden_state
        rows.append(pooled(final, batch["attention_mask"].bool() if "attention_mask" in batch else None))
    return torch.cat(rows).numpy()


def probe_retention(
    train: np.ndarray, labels: np.ndarray, test: dict[str, np.ndarray], test_labels: np.ndarray
) -> dict:
    """Logistic regression fitted on the original's L2-normalised training embeddings; accuracy per model on the test
    embeddings, and the fraction of the original's accuracy each model keeps."""
    from sklearn.linear_model import LogisticRegression

    def normalise(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    classifier = LogisticRegression(max_iter=2000, C=10.0).fit(normalise(train), labels)
    accuracy = {name: float((classifier.predict(normalise(x)) == test_labels).mean()) for name, x in test.items()}
    return {"accuracy": accuracy, "kept": {name: acc / accuracy["original"] for name, acc in accuracy.items()}}


def cosine_to(reference: np.ndarray, other: np.ndarray) -> float:
    dots = (reference * other).sum(1) / (np.linalg.norm(reference, axis=1) * np.linalg.norm(other, axis=1))
    return float(dots.mean())


def prepare_data(name: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write the calibration, healing, evaluation and probe data of one model as files; returns paths and labels."""
    data_dir = work / f"{name}-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    cal, heal_n, probe_train, probe_test = (
        args.calibration_samples,
        args.heal_samples,
        args.probe_train,
        args.probe_test,
    )
    if name == "minilm":
        train, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
        texts = lambda items: [text for text, _ in items]  # noqa: E731
        labels = lambda items: np.array([packaged.BBC_NEWS_LABELS.index(label) for _, label in items])  # noqa: E731
        evaluation = write_texts(data_dir / "eval.txt", texts(test[: args.eval_samples]))
        return {
            "exact_eval": evaluation,
            "calibration": write_texts(data_dir / "calibration.txt", texts(train[:cal])),
            "heal": write_texts(data_dir / "heal.txt", texts(train[cal : cal + heal_n])),
            "eval": evaluation,
            "probe_train": write_texts(data_dir / "probe-train.txt", texts(train[cal : cal + probe_train])),
            "probe_train_labels": labels(train[cal : cal + probe_train]),
            "probe_test": write_texts(data_dir / "probe-test.txt", texts(test[:probe_test])),
            "probe_test_labels": labels(test[:probe_test]),
        }
    train_images, train_labels = packaged.fashion_mnist("train", limit=cal + max(heal_n, probe_train))
    test_images, test_labels = packaged.fashion_mnist("test", limit=max(probe_test, args.eval_samples))
    photos = packaged.photos()
    return {
        "exact_eval": write_images(data_dir / "photos", [photos[name] for name in sorted(photos)]),
        "calibration": write_images(data_dir / "calibration", train_images[:cal]),
        "heal": write_images(data_dir / "heal", train_images[cal : cal + heal_n]),
        "eval": write_images(data_dir / "eval", test_images[: args.eval_samples]),
        "probe_train": write_images(data_dir / "probe-train", train_images[cal : cal + probe_train]),
        "probe_train_labels": train_labels[cal : cal + probe_train],
        "probe_test": write_images(data_dir / "probe-test", test_images[:probe_test]),
        "probe_test_labels": test_labels[:probe_test],
    }


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Exact variants, then DyT convert, snapshot, heal, and the embeddings' cosine and probe retention."""
    work = args.work
    source = packaged.minilm_path() if name == "minilm" else packaged.dinov2_small_path()
    modality = "text" if name == "minilm" else "image"
    load_kwargs = {} if modality == "text" else {"add_pooling_layer": False}
    data = prepare_data(name, work, args)
    results: dict[str, Any] = {
        "exact_max_abs_diff": {},
        "norm_type": args.norm_type,
        "keep_layernorm": args.keep_layernorm,
    }
    for norm_type in () if args.skip_exact else EXACT_TYPES:
        report = convert(source, norm_type, work / f"{name}-{norm_type}", evaluation_data=data["exact_eval"],
                         evaluation_samples=args.eval_samples, overwrite=True)  # fmt: skip
        results["exact_max_abs_diff"][norm_type] = report["stages"]["exact"]["end_to_end"]["max_abs_diff"]
        print(f"{name} {norm_type}: max abs diff {results['exact_max_abs_diff'][norm_type]:.2e}", flush=True)

    variant = args.norm_type + (f"-keep-{args.keep_layernorm.replace(',', '-')}" if args.keep_layernorm else "")
    dyt, calibrated = work / f"{name}-{variant}", work / f"{name}-{variant}-calibrated"
    convert(source, args.norm_type, dyt, calibration_data=data["calibration"], calibration_samples=args.calibration_samples,
            evaluation_data=data["eval"], evaluation_samples=args.eval_samples, keep_layernorm=args.keep_layernorm,
            overwrite=True, progress=True)  # fmt: skip
    shutil.rmtree(calibrated, ignore_errors=True)
    shutil.copytree(dyt, calibrated)
    report = heal(dyt, data["heal"], max_steps=args.heal_steps, max_minutes=args.heal_minutes,
                  batch_size=args.heal_batch_size, learning_rate=args.heal_learning_rate,
                  cosine_weight=args.cosine_weight, hidden_state_weight=args.hidden_state_weight,
                  bf16=args.heal_bf16, progress=True)  # fmt: skip
    results["report_stages"] = {stage: metrics["end_to_end"] for stage, metrics in report["stages"].items()}
    results["calibration"], results["healing"] = report["calibration"], report["healing"]

    embed_kwargs = {"modality": modality, **load_kwargs}
    original_train = embed(source, data["probe_train"], **embed_kwargs)
    test = {model: embed(folder, data["probe_test"], **embed_kwargs)
            for model, folder in (("original", source), ("calibrated", calibrated), ("healed", dyt))}  # fmt: skip
    results["probe_test_cosine"] = {model: cosine_to(test["original"], x) for model, x in test.items()}
    results["probe"] = probe_retention(original_train, data["probe_train_labels"], test, data["probe_test_labels"])
    results["probe_sizes"] = {"train": len(original_train), "test": len(test["original"])}
    print(json.dumps(results, indent=2), flush=True)
    return results


def print_tables(results: dict[str, Any]) -> None:
    print("\n| model | sepnorm | dtn | lape |\n|---|---|---|---|")
    for name, r in results.items():
        if r["exact_max_abs_diff"]:
            print(f"| {name} | " + " | ".join(f"{r['exact_max_abs_diff'][t]:.1e}" for t in EXACT_TYPES) + " |")
    print("\n| model | stage | mean cosine (eval) | mean cosine (probe test) | probe accuracy | accuracy kept |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        probe = r["probe"]
        for stage, model in (
            ("original", "original"),
            ("naive", None),
            ("calibrated", "calibrated"),
            ("healed", "healed"),
        ):
            cosine = r["report_stages"][stage]["mean_cosine"] if stage in r["report_stages"] else 1.0
            probe_cosine = f"{r['probe_test_cosine'][model]:.4f}" if model else "-"
            accuracy = f"{probe['accuracy'][model]:.4f}" if model else "-"
            kept = f"{probe['kept'][model]:.2%}" if model else "-"
            print(f"| {name} | {stage} | {cosine:.4f} | {probe_cosine} | {accuracy} | {kept} |")
        healing = r["healing"]
        print(f"\n{name}: calibration {r['calibration']['seconds']:.0f} s on {r['calibration']['samples']} examples; "
              f"healing {healing['steps']} steps in {healing['seconds']:.0f} s on {healing['samples']} examples")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.dyt_conversion_fidelity`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["minilm", "dinov2"], choices=["minilm", "dinov2"])
    parser.add_argument("--work", type=Path, default=packaged.cache_root() / "dyt-fidelity")
    parser.add_argument("--heal-minutes", type=float, default=15.0)
    parser.add_argument("--heal-steps", type=int, default=400)
    parser.add_argument("--heal-batch-size", type=int, default=8)
    parser.add_argument("--heal-samples", type=int, default=2048)
    parser.add_argument("--heal-learning-rate", type=float, default=2e-4)
    parser.add_argument("--heal-bf16", action="store_true", help="heal under bfloat16 autocast")
    defaults = {field.name: field.default for field in dataclasses.fields(HealArguments)}
    parser.add_argument("--cosine-weight", type=float, default=defaults["cosine_weight"])
    parser.add_argument("--hidden-state-weight", type=float, default=defaults["hidden_state_weight"])
    parser.add_argument("--norm-type", default="dyt", choices=["dyt", "derf"])
    parser.add_argument("--keep-layernorm", help="encoder layers that keep LayerNorm, e.g. 4,5")
    parser.add_argument("--skip-exact", action="store_true", help="skip the exact sepnorm/dtn/lape conversions")
    parser.add_argument("--calibration-samples", type=int, default=64)
    parser.add_argument("--eval-samples", type=int, default=128)
    parser.add_argument("--probe-train", type=int, default=600)
    parser.add_argument("--probe-test", type=int, default=400)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (1 is faster on a busy machine)")
    parser.add_argument("--smoke", action="store_true", help="tiny data and budgets")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.smoke:
        args.heal_minutes, args.heal_steps, args.heal_samples = 1.0, 4, 32
        args.calibration_samples, args.eval_samples, args.probe_train, args.probe_test = 8, 8, 40, 20
    args.work.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.models:
        results[name] = measure(name, args)
        (args.work / "results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    print_tables(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
