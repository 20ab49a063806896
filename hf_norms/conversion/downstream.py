"""Downstream proof of a conversion, beside the in-domain cosine: fidelity on short inputs and out of domain, and a
linear probe's accuracy.

Cosine to the original on the data a conversion was calibrated and evaluated on can hide two failures: a model that
matches its original in domain and drifts away from it elsewhere (reported for LayerNorm-free GPT-2, arXiv 2507.02559),
and features that stay close in cosine yet lose what a downstream head reads from them. `DownstreamChecks` measures,
for every stage of a conversion (naive, calibrated, healed, exact):

- `short_inputs` (text models): the end-to-end fidelity of `fidelity.measure_fidelity` on the evaluation texts cut to
  their first 3 to 8 words (`short_texts`), as the queries of a few words that a text embedding model embeds beside
  whole articles: a norm calibrated or healed on long texts can drift on sequences of a handful of tokens;
- `out_of_domain`: the end-to-end fidelity of `fidelity.measure_fidelity` (max abs diff, mean cosine of the pooled final
  hidden states, top-1 agreement and KL for heads) on a second data set of another kind than the evaluation data:
  `packaged` is Python's documentation for text (`packaged.python_docs_paragraphs`) and scikit-learn's handwritten
  digits for images (`packaged.digits_images`);
- `probe`: a linear probe (closed-form ridge regression to one-hot labels on standardised pooled features) fitted on the
  TEACHER's features of a labelled train split and scored on a test split with (a) the teacher's features, (b) the
  student's features through the same probe (do the converted features still work for heads trained on the
  original's?) and (c) a probe refitted on the student's own features. `packaged` is BBC News' 5 topics for text and
  Fashion-MNIST's 10 classes for images. Accuracies are fractions; `points_kept` is the student's accuracy minus the
  teacher's in percentage points (0: all kept, negative: points lost).

Everything is deterministic (fixed data order, closed-form probe in float64), and the teacher's probe features are
computed once per conversion.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from .. import packaged
from ..errors import ConversionError
from .data import Examples, encode_batches, load_examples, model_device, on_device, real_token_mask
from .fidelity import forward_with_norms, measure_fidelity, pooled

PACKAGED = "packaged"
# `packaged` data per modality: (out-of-domain key, probe key); the keys name `packaged.DATASET_NAMES` entries.
PACKAGED_OOD = {"text": "python_docs", "image": "digits"}
PACKAGED_PROBE = {"text": "bbc_news", "image": "fashion_mnist"}
PROBE_NAMES = {"bbc_news": "BBC News topics (5 classes)", "fashion_mnist": "Fashion-MNIST (10 classes)"}
PROBE_L2 = 1.0  # ridge penalty per training example, on standardised features (the bias is not penalised)
CONSTANT_FEATURE_SPREAD = 1e-3  # of the median feature's spread: below it a feature counts as constant
PROBE_METHOD = "ridge regression to one-hot labels on standardised pooled features (closed form, L2 = 1.0 x examples)"
SHORT_WORDS = (3, 8)  # the words a short input keeps, cycling from the first to the last over the evaluation texts


def packaged_key(data: Any) -> str | None:
    """`"packaged:python_docs"` -> `"python_docs"`; None for anything that is not such a string."""
    if isinstance(data, str) and data.startswith(f"{PACKAGED}:"):
        return data.split(":", 1)[1]
    return None


def out_of_domain_examples(data: Any, modality: str, samples: int) -> Examples:
    """The first `samples` out-of-domain examples: `"packaged"` (or a `"packaged:<key>"` description, as reports
    record it) for the packaged set of the modality, else anything `data.load_examples` takes."""
    key = PACKAGED_OOD[modality] if data == PACKAGED else packaged_key(data)
    if key is None:
        return load_examples(data, modality, samples)
    if key == "python_docs" and modality == "text":
        return Examples(packaged.python_docs_paragraphs(samples), f"{PACKAGED}:{key}", modality)
    if key == "digits" and modality == "image":
        return Examples(packaged.digits_images(samples), f"{PACKAGED}:{key}", modality)
    raise ConversionError(
        f"No packaged {modality} data {key!r}: use {PACKAGED!r} or {PACKAGED}:{PACKAGED_OOD[modality]}."
    )


def short_texts(evaluation: Examples) -> Examples:
    """The evaluation texts cut to their first `3 + i % 6` words (`SHORT_WORDS`) for the i-th text (whitespace-split,
    joined by single spaces; a text with fewer words is kept whole), in order: short inputs such as search queries."""
    low, high = SHORT_WORDS
    items = [" ".join(text.split()[: low + index % (high - low + 1)]) for index, text in enumerate(evaluation.items)]
    return Examples(items, evaluation.description, "text")


@dataclasses.dataclass
class ProbeSet:
    """Labelled examples for the probe: `train_labels` int64 `[train]`, `test_labels` int64 `[test]`, classes
    `0 .. num_classes - 1`."""

    train: Examples
    train_labels: torch.Tensor
    test: Examples
    test_labels: torch.Tensor
    num_classes: int
    description: str
    name: str


def probe_set(data: Any, modality: str, samples: int) -> ProbeSet:
    """`samples` train and `max(1, samples // 2)` test examples: `"packaged"` (or its recorded `"packaged:<key>"`)
    for BBC News topics or Fashion-MNIST, else a dict `{"train": (items, labels), "test": (items, labels)}` with
    optional `"name"` (items: texts or PIL images; labels: ints)."""
    test_samples = max(1, samples // 2)
    key = PACKAGED_PROBE[modality] if data == PACKAGED else packaged_key(data)
    if key == "bbc_news" and modality == "text":
        train, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
        index = {label: number for number, label in enumerate(packaged.BBC_NEWS_LABELS)}
        splits = [([text for text, _ in part], [index[label] for _, label in part]) for part in (train, test)]
        (train_items, train_labels), (test_items, test_labels) = splits
    elif key == "fashion_mnist" and modality == "image":
        from PIL import Image

        (train_images, train_labels), (test_images, test_labels) = (
            packaged.fashion_mnist(split, limit=count) for split, count in (("train", samples), ("test", test_samples))
        )
        train_items, test_items = ([Image.fromarray(image).convert("RGB") for image in images]
                                   for images in (train_images, test_images))  # fmt: skip
    elif isinstance(data, dict) and {"train", "test"} <= set(data):
        (train_items, train_labels), (test_items, test_labels) = data["train"], data["test"]
        key = None
    else:
        raise ConversionError(
            f"Probe data must be {PACKAGED!r} or a dict {{'train': (items, labels), 'test': (items, labels)}}, "
            f"got {data!r:.80}."
        )
    description = f"{PACKAGED}:{key}" if key else data.get("name", f"in-memory labelled {modality} data")
    if len({int(label) for label in train_labels[:samples]}) < 2:  # one class: every probe scores 0 or 1, says nothing
        raise ConversionError(
            f"The probe's {samples} training example(s) of {description} hold only one class; a linear probe needs "
            "at least two: give more probe samples (e.g. --probe-samples 64)."
        )
    return ProbeSet(
        Examples(list(train_items[:samples]), description, modality),
        torch.as_tensor(np.asarray(train_labels[:samples]), dtype=torch.int64),
        Examples(list(test_items[:test_samples]), description, modality),
        torch.as_tensor(np.asarray(test_labels[:test_samples]), dtype=torch.int64),
        int(max(max(train_labels[:samples]), max(test_labels[:test_samples]))) + 1,
        description,
        PROBE_NAMES.get(key, description),
    )


def pooled_features(model: nn.Module, batches: Sequence[dict]) -> torch.Tensor:
    """`[examples, hidden]` float64 on the CPU: the pooled final hidden states (`fidelity.pooled`: mean over real tokens for
    text, [CLS] for images) of `model` on `batches`, in order."""
    training = model.training
    model.eval()
    try:
        batches = [on_device(batch, model_device(model)) for batch in batches]
        features = [pooled(forward_with_norms(model, batch, [])["final"], real_token_mask(batch)) for batch in batches]
    finally:
        model.train(training)
    return torch.cat(features).double().cpu()


@dataclasses.dataclass
class LinearProbe:
    """`scores = ((features - mean) / std) @ weight[:-1] + weight[-1]`: `mean`, `std` `[hidden]`, `weight`
    `[hidden + 1, classes]`."""

    mean: torch.Tensor
    std: torch.Tensor
    weight: torch.Tensor

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """`[examples, hidden]` -> `[examples]` predicted classes."""
        standard = (features.double() - self.mean) / self.std
        return (standard @ self.weight[:-1] + self.weight[-1]).argmax(-1)


def fit_probe(features: torch.Tensor, labels: torch.Tensor, num_classes: int, l2: float = PROBE_L2) -> LinearProbe:
    """Ridge regression of one-hot `labels` `[examples]` on `features` `[examples, hidden]`, standardised with their
    own mean and std: `W = (X^T X + l2 * n * I')^-1 X^T Y` in float64, with `I'` sparing the bias row.

    A feature whose spread is under `CONSTANT_FEATURE_SPREAD` of the median feature's is constant up to rounding (a
    zeroed LayerNorm channel: MiniLM has three): it is scaled by that floor, not by its own spread, so that another
    model's rounding-sized deviation there is not multiplied by up to 1e8 and cannot swing the probe's prediction."""
    features = features.double()
    spread = features.std(0, correction=0)
    floor = (CONSTANT_FEATURE_SPREAD * spread.median()).clamp_min(1e-12)
    mean, std = features.mean(0), spread.clamp_min(floor)
    inputs = torch.cat([(features - mean) / std, torch.ones(len(features), 1, dtype=torch.float64)], dim=1)
    targets = torch.nn.functional.one_hot(labels, num_classes).double()
    penalty = torch.eye(inputs.shape[1], dtype=torch.float64) * (l2 * len(features))
    penalty[-1, -1] = 0.0
    weight = torch.linalg.solve(inputs.T @ inputs + penalty, inputs.T @ targets)
    return LinearProbe(mean, std, weight)


def accuracy(probe: LinearProbe, features: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of `labels` `[examples]` the probe predicts from `features` `[examples, hidden]`."""
    return (probe.predict(features) == labels).double().mean().item()


