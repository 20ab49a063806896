"""Model cards that say exactly how a checkpoint was made, rendered from what was measured.

Everything a card states comes from files next to the weights: `config.json` (family, head, norm_type and options),
`conversion_report.json` (source, conversion, calibration, healing and fidelity, written by `hf_norms.convert`) and the
Trainer's `trainer_state.json` / `all_results.json` / `eval_results.json` (fine-tuning and its evaluation), plus what
the caller knows and the files cannot (the Hub id of a source read from a local copy, a license, dataset ids).
Nothing is estimated: a number absent from those files is absent from the card.

`model_card_for_folder(folder, repo_id)` returns a `huggingface_hub.ModelCard` rendered from the template shipped in
`hf_norms/templates/model_card.md`. `NormCardTrainerMixin` makes `Trainer.push_to_hub` write the same card.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .citations import PAPERS, Paper
from .norm_options import NormOptions
from .version_guard import SUPPORTED_TRANSFORMERS

TEMPLATE_PATH = Path(__file__).parent / "templates" / "model_card.md"
REPORT_NAME = "conversion_report.json"
TRAINER_STATE_NAME = "trainer_state.json"
TRAINER_RESULT_NAMES = ("eval_results.json", "all_results.json", "train_results.json")

# model_type -> (family tag, family name, config class)
FAMILIES = {
    "vit_norm": ("vit", "ViT", "ViTNormConfig"),
    "deit_norm": ("deit", "DeiT", "DeiTNormConfig"),
    "bert_norm": ("bert", "BERT", "BertNormConfig"),
}
# The head class's suffix -> its Auto class and pipeline task (None where transformers has no pipeline for it).
HEADS = {
    "ForImageClassificationWithTeacher": ("AutoModelForImageClassification", "image-classification"),
    "ForImageClassification": ("AutoModelForImageClassification", "image-classification"),
    "ForMaskedImageModeling": ("AutoModelForMaskedImageModeling", None),
    "ForMaskedLM": ("AutoModelForMaskedLM", "fill-mask"),
    "ForSequenceClassification": ("AutoModelForSequenceClassification", "text-classification"),
    "ForTokenClassification": ("AutoModelForTokenClassification", "token-classification"),
    "ForQuestionAnswering": ("AutoModelForQuestionAnswering", "question-answering"),
    "ForMultipleChoice": ("AutoModelForMultipleChoice", None),
    "ForNextSentencePrediction": ("AutoModelForNextSentencePrediction", None),
    "ForPreTraining": ("AutoModelForPreTraining", None),
    "LMHeadModel": ("AutoModelForCausalLM", "text-generation"),
    "Model": ("AutoModel", None),  # feature extraction; the task depends on the modality
}
# Data used by hf-norms (packaged.py; the conversion recipes name data files `<key>-<split>...`) -> the same data on
# the Hub, for `datasets:` and model-index.
HUB_DATASETS = {
    "bbc_news": "SetFit/bbc-news",
    "fashion_mnist": "zalando-datasets/fashion_mnist",
}
STAGES = ("naive", "calibrated", "healed", "exact")
# report metric -> (model-index metric type, what it measures)
FIDELITY_METRICS = {
    "mean_cosine": ("cosine_similarity", "mean cosine similarity to the source model's outputs"),
    "max_abs_diff": ("max_abs_diff", "max abs difference from the source model's outputs"),
    "top1_agreement": ("top1_agreement", "top-1 agreement with the source model"),
    "kl_divergence": ("kl_divergence", "KL divergence from the source model's predictions"),
}
# Trainer metrics that describe the run, not the model.
RUN_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "model_preparation_time")


@dataclass(frozen=True)
class NormText:
    """How a card explains one norm_type: a title, what it does to the model, a paragraph, a LaTeX equation, where it
    sits."""

    title: str
    headline: str
    description: str
    equation: str
    placement: str


NORM_TEXTS = {
    "layernorm": NormText(
        title="LayerNorm",
        headline="with its stock LayerNorms",
        description="The stock LayerNorm: statistics over the channels of each token, then a per-channel affine map.",
        equation=r"y = \gamma \odot \frac{x - \mu(x)}{\sqrt{\sigma^2(x) + \epsilon}} + \beta",
        placement="Every norm of the stock model is a LayerNorm; the model is the stock architecture.",
    ),
    "dyt": NormText(
        title="Dynamic Tanh (DyT)",
        headline="with **Dynamic Tanh (DyT)** in place of its LayerNorms",
        description=(
            "DyT replaces normalization by an element-wise squashing function with a learnable input scale. It "
            "computes no statistics: each channel of each token is mapped on its own."
        ),
        equation=r"y = \gamma \odot \tanh(\alpha x) + \beta",
        placement=(
            "`alpha` is one learnable scalar per norm (or one per channel with `dyt_per_channel_alpha`); `gamma` and "
            "`beta` are the per-channel `weight` and `bias`. Every LayerNorm of the model is replaced."
        ),
    ),
    "dtn": NormText(
        title="Dynamic Token Normalization (DTN)",
        headline="with **Dynamic Token Normalization (DTN)** in place of its LayerNorms",
        description=(
            "DTN mixes, per head group of channels, the LayerNorm statistics of each token with statistics gathered "
            "across tokens, weighted by learned functions of the relative position of the tokens."
        ),
        equation=(
            r"\mu_h = \lambda_\mu \mu^{LN} + (1 - \lambda_\mu) P_h x_h,\quad "
            r"\sigma^2_h = \lambda_\sigma \sigma^{2,LN} + (1 - \lambda_\sigma)\left(P_h x_h^2 - (P_h x_h)^2\right),\quad "
            r"y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta"
        ),
        placement=(
            r"`P_h = softmax(a_h · R + b_h)` over source tokens, with `R` the relative offsets `(dx, dy, dx² + dy²)` on "
            "the patch grid (one row for text); the gates `λ` are per head. Prefix tokens ([CLS], DeiT's "
            "distillation token) keep LayerNorm statistics, and padding never enters the shared statistics. With "
            "both gates at 1 it is exactly LayerNorm."
        ),
    ),
    "sepnorm": NormText(
        title="SepNorm",
        headline="with **SepNorm** in place of its LayerNorms",
        description="SepNorm normalizes the prefix tokens ([CLS], and DeiT's distillation token) with their own norm.",
        equation=r"y_{\mathrm{prefix}} = \mathrm{Norm}_{\mathrm{prefix}}(x_{\mathrm{prefix}}),\quad y_{\mathrm{tokens}} = \mathrm{LN}(x_{\mathrm{tokens}})",
        placement=(
            "The prefix norm is a BatchNorm over the batch (the paper's default) or a LayerNorm "
            "(`sepnorm_prefix_norm`); every LayerNorm of the model is replaced."
        ),
    ),
    "lape": NormText(
        title="LaPE (layer-adaptive position embedding)",
        headline="with **LaPE**: its position embedding normalized by its own LayerNorm in every layer",
        description=(
            "LaPE takes the position embedding out of the input sum: each layer normalizes it with its own "
            "LayerNorm and adds it to that layer's attention input only."
        ),
        equation=(
            r"p_l = \mathrm{LN}^{pe}_l(p_{l-1}),\quad x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x) + p_l),\quad "
            r"x \leftarrow x + \mathrm{MLP}(\mathrm{LN}(x))"
        ),
        placement=(
            '`lape_mode="shared"` normalizes the input embedding `p_0` at every layer instead of the previous '
            "layer's; `lape_keep_input_pe` keeps the embedding in the input as well, with every `pe_norm` starting "
            "at zero."
        ),
    ),
}


@dataclass
class TrainingFacts:
    """A Trainer run on this checkpoint after conversion, as its output files record it."""

    global_step: int | None = None
    epochs: float | None = None
    dataset: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # evaluation, without the `eval_` prefix


@dataclass
class CardFacts:
    """Everything a card states about one checkpoint folder."""

    repo_id: str
    model_type: str
    architecture: str
    norm_type: str
    norm_options: dict[str, Any]
    base_model: str | None
    license: str | None
    language: str | list[str] | None
    datasets: list[str]
    report: dict[str, Any] | None
    training: TrainingFacts | None
    tags: list[str]
    notes: list[str]
    hf_norms_version: str
    without_pooler: bool = False  # a bare model saved without pooler weights (e.g. DINOv2 has no pooler)

    @property
    def model_name(self) -> str:
        return self.repo_id.split("/")[-1]

    @property
    def family(self) -> str:
        return FAMILIES[self.model_type][0]

    @property
    def auto_class(self) -> str:
        return head_of(self.architecture)[0]

    @property
    def pipeline_tag(self) -> str | None:
        task = head_of(self.architecture)[1]
        if task is None and self.auto_class == "AutoModel":
            task = "feature-extraction" if self.family == "bert" else "image-feature-extraction"
        return task

    @property
    def published_stage(self) -> str | None:
        """The report stage the weights are in: `exact`, else the last of naive, calibrated, healed."""
        stages = (self.report or {}).get("stages") or {}
        present = [stage for stage in STAGES if stage in stages]
        return present[-1] if present else None

    @property
    def trained_after_conversion(self) -> bool:
        """Healing (distillation) or fine-tuning changed the weights after the norms were swapped."""
        return bool((self.report or {}).get("healing")) or self.training is not None


def head_of(architecture: str) -> tuple[str, str | None]:
    """(Auto class, pipeline task) of a model class name, e.g. `BertNormForMaskedLM` -> `AutoModelForMaskedLM`."""
    for suffix, head in HEADS.items():
        if architecture.endswith(suffix):
            return head
    raise ValueError(f"{architecture!r} is not an hf-norms model class (ViTNorm*, DeiTNorm*, BertNorm*).")


def weight_names(folder: Path) -> set[str]:
    """Names of the tensors in a folder's safetensors weights, read from the headers (empty when there are none)."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return set(read_json(index)["weight_map"])
    if not (folder / "model.safetensors").is_file():
        return set()
    with safe_open(folder / "model.safetensors", framework="pt") as weights:
        return set(weights.keys())


