"""Evaluation metrics for fine-tuning, computed by the `evaluate` metric modules that hf-norms ships.

The modules live in `hf_norms/training/metric_modules/` (package data) and load from that folder with
`evaluate.load(metric_path(name))` (docs/fine-tuning.md shows how), so nothing is fetched from the Hub: `accuracy`, `f1` and `conversion_fidelity` (a model's outputs against a reference
model's). They are loaded with `keep_in_memory=True`, so processes of a distributed run share no cache files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import evaluate
import numpy as np
import torch
from transformers import EvalPrediction

METRICS_DIR = Path(__file__).resolve().parent / "metric_modules"
METRIC_NAMES = ("accuracy", "conversion_fidelity", "f1")
IGNORE_INDEX = -100  # label of tokens that carry no masked-LM target


def metric_path(name: str) -> str:
    """The metric module file of `name` (one of `METRIC_NAMES`) inside the installed package, as the `str`
    `evaluate.load` takes (it refuses a `Path`): `evaluate.load(metric_path("f1"))`."""
    if name not in METRIC_NAMES:
        raise ValueError(f"hf-norms ships no metric {name!r}; choose one of {METRIC_NAMES}.")
    return str(METRICS_DIR / f"{name}.py")


def load_metric(name: str) -> evaluate.EvaluationModule:
    """`evaluate.load` of the local module `name`: works offline, never downloads."""
    return evaluate.load(metric_path(name), keep_in_memory=True)


def _logits(predictions: np.ndarray | tuple) -> np.ndarray:
    """The logits among a model's outputs (the first, when the model returns several)."""
    return predictions[0] if isinstance(predictions, tuple) else predictions


def classification_metrics() -> Callable[[EvalPrediction], dict[str, float]]:
    """A Trainer `compute_metrics` for sequence/image classification: `accuracy` and macro-averaged `f1`.

    Predictions are the argmax of logits `[N, num_labels]`; references are class indices `[N]`.
    """
    accuracy, f1 = load_metric("accuracy"), load_metric("f1")

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        predicted = _logits(prediction.predictions).argmax(axis=-1)
        references = prediction.label_ids
        return {
            **accuracy.compute(predictions=predicted, references=references),
            "f1": f1.compute(predictions=predicted, references=references, average="macro")["f1"],
        }

    return compute


def argmax_logits(logits: torch.Tensor | tuple, labels: torch.Tensor) -> torch.Tensor:
    """Trainer `preprocess_logits_for_metrics` for masked LM: keep the predicted token ids `[N, T]`, not `[N, T, V]`."""
    return (logits[0] if isinstance(logits, tuple) else logits).argmax(dim=-1)


def masked_lm_metrics() -> Callable[[EvalPrediction], dict[str, float]]:
    """A Trainer `compute_metrics` for masked LM: `accuracy` of the predicted token at each masked position.

    Expects predictions already reduced to token ids by `argmax_logits`; positions labelled `IGNORE_INDEX` are skipped.
    """
    accuracy = load_metric("accuracy")

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        labels = prediction.label_ids
        masked = labels != IGNORE_INDEX
        return accuracy.compute(predictions=prediction.predictions[masked], references=labels[masked])

    return compute
