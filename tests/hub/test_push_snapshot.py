"""What a push publishes is a private snapshot of the folder, checked as a whole, the card included (issue 54, item 1):
a file swapped in the folder while the push runs is never published, and a secret that reaches the card (from the
folder's README.md metadata, the card options or the conversion report) refuses the push before anything is created.
Each case runs a real push to the loopback Hub and compares the sha256 of what the Hub serves."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import hf_hub_download
from safetensors.torch import save_file

from hf_norms.hub import publish
from hf_norms.hub.publish import CheckpointRefused, push_to_hub

TOKEN = "hf_push-snapshot-secret-2718"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"  # the GitHub format, 36 characters after its prefix
AWS_KEY = "AKIA" + "Z7Q2W9X4C6V8B1N3"

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture
def folder(saved_checkpoint: Path, tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    return Path(shutil.copytree(saved_checkpoint, tmp_path / "vit"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class SwapBeforeUpload(logging.Handler):
    """Runs `swap()` when the push logs that it starts uploading: the moment after every check, as a process writing
    to the folder meanwhile would."""

    def __init__(self, swap) -> None:
        super().__init__()
        self.swap = swap

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Uploading"):
            self.swap()


def test_files_swapped_in_the_folder_during_the_push_are_never_published(folder, hub, api, tmp_path, caplog):
    """While a push runs, `config.json` is replaced by a copy holding a credential and `model.safetensors` by a link to
    a private key outside the folder (1 of 6 and 1 of 8 pushes published them): the Hub gets the bytes that were
    checked, and neither the credential nor the key."""
    checked = {name: sha256(folder / name) for name in ("config.json", "model.safetensors")}

    def swap() -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "swapped.json").write_text(json.dumps({**config, "aws_access_key_id": AWS_KEY}))
        os.replace(folder / "swapped.json", folder / "config.json")
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").symlink_to(tmp_path / "outside" / "id_rsa")

    handler = SwapBeforeUpload(swap)
    publish_logger = logging.getLogger("hf_norms.hub.publish")
    publish_logger.addHandler(handler)
    caplog.set_level(logging.INFO, logger="hf_norms.hub.publish")
    try:
        push_to_hub(folder, "org/swapped-during-push", endpoint=hub.url, token=TOKEN)
    finally:
        publish_logger.removeHandler(handler)
    assert (folder / "model.safetensors").is_symlink()  # the swap happened, before the upload
    for name, digest in checked.items():
        served = hf_hub_download("org/swapped-during-push", name, endpoint=hub.url, token=TOKEN,
                                 cache_dir=tmp_path / "cache")  # fmt: skip
        assert sha256(Path(served)) == digest, name


def readme_with(front_matter: str) -> str:
    return f"---\n{front_matter}\n---\n\n# My model\n"


@pytest.mark.parametrize(
    ("readme", "options", "where"),
    [
        (readme_with(f"language:\n- en\n- {GITHUB_TOKEN}"), {}, "an access token"),  # a metadata list
        (readme_with(f"datasets:\n- org/{AWS_KEY}"), {}, "an access token"),  # a dataset id
        (readme_with(f'datasets:\n- "org/{GITHUB_TOKEN[:10]}\\\n  {GITHUB_TOKEN[10:]}"'), {}, "an access token"),
        (readme_with("license: mit"), {"notes": f"Trained with {AWS_KEY} on S3."}, "an access token"),
        (readme_with("license: mit"), {"notes": "mirror: https://bob:hunter22@example.org/x"}, "URL with a password"),
        (readme_with(f"datasets:\n- org/{TOKEN}"), {}, "The Hub token"),
    ],
    ids=["language", "dataset-id", "escaped-line-continuation", "notes-option", "url-password", "hub-token"],
)
def test_a_secret_that_reaches_the_card_refuses_the_push(folder, api, hub, readme, options, where):
    """The card was checked for the Hub token alone: credentials in the README's metadata and in push's own card options
    reached the Hub. The card is now a file of the snapshot, read by the one check with every pattern: the push is
    refused in one line naming the card, and no repo is created."""
    (folder / "README.md").write_text(readme)
    before = {path.name: sha256(path) for path in folder.iterdir() if path.is_file()}
    repo_id = f"org/card-secret-{abs(hash(readme + str(options))) % 10**8}"
    with pytest.raises(CheckpointRefused) as refused:
        push_to_hub(folder, repo_id, endpoint=hub.url, token=TOKEN, **options)
    message = str(refused.value)
    assert "README.md" in message and where in message and "nothing was" in message.lower(), message
    assert TOKEN not in message and GITHUB_TOKEN not in message and AWS_KEY not in message
    assert not api.repo_exists(repo_id)
    assert {path.name: sha256(path) for path in folder.iterdir() if path.is_file()} == before


def test_the_snapshot_is_removed_after_a_push_and_after_a_refusal(folder, hub, monkeypatch, tmp_path):
    """The snapshot is a private folder of the push (under TMPDIR): none is left behind, pushed or refused."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    push_to_hub(folder, "org/snapshot-removed", endpoint=hub.url, token=TOKEN)
    (folder / "README.md").write_text(readme_with(f"datasets:\n- org/{AWS_KEY}"))
    with pytest.raises(CheckpointRefused):
        push_to_hub(folder, "org/snapshot-removed", endpoint=hub.url, token=TOKEN)
    assert [path.name for path in scratch.iterdir() if path.name.startswith("hf-norms-publish-")] == []


def test_weights_swapped_before_the_copy_are_load_checked_as_copied(folder, hub, api, monkeypatch):
    """The load checks read the snapshot, not the folder: weights replaced after the files are chosen and before they
    are copied (by another model's, which would not load) refuse the push, naming the user's folder; they were
    published unchecked when the checks read the folder before the copy."""
    choose = publish.select_upload_files

    def choose_then_swap(*args, **kwargs):
        chosen = choose(*args, **kwargs)
        save_file({"foreign.weight": torch.zeros(3)}, str(folder / "model.safetensors"))
        return chosen

    monkeypatch.setattr(publish, "select_upload_files", choose_then_swap)
    with pytest.raises(CheckpointRefused, match="does not belong to these weights") as refused:
        push_to_hub(folder, "org/swapped-before-copy", endpoint=hub.url, token=TOKEN)
    assert str(folder) in str(refused.value) and "hf-norms-publish-" not in str(refused.value)
    assert not api.repo_exists("org/swapped-before-copy")