def saved_without_pooler(folder: Path, architecture: str) -> bool:
    """A bare `*NormModel` whose weights have no pooler: it loads cleanly only with `add_pooling_layer=False`."""
    names = weight_names(folder)
    return head_of(architecture)[0] == "AutoModel" and bool(names) and not any("pooler." in name for name in names)


def installed_version() -> str:
    """This package's version (read when needed: `hf_norms/__init__.py` may import this module before defining it)."""
    import hf_norms

    return hf_norms.__version__


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def non_default_norm_options(config: dict[str, Any]) -> dict[str, Any]:
    """The NormOptions fields of a config.json that differ from their defaults (norm_type itself excluded)."""
    options = {}
    for option in fields(NormOptions):
        if option.name != "norm_type" and option.name in config and config[option.name] != option.default:
            options[option.name] = config[option.name]
    return options


def read_training_facts(folder: Path, dataset: str | None = None) -> TrainingFacts | None:
    """The Trainer run recorded in `folder`, or None when nothing shows the weights were trained there.

    Training is shown by `trainer_state.json` with `global_step > 0` or `train_*` entries in the results files. The
    evaluation metrics are those of `eval_results.json`, else the `eval_*` entries of `all_results.json`, else the last
    evaluation logged in `trainer_state.json`.
    """
    state = read_json(folder / TRAINER_STATE_NAME) if (folder / TRAINER_STATE_NAME).is_file() else {}
    results = {name: read_json(folder / name) for name in TRAINER_RESULT_NAMES if (folder / name).is_file()}
    trained = (state.get("global_step") or 0) > 0 or any(
        key.startswith("train_") for values in results.values() for key in values
    )
    if not trained:
        return None
    evaluations = [entry for entry in state.get("log_history", []) if any(k.startswith("eval_") for k in entry)]
    source = results.get("eval_results.json") or results.get("all_results.json") or (evaluations or [{}])[-1]
    metrics = {
        key.removeprefix("eval_"): float(value)
        for key, value in source.items()
        if key.startswith("eval_")
        and key.removeprefix("eval_") not in RUN_METRICS
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    }
    all_results = results.get("all_results.json", {})
    return TrainingFacts(
        global_step=state.get("global_step"),
        epochs=state.get("epoch", all_results.get("epoch")),
        dataset=dataset,
        metrics=metrics,
    )


