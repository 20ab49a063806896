"""F1 score as a local `evaluate` metric module: `evaluate.load("<this file>")`, never fetched from the Hub.

The score is scikit-learn's `f1_score` (as in the Hub's own `f1` module), with a class neither predicted nor present
scoring 0: `F1_c = 2 tp_c / (2 tp_c + fp_c + fn_c)`, averaged as `binary` (F1 of `pos_label`), `micro`, `macro`,
`weighted` or `None` (one score per class). Shipped inside hf-norms as package data;
`hf_norms.training.metrics.load_metric("f1")` loads it.
"""

from __future__ import annotations

import datasets
import evaluate
from sklearn.metrics import f1_score

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
    >>> f1 = evaluate.load(hf_norms.training.metrics.metric_path("f1"))
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
        present = set(predictions) | set(references)
        if average == "binary" and len(present) > 2:
            raise ValueError(
                f"average='binary' needs at most 2 classes, but {len(present)} occur; pass average='macro', "
                "'micro' or 'weighted' for multiclass data."
            )
        score = f1_score(references, predictions, labels=labels, pos_label=pos_label, average=average,
                         sample_weight=sample_weight, zero_division=0.0)  # fmt: skip
        return {"f1": score.tolist() if average is None else float(score)}
