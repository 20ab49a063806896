"""Model cards that say exactly how a checkpoint was made, rendered from what was measured.

`model_card_for_folder(folder, repo_id)` returns a `huggingface_hub.ModelCard` rendered from the template shipped in
`hf_norms/hub/templates/model_card.md`, from the facts `card_facts.gather_card_facts` reads next to the weights.
`NormCardTrainerMixin` makes `Trainer.push_to_hub` write the same card.
"""

from __future__ import annotations

import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..conversion.downstream import dataset_name
from ..conversion.report import fine_tuning_rows
from ..models.norm_options import NormOptions
from ..models.version_guard import SUPPORTED_TRANSFORMERS
from .card_facts import (
    FAMILIES,
    FIDELITY_METRICS,
    REPORT_NAME,
    STAGES,
    CardFacts,
    data_name,
    gather_card_facts,
    hub_dataset,
    looks_like_repo_id,
)
from .citations import PAPERS, Paper
from .norm_texts import NORM_TEXTS, STATISTICS_FREE, with_kept_layernorms
from .upload_files import refuse_token_leaks, trainer_upload_files

TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"


def card_metadata(facts: CardFacts) -> ModelCardData:
    """The YAML metadata: library, task, base model and relation, tags, datasets, license, model-index results."""
    paper = PAPERS.get(facts.norm_type)
    tags = ["hf-norms", facts.family, facts.norm_type, "custom_code", *([f"arxiv:{paper.arxiv_id}"] if paper else [])]
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
    published stage of the conversion (values exactly as in the report)."""
    task = facts.pipeline_tag or "feature-extraction"
    if facts.training is not None:
        dataset = facts.training.dataset or "unspecified"
        return [
            EvalResult(
                task_type=task,
                dataset_type=hub_dataset(dataset) or dataset,
                dataset_name=dataset,
                metric_type=name,
                metric_value=value,
                metric_name=f"eval {name}",
            )
            for name, value in facts.training.metrics.items()
        ]
    stage = facts.published_stage
    if stage is None:
        return []
    data = data_name(facts.report["evaluation"]["data"])
    measured = facts.report["stages"][stage]["end_to_end"]
    return [
        EvalResult(
            task_type=task,
            task_name="fidelity to the source checkpoint",
            dataset_type=hub_dataset(data) or data,
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
    if ood and measured.get("out_of_domain"):
        data = data_name(ood["data"])
        results += [
            EvalResult(task_type=task, task_name="fidelity to the source checkpoint, out of domain",
                       dataset_type=hub_dataset(data) or data, dataset_name=ood.get("name") or dataset_name(data),
                       metric_type=metric_type, metric_value=measured["out_of_domain"][key],
                       metric_name=f"{description}, out of domain ({stage})")
            for key, (metric_type, description) in FIDELITY_METRICS.items()
            if measured["out_of_domain"].get(key) is not None
        ]  # fmt: skip
    probe = report.get("probe_evaluation")
    if probe and measured.get("probe"):
        data = data_name(probe["data"])
        results += [
            EvalResult(task_type="text-classification" if facts.family == "bert" else "image-classification",
                       task_name="linear probe on pooled features", dataset_type=hub_dataset(data) or data,
                       dataset_name=probe["name"], dataset_split="test", metric_type=metric_type,
                       metric_value=measured["probe"][key], metric_name=f"{description} ({stage})")
            for key, (metric_type, description) in PROBE_METRICS.items()
        ]  # fmt: skip
    return results


def downstream_rows(report: dict[str, Any] | None) -> list[dict[str, str]]:
    """The card's downstream table, one row per stage: in-domain and out-of-domain cosine, probe accuracies; empty
    when the report has neither check (and a dash for a figure a stage lacks)."""
    report = report or {}
    if not (report.get("out_of_domain_evaluation") or report.get("probe_evaluation")):
        return []
    rows = []
    for stage in STAGES:
        measured = (report.get("stages") or {}).get(stage)
        if measured:
            ood, probe = measured.get("out_of_domain") or {}, measured.get("probe") or {}
            figure = lambda values, key, fmt: "—" if values.get(key) is None else fmt.format(values[key])  # noqa: E731
            rows.append({
                "stage": stage,
                "cosine": figure(measured["end_to_end"], "mean_cosine", "{:.4f}"),
                "ood_cosine": figure(ood, "mean_cosine", "{:.4f}"),
                "teacher": figure(probe, "teacher_accuracy", "{:.3f}"),
                "student": figure(probe, "student_accuracy", "{:.3f}"),
                "retrained": figure(probe, "student_retrained_accuracy", "{:.3f}"),
                "kept": figure(probe, "points_kept", "{:+.1f}"),
            })  # fmt: skip
    return rows


def provenance(facts: CardFacts) -> list[str]:
    """The numbered steps of "How this checkpoint was made"."""
    report = facts.report
    steps = []
    if report is None:
        steps.append(
            f'Built as `{facts.architecture}` with `norm_type="{facts.norm_type}"`. No conversion report was '
            "found next to the weights, so how they were obtained is not recorded here."
        )
    else:
        source = f"`{facts.base_model}`" if facts.base_model else "a local LayerNorm checkpoint"
        if report.get("source_revision"):
            source += f" at revision `{report['source_revision']}`"
        exact = (
            "exactly: the converted model computes the same function as the source"
            if facts.measured_exact
            else "approximately: this norm cannot reproduce the source's LayerNorms exactly (see the fidelity table)"
        )
        steps.append(f"Source: {source}.")
        steps.append(
            f"Converted with hf-norms {facts.hf_norms_version} to `{facts.architecture}`, "
            f'`norm_type="{facts.norm_type}"`{layers_kept(facts, report)}, {exact}.'
            + (
                " The norms' gamma and beta were then folded into the Linear layers that read them."
                if report.get("folded")
                else ""
            )
        )
        if report.get("calibration"):
            c = report["calibration"]
            steps.append(
                f"Calibrated ({c['method']}) on {c['samples']} samples of {data_name(c['data'])}, in {c['seconds']:.1f} s."
            )
        if report.get("healing"):
            h = report["healing"]
            steps.append(
                f"Healed by distillation from the source ({h['loss']}) on {h['samples']} samples of {data_name(h['data'])}: "
                f"{plural(h['steps'], 'step')}, {h['seconds']:.0f} s."
            )
    if facts.training is not None:
        run = facts.training
        detail = ", ".join(
            part
            for part in (
                plural(run.global_step, "step") if run.global_step else "",
                f"{run.epochs:g} epochs" if run.epochs else "",
            )
            if part
        )
        steps.append(
            f"Fine-tuned with the transformers Trainer{f' on {run.dataset}' if run.dataset else ''}"
            f"{f' ({detail})' if detail else ''}."
        )
    return [*steps, *facts.notes]


def layers_kept(facts: CardFacts, report: dict[str, Any]) -> str:
    """`" in layers 0-3, with the source's LayerNorm kept in layers 4, 5 (...)"`, or "" when every layer converted."""
    types = facts.norm_options.get("layer_norm_types")
    if not types:
        return ""
    kept = [index for index, kind in enumerate(types) if kind == "layernorm"]
    converted = [index for index, kind in enumerate(types) if kind != "layernorm"]
    sweep = report.get("layer_sweep")
    why = (
        f" (the fewest last layers whose cosine to the source reached {sweep['target_cosine']} on the calibration data)"
        if sweep and sweep.get("reached")
        else ""
    )
    return (
        f" in encoder layers {', '.join(map(str, converted)) or 'none'}, with the source's LayerNorm kept in layers "
        f"{', '.join(map(str, kept))}{why}"
    )


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def limitations(facts: CardFacts) -> list[str]:
    """What a user must know before relying on the checkpoint, from its family, norm, options and history."""
    items = []
    options = {**{f.name: f.default for f in fields(NormOptions)}, **facts.norm_options}
    report = facts.report or {}
    if report.get("evaluation"):
        items.append(
            f"The fidelity figures hold for {data_name(report['evaluation']['data'])}; inputs far from it may differ more."
        )
    if report and not facts.measured_exact and not facts.trained_after_conversion:
        items.append(
            "The weights were converted without any training, so the model does not compute what the source "
            "computed; check the fidelity table before using it as a drop-in replacement."
        )
    if facts.measured_exact and facts.training is None:
        items.append(
            "The conversion is exact, so the model computes what the source computes: the new norm makes a "
            "difference only once the model is trained further."
        )
    if facts.norm_type in STATISTICS_FREE:
        name = STATISTICS_FREE[facts.norm_type]
        items.append(f"{name} has no statistics: its outputs depend on the scale of its inputs, unlike LayerNorm's.")
        if facts.family == "bert":
            items.append(
                f"BERT is post-LN; the {name} paper tested pre-LN transformers only, so {name} on BERT is outside what "
                "it tested: treat it as experimental."
            )
    if facts.norm_type == "dtn":
        items.append(
            "DTN mixes statistics across tokens: a token's output depends on the other tokens of its sequence, and "
            "the model cannot run as a causal decoder."
        )
        if facts.family == "bert":
            items.append("DTN on text (one row of tokens) has no reference implementation from its authors.")
        if options["dtn_gate_init"] == 1.0 and facts.training is None and not report.get("healing"):
            items.append("Its gates are at 1, where DTN is exactly LayerNorm; token mixing acts only after training.")
    if facts.norm_type == "sepnorm":
        if options["sepnorm_prefix_norm"] == "batchnorm":
            items.append(
                "The prefix norm is a BatchNorm: inference uses its running statistics, training needs batches of "
                "more than one example, and multi-process training needs SyncBatchNorm."
            )
        else:
            items.append(
                "The prefix norm is a LayerNorm (for an exact conversion), not the BatchNorm of the paper's default."
            )
    if facts.norm_type == "lape":
        if options["lape_keep_input_pe"]:
            items.append(
                "The input position embedding is kept and every `pe_norm` starts at zero (a function-preserving "
                "hybrid): this is the paper's architecture only in spirit until training moves the `pe_norm`s."
            )
        if facts.family == "bert":
            items.append("The LaPE paper covers vision transformers only; its BERT form here is an analogue.")
    if facts.without_pooler:
        items.append(
            "The checkpoint has no pooler weights (its source has none): load it with `add_pooling_layer=False` and "
            "use `last_hidden_state`; without that argument the pooler is randomly initialised."
        )
    items.append(
        f"The remote code refuses to run outside transformers{SUPPORTED_TRANSFORMERS}, the releases it was written for."
    )
    return items


def fidelity_rows(report: dict[str, Any] | None) -> list[dict[str, str]]:
    """The fidelity table, one row per stage in the order they were made, numbers formatted for reading; the cosine per
    token type ([CLS]/prefix, special, ordinary) where the report measured it."""
    formats = {"max_abs_diff": "{:.3g}", "mean_cosine": "{:.4f}", "top1_agreement": "{:.3f}", "kl_divergence": "{:.3g}",
               "prefix": "{:.4f}", "special": "{:.4f}", "ordinary": "{:.4f}"}  # fmt: skip
    rows = []
    for stage in STAGES:
        measured = ((report or {}).get("stages") or {}).get(stage)
        if measured:
            values = {**measured["end_to_end"], **(measured.get("token_cosine") or {})}
            rows.append(
                {
                    "stage": stage,
                    **{
                        key: "—" if values.get(key) is None else fmt.format(values[key]) for key, fmt in formats.items()
                    },
                }
            )
    return rows


def fidelity_measurement(report: dict[str, Any] | None) -> str:
    """What the fidelity table's cosines compare: the pooling, the tokens per text, the per-token-type columns."""
    evaluation = (report or {}).get("evaluation") or {}
    text = evaluation.get("pooling") == "mean"
    pooling = "the mean over real tokens, as a sentence embedding pools" if text else "the [CLS] token"
    length = f", texts truncated to {evaluation['max_length']} tokens" if text and evaluation.get("max_length") else ""
    return (
        f"Mean cosine: of the pooled final hidden states ({pooling}{length}). Per token type: the mean cosine of single "
        "tokens' final hidden states, for the [CLS] (prefix) token that a stock classification head reads, the other "
        "special tokens ([SEP], ...) and the ordinary tokens."
    )