def source_card_data(report: dict[str, Any] | None) -> dict[str, Any]:
    """Metadata of the source checkpoint's README.md when the report names a local folder that has one."""
    source = (report or {}).get("source")
    if not source or not (Path(source) / "README.md").is_file():
        return {}
    return ModelCard.load(Path(source) / "README.md").data.to_dict()


def looks_like_repo_id(value: str | None) -> bool:
    return bool(value) and re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not Path(value).exists()


ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s/()]+/)*([^\s/()]+)")


def data_name(description: str) -> str:
    """A report's data description without local folders: `/tmp/x/bbc_news-test.txt` -> `bbc_news-test.txt`."""
    return ABSOLUTE_PATH.sub(r"\1", description)


def hub_dataset(description: str | None) -> str | None:
    """The Hub id of the data a description names, where known: a Hub id itself, or a `HUB_DATASETS` key that starts
    its file name (`bbc_news-train.txt` -> `SetFit/bbc-news`)."""
    if not description:
        return None
    name = data_name(description)
    return HUB_DATASETS.get(re.split(r"[-.\s]", name)[0]) or (name if looks_like_repo_id(name) else None)


def report_datasets(report: dict[str, Any] | None) -> list[str]:
    """Hub ids of the data the report fitted weights on (calibration, healing), where known."""
    ids = [hub_dataset(((report or {}).get(step) or {}).get("data")) for step in ("calibration", "healing")]
    return list(dict.fromkeys(hub_id for hub_id in ids if hub_id))


