"""`hf-norms finetune --push_to_hub` publishes the finished model once, at the end, against the loopback Hub: the real
command line, a tiny BERT fine-tuned on packaged BBC News from a snapshot of a Hub repo in the Hugging Face cache (with
its card and sentence-transformers files), `--hub_token` on the command line and checkpoints saved every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
        found = [model.id for model in api.list_models(pipeline_tag="text-classification")]
        by_id = run_pipeline(hub, tmp_path, env)
        republished = republish(hub, output, tmp_path, env)

    assert [commit.title for commit in commits[:-1]] == ["End of training"]  # one commit after the repo's first
    training = done.stderr[done.stderr.index("0/3 [") : done.stderr.rindex("3/3 [")]  # the Trainer's bar, 3 steps
    assert "Writing model shards" not in training and "Loading weights" not in training  # 3 checkpoints saved in it
    pushed = [line for line in done.stdout.splitlines() if line.startswith("Pushed ")]
    assert pushed == [f"Pushed {output} to {REPO_ID}: commit {commits[0].commit_id} ({commit_url})"]
    assert (output / "checkpoint-3").is_dir() and (output / "training_args.bin").is_file()  # saved, never pushed
    code = {"modeling_bert_norm.py", "configuration_bert_norm.py"}
    tokenizer = {"tokenizer.json", "tokenizer_config.json"}
    results = {"eval_results.json", "train_results.json", "all_results.json", "trainer_state.json"}
    assert {"config.json", "model.safetensors", "README.md", *code, *tokenizer, *results} <= remote
    assert {name for name in remote if name.endswith(".py")} == code
    # the source's sentence-transformers files describe its encoder and pooling, not the classifier trained from it
    assert not {*SENTENCE_TRANSFORMERS_FILES, "1_Pooling/config.json"} & remote
    assert not (output / "modules.json").exists()
    assert not [name for name in remote if name.startswith("checkpoint-") or name.endswith((".bin", ".pt", ".pth"))]

    evaluation = json.loads((published / "eval_results.json").read_text())
    card = ModelCard.load(published / "README.md").data.to_dict()
    metrics = {m["type"]: m["value"] for m in card["model-index"][0]["results"][0]["metrics"]}
    assert metrics["accuracy"] == evaluation["eval_accuracy"]
    assert card["model-index"][0]["results"][0]["dataset"]["type"] == "SetFit/bbc-news"
    assert card["base_model"] == SOURCE_ID and card["base_model_relation"] == "finetune"
    assert (card["license"], card["language"]) == ("apache-2.0", "en")  # from the source's card
    assert card["library_name"] == "transformers" and "dtn" in card["tags"]
    assert card["pipeline_tag"] == "text-classification" and "sentence-transformers" not in card["tags"]
    assert card["model-index"][0]["results"][0]["task"]["type"] == "text-classification"
    assert REPO_ID in found
    # pipeline(model=id), the task read from the Hub: the classifier's own prediction on a held-out article
    assert by_id["task"] == "text-classification"
    assert by_id["label"] == by_id["local_label"] and abs(by_id["score"] - by_id["local_score"]) <= 1e-5

    assert card["datasets"] == ["SetFit/bbc-news"]
    # `hf-norms push` of the output folder (README's tour) and `model.push_to_hub` of the model loaded from the repo,
    # back to it, keep what the card says: datasets, model-index, license, language and the real base model
    for again in republished:
        assert {key: again.get(key) for key in KEPT} == {key: card.get(key) for key in KEPT}, again
    # the folder's Trainer results are the model-index of `hf-norms push`; a model pushed from memory claims none
    assert republished[0]["model-index"][0]["results"] == card["model-index"][0]["results"]
    assert "model-index" not in republished[1]

    forms = token_forms(TOKEN)
    holding = [p.name for p in published.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms)]
    assert holding == []
    assert not [form for form in text_token_forms(TOKEN) if form in done.stdout + done.stderr]


KEPT = ("datasets", "license", "language", "base_model", "pipeline_tag")
PUSH_BACK = """
import hf_norms
from transformers import AutoModelForSequenceClassification
AutoModelForSequenceClassification.from_pretrained(REPO_ID).push_to_hub(REPO_ID, token=TOKEN)
"""


def republish(hub, output: Path, tmp_path: Path, env: dict[str, str]) -> list[dict]:
    """The card metadata after `hf-norms push org/again OUTPUT`, and after pushing the model loaded from REPO_ID back to
    REPO_ID (before, both lost datasets and model-index; the second named REPO_ID as its own base model and dropped
    license and language)."""
    cards = []
    pushed = subprocess.run([str(HF_NORMS_SCRIPT), "push", "org/again", str(output), "--token", TOKEN], env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    code = PUSH_BACK.replace("REPO_ID", repr(REPO_ID)).replace("TOKEN", repr(TOKEN))
    done = subprocess.run([sys.executable, "-c", code], env={**env, "HF_HOME": str(tmp_path / "other-home")},
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for repo_id in ("org/again", REPO_ID):
        folder = snapshot_download(repo_id, endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / f"again-{len(cards)}")
        cards.append(ModelCard.load(Path(folder) / "README.md").data.to_dict())
    return cards


PIPELINE_BY_ID = """
import json, torch, hf_norms
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
from hf_norms import packaged
text = packaged.bbc_news()[-1][0]
pipe = pipeline(model=REPO_ID)
answer = pipe(text, truncation=True, max_length=32)[0]
tokenizer, model = AutoTokenizer.from_pretrained(OUTPUT), AutoModelForSequenceClassification.from_pretrained(OUTPUT)
with torch.no_grad():
    probabilities = model(**tokenizer(text, truncation=True, max_length=32, return_tensors="pt")).logits.softmax(-1)[0]