def probe_scores(teacher: tuple[torch.Tensor, torch.Tensor], student: tuple[torch.Tensor, torch.Tensor],
                 probes: ProbeSet, teacher_probe: LinearProbe | None = None) -> dict[str, float]:  # fmt: skip
    """The probe figures of one stage from `(train, test)` pooled features `[examples, hidden]` of each model: accuracy
    of the teacher, of the student through the teacher's probe and through a probe refitted on its own features, and
    the points (percent) the student keeps of the teacher's accuracy (student minus teacher)."""
    teacher_probe = teacher_probe or fit_probe(teacher[0], probes.train_labels, probes.num_classes)
    student_probe = fit_probe(student[0], probes.train_labels, probes.num_classes)
    teacher_accuracy = accuracy(teacher_probe, teacher[1], probes.test_labels)
    student_accuracy = accuracy(teacher_probe, student[1], probes.test_labels)
    retrained_accuracy = accuracy(student_probe, student[1], probes.test_labels)
    return {
        "teacher_accuracy": teacher_accuracy,
        "student_accuracy": student_accuracy,
        "student_retrained_accuracy": retrained_accuracy,
        "points_kept": 100.0 * (student_accuracy - teacher_accuracy),
        "points_kept_retrained": 100.0 * (retrained_accuracy - teacher_accuracy),
    }


