"""Publishing against the loopback Hub: push a converted checkpoint of each family, load it back by repo id in fresh
processes (with `import hf_norms`, and with `trust_remote_code=True` where hf_norms cannot be imported), and every
refusal and failure of the push."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import in_fresh_memory
from huggingface_hub import ModelCard, hf_hub_download
from test_model_card import MINILM_ID, convert_minilm, text_batch
from transformers import (
    AutoTokenizer,
    DeiTConfig,
    DeiTForImageClassificationWithTeacher,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessorPil,
)

import hf_norms
from hf_norms import cli, packaged
from hf_norms.demo import BLOCK_HF_NORMS
from hf_norms.hub import publish
from hf_norms.hub.card_facts import REPORT_NAME
from hf_norms.hub.publish import CheckpointRefused, PushError, push_to_hub
from hf_norms.hub.server import HubServer
from hf_norms.models.version_guard import SUPPORTED_TRANSFORMERS

TOKEN = "hf_publish-test-secret-4711"
IMAGE_SIZE = 32


pytestmark = pytest.mark.usefixtures("hub_online")


def photo_batch(processor) -> torch.Tensor:
    photos = packaged.photos()
    return processor(images=[photos["astronaut"], photos["coffee"], photos["chelsea"]], return_tensors="pt")[
        "pixel_values"
    ]


@torch.no_grad()
def logit_fidelity(converted, source, pixels) -> dict:
    """End-to-end fidelity of a converted classifier to its source on real photos."""
    mine, theirs = converted(pixel_values=pixels).logits, source(pixel_values=pixels).logits
    log_p, log_q = theirs.log_softmax(-1), mine.log_softmax(-1)
    return {
        "max_abs_diff": (mine - theirs).abs().max().item(),
        "mean_cosine": torch.nn.functional.cosine_similarity(mine, theirs).mean().item(),
        "top1_agreement": (mine.argmax(-1) == theirs.argmax(-1)).float().mean().item(),
        "kl_divergence": (log_p.exp() * (log_p - log_q)).sum(-1).mean().item(),
    }


def convert_tiny_vision(root: Path, family: str, norm_options: dict, exact: bool) -> Path:
    """A small stock ViT/DeiT classifier (random weights: no package ships DeiT weights), converted and measured on real
    photos; saved with its image processor and report."""
    torch.manual_seed(0)
    common = dict(image_size=IMAGE_SIZE, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=4)
    common.update(intermediate_size=96, num_labels=3, id2label={0: "cat", 1: "cup", 2: "person"})
    stock_class, norm_class = {
        "vit": (ViTForImageClassification, hf_norms.ViTNormForImageClassification),
        "deit": (DeiTForImageClassificationWithTeacher, hf_norms.DeiTNormForImageClassificationWithTeacher),
    }[family]
    stock = stock_class((ViTConfig if family == "vit" else DeiTConfig)(**common)).eval()
    stock.save_pretrained(root / f"{family}-stock")
    converted = norm_class.from_pretrained(root / f"{family}-stock", **norm_options).eval()
    processor = ViTImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    folder = root / f"{family}-{norm_options['norm_type']}"
    converted.save_pretrained(folder)
    processor.save_pretrained(folder)
    report = {
        "hf_norms_version": hf_norms.__version__,
        "source": str(root / f"{family}-stock"),
        "source_revision": None,
        "family": family,
        "architecture": norm_class.__name__,
        "norm_type": norm_options["norm_type"],
        "exact": exact,
        "options": {k: v for k, v in norm_options.items() if k != "norm_type"},
        "folded": False,
        "calibration": None,
        "healing": None,
        "evaluation": {"data": "scikit-image photos", "samples": 3},
        "stages": {
            "exact" if exact else "naive": {"end_to_end": logit_fidelity(converted, stock, photo_batch(processor))}
        },
    }
    (folder / REPORT_NAME).write_text(json.dumps(report))
    return folder


@pytest.fixture(scope="module")
def checkpoints(minilm_dir, tmp_path_factory) -> dict[str, dict]:
    """A converted checkpoint of each family: the real MiniLM (DyT, naive), a ViT (DTN) and a DeiT with teacher
    (LaPE, exact), with the repo id, Auto class and pipeline task each is published for."""
    root = tmp_path_factory.mktemp("checkpoints")
    convert_minilm(minilm_dir, root / "bert-dyt", norm_type="dyt")
    return {
        "bert": dict(
            folder=root / "bert-dyt",
            repo_id="hf-norms/minilm-dyt",
            auto="AutoModel",
            task="feature-extraction",
            base_model=MINILM_ID,
        ),
        "vit": dict(
            folder=convert_tiny_vision(root, "vit", {"norm_type": "dtn"}, exact=False),
            repo_id="hf-norms/vit-dtn",
            auto="AutoModelForImageClassification",
            task="image-classification",
            base_model=None,  # converted from a local stock checkpoint that is on no Hub
        ),
        "deit": dict(
            folder=convert_tiny_vision(root, "deit", {"norm_type": "lape", "lape_keep_input_pe": True}, exact=True),
            repo_id="hf-norms/deit-lape",
            auto="AutoModelForImageClassification",
            task="image-classification",
            base_model=None,
        ),
    }


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
    assert {"config.json", "model.safetensors", "preprocessor_config.json", REPORT_NAME, "norms.py"} <= remote
    assert {
        "modeling_deit_norm.py",
        "modeling_vision_norm.py",
        "configuration_deit_norm.py",
        "token_layout.py",
    } <= remote
    assert len(api.list_repo_commits(checkpoints["deit"]["repo_id"])) == 2  # initial commit + one upload


def copy_of(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


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
        (folder / "norms.py").unlink()
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
    folder = checkpoints["vit"]["folder"]
    with pytest.raises(PushError, match=r"Could not reach http://127\.0\.0\.1:9") as excinfo:
        push_to_hub(folder, "org/unreachable", endpoint="http://127.0.0.1:9", token=TOKEN)
    assert TOKEN not in str(excinfo.value)
    wrong = "hf_wrong-token-0000"
    with pytest.raises(PushError, match="HTTP 401") as excinfo:
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
import json, os, transformers
try:
    transformers.AutoModelForImageClassification.from_pretrained(FOLDER, trust_remote_code=True)
    refused = None
except ImportError as err:
    refused = str(err)
os.environ["HF_NORMS_ALLOW_ANY_TRANSFORMERS"] = "1"
model = transformers.AutoModelForImageClassification.from_pretrained(FOLDER, trust_remote_code=True)
print(json.dumps({"refused": refused, "installed": transformers.__version__, "loaded": type(model).__name__}))
"""


def test_remote_code_refuses_a_transformers_release_it_was_not_written_for(checkpoints, hub, tmp_path):
    folder = copy_of(checkpoints["vit"]["folder"], tmp_path)
    guard = folder / "version_guard.py"
    assert guard.is_file(), "save_pretrained must copy version_guard.py (imported by every remote-code file)"
    other = ">=5.24.0,<5.25.0"
    guard.write_text(guard.read_text().replace(SUPPORTED_TRANSFORMERS, other))
    result = run_client(GUARD_CHECK.replace("FOLDER", repr(str(folder))), hub, tmp_path, block_hf_norms=True)
    assert result["refused"] is not None
    assert other in result["refused"] and result["installed"] in result["refused"]
    assert result["loaded"] == "ViTNormForImageClassification"


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