def gather_card_facts(
    folder: str | Path,
    repo_id: str,
    *,
    base_model: str | None = None,
    license: str | None = None,
    language: str | list[str] | None = None,
    datasets: list[str] | None = None,
    training_dataset: str | None = None,
    tags: list[str] | None = None,
    notes: list[str] | None = None,
    conversion_report: str | Path | None = None,
) -> CardFacts:
    """Read what the card will say from `folder` (see the module docstring); keyword arguments fill in what the files
    cannot know and take precedence: `base_model` (a Hub id), `license`, `language`, `datasets` (Hub ids),
    `training_dataset` (what a Trainer run trained and evaluated on), extra `tags`, `notes` (sentences appended to
    "How this checkpoint was made"), `conversion_report` (a report kept elsewhere than `folder`).

    License and language default to the source checkpoint's README.md metadata when the report names a local source
    that has one; `base_model` defaults to the report's source when that is a Hub id.
    """
    folder = Path(folder)
    config = read_json(folder / "config.json")
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(
            f"{folder / 'config.json'} has model_type {model_type!r}; a card needs an hf-norms checkpoint "
            f"({', '.join(FAMILIES)}). Convert the model with hf_norms first."
        )
    report_path = Path(conversion_report) if conversion_report else folder / REPORT_NAME
    report = read_json(report_path) if report_path.is_file() else None
    inherited = source_card_data(report)
    source = (report or {}).get("source")
    training = read_training_facts(folder, training_dataset)
    architecture = (config.get("architectures") or [f"{FAMILIES[model_type][1]}NormModel"])[0]
    all_datasets = [*(datasets or []), *report_datasets(report)]
    if training is not None and hub_dataset(training.dataset):
        all_datasets.append(hub_dataset(training.dataset))
    return CardFacts(
        repo_id=repo_id,
        model_type=model_type,
        architecture=architecture,
        norm_type=config.get("norm_type", "layernorm"),
        norm_options=non_default_norm_options(config),
        base_model=base_model or (source if looks_like_repo_id(source) else None),
        license=license or inherited.get("license"),
        language=language or inherited.get("language"),
        datasets=list(dict.fromkeys(all_datasets)),
        report=report,
        training=training,
        tags=list(tags or []),
        notes=list(notes or []),
        hf_norms_version=(report or {}).get("hf_norms_version") or installed_version(),
        without_pooler=saved_without_pooler(folder, architecture),
    )


