"""Model cards that say exactly how a checkpoint was made, rendered from what was measured.

`model_card_for_folder(folder, repo_id)` returns a `huggingface_hub.ModelCard` rendered from the template shipped in
`hf_norms/hub/templates/model_card.md`, from the facts `card_facts.gather_card_facts` reads next to the weights (its
metadata here, its body's sections in `card_sections`). `NormCardTrainerMixin` makes a Trainer publish the same card,
once, through `hf_norms.hub.publish.push_to_hub`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..conversion.downstream import dataset_name
from ..conversion.report import fine_tuning_rows
from ..models.norms import norm_spec
from ..models.version_guard import SUPPORTED_TRANSFORMERS
from ..output_folders import copy_checkpoint_files
from .card_facts import (
    FAMILIES,
    FIDELITY_METRICS,
    REPORT_NAME,
    CardFacts,
    data_name,
    gather_card_facts,
    hub_dataset,
    identical_outputs,
    source_lineage,
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
from .upload_files import refuse_token_leaks, trainer_upload_files

logger = logging.getLogger(__name__)

TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"


def card_metadata(facts: CardFacts) -> ModelCardData:
    """The YAML metadata: library, task, base model and relation, tags, datasets, license, model-index results."""
    paper = norm_spec(facts.norm_type).paper
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
            EvalResult(task_type="text-classification" if facts.family == "bert" else "image-classification",
                       task_name="linear probe on pooled features", dataset_type=hub_dataset(data),
                       dataset_name=probe["name"], dataset_split="test", metric_type=metric_type,
                       metric_value=measured["probe"][key], metric_name=f"{description} ({stage})")
            for key, (metric_type, description) in PROBE_METRICS.items()
        ]  # fmt: skip
    return results


def render_model_card(facts: CardFacts) -> ModelCard:
    """The card of `facts`, from the shipped template."""
    spec = norm_spec(facts.norm_type)
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
        norm=with_kept_layernorms(spec.text, facts.norm_type, facts.norm_options.get("layer_norm_types"), facts.family),
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


def model_card_for_folder(folder: str | Path, repo_id: str, **overrides: Any) -> ModelCard:
    """`render_model_card(gather_card_facts(folder, repo_id, **overrides))`."""
    return render_model_card(gather_card_facts(folder, repo_id, **overrides))


# --------------------------------------------------------------------------------------------------------------------
# The Trainer writes the same card.
# --------------------------------------------------------------------------------------------------------------------


def trainer_card_arguments(
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
) -> tuple[str, dict[str, Any]]:
    """(repo id, `gather_card_facts` keyword arguments) of a Trainer's output folder, after saving the Trainer's state
    there (`trainer_state.json`) and copying the conversion report of the checkpoint the model was loaded from when
    the folder has none, so the folder holds everything the card says. `dataset` names what was trained on (as in
    `Trainer.create_model_card`); `dataset_tags` are its Hub ids."""
    output_dir = Path(trainer.args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer.save_state()
    loaded_from = str(getattr(trainer.model, "name_or_path", "") or "")
    if loaded_from and not (output_dir / REPORT_NAME).is_file() and (Path(loaded_from) / REPORT_NAME).is_file():
        copy_checkpoint_files(Path(loaded_from), output_dir, [REPORT_NAME])  # never through a link out of it
    as_list = lambda value: [value] if isinstance(value, str) else list(value or [])  # noqa: E731
    repo_id = trainer.args.hub_model_id or model_name or output_dir.absolute().name
    source = source_lineage(loaded_from) if loaded_from else {}
    return repo_id, {
        "base_model": finetuned_from or source.get("base_model"),
        "license": license or source.get("license"),
        "language": language or source.get("language"),
        "datasets": as_list(dataset_tags),
        "training_dataset": ", ".join(as_list(dataset)) or None,
        "tags": as_list(tags),
    }


def create_trainer_model_card(trainer, **card_arguments: Any) -> ModelCard | None:
    """Write the hf-norms card of a Trainer's output folder to its README.md, as `push_to_hub` of that folder renders
    it; `card_arguments` are those of `Trainer.create_model_card` (see `trainer_card_arguments`). Returns the card
    (None on processes other than the main one)."""
    if not trainer.is_world_process_zero():
        return None
    repo_id, overrides = trainer_card_arguments(trainer, **card_arguments)
    card = model_card_for_folder(trainer.args.output_dir, repo_id, **overrides)
    card.save(Path(trainer.args.output_dir) / "README.md")
    return card


class NormCardTrainerMixin:
    """Mix in front of `transformers.Trainer` so it publishes as `hf-norms push` does, once, with the hf-norms card::

        class NormTrainer(NormCardTrainerMixin, Trainer): ...

    - `push_to_hub()` saves the model, writes the card to the output folder's README.md and uploads the folder with
      `hf_norms.hub.publish.push_to_hub`: one commit, the rendered card, and none of what that push skips
      (`training_args.bin`, which pickles `hub_token`; `checkpoint-*/`; secrets), the token in no file or log line.
      Call it after evaluating, as transformers' example scripts do, so the card has the evaluation.
    - Nothing is pushed before that: making the Trainer with `push_to_hub=True` creates no repo (`init_hf_repo` only
      names it), saving a checkpoint pushes nothing whatever `hub_strategy` says (those pushes publish an unfinished
      model, and `checkpoint`/`all_checkpoints` pickled optimizer states), and neither does `save_model()`.
    - `create_model_card` writes the same card, and refuses (before anything is uploaded) when a file the stock
      Trainer's upload would take contains the Hub token, which `training_args.bin` does with `hub_token` set.
    """

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """Name the repo `push_to_hub` will create (`hub_model_id`, else the output folder's name); nothing is sent."""
        strategy = getattr(self.args.hub_strategy, "value", self.args.hub_strategy)  # a HubStrategy, or its value
        if strategy in ("checkpoint", "all_checkpoints"):
            logger.warning(
                "hub_strategy=%s is ignored: hf-norms pushes once, at the end (push_to_hub), and never pickled "
                "checkpoints; keep checkpoints locally to resume.",
                strategy,
            )
        self.hub_model_id = self.args.hub_model_id or Path(self.args.output_dir).absolute().name
        self.push_in_progress = None

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """Push nothing at a checkpoint: the model is unfinished (see the class docstring)."""

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save as the Trainer does, without pushing (the push is `push_to_hub`, once, at the end)."""
        super().save_model(output_dir, _internal_call=True)

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        **card_arguments: Any,
    ):
        """Save the model and publish the output folder with its card in one commit (`hf_norms.push_to_hub`); returns
        the `CommitInfo` (None on processes other than the main one). `card_arguments` are those of
        `create_model_card`; the upload always blocks."""
        from .publish import push_to_hub

        self.save_model()
        if not self.is_world_process_zero():
            return None
        repo_id, overrides = trainer_card_arguments(self, **card_arguments)
        model_card_for_folder(self.args.output_dir, repo_id, **overrides).save(Path(self.args.output_dir) / "README.md")
        return push_to_hub(
            self.args.output_dir,
            repo_id,
            private=bool(self.args.hub_private_repo if private is None else private),
            revision=revision or self.args.hub_revision,
            commit_message=commit_message,
            token=token or self.args.hub_token,
            **overrides,
        )

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
