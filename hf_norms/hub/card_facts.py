"""What a model card states about a checkpoint folder, read from the files next to the weights.

Everything comes from `config.json` (family, head, norm_type and options), `conversion_report.json` (source,
conversion, calibration, healing and fidelity, written by `hf_norms.convert`) and the Trainer's `trainer_state.json` /
`all_results.json` / `eval_results.json` (fine-tuning and its evaluation), plus what the caller knows and the files
cannot (the Hub id of a source read from a local copy, a license, dataset ids). Nothing is estimated: a number absent
from those files is absent from the card.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .. import packaged, readers
from ..conversion.sources import sentence_transformers_max_length
from ..models.family_registry import FAMILIES, MODEL_CLASSES, family_of
from ..models.family_spec import FamilySpec
from ..models.norm_options import NormOptions
from ..norms.registry import STOCK
from ..readers import card_metadata_of
from ..version import VERSION
from .arguments import CardArguments

REPORT_NAME = "conversion_report.json"
TRAINER_STATE_NAME = "trainer_state.json"
TRAINER_RESULT_NAMES = ("eval_results.json", "all_results.json", "train_results.json")

# Each Auto class of an hf-norms head -> the transformers pipeline task that runs it (None where there is none; a
# bare model's feature-extraction task depends on its modality).
PIPELINE_TASKS = {
    "AutoModelForImageClassification": "image-classification",
    "AutoModelForMaskedLM": "fill-mask",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForTokenClassification": "token-classification",
    "AutoModelForQuestionAnswering": "question-answering",
    "AutoModelForCausalLM": "text-generation",
}
FEATURE_EXTRACTION = {"text": "feature-extraction", "image": "image-feature-extraction"}
# the model types of hf-norms checkpoints (`bert_norm`, ...)
NORM_MODEL_TYPES = tuple(spec.model_type for spec in FAMILIES.values())
# Data used by hf-norms (packaged.py; the conversion recipes name data files `<key>-<split>...`) -> the same data on
# the Hub, for `datasets:` and model-index.
HUB_DATASETS = {
    "bbc_news": "SetFit/bbc-news",
    "fashion_mnist": "zalando-datasets/fashion_mnist",
}
STAGES = ("naive", "calibrated", "healed", "exact")
EXACT_TOLERANCE = 1e-4  # max abs output difference a conversion called exact may show (float32 rounding)
# report metric -> (model-index metric type, what it measures)
FIDELITY_METRICS = {
    "mean_cosine": ("cosine_similarity", "mean cosine similarity to the source model's outputs"),
    "max_abs_diff": ("max_abs_diff", "max abs difference from the source model's outputs"),
    "top1_agreement": ("top1_agreement", "top-1 agreement with the source model"),
    "kl_divergence": ("kl_divergence", "KL divergence from the source model's predictions"),
}
# Trainer metrics that describe the run, not the model.
RUN_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "model_preparation_time")


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
    sentence_transformers: bool = False  # its sentence-transformers files describe it (`sentence_transformers_model`)
    max_seq_length: int | None = None  # the tokens per text such a model runs at (sentence_bert_config.json)
    custom_code: list[str] = field(default_factory=list)  # published files that are or name code not hf-norms' own

    @property
    def model_name(self) -> str:
        return self.repo_id.split("/")[-1]

    @property
    def family(self) -> FamilySpec:
        return family_of(self.model_type)

    @property
    def auto_class(self) -> str:
        return head_of(self.architecture)[0]

    @property
    def library_name(self) -> str:
        return "sentence-transformers" if self.sentence_transformers else "transformers"

    @property
    def pipeline_task(self) -> str | None:
        """The transformers `pipeline()` task that runs the checkpoint (no pipeline is called sentence-similarity)."""
        return "feature-extraction" if self.sentence_transformers else self.pipeline_tag

    @property
    def pipeline_tag(self) -> str | None:
        if self.sentence_transformers:
            return "sentence-similarity"
        task = head_of(self.architecture)[1]
        if task is None and self.auto_class == "AutoModel":
            task = FEATURE_EXTRACTION[self.family.modality]
        return task

    @property
    def measured_exact(self) -> bool:
        """The conversion was meant to be exact and measured so: every figure of its `exact` stage is finite and the
        outputs differ by at most `EXACT_TOLERANCE`. Only then does a card say the model computes the source's
        function."""
        stage = ((self.report or {}).get("stages") or {}).get("exact")
        if not (self.report or {}).get("exact") or not stage:
            return False
        figures = [value for value in stage["end_to_end"].values() if value is not None]
        return all(math.isfinite(value) for value in figures) and stage["end_to_end"]["max_abs_diff"] <= EXACT_TOLERANCE

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
    """(Auto class, pipeline task) of a model class name, e.g. `BertNormForMaskedLM` -> `AutoModelForMaskedLM`: the
    class's own `_auto_class`."""
    if architecture not in MODEL_CLASSES:
        raise ValueError(f"{architecture!r} is not an hf-norms model class ({', '.join(sorted(MODEL_CLASSES))}).")
    auto_class = MODEL_CLASSES[architecture]._auto_class
    return auto_class, PIPELINE_TASKS.get(auto_class)