class CheckData(NamedTuple):
    """The data of the out-of-domain check and of the linear probe (None: not made), with their example counts."""

    ood_data: Any
    ood_samples: int | None
    probe_data: Any
    probe_samples: int | None


@dataclasses.dataclass
class DownstreamChecks:
    """The short inputs, the out-of-domain examples and the probe data of one conversion, encoded, with the teacher's
    probe features kept once computed (the teacher does not change between stages)."""

    modality: str
    max_length: int
    short_inputs: Examples | None = None
    short_input_batches: list[dict] | None = None
    out_of_domain: Examples | None = None
    out_of_domain_batches: list[dict] | None = None
    probes: ProbeSet | None = None
    probe_batches: tuple[list[dict], list[dict]] | None = None
    _teacher: tuple[tuple[torch.Tensor, torch.Tensor], LinearProbe] | None = None

    @classmethod
    def load(cls, processor, modality: str, data: CheckData, batch_size: int, max_length: int,
             evaluation: Examples | None = None) -> DownstreamChecks:  # fmt: skip
        """Load and encode the `data` that is given (either may be None: that check is not made); short inputs are
        cut from the `evaluation` texts of a text model with a tokenizer."""
        ood_data, ood_samples, probe_data, probe_samples = data
        checks = cls(modality, max_length)
        if (ood_data is not None or probe_data is not None) and processor is None:
            raise ConversionError("Out-of-domain and probe data need the model's tokenizer or image processor.")
        if modality == "text" and evaluation is not None and processor is not None:
            checks.short_inputs = short_texts(evaluation)
            checks.short_input_batches = encode_batches(processor, checks.short_inputs, batch_size, max_length)
        if ood_data is not None:
            checks.out_of_domain = out_of_domain_examples(ood_data, modality, ood_samples)
            checks.out_of_domain_batches = encode_batches(processor, checks.out_of_domain, batch_size, max_length)
        if probe_data is not None:
            checks.probes = probe_set(probe_data, modality, probe_samples)
            checks.probe_batches = tuple(encode_batches(processor, part, batch_size, max_length)
                                         for part in (checks.probes.train, checks.probes.test))  # fmt: skip
        return checks

    @property
    def active(self) -> bool:
        return self.short_inputs is not None or self.out_of_domain is not None or self.probes is not None

    def records(self) -> dict[str, dict[str, Any] | None]:
        """The report's top-level description of the data: `short_input_evaluation`, `out_of_domain_evaluation` and
        `probe_evaluation` (None where that check is not made)."""
        short, ood, probes = self.short_inputs, self.out_of_domain, self.probes
        return {
            "short_input_evaluation": None if short is None else {
                "data": short.description, "samples": len(short), "words": "-".join(map(str, SHORT_WORDS)),
            },
            "out_of_domain_evaluation": None if ood is None else {
                "data": ood.description, "name": dataset_name(ood.description), "samples": len(ood),
                "max_length": self.max_length, "pooling": "mean" if self.modality == "text" else "cls",
            },
            "probe_evaluation": None if probes is None else {
                "data": probes.description, "name": probes.name, "train_samples": len(probes.train),
                "test_samples": len(probes.test), "classes": probes.num_classes, "method": PROBE_METHOD,
                "max_length": self.max_length,
            },
        }  # fmt: skip

    def teacher_features(self, teacher: nn.Module) -> tuple[tuple[torch.Tensor, torch.Tensor], LinearProbe]:
        """The teacher's `(train, test)` probe features and its probe, computed on first use."""
        if self._teacher is None:
            train, test = (pooled_features(teacher, batches) for batches in self.probe_batches)
            self._teacher = (train, test), fit_probe(train, self.probes.train_labels, self.probes.num_classes)
        return self._teacher

    def measure(self, student: nn.Module, teacher: nn.Module) -> dict[str, Any]:
        """`{"short_inputs": end-to-end fidelity, "out_of_domain": end-to-end fidelity, "probe": probe_scores}` of one
        stage, for the checks made."""
        result: dict[str, Any] = {}
        if self.short_input_batches is not None:
            result["short_inputs"] = measure_fidelity(student, teacher, self.short_input_batches, [])["end_to_end"]
        if self.out_of_domain_batches is not None:
            result["out_of_domain"] = measure_fidelity(student, teacher, self.out_of_domain_batches, [])["end_to_end"]
        if self.probes is not None:
            features, probe = self.teacher_features(teacher)
            student_features = tuple(pooled_features(student, batches) for batches in self.probe_batches)
            result["probe"] = probe_scores(features, student_features, self.probes, probe)
        return result


