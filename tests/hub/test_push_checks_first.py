"""Every check of a push runs before the repo is created: a card the Hub would refuse (an unknown license, a base
model that is no repo id, from an option or from the folder's own card), a branch name the Hub would refuse, an
argument of the wrong type and a keyword hf-norms cannot honour are one line (exit status 2 on the command line, an
`InputError` in Python), the Hub then holds no new repo, and the process is left as it was: a push with the right
arguments right after succeeds."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from publish_setup import copy_of, snapshot

import hf_norms
from hf_norms import cli
from hf_norms.errors import ArgumentTypeError, CheckpointRefused, InputError
from hf_norms.hub.publish import push_to_hub

TOKEN = "hf_checks-first-secret-4713"

pytestmark = pytest.mark.usefixtures("hub_online")


def hub_repos(api: HfApi) -> set[str]:
    """Every repo the Hub lists, read through huggingface_hub."""
    return {model.id for model in api.list_models()}


def refused_on_the_command_line(api: HfApi, capsys: pytest.CaptureFixture, repo_id: str, *argv: str) -> str:
    """Run `hf-norms push REPO_ID ...`: exit status 2, one line on stderr, and no repo made; returns the line."""
    before = hub_repos(api)
    assert cli.main(["push", repo_id, *argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    lines = [line for line in lines if line.strip() and not line.startswith("Loading weights")]  # transformers' bar
    assert len(lines) == 1 and lines[0].startswith("hf-norms push: error: "), lines
    err = lines[0]
    assert hub_repos(api) == before and repo_id not in before
    assert TOKEN not in err
    return err


@pytest.fixture
def on_the_hub(api: HfApi, monkeypatch: pytest.MonkeyPatch) -> HfApi:
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return api


# --------------------------------------------------------------------------------------------------------------------
# The card, checked with the Hub's rules before the repo is created
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--base-model", "not/a/repo!"], "base_model"),
        (["--license", "not-a-license"], "license"),
        (["--license", "MIT License"], "license"),
        (["--license", "Apache-2.0"], "license"),
        (["--base-model", "a/b/c"], "base_model"),
        (["--base-model", "/home/me/models/vit"], "base_model"),
        (["--base-model", "org/vit", "--license", "mit", "--license", "bogus"], "license"),
        (["--license", "bogus", "--dry-run"], "license"),
    ],
)
def test_a_card_the_hub_refuses_is_one_line_and_creates_no_repo(
    options, named, saved_checkpoint: Path, on_the_hub: HfApi, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(saved_checkpoint)
    err = refused_on_the_command_line(on_the_hub, capsys, "org/bad-card", str(saved_checkpoint), *options)
    assert f'"{named}" must be' in err and "Nothing was created" in err
    assert snapshot(saved_checkpoint) == before


def test_a_card_the_folder_makes_invalid_is_refused_before_the_repo_is_created(
    saved_checkpoint: Path, on_the_hub: HfApi, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The folder's own README.md names a license the Hub does not know: the rendered card is checked too, and the
    message says how to give the right one."""
    folder = copy_of(saved_checkpoint, tmp_path)
    (folder / "README.md").write_text("---\nlicense: MIT License\n---\n# my notes\n")
    err = refused_on_the_command_line(on_the_hub, capsys, "org/folder-card", str(folder))
    assert "'MIT License'" in err and "--license" in err and "Nothing was created" in err
    assert cli.main(["push", "org/folder-card", str(folder), "--license", "mit"]) == 0
    assert on_the_hub.model_info("org/folder-card").card_data["license"] == "mit"


@pytest.mark.parametrize(
    "options",
    [{"license": "bogus"}, {"base_model": "not/a/repo!"}, {"revision": "brånch"}, {"revision": "refs/heads/x"}],
)
def test_model_push_to_hub_refuses_a_card_or_branch_the_hub_refuses_in_one_line(
    options, saved_checkpoint: Path, api: HfApi
) -> None:
    model = hf_norms.ViTNormModel.from_pretrained(saved_checkpoint)
    before = hub_repos(api)
    with pytest.raises(ValueError) as refused:
        model.push_to_hub("org/model-bad-card", token=TOKEN, endpoint=api.endpoint, **options)
    assert isinstance(refused.value, InputError) and "\n" not in str(refused.value)
    assert "Nothing was created" in str(refused.value)
    assert hub_repos(api) == before