best = int(probabilities.argmax())
print(json.dumps({"task": pipe.task, "label": answer["label"], "score": answer["score"],
                  "local_label": model.config.id2label[best], "local_score": float(probabilities[best])}))
"""


def run_pipeline(hub, tmp_path: Path, env: dict[str, str]) -> dict:
    """`pipeline(model=REPO_ID)` in a fresh process pointed at the loopback Hub, beside the local output's answer."""
    code = PIPELINE_BY_ID.replace("REPO_ID", repr(REPO_ID)).replace("OUTPUT", repr(str(tmp_path / "out")))
    done = subprocess.run([sys.executable, "-c", code], env={**env, "HF_TOKEN": TOKEN}, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


GRAY_REPO_ID = "org/fashion-vit-dyt"
GRAYSCALE_PIPELINE = """
import json
from PIL import Image
IMPORT_LINE
from transformers import pipeline
pipe = pipeline("image-classification", model=REPO_ID, **KWARGS)
gray = Image.open(PHOTO)
answers = [pipe(image, top_k=3) for image in (gray, gray.convert("RGB"), PHOTO)]
print(json.dumps({"answers": answers, "processor": type(pipe.image_processor).__module__}))
"""


def test_a_grayscale_model_runs_in_the_image_classification_pipeline_by_id(tmp_path):
    """The docs' Fashion-MNIST recipe (`num_channels=1`) pushed with `finetune --push_to_hub`: the published image
    processor makes `pipeline("image-classification", model=id)` work on a grayscale image, its RGB copy and its path
    (the pipeline opens images as RGB), with and without hf-norms, giving what the model gives on the pixels it was
    trained on."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageClassification

    from hf_norms import packaged
    from hf_norms.demo import BLOCK_HF_NORMS
    from hf_norms.models.image_processing_norm import GrayscaleImageProcessor

    photo = tmp_path / "fashion.png"
    Image.fromarray(packaged.fashion_mnist("test", limit=1)[0][0]).save(photo)
    with HubServer(tmp_path / "hub", tokens=[TOKEN]) as hub:
        env = {**os.environ, **hub.client_env(TOKEN), "HF_HOME": str(tmp_path / "hf-home")}
        output = tmp_path / "out"
        overrides = "image_size=28,patch_size=7,num_channels=1,hidden_size=32,num_hidden_layers=1,num_attention_heads=2"
        command = [str(HF_NORMS_SCRIPT), "finetune", "--model_type", "vit_norm", "--norm_type", "dyt"]
        command += ["--dataset", "packaged:fashion-mnist", "--config_overrides", f"{overrides},intermediate_size=64"]
        command += ["--max_train_samples", "64", "--max_eval_samples", "16", "--max_steps", "2", "--use_cpu"]
        command += ["--output_dir", str(output), "--report_to", "none", "--push_to_hub", "--hub_model_id", GRAY_REPO_ID]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        results = {}
        for name, import_line, kwargs in (("hf_norms", "import hf_norms", "{}"),
                                          ("remote", BLOCK_HF_NORMS, "{'trust_remote_code': True}")):  # fmt: skip
            code = GRAYSCALE_PIPELINE.replace("IMPORT_LINE", import_line).replace("KWARGS", kwargs)
            code = code.replace("REPO_ID", repr(GRAY_REPO_ID)).replace("PHOTO", repr(str(photo)))
            ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                                 cwd=tmp_path)  # fmt: skip
            assert ran.returncode == 0, ran.stderr[-3000:]
            assert "Do you wish to run the custom code?" not in ran.stdout  # no prompt, whatever is installed
            results[name] = json.loads(ran.stdout.strip().splitlines()[-1])

    model = AutoModelForImageClassification.from_pretrained(output).eval()
    pixels = GrayscaleImageProcessor.from_pretrained(output)(images=Image.open(photo), return_tensors="pt")
    with torch.no_grad():
        probabilities = model(**pixels).logits.softmax(-1)[0]
    top = probabilities.topk(3)
    expected = [(model.config.id2label[int(i)], float(p)) for p, i in zip(top.values, top.indices, strict=True)]
    assert pixels["pixel_values"].shape == (1, 1, 28, 28)
    for name, result in results.items():
        for answer in result["answers"]:
            assert [entry["label"] for entry in answer] == [label for label, _ in expected], name
            assert max(abs(entry["score"] - p) for entry, (_, p) in zip(answer, expected, strict=True)) <= 1e-6
    assert "transformers_modules" in results["remote"]["processor"]
    assert results["hf_norms"]["processor"] == "hf_norms.models.image_processing_norm"
