"""The checks `POST /api/validate-yaml` makes of a card's YAML metadata, as the Hub makes them.

huggingface_hub posts every README.md it uploads (`upload_folder`, `create_commit`, `upload_file`) and every
`RepoCard.validate()` / `RepoCard.push_to_hub()` here first, and refuses the upload when the answer lists errors. So a
card that the Hub would refuse is refused offline too:

- metadata that does not parse, or is not a mapping, is an error; a card without metadata only a warning;
- `license`: one of the Hub's license identifiers (`LICENSES`, `other` for any other license), or a list of them;
- model cards: `pipeline_tag` one of the Hub's tasks (`PIPELINE_TAGS`); `base_model` one repo id or a list of them,
  `base_model_relation` one of `BASE_MODEL_RELATIONS`; `model-index` a list of `{name, results}`, each result a
  `task` with a `type`, a `dataset` with a `type` and a `name`, and a non-empty list of `metrics`, each with a `type`
  and a `value`;
- `library_name` a string; `tags`, `datasets`, `language` a string or a list of strings.

huggingface_hub ships neither list, so both are written here, from the Hub's documentation of repository licenses
(hub/repositories-licenses) and of its tasks (the `pipeline_tag` values of huggingface.js' tasks package).
"""

from __future__ import annotations

import re
from typing import Any

from .metadata import front_matter

LICENSES = frozenset(
    """
    apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
    afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5
    cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
    cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0
    cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0
    lgpl lgpl-2.1 lgpl-3.0 isc h-research intel-research lppl-1.3c ms-pl apple-ascl apple-amlr mpl-2.0 odc-by odbl
    openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib pddl lgpl-lr deepfloyd-if-license llama2 llama3 llama3.1
    llama3.2 llama3.3 llama4 gemma unknown other
    """.split()
)
PIPELINE_TAGS = frozenset(
    """
    text-classification token-classification table-question-answering question-answering zero-shot-classification
    translation summarization feature-extraction text-generation fill-mask sentence-similarity text-ranking
    text-to-speech text-to-audio automatic-speech-recognition audio-to-audio audio-classification audio-text-to-text
    voice-activity-detection depth-estimation image-classification object-detection image-segmentation text-to-image
    image-to-text image-to-image image-to-video unconditional-image-generation video-classification
    reinforcement-learning robotics tabular-classification tabular-regression tabular-to-text table-to-text
    multiple-choice text-retrieval time-series-forecasting text-to-video image-text-to-text image-text-to-image
    image-text-to-video visual-question-answering document-question-answering zero-shot-image-classification graph-ml
    mask-generation zero-shot-object-detection text-to-3d image-to-3d image-feature-extraction video-text-to-text
    keypoint-detection visual-document-retrieval any-to-any video-to-video other
    """.split()
)
BASE_MODEL_RELATIONS = ("adapter", "merge", "quantized", "finetune")
REPO_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def card_problems(content: str, repo_type: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a card's metadata, each one line naming the field; no errors means the Hub accepts it."""
    try:
        metadata = front_matter(content.encode("utf-8", errors="replace"))
    except ValueError as error:
        return [f"{str(error)[:1].upper()}{str(error)[1:]}."], []
    if not metadata:
        return [], ["Empty or missing yaml metadata in repo card"]
    return metadata_problems(metadata, repo_type), []


def metadata_problems(metadata: dict[str, Any], repo_type: str) -> list[str]:
    """The errors of a card's parsed metadata (a mapping), each one line naming the field."""
    errors = license_problems(metadata.get("license"))
    for name in ("tags", "datasets", "language"):
        if name in metadata and not strings(metadata[name]):
            errors.append(f'"{name}" must be a string or a list of strings, got {metadata[name]!r}.')
    if "library_name" in metadata and not isinstance(metadata["library_name"], str):
        errors.append(f'"library_name" must be a string, got {metadata["library_name"]!r}.')
    if repo_type == "model":
        errors += model_problems(metadata)
    return errors


def strings(value: Any) -> bool:
    """A string, or a list of strings."""
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(item, str) for item in value))


def known(value: Any, names: frozenset[str] | tuple[str, ...]) -> bool:
    """`value` is one of `names` (a list or mapping, which no set can hold, is not)."""
    return isinstance(value, str) and value in names


def license_problems(license_id: Any) -> list[str]:
    if license_id is None:
        return []
    ids = license_id if isinstance(license_id, list) else [license_id]
    unknown = [value for value in ids if not known(value, LICENSES)]
    if not unknown:
        return []
    return [
        f'"license" must be one of the Hub\'s license identifiers (apache-2.0, mit, cc-by-4.0, ..., or other with '
        f"license_name and license_link), got {unknown[0]!r}."
    ]


def model_problems(metadata: dict[str, Any]) -> list[str]:
    """The errors in the fields only model cards have: pipeline_tag, base_model and its relation, model-index."""
    errors = []
    tag = metadata.get("pipeline_tag")
    if tag is not None and not known(tag, PIPELINE_TAGS):
        errors.append(
            f'"pipeline_tag" must be one of the Hub\'s tasks (text-classification, fill-mask, ...), got {tag!r}.'
        )
    base = metadata.get("base_model")
    if base is not None and not (
        strings(base) and all(REPO_ID.fullmatch(b) for b in ([base] if isinstance(base, str) else base))
    ):
        errors.append(f'"base_model" must be a model id or a list of them, got {base!r}.')
    relation = metadata.get("base_model_relation")
    if relation is not None and not known(relation, BASE_MODEL_RELATIONS):
        errors.append(f'"base_model_relation" must be one of {", ".join(BASE_MODEL_RELATIONS)}, got {relation!r}.')
    if "model-index" in metadata:
        errors += model_index_problems(metadata["model-index"])
    return errors


def model_index_problems(model_index: Any) -> list[str]:
    """The errors in a `model-index`, each naming where it is (`model-index[0].results[1].dataset.name`)."""
    if not isinstance(model_index, list) or not model_index:
        return ['"model-index" must be a non-empty list of {name, results}.']
    errors = []
    for i, entry in enumerate(model_index):
        where = f"model-index[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            errors.append(f'"{where}" must have a "name" (a string).')
            continue
        results = entry.get("results")
        if not isinstance(results, list):
            errors.append(f'"{where}.results" must be a list.')
            continue
        for j, result in enumerate(results):
            errors += result_problems(result, f"{where}.results[{j}]")
    return errors


def result_problems(result: Any, where: str) -> list[str]:
    if not isinstance(result, dict):
        return [f'"{where}" must be a mapping with task, dataset and metrics.']
    errors = []
    required = {"task": ("type",), "dataset": ("type", "name")}
    for part, keys in required.items():
        value = result.get(part)
        for key in keys:
            if not isinstance(value, dict) or not isinstance(value.get(key), str) or not value[key]:
                errors.append(f'"{where}.{part}.{key}" is required (a string).')
    metrics = result.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        return [*errors, f'"{where}.metrics" must be a non-empty list of {{type, value}}.']
    for k, metric in enumerate(metrics):
        if not isinstance(metric, dict) or not isinstance(metric.get("type"), str) or metric.get("value") is None:
            errors.append(f'"{where}.metrics[{k}]" must have a "type" (a string) and a "value".')
    return errors