def readable_data(description: str) -> str:
    """`BBC News (held-out articles) (bbc_news-test-128.txt)` for a known packaged set, else the description without
    local folders."""
    data = data_name(description)
    name = dataset_name(data)
    return data if name == data else f"{name} ({data})"


def render_model_card(facts: CardFacts) -> ModelCard:
    """The card of `facts`, from the shipped template."""
    paper: Paper | None = PAPERS.get(facts.norm_type)
    _, family_name, config_class = FAMILIES[facts.model_type]
    training_metrics = (
        {name: f"{value:.4g}" for name, value in facts.training.metrics.items()} if facts.training else {}
    )
    return ModelCard.from_template(
        card_metadata(facts),
        template_path=str(TEMPLATE_PATH),
        facts=facts,
        family_name=family_name,
        config_class=config_class,
        auto_class=facts.auto_class,
        load_kwargs=", add_pooling_layer=False" if facts.without_pooler else "",
        norm=with_kept_layernorms(
            NORM_TEXTS[facts.norm_type], facts.norm_type, facts.norm_options.get("layer_norm_types"), facts.family
        ),
        options=facts.norm_options,
        paper=paper,
        provenance=provenance(facts),
        report=facts.report,
        evaluation_data=readable_data(facts.report["evaluation"]["data"]) if facts.report else None,
        fidelity_rows=fidelity_rows(facts.report),
        fidelity_measurement=fidelity_measurement(facts.report),
        fine_tuning_rows=fine_tuning_rows((facts.report or {}).get("fine_tuning")),
        downstream_rows=downstream_rows(facts.report),
        training_metrics=training_metrics,
        limitations=limitations(facts),
        supported_transformers=SUPPORTED_TRANSFORMERS,
    )


