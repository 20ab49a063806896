"""Publishing against the loopback Hub: push a converted checkpoint of each family, load it back by repo id in fresh
processes (with `import hf_norms`, and with `trust_remote_code=True` where hf_norms cannot be imported), and every
refusal and failure of the push."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import in_fresh_memory
from huggingface_hub import ModelCard, hf_hub_download
from publish_setup import copy_of, make_checkpoints, photo_batch
from test_model_card import MINILM_ID, text_batch
from transformers import (
    AutoTokenizer,
    ViTImageProcessorPil,
)

import hf_norms
from hf_norms import cli, packaged
from hf_norms.demo import BLOCK_HF_NORMS
from hf_norms.hub.card_facts import REPORT_NAME
from hf_norms.hub.publish import push_to_hub
from hf_norms.hub.server import HubServer
from hf_norms.version_guard import NEWEST_TESTED_TRANSFORMERS, OLDEST_TRANSFORMERS

TOKEN = "hf_publish-test-secret-4711"


pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def checkpoints(minilm_dir, tmp_path_factory) -> dict[str, dict]:
    return make_checkpoints(minilm_dir, tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="module")
def published(checkpoints, hub, tmp_path_factory) -> Path:
    """Push every checkpoint; save the inputs and the local folders' outputs to compare the downloads against."""
    references = tmp_path_factory.mktemp("references") / "references.pt"
    expected = {}
    for family, entry in checkpoints.items():
        push_to_hub(entry["folder"], entry["repo_id"], endpoint=hub.url, token=TOKEN, base_model=entry["base_model"])
        architecture = json.loads((entry["folder"] / "config.json").read_text())["architectures"][0]
        model = in_fresh_memory(getattr(hf_norms, architecture).from_pretrained(entry["folder"])).eval()
        if family == "bert":
            inputs = text_batch(AutoTokenizer.from_pretrained(entry["folder"]), count=4)
        else:
            inputs = {"pixel_values": photo_batch(ViTImageProcessorPil.from_pretrained(entry["folder"]))}
        with torch.no_grad():
            output = model(**inputs)
        expected[entry["repo_id"]] = {
            "inputs": inputs,
            "output": output.last_hidden_state if family == "bert" else output.logits,
            "class": type(model).__name__,
        }
    torch.save(expected, references)
    return references


