"""Pushing a converted checkpoint again and again: a second push adds a commit and deletes nothing unless asked, only
the checkpoint's own files go up, a folder holding the token or one that does not load is refused before upload, a
server error mid-push is retried, network failures and refused tokens are one line, and the CLI does the same."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import HF_NORMS_SCRIPT
from huggingface_hub import hf_hub_download
from publish_setup import copy_of, make_checkpoints, snapshot

from hf_norms import cli
from hf_norms.hub import publish
from hf_norms.hub.publish import CheckpointRefused, PushError, push_to_hub

TOKEN = "hf_push-outcomes-secret-4712"


pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def checkpoints(minilm_dir, tmp_path_factory) -> dict[str, dict]:
    return make_checkpoints(minilm_dir, tmp_path_factory.mktemp("checkpoints"))


def test_second_push_adds_a_commit_and_deletes_nothing_unless_asked(checkpoints, api, hub, tmp_path):
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    repo_id = "org/repush"
    (folder / "notes.txt").write_text("first")
    first = push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, include="*.txt")
    (folder / "notes.txt").unlink()
    (folder / "extra.txt").write_text("second")
    second = push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, commit_message="add extra", include="*.txt")
    commits = api.list_repo_commits(repo_id)
    assert [c.commit_id for c in commits[:2]] == [second.oid, first.oid] and commits[0].title == "add extra"
    assert {"notes.txt", "extra.txt"} <= set(api.list_repo_files(repo_id))
    push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, delete_patterns=["notes.txt"])
    assert "notes.txt" not in api.list_repo_files(repo_id) and "extra.txt" in api.list_repo_files(repo_id)
    push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, revision="dev")
    assert {b.name for b in api.list_repo_refs(repo_id).branches} == {"main", "dev"}


def test_only_the_checkpoint_is_published_unless_more_is_included(checkpoints, api, hub, tmp_path):
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    (folder / ".env").write_text("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    (folder / "server.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
    (folder / "hf_token.txt").write_text("not the real token")
    (folder / "checkpoint-5").mkdir()
    shutil.copy(folder / "model.safetensors", folder / "checkpoint-5" / "model.safetensors")
    torch.save({"step": 5}, folder / "training_args.bin")
    (folder / "README.md").write_text("my own notes")
    repo_id = "org/secrets"
    push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN)
    assert set(api.list_repo_files(repo_id)) == {p.name for p in checkpoints["vit"]["folder"].iterdir()} | {
        "README.md",
        ".gitattributes",
    }
    assert {"tokenizer.json"} <= set(publish.select_upload_files(checkpoints["bert"]["folder"])[0])
    card = hf_hub_download(repo_id, "README.md", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "cache")
    assert Path(card).read_text().startswith("---\n")  # the rendered card, not the folder's README
    push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, include="*")  # every file added is read first
    remote = set(api.list_repo_files(repo_id))
    assert {"hf_token.txt", "checkpoint-5/model.safetensors"} <= remote
    assert not remote & {".env", "server.pem", "training_args.bin"}


def test_a_file_holding_the_token_is_refused(checkpoints, api, hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    (folder / "run_notes.json").write_text(json.dumps({"note": f"pushed with {TOKEN}"}))
    push_to_hub(folder, "org/leaky", endpoint=hub.url, token=TOKEN, dry_run=True)  # not included: not read
    with pytest.raises(CheckpointRefused) as excinfo:
        push_to_hub(folder, "org/leaky", endpoint=hub.url, token=TOKEN, include="run_notes.json")
    assert "run_notes.json" in str(excinfo.value) and TOKEN not in str(excinfo.value)
    assert not api.repo_exists("org/leaky")
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    "damage",
    ["no_config", "stock_model", "no_weights", "no_remote_code", "no_auto_map", "wrong_weights", "no_processor"],
)
def test_a_folder_that_does_not_load_is_refused_before_upload(damage, checkpoints, minilm_dir, api, hub, tmp_path):
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    config = json.loads((folder / "config.json").read_text())
    if damage == "no_config":
        (folder / "config.json").unlink()
    elif damage == "stock_model":
        folder = minilm_dir
    elif damage == "no_weights":
        (folder / "model.safetensors").unlink()
    elif damage == "no_remote_code":
        (folder / "configuration_vit_norm.py").unlink()
    elif damage == "no_auto_map":
        (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "auto_map"}))
    elif damage == "wrong_weights":
        (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 64, "intermediate_size": 128}))
    elif damage == "no_processor":
        (folder / "preprocessor_config.json").unlink()
    repo_id = f"org/refused-{damage.replace('_', '-')}"
    before = snapshot(folder)
    with pytest.raises(CheckpointRefused) as excinfo:
        push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN)
    assert str(folder) in str(excinfo.value) or "config.json" in str(excinfo.value)
    assert not api.repo_exists(repo_id)
    assert snapshot(folder) == before


def test_server_error_mid_push_then_retry(checkpoints, api, hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    before = snapshot(folder)
    repo_id = "org/flaky-push"
    # 507 is not among the statuses huggingface_hub retries as it is, but a failed commit of many files (21 here) is
    # retried in smaller chunks: every commit of this push fails
    hub.fail_next(f"/api/models/{repo_id}/commit/", status=507, count=1000)
    with pytest.raises(PushError) as excinfo:
        push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN)
    hub.clear_failures()
    message = str(excinfo.value)
    assert "HTTP 507" in message and "run the same push again" in message and TOKEN not in message
    assert snapshot(folder) == before
    assert api.list_repo_files(repo_id) == [".gitattributes"]  # the repo exists, the commit did not happen
    push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN)
    assert "model.safetensors" in api.list_repo_files(repo_id) and len(api.list_repo_commits(repo_id)) == 2
    hub.fail_next(f"/api/models/{repo_id}/commit/", status=500)  # transient: retried by huggingface_hub
    (folder / "extra.txt").write_text("more")
    push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, include="extra.txt")
    assert "extra.txt" in api.list_repo_files(repo_id) and len(api.list_repo_commits(repo_id)) == 3
    assert TOKEN not in caplog.text


def test_network_failure_and_refused_token(checkpoints, hub, tmp_path):
    """An endpoint that does not answer and a token it refuses are input mistakes found before the folder is read
    (`whoami`), as `CheckpointRefused`."""
    folder = checkpoints["vit"]["folder"]
    with pytest.raises(CheckpointRefused, match=r"Could not reach http://127\.0\.0\.1:9") as excinfo:
        push_to_hub(folder, "org/unreachable", endpoint="http://127.0.0.1:9", token=TOKEN)
    assert TOKEN not in str(excinfo.value)
    wrong = "hf_wrong-token-0000"
    with pytest.raises(CheckpointRefused, match="HTTP 401") as excinfo:
        push_to_hub(folder, "org/intruder", endpoint=hub.url, token=wrong)
    assert wrong not in str(excinfo.value)


def test_cli_push(checkpoints, api, hub, monkeypatch, capsys):
    """`hf-norms push REPO_ID [LOCAL_PATH]` as `hf upload`: the token from --token (or HF_TOKEN), LOCAL_PATH defaulting
    to the current folder, --include/--exclude globs, and never a token printed."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    folder = str(checkpoints["deit"]["folder"])
    argv = ["push", "org/cli-deit", folder, "--private", "--revision", "dev", "--commit_message", "hi"]
    assert cli.main([*argv, "--token", TOKEN]) == 0
    assert api.model_info("org/cli-deit").private
    assert api.list_repo_commits("org/cli-deit", revision="dev")[0].title == "hi"
    assert "model.safetensors" not in api.list_repo_files("org/cli-deit")  # main untouched
    printed = capsys.readouterr()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.chdir(folder)
    assert cli.main(["push", "org/cli-dry", "--dry-run"]) == 0 and not api.repo_exists("org/cli-dry")
    dry_run = capsys.readouterr()
    assert "README.md" in json.loads(dry_run.out[dry_run.out.index("{") :])["files"]
    (Path(folder) / "notes.json").write_text("{}")
    argv = ["push", "org/cli-glob", "--include", "*.json", "--exclude", "*.py", "--exclude", "README.md", "--dry-run"]
    assert cli.main(argv) == 0
    globbed = capsys.readouterr()
    assert json.loads(globbed.out[globbed.out.index("{") :])["files"] == [
        "config.json",
        "conversion_report.json",
        "model.safetensors",
        "notes.json",
        "preprocessor_config.json",
    ]
    (Path(folder) / "notes.json").unlink()
    assert cli.main(["push", "org/cli-bad", str(Path(folder).parent)]) == 2
    refused = capsys.readouterr()
    assert "no config.json" in refused.err
    assert not any(TOKEN in text for output in (printed, dry_run, globbed, refused) for text in output)