# Auto classes of the architectures sentence-transformers checkpoints are saved with (all-mpnet-base-v2 declares
# MPNetForMaskedLM): their encoder is the embedding model, which SentenceTransformer loads through AutoModel
EMBEDDING_MODEL_CLASSES = ("AutoModel", "AutoModelForMaskedLM", "AutoModelForPreTraining")


def sentence_transformers_model(folder: Path, architecture: str) -> bool:
    """Whether the folder's sentence-transformers files (modules.json, its pooling and other module folders) describe
    the model: they do for the architectures sentence-transformers checkpoints are saved with
    (`EMBEDDING_MODEL_CLASSES`), whose encoder `SentenceTransformer` loads and pools. With a task's head (a classifier
    fine-tuned from a sentence-transformers checkpoint, a token classifier, ...), `SentenceTransformer` would load the
    encoder and silently drop the head, so the card describes the head, for transformers' pipeline of its task, and a
    push leaves those files out (`upload_files.select_upload_files`)."""
    return (folder / "modules.json").is_file() and head_of(architecture)[0] in EMBEDDING_MODEL_CLASSES


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
    family = family_of(MODEL_CLASSES[architecture].config_class.model_type) if architecture in MODEL_CLASSES else None
    if family is None or not family.pooler_option:  # DINOv2, CLIP: no pooler at all (`pooler_option`)
        return False
    names = weight_names(folder)
    return head_of(architecture)[0] == "AutoModel" and bool(names) and not any("pooler." in name for name in names)


def read_json(path: Path) -> Any:
    """The JSON value in `path`, read bounded (`readers.read_json`)."""
    return readers.read_json(path, "fix or remove the file")


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
    return card_metadata_of(Path(source) / "README.md") if source else {}


def looks_like_repo_id(value: str | None) -> bool:
    return bool(value) and re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not Path(value).exists()


HUB_CACHE_SNAPSHOT = re.compile(r"(?:^|/)models--([\w.-]+?)--([\w.-]+)/snapshots/[^/]+/?$")


def trained_on(own_card: dict[str, Any]) -> str | None:
    """What a Trainer run in this folder evaluated on, as the card hf-norms wrote at its end names it: the dataset name
    of its model-index results (None when the card has none)."""
    entries = own_card.get("model-index")
    for entry in entries if isinstance(entries, list) else []:
        results = entry.get("results") if isinstance(entry, dict) else None
        for result in results if isinstance(results, list) else []:
            dataset = result.get("dataset") if isinstance(result, dict) else None
            if isinstance(dataset, dict) and isinstance(dataset.get("name"), str):
                return dataset["name"]
    return None


def as_id_list(value: Any) -> list[str]:
    """A card's `datasets` (a string or a list) as a list of strings."""
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [item for item in values if isinstance(item, str)]


