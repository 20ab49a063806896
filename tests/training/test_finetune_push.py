"""`hf-norms finetune --push_to_hub` publishes the finished model once, at the end, against the loopback Hub: the real
command line, a tiny BERT fine-tuned on packaged BBC News from a snapshot of a Hub repo in the Hugging Face cache (with
its card and sentence-transformers files), `--hub_token` on the command line and checkpoints saved every step."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import HF_NORMS_SCRIPT, tiny_sentence_transformer
from huggingface_hub import HfApi, ModelCard, snapshot_download

from hf_norms.hub.server import HubServer
from hf_norms.redaction import text_token_forms, token_forms

TOKEN = "hf_FinetunePushTokenAbCdEfGhIjKl0123"
SOURCE_ID = "org/tiny-minilm"
REPO_ID = "org/tiny-minilm-dtn-bbc"
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")

pytestmark = pytest.mark.usefixtures("hub_online")


def test_finetune_push_to_hub_publishes_the_finished_model_once(tiny_bert_dir, minilm_dir, tmp_path):
    with HubServer(tmp_path / "hub", tokens=[TOKEN]) as hub:
        api = HfApi(endpoint=hub.url, token=TOKEN)
        api.create_repo(SOURCE_ID)
        api.upload_folder(folder_path=tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "source"),
                          repo_id=SOURCE_ID)  # fmt: skip
        snapshot = snapshot_download(SOURCE_ID, endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "hf-home" / "hub")
        assert "models--org--tiny-minilm/snapshots/" in snapshot
        env = {**os.environ, **hub.client_env(), "HF_HOME": str(tmp_path / "hf-home")}  # no HF_TOKEN, no stored login
        env.pop("HF_TOKEN", None)
        env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)  # the bars a user sees
        output = tmp_path / "out"
        command = [str(HF_NORMS_SCRIPT), "finetune", "--model_name_or_path", snapshot, "--norm_type", "dtn"]
        command += ["--dataset", "packaged:bbc-news", "--max_train_samples", "48", "--max_eval_samples", "16"]
        command += ["--max_seq_length", "32", "--max_steps", "3", "--per_device_train_batch_size", "8", "--use_cpu"]
        command += ["--save_steps", "1", "--output_dir", str(output), "--report_to", "none", "--push_to_hub"]
        command += ["--hub_model_id", REPO_ID, "--hub_token", TOKEN, "--disable_tqdm", "false"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        commits = api.list_repo_commits(REPO_ID)
        remote = set(api.list_repo_files(REPO_ID))
        published = Path(snapshot_download(REPO_ID, endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "published"))
        commit_url = f"{hub.url}/{REPO_ID}/commit/{commits[0].commit_id}"

    assert [commit.title for commit in commits[:-1]] == ["End of training"]  # one commit after the repo's first
    training = done.stderr[done.stderr.index("0/3 [") : done.stderr.rindex("3/3 [")]  # the Trainer's bar, 3 steps
    assert "Writing model shards" not in training and "Loading weights" not in training  # 3 checkpoints saved in it
    pushed = [line for line in done.stdout.splitlines() if line.startswith("Pushed ")]
    assert pushed == [f"Pushed {output} to {REPO_ID}: commit {commits[0].commit_id} ({commit_url})"]
    assert (output / "checkpoint-3").is_dir() and (output / "training_args.bin").is_file()  # saved, never pushed
    code = {"norms.py", "modeling_bert_norm.py", "configuration_bert_norm.py", "version_guard.py"}
    tokenizer = {"tokenizer.json", "tokenizer_config.json"}
    sentence_transformers = {*SENTENCE_TRANSFORMERS_FILES, "1_Pooling/config.json"}
    results = {"eval_results.json", "train_results.json", "all_results.json", "trainer_state.json"}
    assert {
        "config.json",
        "model.safetensors",
        "README.md",
        *code,
        *tokenizer,
        *sentence_transformers,
        *results,
    } <= remote
    assert not [name for name in remote if name.startswith("checkpoint-") or name.endswith((".bin", ".pt", ".pth"))]

    evaluation = json.loads((published / "eval_results.json").read_text())
    card = ModelCard.load(published / "README.md").data.to_dict()
    metrics = {m["type"]: m["value"] for m in card["model-index"][0]["results"][0]["metrics"]}
    assert metrics["accuracy"] == evaluation["eval_accuracy"]
    assert card["model-index"][0]["results"][0]["dataset"]["type"] == "SetFit/bbc-news"
    assert card["base_model"] == SOURCE_ID and card["base_model_relation"] == "finetune"
    assert (card["license"], card["language"]) == ("apache-2.0", "en")  # from the source's card
    assert card["library_name"] == "sentence-transformers" and "dtn" in card["tags"]

    forms = token_forms(TOKEN)
    holding = [p.name for p in published.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms)]
    assert holding == []
    assert not [form for form in text_token_forms(TOKEN) if form in done.stdout + done.stderr]