def test_cli_push_in_the_old_order_says_so(checkpoints, api, hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    folder = str(checkpoints["vit"]["folder"])
    assert cli.main(["push", folder, "org/old-order"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the order is REPO_ID LOCAL_PATH, as in `hf upload`" in err
    assert f"hf-norms push org/old-order {folder}" in err and not api.repo_exists("org/old-order")


def test_push_says_what_it_leaves_out_in_one_line_per_folder_and_quiet_prints_only_the_url(
    checkpoints, api, hub, tmp_path
):
    """The README tour's push printed 71 lines: one per file of a Trainer's `checkpoint-20/`, and a suggestion to
    publish hf-norms' own folder marker. A folder left out whole is one line; the marker is never named; `--quiet`
    (as `hf upload --quiet`) prints the commit URL and nothing else."""
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    (folder / "checkpoint-20").mkdir()
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin"):
        (folder / "checkpoint-20" / name).write_bytes(b"x")
    (folder / ".hf-norms-made-this").write_text("{}")
    (folder / "notes.txt").write_text("mine")
    env = {**os.environ, "HF_TOKEN": TOKEN, "HF_ENDPOINT": hub.url}
    env.pop("HF_HUB_OFFLINE", None)
    push = [str(HF_NORMS_SCRIPT), "push", "org/quiet", str(folder)]
    dry = subprocess.run([*push, "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr
    said = [line for line in dry.stderr.splitlines() if line.startswith("INFO Not uploading")]
    assert said == [
        "INFO Not uploading checkpoint-20/ (5 files): not a file of an hf-norms checkpoint (add them with --include "
        "'checkpoint-20/')",
        "INFO Not uploading notes.txt: not a file of an hf-norms checkpoint (add it with --include notes.txt)",
    ]
    quiet = subprocess.run([*push, "--quiet"], env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    commit = api.list_repo_commits("org/quiet")[0].commit_id
    assert quiet.stdout.startswith(hub.url) and quiet.stdout.endswith(f"{commit}\n") and quiet.stdout.count("\n") == 1