def with_downstream(stage: dict[str, Any], checks: DownstreamChecks | None, student: nn.Module,
                    teacher: nn.Module) -> dict[str, Any]:  # fmt: skip
    """A stage's fidelity (`measure_fidelity`'s dict) with the downstream figures added, when there are checks."""
    if checks is not None and checks.active:
        stage.update(checks.measure(student, teacher))
    return stage


def dataset_name(description: str) -> str:
    """The name a card shows for a data description: `packaged:python_docs`, `.../python_docs-test-64.txt` ->
    `Python documentation paragraphs` (`packaged.DATASET_NAMES`), else the description itself."""
    import re

    key = packaged_key(description) or re.split(r"[-.\s]", description.rstrip("/").rsplit("/", 1)[-1])[0]
    return packaged.DATASET_NAMES.get(key, description)


def data_places(**sources: Any) -> dict[str, Path | None]:
    """The local paths among data sources (files or folders), which no output may touch."""
    return {name: Path(value) for name, value in sources.items() if isinstance(value, (str, Path))}


def local_data(**sources: Any) -> dict[str, Any]:
    """The data sources that may be local paths (for `data_places`): `"packaged"` and `"packaged:<key>"`
    name no file, and neither do in-memory ones."""
    return {name: value for name, value in sources.items() if value != PACKAGED and packaged_key(value) is None}