def card_metadata(facts: CardFacts) -> ModelCardData:
    """The YAML metadata: library, task, base model and relation, tags, datasets, license, model-index results."""
    paper = PAPERS.get(facts.norm_type)
    tags = ["hf-norms", facts.family, facts.norm_type, "custom_code", *([f"arxiv:{paper.arxiv_id}"] if paper else [])]
    relation = {"base_model_relation": "finetune"} if facts.base_model and facts.trained_after_conversion else {}
    return ModelCardData(
        model_name=facts.model_name,
        library_name="transformers",
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
            dataset_name=data,
            metric_type=metric_type,
            metric_value=measured[key],
            metric_name=f"{description} ({stage})",
        )
        for key, (metric_type, description) in FIDELITY_METRICS.items()
        if measured.get(key) is not None
    ]


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
            if report.get("exact")
            else "approximately: this norm cannot reproduce the source's LayerNorms exactly (see the fidelity table)"
        )
        steps.append(f"Source: {source}.")
        steps.append(
            f"Converted with hf-norms {facts.hf_norms_version} to `{facts.architecture}`, "
            f'`norm_type="{facts.norm_type}"`, {exact}.'
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
    if report and not report.get("exact") and not facts.trained_after_conversion:
        items.append(
            "The weights were converted without any training, so the model does not compute what the source "
            "computed; check the fidelity table before using it as a drop-in replacement."
        )
    if report.get("exact") and facts.training is None:
        items.append(
            "The conversion is exact, so the model computes what the source computes: the new norm makes a "
            "difference only once the model is trained further."
        )
    if facts.norm_type == "dyt":
        items.append("DyT has no statistics: its outputs depend on the scale of its inputs, unlike LayerNorm's.")
        if facts.family == "bert":
            items.append(
                "BERT is post-LN; the DyT paper tested pre-LN transformers only, so DyT on BERT is outside what it "
                "tested: treat it as experimental."
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
    """The fidelity table, one row per stage in the order they were made, numbers formatted for reading."""
    formats = {"max_abs_diff": "{:.3g}", "mean_cosine": "{:.4f}", "top1_agreement": "{:.3f}", "kl_divergence": "{:.3g}"}
    rows = []
    for stage in STAGES:
        measured = ((report or {}).get("stages") or {}).get(stage)
        if measured:
            values = measured["end_to_end"]
            rows.append(
                {
                    "stage": stage,
                    **{
                        key: "—" if values.get(key) is None else fmt.format(values[key]) for key, fmt in formats.items()
                    },
                }
            )
    return rows


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
        norm=NORM_TEXTS[facts.norm_type],
        options=facts.norm_options,
        paper=paper,
        provenance=provenance(facts),
        report=facts.report,
        evaluation_data=data_name(facts.report["evaluation"]["data"]) if facts.report else None,
        fidelity_rows=fidelity_rows(facts.report),
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

        from .publish import refuse_token_leaks, trainer_upload_files

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