# --------------------------------------------------------------------------------------------------------------------
# The branch, checked with the Hub's rules before the repo is created
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "revision",
    ["refs/heads/x", "refs/pr/1", "x" * 5000, "x" * 97, "brånch", "main\u200b", "feature/x", "_dev", "dev.lock"],
)
def test_a_branch_the_hub_refuses_is_one_line_and_creates_no_repo(
    revision, saved_checkpoint: Path, on_the_hub: HfApi, capsys: pytest.CaptureFixture
) -> None:
    err = refused_on_the_command_line(on_the_hub, capsys, "org/bad-branch", str(saved_checkpoint), "--revision",
                                      revision)  # fmt: skip
    assert "is not a branch name" in err and len(err) < 600


@pytest.mark.parametrize("repo_id", ["_org/vit", "org/_vit", "org/-vit", "org/vït", "x" * 97])
def test_a_repo_id_the_hub_refuses_is_one_line_with_status_2(
    repo_id, saved_checkpoint: Path, on_the_hub: HfApi, capsys: pytest.CaptureFixture
) -> None:
    """huggingface_hub's `validate_repo_id` takes `_org/vit`; the Hub does not: refused before the repo is created."""
    err = refused_on_the_command_line(on_the_hub, capsys, repo_id, str(saved_checkpoint))
    assert "is not a Hub repo id" in err and len(err) < 600


