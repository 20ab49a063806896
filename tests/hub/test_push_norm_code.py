"""The remote code a pushed checkpoint makes its users trust: its two generated files, with its own norm only; it loads by
repo id with `trust_remote_code=True` where hf_norms cannot be imported, and push refuses any `.py` file that is not
what hf-norms writes for the checkpoint's config, byte for byte."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import in_fresh_memory, tiny_config
from huggingface_hub import HfApi
from publish_setup import copy_of, snapshot
from transformers import ViTImageProcessorPil

import hf_norms
from hf_norms import cli
from hf_norms.demo import BLOCK_HF_NORMS
from hf_norms.hub.publish import push_to_hub
from hf_norms.hub.server import HubServer
from hf_norms.models.checkpoint_code import checkpoint_code

TOKEN = "hf_norm-code-test-secret-4711"
NORMS = Path(hf_norms.__file__).parent / "norms"  # the flat files of an older save held these layers
# A ViT checkpoint's remote code: its configuration and modeling files, generated for its norm (before: 18 files, the
# family's code, the registry and DyT's files; 24 before that)
VIT_DYT_FILES = {"configuration_vit_norm.py", "modeling_vit_norm.py"}

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def dyt_checkpoint(tmp_path_factory) -> Path:
    """A tiny DyT ViT image classifier with its image processor."""
    folder = tmp_path_factory.mktemp("checkpoint") / "vit-dyt"
    torch.manual_seed(0)
    hf_norms.ViTNormForImageClassification(tiny_config("vit", "dyt")).save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


LOAD_BY_ID = """
import json, torch, transformers
model = transformers.AutoModelForImageClassification.from_pretrained("org/vit-dyt", trust_remote_code=True).eval()
for tensor in [*model.parameters(), *model.buffers()]:
    tensor.data = tensor.data.clone()  # out of the memory map, aligned as in the pushing process
reference = torch.load(REFERENCE)
with torch.no_grad():
    logits = model(pixel_values=reference["pixels"]).logits
print(json.dumps({"class": type(model).__name__, "module": type(model).__module__,
                  "diff": (logits - reference["logits"]).abs().max().item()}))
"""


def test_a_dyt_checkpoint_publishes_no_other_norms_file_and_loads_by_id_without_hf_norms(
    dyt_checkpoint: Path, hub: HubServer, api: HfApi, tmp_path: Path
) -> None:
    """Flat files of an older save in the folder stay local; the download fetches the two published files, each
    once, and computes the local model's logits exactly."""
    folder = copy_of(dyt_checkpoint, tmp_path)
    for stray, source in {"norm_dtn.py": "dtn.py", "norm_dyt.py": "dyt.py", "norms.py": "build.py"}.items():
        shutil.copyfile(NORMS / source, folder / stray)
    push_to_hub(folder, "org/vit-dyt", endpoint=hub.url, token=TOKEN)
    assert {name for name in api.list_repo_files("org/vit-dyt") if name.endswith(".py")} == VIT_DYT_FILES

    model = in_fresh_memory(hf_norms.ViTNormForImageClassification.from_pretrained(folder)).eval()
    torch.manual_seed(1)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.save({"pixels": pixels, "logits": model(pixel_values=pixels).logits}, tmp_path / "reference.pt")
    code = BLOCK_HF_NORMS + textwrap.dedent(LOAD_BY_ID).replace("REFERENCE", repr(str(tmp_path / "reference.pt")))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), **hub.client_env(TOKEN)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["class"] == "ViTNormForImageClassification" and "hf_norms" not in result["module"]
    assert result["diff"] == 0
    downloaded = re.findall(r"A new version of the following files was downloaded from \S+:\n- (\S+)", done.stderr)
    assert sorted(downloaded) == sorted(VIT_DYT_FILES)  # one warning per file: 2 (18 before)


@pytest.mark.parametrize("edit", ["a line appended", "the file of a DTN checkpoint"])
def test_code_hf_norms_does_not_write_for_the_config_is_refused(
    edit: str,
    dyt_checkpoint: Path,
    api: HfApi,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`hf-norms push`: exit 2, one line naming the file, no repo created, every file of the folder unchanged."""
    folder = copy_of(dyt_checkpoint, tmp_path)
    written = folder / "modeling_vit_norm.py"
    if edit == "a line appended":
        written.write_text(written.read_text() + "import os; os.system('id')\n")
    else:
        written.write_text(checkpoint_code({"model_type": "vit_norm", "norm_type": "dtn"})[written.name])
    before = snapshot(folder)
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", "org/edited-norm-code", str(folder)]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.startswith("hf-norms push: error: ")
    assert "modeling_vit_norm.py differs from the modeling_vit_norm.py the installed hf-norms" in line, line
    assert not api.repo_exists("org/edited-norm-code") and snapshot(folder) == before


def test_save_pretrained_with_push_to_hub_publishes_the_norms_files(
    dyt_checkpoint: Path, hub: HubServer, api: HfApi, tmp_path: Path
) -> None:
    """`save_pretrained(folder, push_to_hub=True)` (in a fresh process pointed at the loopback Hub) publishes what the
    folder then holds, the norms' files included: transformers' own upload would run before they are written."""
    code = f"""
import hf_norms
model = hf_norms.ViTNormForImageClassification.from_pretrained({str(dyt_checkpoint)!r})
model.save_pretrained({str(tmp_path / "saved")!r}, push_to_hub=True, repo_id="org/saved-and-pushed")
"""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), **hub.client_env(TOKEN)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert {name for name in os.listdir(tmp_path / "saved") if name.endswith(".py")} == VIT_DYT_FILES
    assert {name for name in api.list_repo_files("org/saved-and-pushed") if name.endswith(".py")} == VIT_DYT_FILES
