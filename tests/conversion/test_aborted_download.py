"""A download that the network cuts off mid-file is one line naming the repo's file and what to do, exit 2, for every
command that reads a source repo by id (issue 54, item 4): `convert` and `heal` (through `resolve_source`) and
`finetune` (through transformers' `from_pretrained`, which raised it as a misleading `OSError`, exit 1). Before, the
retries of huggingface_hub printed 12 more lines.

The real `hf-norms` command runs in a subprocess against the real loopback Hub, reached through a real proxy on
127.0.0.1 that drops the connection half-way through each `model.safetensors` body (`cutting_proxy.CuttingProxy`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import HF_NORMS_SCRIPT
from cutting_proxy import CuttingProxy
from test_convert import tree_digest
from test_safety import run

TOKEN = "hf_cut-download-token-2024"
FIX = "check the network and HF_ENDPOINT"


@pytest.fixture(scope="module")
def cut_hub(tiny_bert_dir, tmp_path_factory):
    """(the URL of a proxy that cuts every `.safetensors` download of the loopback Hub holding `org/bert`, the proxy)."""
    import huggingface_hub
    from huggingface_hub import HfApi

    from hf_norms.hub.server import HubServer

    with pytest.MonkeyPatch.context() as patch, HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN]) as hub:
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # loopback only
        HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/bert")
        HfApi(endpoint=hub.url, token=TOKEN).upload_folder(folder_path=tiny_bert_dir, repo_id="org/bert")
        with CuttingProxy(int(hub.url.rsplit(":", 1)[1]), (".safetensors",)) as url:
            yield url, hub


def run_cut(cut_hub, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    url, hub = cut_hub
    env = {**os.environ, **hub.client_env(TOKEN), "HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_NORMS_DEBUG", None)
    return subprocess.run([str(HF_NORMS_SCRIPT), *argv], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def assert_one_download_line(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(text in result.stderr for text in (*expected, FIX)), result.stderr


def test_convert_of_a_cut_download_is_one_line(cut_hub, tmp_path):
    result = run_cut(cut_hub, tmp_path, "convert", "org/bert", "--norm-type", "lape", "--output", "out")
    assert_one_download_line(result, "'org/bert'", "RemoteProtocolError")
    assert not (tmp_path / "out").exists()


def test_finetune_of_a_cut_download_is_one_line(cut_hub, tmp_path):
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"news item {i},{i % 2}\n" for i in range(8)))
    result = run_cut(cut_hub, tmp_path, "finetune", "--model_name_or_path", "org/bert", "--dataset", "train.csv",
                     "--output_dir", "run", "--max_steps", "1", "--max_seq_length", "32")  # fmt: skip
    assert_one_download_line(result, "downloading model.safetensors of model 'org/bert'", "RemoteProtocolError")


def test_heal_of_a_cut_teacher_download_is_one_line(cut_hub, tiny_bert_dir, tmp_path, capsys):
    converted = tmp_path / "converted"
    assert run(["convert", str(tiny_bert_dir), "--norm-type", "lape", "--output", str(converted)], capsys)[0] == 0
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"a sentence to heal on, number {i}\n" for i in range(16)))
    before = tree_digest(converted)
    result = run_cut(cut_hub, tmp_path, "heal", str(converted), "--teacher", "org/bert", "--data", str(texts),
                     "--max-steps", "1")  # fmt: skip
    assert_one_download_line(result, "'org/bert'", "RemoteProtocolError")
    assert tree_digest(converted) == before