def source_lineage(
    source: str, publishing_to: str | None = None, token: str | None = None, endpoint: str | None = None
) -> dict[str, Any]:
    """What the card of a model trained from `source` (a Hub id or a local folder) takes from it: `base_model`,
    `license`, `language` and the `datasets` its weights were trained on, each only where a file says it.

    The base model is `source` itself when it is a Hub id, a snapshot of one in the Hugging Face cache
    (`.../models--ORG--NAME/snapshots/REV`) or a packaged checkpoint, else what the folder's card (README.md metadata)
    or conversion report names as its source; when `source` is the repo being published to (`publishing_to`: a model
    loaded from `org/x` pushed back to `org/x`), it is what that repo's card names. License and language come from the
    folder's card, else from the card beside its conversion report's source. A Hub id's card is read from the cache,
    or, when publishing (`publishing_to`, with `token`), from the Hub at `endpoint` (default: HF_ENDPOINT).
    """
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError

    folder = Path(source)
    cached = HUB_CACHE_SNAPSHOT.search(folder.resolve().as_posix()) if folder.is_dir() else None
    hub_id = source if looks_like_repo_id(source) else (f"{cached[1]}/{cached[2]}" if cached else None)
    hub_id = hub_id or (packaged.hub_id_of(folder) if folder.is_dir() else None)
    card_path = folder / "README.md" if folder.is_dir() else None
    if hub_id and not folder.is_dir():
        found = try_to_load_from_cache(hub_id, "README.md")
        if not isinstance(found, str) and publishing_to:
            try:
                found = hf_hub_download(hub_id, "README.md", token=token, endpoint=endpoint)
            except (OSError, EntryNotFoundError):  # no card, or the Hub cannot be reached: nothing is inherited
                found = None
        card_path = Path(found) if isinstance(found, str) else None
    card = card_metadata_of(card_path)
    report = read_json(folder / REPORT_NAME) if folder.is_dir() and (folder / REPORT_NAME).is_file() else None
    inherited = source_card_data(report)
    report_source = (report or {}).get("source")
    base_model = (
        (hub_id if hub_id != publishing_to else None)
        or card.get("base_model")
        or (report_source if looks_like_repo_id(report_source) else inherited.get("base_model"))
    )
    return {
        "base_model": base_model if base_model != publishing_to else None,
        "license": card.get("license") or inherited.get("license"),
        "language": card.get("language") or inherited.get("language"),
        "datasets": as_id_list(card.get("datasets")) or None,
    }


ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s/()]+/)*([^\s/()]+)")


def data_name(description: str) -> str:
    """A report's data description without local folders: `/tmp/x/bbc_news-test.txt` -> `bbc_news-test.txt`."""
    return ABSOLUTE_PATH.sub(r"\1", description)


def without_local_paths(value: Any) -> Any:
    """JSON data with every string that holds a local absolute path cut to the path's last component (`data_name`):
    what a published report may say about where its files were (URLs are kept)."""
    if isinstance(value, dict):
        return {key: without_local_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_local_paths(item) for item in value]
    if isinstance(value, str) and "://" not in value:
        return data_name(value)
    return value


def hub_dataset(description: str | None) -> str | None:
    """The Hub id of the data a description names, where known: a Hub id itself, a packaged set
    (`packaged:bbc-news` -> `SetFit/bbc-news`), or a `HUB_DATASETS` key that starts its file name
    (`bbc_news-train.txt` -> `SetFit/bbc-news`)."""
    if not description:
        return None
    name = data_name(description)
    if name.startswith("packaged:"):
        return HUB_DATASETS.get(name.removeprefix("packaged:").replace("-", "_"))
    return HUB_DATASETS.get(re.split(r"[-.\s]", name)[0]) or (name if looks_like_repo_id(name) else None)


def identical_outputs(measured: dict[str, Any]) -> dict[str, Any]:
    """A stage's figures, with those of outputs that are identical (max abs diff exactly 0) made exact: cosine and
    top-1 agreement 1, KL divergence 0, where float32 arithmetic measured 0.99999998 or 1e-9."""
    if measured.get("max_abs_diff") != 0:
        return measured
    exact = {"mean_cosine": 1.0, "top1_agreement": 1.0, "kl_divergence": 0.0}
    return {key: exact[key] if key in exact and value is not None else value for key, value in measured.items()}


