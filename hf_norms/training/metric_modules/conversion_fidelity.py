"""Conversion fidelity as a local `evaluate` metric module: how close a model's outputs are to a reference model's.

Given a model's outputs `y_i` and a reference model's outputs `r_i` on the same N examples (vectors of size K each:
logits, or pooled embeddings), it reports

    max_abs_diff   = max_{i,k} |y_ik - r_ik|
    mean_abs_diff  = mean_{i,k} |y_ik - r_ik|
    mean_cosine    = mean_i  y_i . r_i / (|y_i| |r_i|)
    min_cosine     = min_i   y_i . r_i / (|y_i| |r_i|)

and for logits (`is_logits=True`) also

    top1_agreement = mean_i [argmax y_i == argmax r_i]
    mean_kl        = mean_i KL(softmax(r_i) || softmax(y_i))     (nats; 0 when the predictive distributions agree)

Use it to measure a norm_type conversion against the LayerNorm original. Shipped inside hf-norms as package data;
`hf_norms.training.metrics.load_metric("conversion_fidelity")` loads it.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

_DESCRIPTION = "Agreement between a model's outputs and a reference model's outputs on the same inputs."

_INPUTS_DESCRIPTION = """
Args:
    predictions (`list[list[float]]`): the model's outputs, `[N, K]`.
    references (`list[list[float]]`): the reference model's outputs, `[N, K]`.
    is_logits (`bool`, defaults to `True`): the vectors are class logits; adds `top1_agreement` and `mean_kl`.
Returns:
    max_abs_diff, mean_abs_diff, mean_cosine, min_cosine (`float`), and with `is_logits` top1_agreement, mean_kl.
Example:
    >>> fidelity = evaluate.load(hf_norms.training.metrics.metric_path("conversion_fidelity"))
    >>> fidelity.compute(predictions=[[2.0, 0.0], [0.0, 1.0]], references=[[1.0, 0.0], [0.0, 1.0]])["top1_agreement"]
    1.0
"""

_CITATION = ""


class ConversionFidelity(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_INPUTS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("float32")),
                    "references": datasets.Sequence(datasets.Value("float32")),
                }
            ),
        )

    def _compute(
        self,
        predictions: list[list[float]],
        references: list[list[float]],
        is_logits: bool = True,
    ) -> dict[str, float]:
        outputs, reference = _as_matrix(predictions, "predictions"), _as_matrix(references, "references")
        if outputs.shape != reference.shape:
            raise ValueError(f"predictions {outputs.shape} and references {reference.shape} must have the same shape.")
        difference = np.abs(outputs - reference)
        norms = np.linalg.norm(outputs, axis=1) * np.linalg.norm(reference, axis=1)
        cosine = np.sum(outputs * reference, axis=1) / np.maximum(norms, np.finfo(np.float64).tiny)
        result = {
            "max_abs_diff": float(difference.max()),
            "mean_abs_diff": float(difference.mean()),
            "mean_cosine": float(cosine.mean()),
            "min_cosine": float(cosine.min()),
        }
        if is_logits:
            log_p, log_q = _log_softmax(reference), _log_softmax(outputs)
            result["top1_agreement"] = float(np.mean(outputs.argmax(axis=1) == reference.argmax(axis=1)))
            result["mean_kl"] = float(np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=1)))
        return result


def _as_matrix(rows: list[list[float]], name: str) -> np.ndarray:
    """`[N, K]` float64 from N rows of K numbers, refusing ragged rows."""
    lengths = {len(row) for row in rows}
    if len(lengths) != 1:
        raise ValueError(f"every row of {name} must have the same length; got lengths {sorted(lengths)}.")
    return np.asarray(rows, dtype=np.float64)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
