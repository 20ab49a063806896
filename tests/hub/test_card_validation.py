"""The loopback Hub's `/api/validate-yaml` checks card metadata as the Hub does, so `ModelCard.validate()`, an
`upload_file` of a README.md and `hf upload` refuse offline what the Hub would refuse: an unknown license, a
pipeline_tag that is no task, a model-index without its dataset or metrics."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import huggingface_hub
import pytest
from conftest import HF_NORMS_SCRIPT
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.errors import EntryNotFoundError

TOKEN = "hf_CardValidationTokenAbCdEfGh0123"
VALID = "---\nlicense: apache-2.0\npipeline_tag: text-classification\nlibrary_name: transformers\n---\n# A model\n"
MODEL_INDEX = (
    "model-index:\n- name: m\n  results:\n  - task:\n      type: text-classification\n"
    "    dataset:\n      type: SetFit/bbc-news\nDATASET_NAME    metrics:METRICS"
)

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture
def at_hub(hub, monkeypatch):
    """`ModelCard.validate()` posts to `huggingface_hub.constants.ENDPOINT`: point it at the loopback Hub."""
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    return hub


def model_index(dataset_name: bool = True, metrics: str = "\n    - type: accuracy\n      value: 0.9\n") -> str:
    name = "      name: BBC News\n" if dataset_name else ""
    return MODEL_INDEX.replace("DATASET_NAME", name).replace("METRICS", metrics)


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ("license: not-a-license", "license"),
        ("license: [mit, not-a-license]", "license"),
        ("pipeline_tag: 12", "pipeline_tag"),
        ("pipeline_tag: [text-classification]", "pipeline_tag"),
        ("license: [{a: 1}]", "license"),
        ("pipeline_tag: sentence-classification", "pipeline_tag"),
        ("base_model_relation: cousin", "base_model_relation"),
        ("base_model: 'not a repo id'", "base_model"),
        ("datasets: {a: 1}", "datasets"),
        (model_index(dataset_name=False), "model-index[0].results[0].dataset.name"),
        (model_index(metrics="\n    - type: accuracy\n"), "model-index[0].results[0].metrics[0]"),
        (model_index(metrics=" []\n"), "model-index[0].results[0].metrics"),
        ("model-index: {name: m}", "model-index"),
        ("pipeline_tag: [unclosed", "does not parse"),
    ],
)
def test_an_upload_of_a_card_the_hub_refuses_uploads_nothing(api, metadata, named):
    """What huggingface_hub does before every README.md it uploads: post it to /api/validate-yaml."""
    api.create_repo("org/refused-card", exist_ok=True)
    with pytest.raises(ValueError, match=r"Invalid metadata in README\.md") as refused:
        api.upload_file(path_or_fileobj=f"---\n{metadata}\n---\n# A model\n".encode(), path_in_repo="README.md",
                        repo_id="org/refused-card")  # fmt: skip
    assert named in str(refused.value)
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download("org/refused-card", "README.md")


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ("license: not-a-license", "license"),
        ("pipeline_tag: 12", "pipeline_tag"),
        ("base_model_relation: x", "relation"),
    ],
)
def test_model_card_validate_refuses_what_the_hub_refuses(at_hub, metadata, named):
    with pytest.raises(ValueError, match=named):
        ModelCard(f"---\n{metadata}\n---\n# A model\n").validate()


def test_validate_accepts_cards_the_hub_accepts(at_hub):
    ModelCard(VALID).validate()
    ModelCard(f"---\nlicense: other\nlicense_name: my-license\n{model_index()}---\n").validate()
    data = ModelCardData(
        license="cc-by-4.0",
        pipeline_tag="image-classification",
        base_model="org/base",
        base_model_relation="finetune",
        eval_results=[
            EvalResult(
                task_type="image-classification",
                dataset_type="zalando-datasets/fashion_mnist",
                dataset_name="Fashion-MNIST",
                metric_type="accuracy",
                metric_value=0.87,
            )
        ],
        model_name="m",
    )
    ModelCard.from_template(data).validate()


def test_hf_upload_refuses_a_card_with_an_unknown_pipeline_tag(hub, api, tmp_path):
    api.create_repo("org/cli-card")
    (tmp_path / "README.md").write_text("---\npipeline_tag: 12\n---\n")
    env = {**os.environ, **hub.client_env(TOKEN), "HF_HOME": str(tmp_path / "home")}
    hf = Path(HF_NORMS_SCRIPT).with_name("hf")
    refused = subprocess.run([str(hf), "upload", "org/cli-card", str(tmp_path / "README.md"), "README.md"], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert refused.returncode != 0 and "pipeline_tag" in refused.stdout + refused.stderr
    (tmp_path / "README.md").write_text(VALID)
    accepted = subprocess.run([str(hf), "upload", "org/cli-card", str(tmp_path / "README.md"), "README.md"], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert api.model_info("org/cli-card").pipeline_tag == "text-classification"