def report_datasets(report: dict[str, Any] | None) -> list[str]:
    """Hub ids of the data the report fitted weights on (calibration, healing), where known."""
    ids = [hub_dataset(((report or {}).get(step) or {}).get("data")) for step in ("calibration", "healing")]
    return list(dict.fromkeys(hub_id for hub_id in ids if hub_id))


def base_model_of(named: str | None, source: str | None, repo_id: str) -> str | None:
    """The card's `base_model`: the one given or named by the folder's card, else the report's source where it is a Hub
    id or a packaged checkpoint (`packaged.hub_id_of`); never the repo the card is published to."""
    if not named and source:
        named = source if looks_like_repo_id(source) else packaged.hub_id_of(source) if Path(source).is_dir() else None
    return named if named != repo_id else None


def gather_card_facts(
    folder: str | Path, repo_id: str, card: CardArguments | None = None, custom_code: Sequence[str] = ()
) -> CardFacts:
    """Read what the card will say from `folder` (see the module docstring); `card` fills in what the files cannot
    know and takes precedence (`CardArguments`: `base_model`, `license`, `language`, `datasets`, `training_dataset`,
    extra `tags`, `notes` appended to "How this checkpoint was made", a `conversion_report` kept elsewhere);
    `custom_code` names the published files that are or name code not hf-norms' own (the card then says to load with
    `trust_remote_code=False`).

    `base_model`, license, language, datasets and what a Trainer run trained on default to what the folder's own
    README.md metadata says (the card hf-norms writes at the end of a Trainer run names them, from `source_lineage`),
    so a push keeps them; else license and language to the source checkpoint's README.md metadata when the report names
    a local source that has one, and `base_model` to the report's source when that is a Hub id or a packaged
    checkpoint (`base_model_of`: never `repo_id` itself). Neither a license nor a language is ever assumed.
    """
    card = card or CardArguments()
    folder = Path(folder)
    config = read_json(folder / "config.json")
    model_type = config.get("model_type")
    family = family_of(model_type)
    if family is None or model_type != family.model_type:
        raise ValueError(
            f"{folder / 'config.json'} has model_type {model_type!r}; a card needs an hf-norms checkpoint "
            f"({', '.join(NORM_MODEL_TYPES)}). Convert the model with hf_norms first."
        )
    report_path = Path(card.conversion_report) if card.conversion_report else folder / REPORT_NAME
    report = read_json(report_path) if report_path.is_file() else None
    own = card_metadata_of(folder / "README.md")
    inherited = {**source_card_data(report), **{key: own[key] for key in ("license", "language") if own.get(key)}}
    source = (report or {}).get("source")
    training_dataset = card.training_dataset or trained_on(own)
    training = read_training_facts(folder, data_name(training_dataset) if training_dataset else None)
    architecture = (config.get("architectures") or [f"{family.class_prefix}NormModel"])[0]
    embeddings = sentence_transformers_model(folder, architecture)  # else a head: transformers' model of its task
    all_datasets = [*(card.datasets or []), *as_id_list(own.get("datasets")), *report_datasets(report)]
    if training is not None and hub_dataset(training.dataset):
        all_datasets.append(hub_dataset(training.dataset))
    return CardFacts(
        repo_id=repo_id,
        model_type=model_type,
        architecture=architecture,
        norm_type=config.get("norm_type", STOCK),
        norm_options=non_default_norm_options(config),
        base_model=base_model_of(card.base_model or own.get("base_model"), source, repo_id),
        license=card.license or inherited.get("license"),
        language=card.language or inherited.get("language"),
        datasets=list(dict.fromkeys(all_datasets)),
        report=report,
        training=training,
        tags=list(card.tags or []),
        notes=list(card.notes or []),
        hf_norms_version=(report or {}).get("hf_norms_version") or VERSION,
        without_pooler=saved_without_pooler(folder, architecture),
        sentence_transformers=embeddings,
        max_seq_length=sentence_transformers_max_length(folder) if embeddings else None,
        custom_code=list(custom_code),
    )