def check_out_of_domain(ood_data: Any, **in_domain: Any) -> None:
    """Refuse out-of-domain data that is a path to the calibration or evaluation data: its figures would be in-domain
    ones reported as out-of-domain."""
    if not isinstance(ood_data, (str, Path)) or ood_data == PACKAGED or packaged_key(ood_data):
        return
    for name, data in in_domain.items():
        if isinstance(data, (str, Path)) and Path(data).expanduser().resolve() == Path(ood_data).expanduser().resolve():
            raise ConversionError(
                f"The out-of-domain data {str(ood_data)!r} is the {name.replace('_', ' ')}: give a data set of "
                "another kind (or 'packaged')."
            )


def checks_for_report(report: dict[str, Any], processor, modality: str, ood_data: Any = None, probe_data: Any = None,
                      batch_size: int = 16, evaluation: Examples | None = None) -> DownstreamChecks:  # fmt: skip
    """The checks a report's conversion made, for measuring a later stage (healing) the same way: short inputs cut
    from the `evaluation` examples, its recorded out-of-domain data and probe data (reloadable when packaged or a
    path), or `ood_data` / `probe_data` in their place, with the recorded sample counts and `max_length`."""
    ood, probe = report.get("out_of_domain_evaluation"), report.get("probe_evaluation")
    ood_source = ood_data if ood_data is not None else (ood or {}).get("data")
    probe_source = probe_data if probe_data is not None else (probe or {}).get("data")
    if ood_data is None and ood and packaged_key(ood_source) is None and not Path(ood_source).exists():
        raise ConversionError(
            f"The conversion was evaluated out of domain on {ood_source!r}, which cannot be reloaded: give "
            "--ood-evaluation-data."
        )
    if probe_data is None and probe and packaged_key(probe_source) is None:
        raise ConversionError(f"The conversion's probe data {probe_source!r} cannot be reloaded: give probe_data.")
    data = CheckData(ood_source, (ood or {}).get("samples"), probe_source, (probe or {}).get("train_samples"))
    return DownstreamChecks.load(processor, modality, data, batch_size, report["evaluation"]["max_length"], evaluation)
