"""The loopback hub against real clients: huggingface_hub in-process, transformers in a fresh process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from raw_http import hub_command
from transformers import BertConfig, BertModel

from hf_norms.hub.server import HubServer
from hf_norms.hub.server import http as hub_http
from hf_norms.hub.server import store as hub_store

TOKEN = "test-token"


pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised BertModel saved with save_pretrained."""
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=99)
    path = tmp_path_factory.mktemp("bert")
    BertModel(config).save_pretrained(path)
    (path / "notes.txt").write_text("v1")
    return path


@pytest.fixture(scope="module")
def bert_repo(api: HfApi, bert_dir: Path) -> tuple[str, str]:
    """`org/tiny-bert` holding `bert_dir`; returns (repo_id, sha of the upload commit)."""
    repo_id = "org/tiny-bert"
    api.create_repo(repo_id)
    return repo_id, api.upload_folder(folder_path=bert_dir, repo_id=repo_id).oid


def _download(hub: HubServer, repo_id: str, filename: str, tmp_path: Path, revision: str | None = None) -> str:
    path = hf_hub_download(repo_id, filename, revision=revision, endpoint=hub.url, cache_dir=tmp_path, token=TOKEN)
    return Path(path).read_text()


def test_create_repo_conflict_and_exist_ok(api: HfApi) -> None:
    url = api.create_repo("org/created")
    assert url.repo_id == "org/created"
    assert api.create_repo("org/created", exist_ok=True).repo_id == "org/created"
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.create_repo("org/created")
    assert excinfo.value.response.status_code == 409
    assert api.create_repo("no-namespace").repo_id == "hf-norms-tester/no-namespace"


def test_upload_folder_then_from_pretrained_in_fresh_process(
    hub: HubServer, bert_repo: tuple[str, str], bert_dir: Path, tmp_path: Path
) -> None:
    repo_id, _ = bert_repo
    code = f"""
import json, torch
from huggingface_hub import hf_hub_download
from transformers import AutoModel
remote = AutoModel.from_pretrained({repo_id!r})
local = AutoModel.from_pretrained({str(bert_dir)!r})
pairs = zip(remote.state_dict().values(), local.state_dict().values(), strict=True)
diff = max((a - b).abs().max().item() for a, b in pairs)
config = json.load(open(hf_hub_download({repo_id!r}, "config.json")))
print(json.dumps({{"class": type(remote).__name__, "diff": diff, "hidden": config["hidden_size"]}}))
"""
    env = {**os.environ, **hub.client_env(TOKEN), "HF_HOME": str(tmp_path / "hf_home")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"class": "BertModel", "diff": 0.0, "hidden": 32}


def test_model_info_and_file_listing(api: HfApi, bert_repo: tuple[str, str], bert_dir: Path) -> None:
    repo_id, sha = bert_repo
    expected = {".gitattributes", *(p.name for p in bert_dir.iterdir())}
    info = api.model_info(repo_id)
    assert info.sha == sha and info.id == repo_id and not info.private
    assert {s.rfilename for s in info.siblings} == expected
    assert set(api.list_repo_files(repo_id)) == expected
    sizes = {s.rfilename: s.size for s in api.model_info(repo_id, files_metadata=True).siblings}
    assert sizes["model.safetensors"] == (bert_dir / "model.safetensors").stat().st_size


def test_second_commit_keeps_old_files_and_old_revisions(
    hub: HubServer, api: HfApi, bert_dir: Path, tmp_path: Path
) -> None:
    repo_id = "org/two-commits"
    api.create_repo(repo_id)
    first = api.upload_folder(folder_path=bert_dir, repo_id=repo_id).oid
    api.upload_file(path_or_fileobj=b"v2", path_in_repo="notes.txt", repo_id=repo_id)
    second = api.upload_file(path_or_fileobj=b"new", path_in_repo="sub/extra.txt", repo_id=repo_id).oid
    files = set(api.list_repo_files(repo_id))
    assert files == set(api.list_repo_files(repo_id, revision=first)) | {"sub/extra.txt"}
    assert _download(hub, repo_id, "notes.txt", tmp_path) == "v2"
    assert _download(hub, repo_id, "notes.txt", tmp_path, revision=first) == "v1"
    assert _download(hub, repo_id, "sub/extra.txt", tmp_path, revision=second[:10]) == "new"
    commits = api.list_repo_commits(repo_id)
    assert [c.commit_id for c in commits[:1]] == [second] and len(commits) == 4
    assert commits[-1].title == "initial commit"
    tree = {e.path: type(e).__name__ for e in api.list_repo_tree(repo_id)}
    assert tree["sub"] == "RepoFolder" and "sub/extra.txt" not in tree