def run_client(code: str, hub: HubServer, cwd: Path, block_hf_norms: bool = False) -> dict:
    """Run `code` in a fresh interpreter pointed at the loopback hub; return the JSON it prints last."""
    prefix = BLOCK_HF_NORMS if block_hf_norms else ""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd),
        "HF_HOME": str(cwd / "hf_home"),
        "TRANSFORMERS_VERBOSITY": "error",
        **hub.client_env(TOKEN),
        **{key: os.environ[key] for key in ("PYTHONPATH",) if key in os.environ},  # the hf_norms under test
    }
    done = subprocess.run(
        [sys.executable, "-c", prefix + textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert TOKEN not in done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


LOAD_BY_ID = """
import json, torch, transformers
from huggingface_hub import ModelCard
from transformers import pipeline
from PIL import Image
IMPORT_LINE
kwargs = KWARGS
results = {}
for entry in json.loads(ENTRIES):
    reference = torch.load(REFERENCES)[entry["repo_id"]]
    model = getattr(transformers, entry["auto"]).from_pretrained(entry["repo_id"], **kwargs).eval()
    for p in [*model.parameters(), *model.buffers()]:
        p.data = p.data.clone()  # out of the memory map, aligned as in the saving process
    with torch.no_grad():
        out = model(**reference["inputs"])
    tensor = out.last_hidden_state if entry["auto"] == "AutoModel" else out.logits
    base = transformers.AutoModel.from_pretrained(entry["repo_id"], **kwargs)
    pipe = pipeline(entry["task"], model=entry["repo_id"], **kwargs)
    if entry["task"] == "feature-extraction":
        answer = len(pipe("Shares rose after the central bank held interest rates.")[0][0])  # hidden size
    else:
        answer = len(pipe(Image.open(PHOTO), top_k=2))
    results[entry["repo_id"]] = {
        "class": type(model).__name__,
        "module": type(model).__module__,
        "base_class": type(base).__name__,
        "diff": (tensor - reference["output"]).abs().max().item(),
        "pipeline": answer,
        "card": ModelCard.load(entry["repo_id"]).data.to_dict(),
    }
print(json.dumps(results))
"""


def load_by_id(checkpoints, published, hub, tmp_path, *, with_hf_norms: bool) -> dict:
    photo = tmp_path / "astronaut.png"
    packaged.photos()["astronaut"].save(photo)
    entries = [{k: v for k, v in entry.items() if k != "folder"} for entry in checkpoints.values()]
    code = (
        LOAD_BY_ID.replace("IMPORT_LINE", "import hf_norms" if with_hf_norms else "")
        .replace("KWARGS", "{}" if with_hf_norms else "{'trust_remote_code': True}")
        .replace("ENTRIES", repr(json.dumps(entries)))
        .replace("REFERENCES", repr(str(published)))
        .replace("PHOTO", repr(str(photo)))
    )
    return run_client(code, hub, tmp_path, block_hf_norms=not with_hf_norms)


def check_loaded(results: dict, checkpoints: dict, published: Path, remote_code: bool) -> None:
    expected = torch.load(published)
    for family, entry in checkpoints.items():
        result = results[entry["repo_id"]]
        assert result["class"] == expected[entry["repo_id"]]["class"], family
        assert result["diff"] == 0, f"{family}: {result['diff']}"
        assert result["base_class"].endswith("NormModel")
        assert ("transformers_modules" in result["module"]) == remote_code
        assert result["pipeline"] == (2 if entry["task"] == "image-classification" else 384)  # top_k / hidden size
        report = json.loads((entry["folder"] / REPORT_NAME).read_text())
        card = result["card"]
        config = json.loads((entry["folder"] / "config.json").read_text())
        assert card.get("base_model") == entry["base_model"] and card["library_name"] == "transformers"
        assert card["pipeline_tag"] == entry["task"]
        assert {family, config["norm_type"], "custom_code", "hf-norms"} <= set(card["tags"])
        if report["evaluation"]["data"] == "scikit-image photos":  # no Hub dataset id: no model-index entry
            assert "model-index" not in card
            continue
        stage = next(iter(report["stages"].values()))["end_to_end"]
        metrics = {m["type"]: m["value"] for m in card["model-index"][0]["results"][0]["metrics"]}
        names = {"mean_cosine": "cosine_similarity", "max_abs_diff": "max_abs_diff"}
        names.update(top1_agreement="top1_agreement", kl_divergence="kl_divergence")
        assert metrics == {names[k]: v for k, v in stage.items() if v is not None}


def test_load_by_repo_id_with_hf_norms(checkpoints, published, hub, tmp_path):
    results = load_by_id(checkpoints, published, hub, tmp_path, with_hf_norms=True)
    check_loaded(results, checkpoints, published, remote_code=False)


def test_load_by_repo_id_with_trust_remote_code_without_hf_norms(checkpoints, published, hub, tmp_path):
    results = load_by_id(checkpoints, published, hub, tmp_path, with_hf_norms=False)
    check_loaded(results, checkpoints, published, remote_code=True)


def test_uploaded_files(checkpoints, published, api):
    folder = checkpoints["deit"]["folder"]
    remote = set(api.list_repo_files(checkpoints["deit"]["repo_id"]))
    local = {p.name for p in folder.iterdir()}
    assert remote == local | {"README.md", ".gitattributes"}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", REPORT_NAME} <= remote
    assert {
        "modeling_deit_norm.py",
        "configuration_deit_norm.py",
    } == {name for name in remote if name.endswith(".py")}
    assert len(api.list_repo_commits(checkpoints["deit"]["repo_id"])) == 2  # initial commit + one upload


TRAINER_PUSH = """
import json, numpy as np, torch
import hf_norms
from hf_norms.training.trainer import NormCardTrainerMixin
from transformers import AutoTokenizer, Trainer, TrainingArguments

class CardTrainer(NormCardTrainerMixin, Trainer):
    pass

folder = FOLDER
tokenizer = AutoTokenizer.from_pretrained(folder)
model = hf_norms.BertNormForSequenceClassification.from_pretrained(folder, num_labels=5)
encoded = tokenizer(TEXTS, truncation=True, max_length=32, padding="max_length")
examples = [{**{k: v[i] for k, v in encoded.items()}, "labels": label} for i, label in enumerate(LABELS)]
args = TrainingArguments(output_dir=OUTPUT, use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                         hub_model_id="trainer/minilm-dyt-bbc", report_to="none")
trainer = CardTrainer(model=model, args=args, train_dataset=examples, eval_dataset=examples, processing_class=tokenizer,
                      compute_metrics=lambda p: {"accuracy": float(np.mean(p.predictions.argmax(-1) == p.label_ids))})
trainer.train()
metrics = trainer.evaluate()
commit = trainer.push_to_hub(dataset="bbc_news", finetuned_from=BASE)
print(json.dumps({"metrics": metrics, "commit": commit.oid}))
"""


def test_trainer_push_to_hub_writes_the_same_card(checkpoints, api, hub, tmp_path):
    from test_model_card import bbc_texts

    texts, labels = bbc_texts(4, "train")
    output = tmp_path / "trainer-output"
    code = (
        TRAINER_PUSH.replace("FOLDER", repr(str(checkpoints["bert"]["folder"])))
        .replace("TEXTS", repr(texts))
        .replace("LABELS", repr(labels))
        .replace("OUTPUT", repr(str(output)))
        .replace("BASE", repr(MINILM_ID))
    )
    result = run_client(code, hub, tmp_path)
    push_to_hub(
        output,
        "folder/minilm-dyt-bbc",
        endpoint=hub.url,
        token=TOKEN,
        training_dataset="bbc_news",
        base_model=MINILM_ID,
    )
    cards = {}
    for repo_id in ("trainer/minilm-dyt-bbc", "folder/minilm-dyt-bbc"):
        path = hf_hub_download(repo_id, "README.md", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "cache")
        cards[repo_id] = ModelCard.load(path).data.to_dict()
    assert cards["trainer/minilm-dyt-bbc"] == cards["folder/minilm-dyt-bbc"]
    data = cards["trainer/minilm-dyt-bbc"]
    assert data["base_model"] == MINILM_ID and data["base_model_relation"] == "finetune"
    assert data["pipeline_tag"] == "text-classification" and "dyt" in data["tags"]
    metrics = {m["type"]: m["value"] for m in data["model-index"][0]["results"][0]["metrics"]}
    assert metrics == {"accuracy": result["metrics"]["eval_accuracy"], "loss": result["metrics"]["eval_loss"]}
    assert REPORT_NAME in api.list_repo_files("trainer/minilm-dyt-bbc")


GUARD_CHECK = """
import json, logging, os, transformers
warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
logging.getLogger("hf_norms").addHandler(handler)
try:
    transformers.AutoModelForImageClassification.from_pretrained(FOLDER, trust_remote_code=True)
    refused = None
except ImportError as err:
    refused = str(err)
os.environ["HF_NORMS_ALLOW_ANY_TRANSFORMERS"] = "1"
model = transformers.AutoModelForImageClassification.from_pretrained(FOLDER, trust_remote_code=True)
print(json.dumps({"refused": refused, "installed": transformers.__version__, "loaded": type(model).__name__,
                  "warnings": warnings}))
"""


@pytest.mark.parametrize("tested_range", ["older", "newer"])
def test_remote_code_on_a_release_outside_its_tested_range(checkpoints, hub, tmp_path, tested_range):
    """The remote code refuses a release older than its oldest in one line (and runs with the override); on a release
    newer than its tested range it warns once and runs."""
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    guard = folder / "configuration_vit_norm.py"  # the release check runs when the config class is imported
    text = guard.read_text()
    if tested_range == "older":  # the installed release is older than this code's oldest
        text = text.replace(f'OLDEST_TRANSFORMERS = "{OLDEST_TRANSFORMERS}"', 'OLDEST_TRANSFORMERS = "99.0.0"')
    else:  # the installed release is newer than the newest this code was tested on
        text = text.replace(
            f'NEWEST_TESTED_TRANSFORMERS = "{NEWEST_TESTED_TRANSFORMERS}"', 'NEWEST_TESTED_TRANSFORMERS = "5.1.0"'
        )
    assert text != guard.read_text()
    guard.write_text(text)
    result = run_client(GUARD_CHECK.replace("FOLDER", repr(str(folder))), hub, tmp_path, block_hf_norms=True)
    assert result["loaded"] == "ViTNormForImageClassification"
    if tested_range == "older":
        refused = result["refused"]
        assert refused is not None and "\n" not in refused
        assert "transformers>=99.0.0" in refused and result["installed"] in refused
    else:
        assert result["refused"] is None
        assert len(result["warnings"]) == 1 and f"transformers {result['installed']} is newer" in result["warnings"][0]


ENCODE_BY_ID = """
import json
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("org/minilm-dtn", device="cpu", trust_remote_code=True)
print(json.dumps({"embeddings": model.encode(TEXTS).tolist(), "module": type(model[0].auto_model).__module__}))
"""


def test_a_sentence_transformers_conversion_loads_by_id(minilm_dir, api, hub, tmp_path):
    """What `convert` writes for the real MiniLM is what a push publishes (the sentence-transformers module folders
    included), and `SentenceTransformer(repo_id, trust_remote_code=True)` without hf_norms gives the local embeddings."""
    from sentence_transformers import SentenceTransformer
    from test_model_card import bbc_texts

    output = tmp_path / "minilm-dtn"
    assert cli.main(["convert", str(minilm_dir), "--norm-type", "dtn", "--output", str(output)]) == 0
    push_to_hub(output, "org/minilm-dtn", endpoint=hub.url, token=TOKEN)
    local = {path.relative_to(output).as_posix() for path in output.rglob("*") if path.is_file()}
    assert set(api.list_repo_files("org/minilm-dtn")) == {
        *local - {".hf-norms-made-this"},
        "README.md",
        ".gitattributes",
    }
    assert {"modules.json", "1_Pooling/config.json", "conversion_report.png", "modeling_bert_norm.py"} <= local
    texts, _ = bbc_texts(2)
    result = run_client(ENCODE_BY_ID.replace("TEXTS", repr(texts)), hub, tmp_path, block_hf_norms=True)
    expected = SentenceTransformer(str(output), device="cpu").encode(texts)
    assert "transformers_modules" in result["module"]
    assert abs(torch.tensor(result["embeddings"]) - torch.tensor(expected)).max().item() <= 1e-5


MODEL_PUSH = """
import json, hf_norms
from PIL import Image
from transformers import AutoModelForImageClassification, pipeline
model = AutoModelForImageClassification.from_pretrained(FOLDER)
commit = model.push_to_hub("python/vit-dtn", commit_message="From Python")
answer = pipeline(model="python/vit-dtn")(Image.open(PHOTO), top_k=2)
print(json.dumps({"commit": commit.oid, "labels": [entry["label"] for entry in answer]}))
"""


def test_model_push_to_hub_from_python_publishes_the_hf_norms_card(checkpoints, api, hub, tmp_path):
    """`model.push_to_hub(repo_id)` after `import hf_norms` publishes what `hf-norms push` of the folder the model was
    loaded from publishes: the same card metadata and body, the processor and the report, in one commit."""
    folder = checkpoints["vit"]["folder"]
    photo = tmp_path / "astronaut.png"
    packaged.photos()["astronaut"].save(photo)
    code = MODEL_PUSH.replace("FOLDER", repr(str(folder))).replace("PHOTO", repr(str(photo)))
    result = run_client(code, hub, tmp_path)
    push_to_hub(folder, "folder/vit-dtn", endpoint=hub.url, token=TOKEN)
    cards = {}
    for repo_id in ("python/vit-dtn", "folder/vit-dtn"):
        path = hf_hub_download(repo_id, "README.md", endpoint=hub.url, token=TOKEN, cache_dir=tmp_path / "cache")
        cards[repo_id] = Path(path).read_text(encoding="utf-8")
    assert "[More Information Needed]" not in cards["python/vit-dtn"]
    assert cards["python/vit-dtn"].replace("python/", "folder/") == cards["folder/vit-dtn"]
    data = ModelCard(cards["python/vit-dtn"]).data.to_dict()
    assert data["pipeline_tag"] == "image-classification" and "dtn" in data["tags"]
    assert api.model_info("python/vit-dtn").pipeline_tag == "image-classification"
    assert {"preprocessor_config.json", REPORT_NAME} <= set(api.list_repo_files("python/vit-dtn"))
    assert api.list_repo_commits("python/vit-dtn")[0].title == "From Python"
    assert len(result["labels"]) == 2 and set(result["labels"]) <= {"cat", "cup", "person"}