@pytest.mark.parametrize(
    "endpoint", ["127.0.0.1:8765", "ftp://127.0.0.1:9", "http://", "http://127.0.0.1:99999", "http://127.0.0.1:0",
                 "http://exa mple", "http://127.0.0.1:x"],
)  # fmt: skip
def test_an_endpoint_that_is_no_url_is_one_line_with_status_2(
    endpoint, saved_checkpoint: Path, on_the_hub: HfApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An input mistake, found before the folder is read: not a network failure to retry (it was exit 1)."""
    err = refused_on_the_command_line(on_the_hub, capsys, "org/no-url", str(saved_checkpoint), "--endpoint", endpoint)
    assert "is not a Hub endpoint" in err and "HF_ENDPOINT" in err
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    assert "is not a Hub endpoint" in refused_on_the_command_line(
        on_the_hub, capsys, "org/no-url", str(saved_checkpoint)
    )


def test_the_longest_branch_name_the_hub_takes_is_pushed(saved_checkpoint: Path, api: HfApi) -> None:
    branch = "b" * 96
    push_to_hub(saved_checkpoint, "org/long-branch", endpoint=api.endpoint, token=TOKEN, revision=branch)
    assert branch in {ref.name for ref in api.list_repo_refs("org/long-branch").branches}


# --------------------------------------------------------------------------------------------------------------------
# Arguments of the wrong type, and keywords hf-norms cannot honour
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [123, b"hf_bytes-token-0123456789", ["hf_listed-token-0123456789"], 12.5])
def test_a_token_of_the_wrong_type_is_one_line_and_changes_nothing(token, saved_checkpoint: Path, api: HfApi) -> None:
    """A wrong token changes no process state (the log record factory, the warning hook): the next push works."""
    factory, showwarning, before = logging.getLogRecordFactory(), warnings.showwarning, hub_repos(api)
    with pytest.raises(ArgumentTypeError) as refused:
        push_to_hub(saved_checkpoint, "org/typed-token", endpoint=api.endpoint, token=token)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("token must be a string") and "hf_" not in message
    assert (logging.getLogRecordFactory(), warnings.showwarning) == (factory, showwarning)
    assert hub_repos(api) == before
    model = hf_norms.ViTNormModel.from_pretrained(saved_checkpoint)
    with pytest.raises(ArgumentTypeError, match=r"^token must be a string"):
        model.push_to_hub("org/typed-token", endpoint=api.endpoint, token=token)
    commit = push_to_hub(saved_checkpoint, "org/typed-token", endpoint=api.endpoint, token=TOKEN)
    assert api.list_repo_commits("org/typed-token")[0].commit_id == commit.oid


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"commit_message": 5}, "commit_message"),
        ({"private": "yes"}, "private"),
        ({"tags": ["ok", 7]}, "tags"),
        ({"license": 3}, "license"),
        ({"commit_message": b"bytes"}, "commit_message"),
        ({"revision": 1}, "revision"),
    ],
)
def test_an_option_of_the_wrong_type_is_one_line(options, named, saved_checkpoint: Path, api: HfApi) -> None:
    before = hub_repos(api)
    with pytest.raises(ArgumentTypeError, match=f"^{named} must be ") as refused:
        push_to_hub(saved_checkpoint, "org/typed-option", endpoint=api.endpoint, token=TOKEN, **options)
    assert "\n" not in str(refused.value) and hub_repos(api) == before


def test_an_unknown_keyword_is_one_line_naming_it(saved_checkpoint: Path, api: HfApi) -> None:
    before = hub_repos(api)
    with pytest.raises(ArgumentTypeError) as refused:
        push_to_hub(saved_checkpoint, "org/unknown-keyword", token=TOKEN, endpoint=api.endpoint, licence="mit")
    assert "\n" not in str(refused.value) and "licence" in str(refused.value) and "license" in str(refused.value)
    model = hf_norms.ViTNormModel.from_pretrained(saved_checkpoint)
    with pytest.raises(ArgumentTypeError) as refused:
        model.push_to_hub("org/unknown-keyword", token=TOKEN, endpoint=api.endpoint, use_auth_token=TOKEN)
    message = str(refused.value)
    assert "\n" not in message and "use_auth_token" in message and "token=" in message and TOKEN not in message
    assert hub_repos(api) == before


def test_model_push_to_hub_takes_transformers_keywords_or_refuses_them_in_one_line(
    saved_checkpoint: Path, api: HfApi
) -> None:
    """safe_serialization=True is what hf-norms does anyway; False (pickled weights) is refused in one line, as are
    create_pr and commit_description; the other keywords of transformers' push_to_hub are honoured."""
    model = hf_norms.ViTNormModel.from_pretrained(saved_checkpoint)
    before = hub_repos(api)
    for refused_keyword in ({"safe_serialization": False}, {"create_pr": True}, {"commit_description": "more"}):
        with pytest.raises(CheckpointRefused) as refused:
            model.push_to_hub("org/keywords", token=TOKEN, endpoint=api.endpoint, **refused_keyword)
        assert "\n" not in str(refused.value) and next(iter(refused_keyword)) in str(refused.value)
    assert hub_repos(api) == before
    commit = model.push_to_hub("org/keywords", token=TOKEN, endpoint=api.endpoint, safe_serialization=True,
                               commit_message="kw", private=True, revision="dev", tags=["mine"],
                               max_shard_size="1MB")  # fmt: skip
    assert api.list_repo_commits("org/keywords", revision="dev")[0].commit_id == commit.oid
    assert api.model_info("org/keywords").private
    files = api.list_repo_files("org/keywords", revision="dev")
    assert "model.safetensors" in files or "model.safetensors.index.json" in files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth"))]


@pytest.mark.parametrize(
    ("environment", "said"),
    [
        ({"HF_TOKEN": "hf_not-the-hubs-token-1234"}, "does not accept the token (HTTP 401)"),
        ({"HF_TOKEN": None}, "No Hugging Face token found: log in with `hf auth login`"),
        ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "Could not reach http://127.0.0.1:9:"),
    ],
    ids=["wrong token", "no token", "unreachable endpoint"],
)
def test_who_pushes_is_checked_before_the_folder_is_read(environment, said, on_the_hub, capsys, monkeypatch, tmp_path):
    """A wrong or missing token and an endpoint that does not answer were found only after the checkpoint loaded (57 s
    and 64 s on the real MiniLM): they are now found first, so a folder that is no checkpoint at all gets that line."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-login"))  # no stored login
    for name, value in environment.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    (tmp_path / "not-a-checkpoint").mkdir()
    err = refused_on_the_command_line(on_the_hub, capsys, "org/never-made", str(tmp_path / "not-a-checkpoint"))
    assert said in err and err.endswith("Nothing was created.")
