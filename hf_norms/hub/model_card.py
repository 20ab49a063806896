"""Model cards that say exactly how a checkpoint was made, rendered from what was measured.

`model_card_for_folder(folder, repo_id)` returns a `huggingface_hub.ModelCard` rendered from the template shipped in
`hf_norms/hub/templates/model_card.md`, from the facts `card_facts.gather_card_facts` reads next to the weights (its
metadata here, its body's sections in `card_sections`). A Trainer publishes the same card
(`hf_norms.training.trainer.NormCardTrainerMixin`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..conversion.downstream import dataset_name
from ..conversion.report import fine_tuning_rows
from ..norms.build import norm_spec
from ..version_guard import SUPPORTED_TRANSFORMERS
from .arguments import CardArguments
from .card_facts import (
    FIDELITY_METRICS,
    CardFacts,
    data_name,
    gather_card_facts,
    hub_dataset,
    identical_outputs,
)
from .card_sections import (
    downstream_rows,
    fidelity_measurement,
    fidelity_rows,
    limitations,
    provenance,
    readable_data,
    with_kept_layernorms,
)

logger = logging.getLogger(__name__)

TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"


def card_metadata(facts: CardFacts) -> ModelCardData:
    """The YAML metadata: library, task, base model and relation, tags, datasets, license, model-index results."""
    paper = norm_spec(facts.norm_type).paper
    tags = [
        "hf-norms",
        facts.family.name,
        facts.norm_type,
        "custom_code",
        *([f"arxiv:{paper.arxiv_id}"] if paper else []),
    ]
    if facts.sentence_transformers:
        tags = [*tags, "sentence-transformers", "feature-extraction"]
    relation = {"base_model_relation": "finetune"} if facts.base_model and facts.trained_after_conversion else {}
    return ModelCardData(
        model_name=facts.model_name,
        library_name=facts.library_name,
        pipeline_tag=facts.pipeline_tag,
        base_model=facts.base_model,
        license=facts.license,
        language=facts.language,
        datasets=facts.datasets or None,
        tags=list(dict.fromkeys([*tags, *facts.tags])),
        eval_results=eval_results(facts) or None,
        **relation,
    )


def eval_results(facts: CardFacts) -> list[EvalResult]:
    """model-index entries: the fine-tuning evaluation when the weights were fine-tuned, else the fidelity of the
    published stage of the conversion (values as in the report; those of identical outputs exact:
    `identical_outputs`). Only results on data with a Hub dataset id are listed (model-index requires one); the
    others are in the card's tables."""
    task = facts.pipeline_tag or "feature-extraction"
    if facts.training is not None:
        dataset = hub_dataset(facts.training.dataset)
        if dataset is None:
            return []
        return [
            EvalResult(
                task_type=task,
                dataset_type=dataset,
                dataset_name=facts.training.dataset,
                metric_type=name,
                metric_value=value,
                metric_name=f"eval {name}",
            )
            for name, value in facts.training.metrics.items()
        ]
    stage = facts.published_stage
    data = data_name(facts.report["evaluation"]["data"]) if stage else None
    if stage is None or hub_dataset(data) is None:
        return downstream_eval_results(facts, task, stage) if stage else []
    measured = identical_outputs(facts.report["stages"][stage]["end_to_end"])
    return [
        EvalResult(
            task_type=task,
            task_name="fidelity to the source checkpoint",
            dataset_type=hub_dataset(data),
            dataset_name=dataset_name(data),
            metric_type=metric_type,
            metric_value=measured[key],
            metric_name=f"{description} ({stage})",
        )
        for key, (metric_type, description) in FIDELITY_METRICS.items()
        if measured.get(key) is not None
    ] + downstream_eval_results(facts, task, stage)


# probe figure -> (model-index metric type, what it measures)
PROBE_METRICS = {
    "teacher_accuracy": ("accuracy", "accuracy of the source checkpoint, linear probe fitted on its features"),
    "student_accuracy": ("accuracy", "accuracy of this checkpoint through the source's linear probe"),
    "student_retrained_accuracy": ("accuracy", "accuracy of this checkpoint, linear probe refitted on its features"),
}


def downstream_eval_results(facts: CardFacts, task: str, stage: str) -> list[EvalResult]:
    """model-index entries of the published stage's out-of-domain fidelity and linear probe, where measured."""
    report, measured = facts.report, facts.report["stages"][stage]
    results = []
    ood = report.get("out_of_domain_evaluation")
    if ood and measured.get("out_of_domain") and hub_dataset(ood["data"]):
        data, figures = data_name(ood["data"]), identical_outputs(measured["out_of_domain"])
        results += [
            EvalResult(task_type=task, task_name="fidelity to the source checkpoint, out of domain",
                       dataset_type=hub_dataset(data), dataset_name=ood.get("name") or dataset_name(data),
                       metric_type=metric_type, metric_value=figures[key],
                       metric_name=f"{description}, out of domain ({stage})")
            for key, (metric_type, description) in FIDELITY_METRICS.items()
            if figures.get(key) is not None
        ]  # fmt: skip
    probe = report.get("probe_evaluation")
    if probe and measured.get("probe") and hub_dataset(probe["data"]):
        data = data_name(probe["data"])
        results += [
            EvalResult(task_type=facts.family.default_task,
                       task_name="linear probe on pooled features", dataset_type=hub_dataset(data),
                       dataset_name=probe["name"], dataset_split="test", metric_type=metric_type,
                       metric_value=measured["probe"][key], metric_name=f"{description} ({stage})")
            for key, (metric_type, description) in PROBE_METRICS.items()
        ]  # fmt: skip
    return results


def render_model_card(facts: CardFacts) -> ModelCard:
    """The card of `facts`, from the shipped template."""
    spec = norm_spec(facts.norm_type)

    training_metrics = (
        {name: f"{value:.4g}" for name, value in facts.training.metrics.items()} if facts.training else {}
    )
    return ModelCard.from_template(
        card_metadata(facts),
        template_path=str(TEMPLATE_PATH),
        facts=facts,
        family_name=facts.family.display_name,
        config_class=facts.family.config_class.__name__,
        auto_class=facts.auto_class,
        load_kwargs=", add_pooling_layer=False" if facts.without_pooler else "",
        norm=with_kept_layernorms(spec.text, facts.norm_type, facts.norm_options.get("layer_norm_types")),
        options=facts.norm_options,
        paper=spec.paper,
        provenance=provenance(facts),
        report=facts.report,
        evaluation_data=readable_data(facts.report["evaluation"]["data"]) if facts.report else None,
        fidelity_rows=fidelity_rows(facts.report),
        fidelity_measurement=fidelity_measurement(facts.report, facts.max_seq_length),
        fine_tuning_rows=fine_tuning_rows((facts.report or {}).get("fine_tuning")),
        downstream_rows=downstream_rows(facts.report),
        training_metrics=training_metrics,
        limitations=limitations(facts),
        supported_transformers=SUPPORTED_TRANSFORMERS,
    )


def model_card_for_folder(
    folder: str | Path, repo_id: str, custom_code: Sequence[str] = (), **card_options: Any
) -> ModelCard:
    """The card of `folder`: `gather_card_facts`, with `card_options` the fields of `CardArguments`, rendered."""
    return render_model_card(gather_card_facts(folder, repo_id, CardArguments(**card_options), custom_code))