def test_branches_tags_and_deletions(api: HfApi) -> None:
    repo_id = "org/refs"
    api.create_repo(repo_id)
    api.upload_file(path_or_fileobj=b"a", path_in_repo="dir/a.txt", repo_id=repo_id)
    api.create_branch(repo_id, branch="dev")
    api.create_branch(repo_id, branch="dev", exist_ok=True)
    api.create_tag(repo_id, tag="v1")
    api.upload_file(path_or_fileobj=b"b", path_in_repo="b.txt", repo_id=repo_id, revision="dev")
    api.delete_folder("dir", repo_id=repo_id)
    assert set(api.list_repo_files(repo_id)) == {".gitattributes"}
    assert set(api.list_repo_files(repo_id, revision="dev")) == {".gitattributes", "dir/a.txt", "b.txt"}
    assert set(api.list_repo_files(repo_id, revision="v1")) == {".gitattributes", "dir/a.txt"}
    refs = api.list_repo_refs(repo_id)
    assert {b.name for b in refs.branches} == {"main", "dev"} and [t.name for t in refs.tags] == ["v1"]
    with pytest.raises(EntryNotFoundError):
        api.delete_file("missing.txt", repo_id=repo_id)


def test_concurrent_commits_are_serialised_and_stale_parents_refused(api: HfApi) -> None:
    repo_id = "org/busy"
    api.create_repo(repo_id)
    first = api.model_info(repo_id).sha

    def upload(i: int) -> str:
        return api.upload_file(path_or_fileobj=str(i).encode(), path_in_repo=f"f{i}.txt", repo_id=repo_id).oid

    with ThreadPoolExecutor(max_workers=6) as pool:
        shas = list(pool.map(upload, range(6)))
    assert len(set(shas)) == 6
    assert set(api.list_repo_files(repo_id)) == {".gitattributes", *(f"f{i}.txt" for i in range(6))}
    assert len(api.list_repo_commits(repo_id)) == 7
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.upload_file(path_or_fileobj=b"late", path_in_repo="late.txt", repo_id=repo_id, parent_commit=first)
    assert excinfo.value.response.status_code == 412


def test_missing_file_revision_and_repo(hub: HubServer, bert_repo: tuple[str, str], tmp_path: Path) -> None:
    repo_id, _ = bert_repo
    with pytest.raises(EntryNotFoundError):
        _download(hub, repo_id, "no_such_file.json", tmp_path)
    with pytest.raises(RevisionNotFoundError):
        _download(hub, repo_id, "config.json", tmp_path, revision="no-such-branch")
    with pytest.raises(RepositoryNotFoundError):
        _download(hub, "org/no-such-repo", "config.json", tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url).model_info("org/no-such-repo")


def test_bad_token_is_refused_on_write(hub: HubServer, api: HfApi, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=hub_http.__name__)
    intruder = HfApi(endpoint=hub.url, token="wrong-secret-token")
    api.create_repo("org/guarded")
    with pytest.raises(HfHubHTTPError) as excinfo:
        intruder.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="org/guarded")
    assert excinfo.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as excinfo:
        intruder.create_repo("org/intruder")
    assert excinfo.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError):
        intruder.whoami()
    assert api.whoami()["name"] == "hf-norms-tester"
    assert api.list_repo_files("org/guarded") == [".gitattributes"]
    assert not api.repo_exists("org/intruder")
    assert "wrong-secret-token" not in caplog.text + str(excinfo.value)


