"""F1 score as a local `evaluate` metric module: `evaluate.load("<this file>")`, never fetched from the Hub.

For each class c, with (weighted) counts `tp_c`, `fp_c`, `fn_c`: `F1_c = 2 tp_c / (2 tp_c + fp_c + fn_c)`, 0 when the
denominator is 0 (a class neither predicted nor present). Averages, as `sklearn.metrics.f1_score`:
`binary` (F1 of `pos_label`), `micro` (F1 of the summed counts), `macro` (mean of `F1_c`), `weighted` (mean of `F1_c`
weighted by each class's support), or `None` (one score per class). Shipped inside hf-norms as package data;
`hf_norms.training.metrics.load_metric("f1")` loads it.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

AVERAGES = ("binary", "micro", "macro", "weighted", None)

_DESCRIPTION = "The harmonic mean of precision and recall, per class or averaged over classes."

_INPUTS_DESCRIPTION = """
Args:
    predictions (`list[int]`): predicted class indices, one per example.
    references (`list[int]`): true class indices, one per example.
    labels (`list[int]`, *optional*): the classes to score (and average over); defaults to every class that occurs in
        predictions or references, sorted.
    pos_label (`int`, defaults to 1): the class scored with `average="binary"`.
    average (`str` or `None`, defaults to `"binary"`): `binary`, `micro`, `macro`, `weighted`, or `None` for a list of
        per-class scores in the order of `labels`.
    sample_weight (`list[float]`, *optional*): one weight per example.
Returns:
    f1 (`float`, or `list[float]` with `average=None`): in [0, 1].
Example:
    >>> f1 = evaluate.load("hf_norms/metrics/f1.py")
    >>> f1.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2], average="macro")
    {'f1': 0.7777777777777777}
"""

_CITATION = ""


class F1(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(
        self,
        predictions: list[int],
        references: list[int],
        labels: list[int] | None = None,
        pos_label: int = 1,
        average: str | None = "binary",
        sample_weight: list[float] | None = None,
    ) -> dict[str, float | list[float]]:
        if average not in AVERAGES:
            raise ValueError(f"average={average!r} is not supported; choose one of {AVERAGES}.")
        predictions, references = np.asarray(predictions), np.asarray(references)
        weights = np.ones(len(predictions)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if len(weights) != len(predictions):
            raise ValueError(f"sample_weight has {len(weights)} entries for {len(predictions)} predictions.")
        present = np.union1d(predictions, references)
        if average == "binary":
            if len(present) > 2:
                raise ValueError(
                    f"average='binary' needs at most 2 classes, but {len(present)} occur; pass average='macro', "
                    "'micro' or 'weighted' for multiclass data."
                )
            labels = [pos_label]
        classes = np.asarray(present if labels is None else labels)

        predicted = predictions[None, :] == classes[:, None]  # [K, N]
        actual = references[None, :] == classes[:, None]
        true_positives = (weights * (predicted & actual)).sum(axis=1)
        false_positives = (weights * (predicted & ~actual)).sum(axis=1)
        false_negatives = (weights * (~predicted & actual)).sum(axis=1)

        if average == "micro":
            return {"f1": _safe_f1(true_positives.sum(), false_positives.sum(), false_negatives.sum())}
        per_class = np.array(
            [_safe_f1(*counts) for counts in zip(true_positives, false_positives, false_negatives, strict=True)]
        )
        if average is None:
            return {"f1": per_class.tolist()}
        if average == "weighted":
            support = (weights * actual).sum(axis=1)
            return {"f1": float(np.sum(per_class * support) / support.sum()) if support.sum() > 0 else 0.0}
        return {"f1": float(per_class.mean())}  # macro, or the single class of binary


def _safe_f1(true_positives: float, false_positives: float, false_negatives: float) -> float:
    denominator = 2 * true_positives + false_positives + false_negatives
    return float(2 * true_positives / denominator) if denominator > 0 else 0.0
