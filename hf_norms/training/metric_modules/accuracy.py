"""Accuracy as a local `evaluate` metric module: `evaluate.load("<this file>")`, never fetched from the Hub.

`accuracy = sum_i w_i * [prediction_i == reference_i] / sum_i w_i` (or the weighted count with `normalize=False`),
computed by scikit-learn's `accuracy_score`, as in the Hub's own `accuracy` module. Shipped inside hf-norms as package data;
`hf_norms.training.metrics.load_metric("accuracy")` loads it.
"""

from __future__ import annotations

import datasets
import evaluate
from sklearn.metrics import accuracy_score

_DESCRIPTION = "The fraction of predictions equal to their reference class (optionally weighted per example)."

_INPUTS_DESCRIPTION = """
Args:
    predictions (`list[int]`): predicted class indices, one per example.
    references (`list[int]`): true class indices, one per example.
    normalize (`bool`, defaults to `True`): return the fraction; `False` returns the (weighted) count of matches.
    sample_weight (`list[float]`, *optional*): one weight per example.
Returns:
    accuracy (`float`): in [0, 1] with `normalize=True`.
Example:
    >>> accuracy = evaluate.load(hf_norms.training.metrics.metric_path("accuracy"))
    >>> accuracy.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2])
    {'accuracy': 0.75}
"""

_CITATION = ""


class Accuracy(evaluate.Metric):
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
        normalize: bool = True,
        sample_weight: list[float] | None = None,
    ) -> dict[str, float]:
        score = accuracy_score(references, predictions, normalize=normalize, sample_weight=sample_weight)
        return {"accuracy": float(score)}