def model_card_for_folder(folder: str | Path, repo_id: str, **overrides: Any) -> ModelCard:
    """`render_model_card(gather_card_facts(folder, repo_id, **overrides))`."""
    return render_model_card(gather_card_facts(folder, repo_id, **overrides))


# --------------------------------------------------------------------------------------------------------------------
# The Trainer writes the same card.
# --------------------------------------------------------------------------------------------------------------------


def create_trainer_model_card(
    trainer,
    *,
    model_name: str | None = None,
    license: str | None = None,
    language: str | list[str] | None = None,
    tags: str | list[str] | None = None,
    finetuned_from: str | None = None,
    dataset: str | list[str] | None = None,
    dataset_tags: str | list[str] | None = None,
    **_unused: Any,
) -> ModelCard | None:
    """Write the hf-norms card of a Trainer's output folder to its README.md, as `push_to_hub` of that folder would.

    The Trainer's state is saved first (`trainer_state.json`), and the conversion report of the checkpoint the model
    was loaded from is copied next to it when the output folder has none, so the folder holds everything the card
    says. `dataset` names what was trained on (as in `Trainer.create_model_card`); `dataset_tags` are its Hub ids.
    Returns the card (None on processes other than the main one).
    """
    if not trainer.is_world_process_zero():
        return None
    output_dir = Path(trainer.args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer.save_state()
    loaded_from = str(getattr(trainer.model, "name_or_path", "") or "")
    if loaded_from and not (output_dir / REPORT_NAME).is_file() and (Path(loaded_from) / REPORT_NAME).is_file():
        shutil.copyfile(Path(loaded_from) / REPORT_NAME, output_dir / REPORT_NAME)
    as_list = lambda value: [value] if isinstance(value, str) else list(value or [])  # noqa: E731
    repo_id = trainer.hub_model_id or model_name or output_dir.name
    # The model's lineage: a Hub id it was loaded from, else what the card beside its local source says.
    source_card = Path(loaded_from) / "README.md" if loaded_from else None
    source_data = ModelCard.load(source_card).data if source_card and source_card.is_file() else None
    if finetuned_from is None:
        finetuned_from = loaded_from if looks_like_repo_id(loaded_from) else getattr(source_data, "base_model", None)
    card = model_card_for_folder(
        output_dir,
        repo_id,
        base_model=finetuned_from,
        license=license or getattr(source_data, "license", None),
        language=language,
        datasets=as_list(dataset_tags),
        training_dataset=", ".join(as_list(dataset)) or None,
        tags=as_list(tags),
    )
    card.save(output_dir / "README.md")
    return card


class NormCardTrainerMixin:
    """Mix in front of `transformers.Trainer` so `push_to_hub` publishes the hf-norms card::

        class NormTrainer(NormCardTrainerMixin, Trainer): ...

    `create_model_card`, which `Trainer.push_to_hub` calls after saving and before uploading the output folder, writes
    the card of `create_trainer_model_card`, and refuses (before anything is uploaded) when a file the Trainer would
    upload contains the Hub token, which `training_args.bin` does when `TrainingArguments(hub_token=...)` is set.
    """

    def create_model_card(
        self,
        language: str | None = None,
        license: str | None = None,
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
    ) -> None:
        from huggingface_hub import get_token

        card = create_trainer_model_card(
            self,
            model_name=model_name,
            license=license,
            language=language,
            tags=tags,
            finetuned_from=finetuned_from,
            dataset=dataset,
            dataset_tags=dataset_tags,
        )
        if card is not None:
            output_dir = Path(self.args.output_dir)
            token = self.args.hub_token or get_token()
            refuse_token_leaks(output_dir, trainer_upload_files(output_dir), token)