def test_private_repo_needs_a_token(hub: HubServer, api: HfApi) -> None:
    api.create_repo("org/private", private=True)
    assert api.model_info("org/private").private
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).model_info("org/private")


def test_injected_server_error_on_commit_then_retry(hub: HubServer, api: HfApi) -> None:
    repo_id = "org/flaky"
    api.create_repo(repo_id)
    hub.fail_next(f"/api/models/{repo_id}/commit/", status=500)
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    assert excinfo.value.response.status_code == 500
    assert api.list_repo_files(repo_id) == [".gitattributes"]
    api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    assert set(api.list_repo_files(repo_id)) == {".gitattributes", "x.txt"}


def test_crash_before_refs_update_keeps_previous_state(
    hub: HubServer, api: HfApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo_id = "org/crashy"
    api.create_repo(repo_id)
    before = api.model_info(repo_id).sha
    real_write = hub_store._atomic_write

    def crash_on_refs(path: Path, data: bytes) -> None:
        if path.name == "refs.json":
            raise OSError("disk died")
        real_write(path, data)

    monkeypatch.setattr(hub_store, "_atomic_write", crash_on_refs)
    with pytest.raises(HfHubHTTPError) as excinfo:
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo_id)
    assert excinfo.value.response.status_code == 500
    monkeypatch.setattr(hub_store, "_atomic_write", real_write)
    assert api.model_info(repo_id).sha == before
    assert api.list_repo_files(repo_id) == [".gitattributes"]


def test_repos_survive_restart_and_range_requests(tmp_path: Path) -> None:
    with HubServer(tmp_path, tokens=[TOKEN]) as first:
        client = HfApi(endpoint=first.url, token=TOKEN)
        client.create_repo("org/durable")
        client.upload_file(path_or_fileobj=b"0123456789", path_in_repo="digits.txt", repo_id="org/durable")
    with HubServer(tmp_path) as second:
        request = urllib.request.Request(
            f"{second.url}/org/durable/resolve/main/digits.txt", headers={"Range": "bytes=2-4"}
        )
        with urllib.request.urlopen(request) as response:
            assert response.status == 206 and response.read() == b"234"
        with pytest.raises(urllib.error.HTTPError) as excinfo:
            urllib.request.urlopen(f"{second.url}/api/models/org/durable/tree/main/nowhere")
        assert excinfo.value.headers["X-Error-Code"] == "EntryNotFound"


def test_standalone_command(tmp_path: Path) -> None:
    with hub_command(tmp_path / "hub", "--token", TOKEN) as (_, endpoint):
        request = urllib.request.Request(f"{endpoint}/api/whoami-v2", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["name"] == "hf-norms-tester"


def test_the_hub_command_imports_only_the_server(tmp_path: Path) -> None:
    """The real `hf-norms hub` console script prints HF_ENDPOINT and answers; with `PYTHONPROFILEIMPORTTIME`, its import
    log names none of hf-norms' conversion, training or publishing code, nor datasets: the command imports the
    package (which registers with transformers) and the server, nothing else."""
    with hub_command(tmp_path / "hub", env={"PYTHONPROFILEIMPORTTIME": "1"}) as (_, endpoint):
        with urllib.request.urlopen(f"{endpoint}/api/agent-harnesses", timeout=10) as response:
            assert json.load(response) == {"standardEnvVars": [], "harnesses": {}}
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in (tmp_path / "hub.stderr").read_text().splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "hf_norms.hub.server.routes" in imported  # http itself is imported by importlib, which logs no time
    heavy = ("datasets", "hf_norms.conversion.convert", "hf_norms.training", "hf_norms.hub.publish")
    assert not [name for name in imported if name.startswith(heavy)]


def test_agent_harness_registry_is_empty_and_logs_nothing(hub: HubServer, caplog: pytest.LogCaptureFixture) -> None:
    """huggingface_hub asks every endpoint for this registry; an unknown route would log a warning in the demo."""
    with caplog.at_level("WARNING"), urllib.request.urlopen(f"{hub.url}/api/agent-harnesses", timeout=10) as response:
        assert json.load(response) == {"standardEnvVars": [], "harnesses": {}}
    assert "no endpoint" not in caplog.text
