"""The Hub API that tests and cleanup scripts call, through the real `huggingface_hub.HfApi` against the loopback Hub:
deleting repos, branches and tags, changing visibility, listing and moving repos, pull requests, and the card and
weights facts of `model_info` (with `pipeline(model=repo_id)` and no task, in a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from safetensors.numpy import save as safetensors_bytes

from hf_norms.hub.server import HubServer

TOKEN = "api-test-token"
CARD = b"""---
license: mit
language: en
library_name: transformers
pipeline_tag: text-classification
tags:
- hf-norms
- tiny
datasets:
- org/news
base_model: org/base
---
# A tiny model
"""

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN]) as server:
        yield server


@pytest.fixture(scope="module")
def api(hub: HubServer) -> HfApi:
    return HfApi(endpoint=hub.url, token=TOKEN)


def _status(excinfo: pytest.ExceptionInfo[HfHubHTTPError]) -> int:
    return excinfo.value.response.status_code


def test_delete_repo(api: HfApi) -> None:
    api.create_repo("org/doomed")
    api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="org/doomed")
    api.delete_repo("org/doomed")
    assert not api.repo_exists("org/doomed")
    with pytest.raises(RepositoryNotFoundError):
        api.delete_repo("org/doomed")
    api.delete_repo("org/doomed", missing_ok=True)
    api.create_repo("org/doomed")  # the name is free again, and the new repo starts empty
    assert api.list_repo_files("org/doomed") == [".gitattributes"]
    api.create_repo("org/doomed-dataset", repo_type="dataset")
    api.delete_repo("org/doomed-dataset", repo_type="dataset")
    assert not api.repo_exists("org/doomed-dataset", repo_type="dataset")


def test_delete_branch_and_tag(api: HfApi) -> None:
    repo_id = "org/refs-to-delete"
    api.create_repo(repo_id)
    api.create_branch(repo_id, branch="dev")
    api.create_tag(repo_id, tag="v1")
    api.delete_branch(repo_id, branch="dev")
    api.delete_tag(repo_id, tag="v1")
    refs = api.list_repo_refs(repo_id)
    assert [b.name for b in refs.branches] == ["main"] and refs.tags == []
    for delete in (lambda: api.delete_branch(repo_id, branch="dev"), lambda: api.delete_tag(repo_id, tag="v1")):
        with pytest.raises(HfHubHTTPError) as excinfo:
            delete()
        assert _status(excinfo) == 404
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.delete_branch(repo_id, branch="main")
    assert _status(excinfo) == 400 and "default branch" in str(excinfo.value)
    api.create_branch(repo_id, branch="dev")  # a deleted name can be used again
    assert {b.name for b in api.list_repo_refs(repo_id).branches} == {"main", "dev"}


def test_update_repo_settings_changes_visibility(hub: HubServer, api: HfApi) -> None:
    repo_id = "org/visible"
    api.create_repo(repo_id)
    anonymous = HfApi(endpoint=hub.url, token=False)
    api.update_repo_settings(repo_id, private=True)
    assert api.model_info(repo_id).private
    with pytest.raises(RepositoryNotFoundError):
        anonymous.model_info(repo_id)
    api.update_repo_settings(repo_id, visibility="public")
    assert anonymous.model_info(repo_id).private is False
    api.update_repo_settings(repo_id, gated=False)
    with pytest.raises(HfHubHTTPError) as excinfo:  # nothing on this hub enforces access requests
        api.update_repo_settings(repo_id, gated="auto")
    assert _status(excinfo) == 400


def test_list_models_by_author_and_search(hub: HubServer, api: HfApi) -> None:
    for repo_id, private in (("lister/alpha-bert", False), ("lister/beta-vit", False), ("lister/alpha-secret", True)):
        api.create_repo(repo_id, private=private)
    api.create_repo("lister/alpha-data", repo_type="dataset")
    anonymous = HfApi(endpoint=hub.url, token=False)
    assert [m.id for m in api.list_models(author="lister")] == [
        "lister/alpha-bert",
        "lister/alpha-secret",
        "lister/beta-vit",
    ]
    assert [m.id for m in anonymous.list_models(author="lister")] == ["lister/alpha-bert", "lister/beta-vit"]
    assert [m.id for m in api.list_models(search="ALPHA", author="LISTER")] == [
        "lister/alpha-bert",
        "lister/alpha-secret",
    ]
    assert [m.id for m in api.list_models(author="lister", limit=1)] == ["lister/alpha-bert"]
    assert [d.id for d in api.list_datasets(author="lister")] == ["lister/alpha-data"]
    assert list(api.list_models(author="nobody")) == []


def test_move_repo(hub: HubServer, api: HfApi, tmp_path: Path) -> None:
    api.create_repo("org/old-name")
    sha = api.upload_file(path_or_fileobj=b"kept", path_in_repo="kept.txt", repo_id="org/old-name").oid
    api.move_repo("org/old-name", "moved/new-name")
    assert not api.repo_exists("org/old-name")
    assert api.model_info("moved/new-name").sha == sha
    path = hf_hub_download("moved/new-name", "kept.txt", endpoint=hub.url, cache_dir=tmp_path, token=TOKEN)
    assert Path(path).read_bytes() == b"kept"
    api.create_repo("org/taken")
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.move_repo("moved/new-name", "org/taken")
    assert _status(excinfo) == 409
    with pytest.raises(RepositoryNotFoundError):
        api.move_repo("org/old-name", "org/anywhere")


def test_upload_with_create_pr_opens_a_readable_pull_request(hub: HubServer, api: HfApi, tmp_path: Path) -> None:
    repo_id = "org/reviewed"
    api.create_repo(repo_id)
    main = api.upload_file(path_or_fileobj=b"v1", path_in_repo="notes.txt", repo_id=repo_id).oid
    first = api.upload_file(path_or_fileobj=b"v2", path_in_repo="notes.txt", repo_id=repo_id, create_pr=True)
    second = api.upload_file(path_or_fileobj=b"v3", path_in_repo="notes.txt", repo_id=repo_id, create_pr=True)
    assert (first.pr_revision, first.pr_num, second.pr_revision) == ("refs/pr/1", 1, "refs/pr/2")
    assert api.model_info(repo_id).sha == main  # main is untouched

    def read(revision: str) -> bytes:
        path = hf_hub_download(repo_id, "notes.txt", revision=revision, endpoint=hub.url, cache_dir=tmp_path)
        return Path(path).read_bytes()

    assert (read("main"), read("refs/pr/1"), read("refs/pr/2")) == (b"v1", b"v2", b"v3")
    api.upload_file(path_or_fileobj=b"more", path_in_repo="more.txt", repo_id=repo_id, revision="refs/pr/1")
    assert set(api.list_repo_files(repo_id, revision="refs/pr/1")) == {".gitattributes", "notes.txt", "more.txt"}
    pulls = api.list_repo_refs(repo_id, include_pull_requests=True).pull_requests
    assert [(p.name, p.ref) for p in pulls] == [("refs/pr/1", "refs/pr/1"), ("refs/pr/2", "refs/pr/2")]
    assert api.model_info(repo_id, revision="refs/pr/2").sha == second.oid


def _weights(**shapes: tuple[tuple[int, ...], str]) -> bytes:
    return safetensors_bytes({name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in shapes.items()})


def test_model_info_serves_the_card_and_the_safetensors_parameter_counts(api: HfApi) -> None:
    repo_id = "org/carded"
    api.create_repo(repo_id)
    bare = api.upload_file(path_or_fileobj=b'{"model_type": "bert"}', path_in_repo="config.json", repo_id=repo_id)
    operations = {
        "README.md": CARD,
        "model-00001-of-00002.safetensors": _weights(w=((3, 4), "float32"), ids=((5,), "int64")),
        "model-00002-of-00002.safetensors": _weights(v=((2, 2), "float16")),
        "onnx/extra.safetensors": _weights(x=((100,), "float32")),  # not at the root: not counted
    }
    for path, content in operations.items():
        api.upload_file(path_or_fileobj=content, path_in_repo=path, repo_id=repo_id)
    info = api.model_info(repo_id)
    assert (info.pipeline_tag, info.library_name) == ("text-classification", "transformers")
    assert info.card_data.license == "mit" and info.card_data.base_model == "org/base"
    assert info.tags == [
        "hf-norms",
        "tiny",
        "transformers",
        "safetensors",
        "bert",
        "text-classification",
        "en",
        "dataset:org/news",
        "base_model:org/base",
        "license:mit",
    ]
    assert (info.safetensors.total, info.safetensors.parameters) == (21, {"F32": 12, "I64": 5, "F16": 4})
    listed = next(iter(api.list_models(author="org", search="carded")))
    assert (listed.pipeline_tag, listed.library_name, listed.tags) == (info.pipeline_tag, "transformers", info.tags)
    old = api.model_info(repo_id, revision=bare.oid)  # before the card and the weights
    assert (old.pipeline_tag, old.card_data, old.safetensors, old.library_name) == (None, None, None, "transformers")
    assert old.tags == ["transformers", "bert"]


PIPELINE_WITHOUT_A_TASK = """
import json, sys
import numpy as np
from PIL import Image
from transformers import pipeline
repo_id, local_dir = sys.argv[1:]
image = Image.fromarray((np.arange(32 * 32 * 3).reshape(32, 32, 3) % 251).astype("uint8"))
remote = pipeline(model=repo_id)
local = pipeline("image-classification", model=local_dir)
print(json.dumps({"task": remote.task, "remote": remote(image), "local": local(image)}))
"""


def test_pipeline_without_a_task_reads_it_from_the_pushed_card(
    hub: HubServer, api: HfApi, tiny_vit_dir: Path, tmp_path: Path
) -> None:
    repo_id = "org/tiny-vit-card"
    api.create_repo(repo_id)
    api.upload_folder(folder_path=tiny_vit_dir, repo_id=repo_id)
    card = b"---\nlibrary_name: transformers\npipeline_tag: image-classification\n---\n# tiny ViT\n"
    api.upload_file(path_or_fileobj=card, path_in_repo="README.md", repo_id=repo_id)
    env = {**os.environ, **hub.client_env(TOKEN), "HF_HOME": str(tmp_path / "hf_home")}
    command = [sys.executable, "-c", PIPELINE_WITHOUT_A_TASK, repo_id, str(tiny_vit_dir)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["task"] == "image-classification"
    assert result["remote"] == result["local"] and len(result["remote"]) == 3
