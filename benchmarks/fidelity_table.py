"""Downstream proof beside cosine for the packaged real models: one row per norm_type, calibrated stage, no healing.

    python -m benchmarks.fidelity_table                               # MiniLM and DINOv2-S, a few minutes on 2 cores
    python -m benchmarks.fidelity_table --models minilm --probe-samples 256 --norm-types dyt dtn
    python -m benchmarks.fidelity_table --smoke                        # a handful of examples, to check it runs

Each norm_type is converted with `hf_norms.convert_model` at its defaults (exact for sepnorm, dtn, lape; DyT calibrated
on training data, per-channel alpha), and measured as `hf-norms convert` measures it (`conversion.downstream`):

- MiniLM (`packaged.minilm_path()`, mean-pooled): DyT calibrated on BBC News training articles; in domain: held-out BBC
  News test articles; out of domain: Python documentation paragraphs; probe: BBC News topics.
- DINOv2-S (`packaged.dinov2_small_path()`, [CLS]): DyT calibrated on Fashion-MNIST training images; in domain:
  Fashion-MNIST test images; out of domain: scikit-learn digits; probe: Fashion-MNIST classes.

The probe is fitted on the original's features of the probe's training examples and scored on its test examples with
the original's features and the converted model's (same probe); points kept = converted minus original.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import torch
from PIL import Image

from hf_norms import packaged
from hf_norms.conversion.convert import convert_model
from hf_norms.conversion.downstream import PACKAGED, CheckData, DownstreamChecks
from hf_norms.norms.build import NORM_TYPES

MODELS = ("minilm", "dinov2")


def model_data(name: str, calibration: int, evaluation: int) -> tuple[Any, Any, list, list, str]:
    """(teacher, processor, calibration examples, in-domain evaluation examples, in-domain name) of a packaged model."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    if name == "minilm":
        path = packaged.minilm_path()
        train, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
        texts = lambda part, count: [" ".join(text.split()) for text, _ in part[:count]]  # noqa: E731
        return (AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                texts(train, calibration), texts(test, evaluation), packaged.DATASET_NAMES["bbc_news"])  # fmt: skip
    path = packaged.dinov2_small_path()
    images = lambda split, count: [Image.fromarray(i).convert("RGB") for i in packaged.fashion_mnist(split, count)[0]]  # noqa: E731
    return (AutoModel.from_pretrained(path).eval(), AutoImageProcessor.from_pretrained(path),
            images("train", calibration), images("test", evaluation), packaged.DATASET_NAMES["fashion_mnist"])  # fmt: skip


def measure_model(name: str, norm_types: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per norm_type: the last stage's in-domain and out-of-domain fidelity and probe accuracies."""
    teacher, processor, calibration, evaluation, in_domain = model_data(name, args.calibration_samples,
                                                                        args.evaluation_samples)  # fmt: skip
    modality = "text" if name == "minilm" else "image"
    data = CheckData(PACKAGED, args.ood_samples, PACKAGED, args.probe_samples)
    checks = DownstreamChecks.load(processor, modality, data, batch_size=16, max_length=args.max_length)
    rows = []
    for norm_type in norm_types:
        started = time.perf_counter()
        student = convert_model(
            teacher, norm_type, calibration if norm_type == "dyt" else None, processor=processor,
            evaluation_data=evaluation, evaluation_samples=len(evaluation), calibration_samples=len(calibration),
            max_length=args.max_length,
        )  # fmt: skip
        stage, measured = list(student.conversion_report["stages"].items())[-1]
        downstream = checks.measure(student, teacher)
        rows.append({
            "model": name, "norm_type": norm_type, "stage": stage, "in_domain": in_domain,
            "cosine": measured["end_to_end"]["mean_cosine"], "ood_cosine": downstream["out_of_domain"]["mean_cosine"],
            "ood_max_abs_diff": downstream["out_of_domain"]["max_abs_diff"], **downstream["probe"],
            "seconds": time.perf_counter() - started,
        })  # fmt: skip
        print(f"# {name} {norm_type}: {rows[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    return rows


def markdown_table(rows: list[dict[str, Any]], checks: dict[str, str]) -> str:
    """The Markdown table of `measure_model`'s rows (`checks`: model -> what its columns were measured on)."""
    lines = [
        "| model | norm_type | stage | in-domain cosine | out-of-domain cosine | out-of-domain max abs diff | "
        "probe acc. original | probe acc. converted (original's probe) | converted (refitted) | points kept |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['norm_type']} | {row['stage']} | {row['cosine']:.4f} | {row['ood_cosine']:.4f} | "
            f"{row['ood_max_abs_diff']:.3g} | {row['teacher_accuracy']:.3f} | {row['student_accuracy']:.3f} | "
            f"{row['student_retrained_accuracy']:.3f} | {row['points_kept']:+.1f} |"
        )
    return "\n".join([*lines, "", *(f"- {model}: {text}" for model, text in checks.items())])


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.fidelity_table`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--norm-types", nargs="+", choices=[n for n in NORM_TYPES if n != "layernorm"],
                        default=[n for n in NORM_TYPES if n != "layernorm"])  # fmt: skip
    parser.add_argument("--calibration-samples", type=int, default=64)
    parser.add_argument("--evaluation-samples", type=int, default=32)
    parser.add_argument("--ood-samples", type=int, default=32)
    parser.add_argument("--probe-samples", type=int, default=128, help="probe training examples (half as many test)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--smoke", action="store_true", help="a handful of examples per set")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.calibration_samples, args.evaluation_samples, args.ood_samples, args.probe_samples = 8, 4, 4, 10
    torch.manual_seed(0)
    rows = [row for name in args.models for row in measure_model(name, args.norm_types, args)]
    described = {
        "minilm": f"in domain {args.evaluation_samples} BBC News test articles; out of domain {args.ood_samples} Python "
        f"documentation paragraphs; probe BBC News topics, {args.probe_samples} train / {args.probe_samples // 2} test",
        "dinov2": f"in domain {args.evaluation_samples} Fashion-MNIST test images; out of domain {args.ood_samples} "
        f"scikit-learn digits; probe Fashion-MNIST, {args.probe_samples} train / {args.probe_samples // 2} test",
    }
    print(markdown_table(rows, {model: described[model] for model in args.models}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
