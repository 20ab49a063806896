"""`convert` and `hf-norms convert`: exact conversions of the real MiniLM and DINOv2, the saved checkpoint and its
report, byte-identical outputs, a Hub source, and every bad input refused with nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import EXACT_TYPES, HF_NORMS_SCRIPT, run_without_hf_norms
from PIL import Image
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    Dinov2Model,
    GPT2Config,
    GPT2Model,
    ViTConfig,
    ViTForImageClassification,
)

import hf_norms
from hf_norms import cli
from hf_norms.conversion import healing
from hf_norms.conversion.arguments import parse_norm_options
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.conversion.convert import convert
from hf_norms.conversion.report import REPORT_JSON, REPORT_MD, REPORT_PNG
from hf_norms.hub.server import HubServer
from hf_norms.output_folders import OutputFolderError

STAGE_KEYS = {"max_abs_diff", "mean_cosine", "top1_agreement", "kl_divergence"}


def tree_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`, by relative path."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def leftovers(parent: Path, name: str) -> list[str]:
    """Staging or retired folders a conversion to `parent/name` could have left behind."""
    return [entry.name for entry in parent.iterdir() if entry.name.startswith(f".{name}.")]


def save_images(folder: Path, count: int, size: int = 32) -> Path:
    """`count` deterministic RGB PNGs (smooth gradients with noise) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    generator = np.random.default_rng(0)
    ys, xs = np.mgrid[0:size, 0:size] / (size - 1)
    for index in range(count):
        colours = generator.uniform(0, 255, size=3)
        pixels = colours * (0.5 + 0.5 * xs[..., None] * ys[..., None]) + generator.normal(0, 25, (size, size, 3))
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / f"{index:03d}.png")
    return folder


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    return save_images(tmp_path_factory.mktemp("images") / "data", 12)


# --------------------------------------------------------------------------------------------------------------------
# Exact conversions of the real models
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_type", EXACT_TYPES)
def test_exact_conversion_of_real_minilm(minilm_dir, news_sentences, norm_type, tmp_path):
    before = tree_digest(minilm_dir)
    report = convert(minilm_dir, norm_type, tmp_path / "out", evaluation_data=news_sentences)
    assert report["exact"] and list(report["stages"]) == ["exact"]
    exact = report["stages"]["exact"]
    assert exact["end_to_end"]["max_abs_diff"] <= 1e-5
    assert exact["end_to_end"]["mean_cosine"] > 1 - 1e-6
    assert max(exact["per_norm"].values()) <= 1e-5
    assert len(exact["per_norm"]) == 13  # embeddings + 2 per layer in 6 layers
    assert tree_digest(minilm_dir) == before  # the source is only read

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    batch = tokenizer(news_sentences, padding=True, return_tensors="pt")
    converted = AutoModel.from_pretrained(tmp_path / "out").eval()
    assert type(converted).__name__ == "BertNormModel" and converted.config.norm_type == norm_type
    with torch.no_grad():
        ours = converted(**batch).last_hidden_state
        stock = BertModel.from_pretrained(minilm_dir).eval()(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (ours - stock)[real].abs().max().item() <= 1e-5


@pytest.mark.parametrize("norm_type", EXACT_TYPES)
def test_exact_conversion_of_real_dinov2(dinov2_dir, photo_pixels, norm_type, tmp_path):
    from hf_norms import packaged

    photos = packaged.photos()
    images = [photos["astronaut"], photos["coffee"]]
    fold = norm_type == "dtn"  # folding on a real model too: DTN's affine folds exactly into q/k/v and fc1
    report = convert(dinov2_dir, norm_type, tmp_path / "out", evaluation_data=images, fold=fold)
    exact = report["stages"]["exact"]
    assert report["exact"] and exact["end_to_end"]["max_abs_diff"] <= 1e-5
    assert len(exact["per_norm"]) == 25
    if fold:
        folding = report["folding"]
        # Folding is exact algebra; in float32 it reorders rounding over 12 layers: measured 2.0e-5 on outputs up to 11
        # (1.8e-6 relative), while the unfolded float32 model is itself 5e-5 from its float64 evaluation. The folded
        # model is no further from the exact result than the original is. (Tiny models hold 1e-5: test_folding.py.)
        assert report["folded"] and folding["max_abs_diff_to_unfolded"] <= 4e-6 * folding["max_abs_output"]
        to_float64 = folding["max_abs_diff_to_float64"]
        assert to_float64["folded"] <= 1.5 * to_float64["unfolded"]
        assert len(report["folding"]["folded"]) == 24  # q/k/v and fc1 norms; the final norm is the output

    converted = AutoModel.from_pretrained(tmp_path / "out").eval()
    assert (
        type(converted).__name__ == "Dinov2NormModel" and converted.embeddings.position_embeddings.shape[1] == 1 + 37**2
    )
    with torch.no_grad():
        ours = converted(pixel_values=photo_pixels).last_hidden_state
        stock = Dinov2Model.from_pretrained(dinov2_dir).eval()(pixel_values=photo_pixels)
    bound = 4e-6 * report["folding"]["max_abs_output"] if fold else 1e-5
    assert (ours - stock.last_hidden_state).abs().max().item() <= bound


STOCK_HEADS = [
    ("DeiTForImageClassificationWithTeacher", "sepnorm", True),
    ("ViTForMaskedImageModeling", "lape", False),
    ("BertForSequenceClassification", "dtn", False),
    ("BertForPreTraining", "layernorm", False),
]


@pytest.mark.parametrize(("class_name", "norm_type", "fold"), STOCK_HEADS, ids=[h[0] for h in STOCK_HEADS])
def test_exact_conversion_of_stock_heads(class_name, norm_type, fold, tmp_path):
    """Any head of each family converts; without a tokenizer or image processor, fixed random inputs evaluate it."""
    import transformers

    torch.manual_seed(0)
    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, num_labels=3)
    if class_name.startswith("Bert"):
        config = BertConfig(vocab_size=99, max_position_embeddings=40, **size)
    else:
        config_class = transformers.DeiTConfig if class_name.startswith("DeiT") else ViTConfig
        config = config_class(image_size=32, patch_size=8, encoder_stride=8, **size)
    getattr(transformers, class_name)(config).save_pretrained(tmp_path / "source")
    report = convert(tmp_path / "source", norm_type, tmp_path / "out", fold=fold)
    prefix = next(p for p in ("Bert", "DeiT", "ViT") if class_name.startswith(p))
    assert report["architecture"] == class_name.replace(prefix, f"{prefix}Norm", 1)
    exact = report["stages"]["exact"]["end_to_end"]
    assert report["evaluation"]["data"] == "built-in probe inputs (no processor)"
    assert exact["max_abs_diff"] <= 1e-5
    assert (exact["top1_agreement"] == 1.0) == ("Classification" in class_name or "PreTraining" in class_name)
    if fold:
        assert report["folding"]["max_abs_diff_to_unfolded"] <= 1e-5 and len(report["folding"]["folded"]) == 5


# --------------------------------------------------------------------------------------------------------------------
# The saved checkpoint and its report
# --------------------------------------------------------------------------------------------------------------------


def test_dyt_conversion_writes_checkpoint_and_report(tiny_vit_dir, image_folder, tmp_path):
    report = convert(
        tiny_vit_dir,
        "dyt",
        tmp_path / "out",
        calibration_data=image_folder,
        calibration_samples=8,
        evaluation_samples=4,
        heal_steps=0,
    )
    out = tmp_path / "out"
    files = set(os.listdir(out))
    expected = {"config.json", "model.safetensors", "preprocessor_config.json", REPORT_JSON, REPORT_MD, REPORT_PNG}
    assert expected <= files
    assert {name for name in files if name.endswith(".py")} == {"modeling_vit_norm.py", "configuration_vit_norm.py"}

    saved = json.loads((out / REPORT_JSON).read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["family"] == "vit" and saved["architecture"] == "ViTNormForImageClassification"
    assert saved["norm_type"] == "dyt" and saved["exact"] is False and saved["folded"] is False
    assert saved["source"] == str(tiny_vit_dir) and saved["source_revision"] is None
    assert saved["options"]["dyt_per_channel_alpha"] is True and "norm_type" in saved["options"]
    assert saved["calibration"]["samples"] == 8 and saved["calibration"]["data"] == str(image_folder)
    assert isinstance(saved["calibration"]["seconds"], float) and saved["calibration"]["method"]
    assert saved["healing"] is None
    assert saved["evaluation"]["samples"] == 4 and saved["evaluation"]["start"] == 8  # held out after calibration
    assert list(saved["stages"]) == ["naive", "calibrated"]
    for stage in saved["stages"].values():
        assert set(stage["end_to_end"]) == STAGE_KEYS
        assert stage["end_to_end"]["top1_agreement"] is not None  # the classifier head gives logits
        assert set(stage["per_norm"]) == {
            f"vit.layers.{i}.layernorm_{p}" for i in (0, 1) for p in ("before", "after")
        } | {"vit.layernorm"}
    naive, calibrated = saved["stages"]["naive"], saved["stages"]["calibrated"]
    assert calibrated["end_to_end"]["mean_cosine"] > naive["end_to_end"]["mean_cosine"]
    assert calibrated["end_to_end"]["kl_divergence"] < naive["end_to_end"]["kl_divergence"]

    markdown = (out / REPORT_MD).read_text()
    assert "| naive |" in markdown and "| calibrated |" in markdown and "`vit.layernorm`" in markdown
    with Image.open(out / REPORT_PNG) as plot:
        assert plot.format == "PNG" and plot.width > 300

    model = AutoModel.from_pretrained(out)  # the Auto class of the head, through import hf_norms
    assert type(model).__name__ == "ViTNormModel" and model.config.norm_type == "dyt"


def test_derf_conversion_is_calibrated_per_channel_and_folds(tiny_vit_dir, image_folder, tmp_path):
    report = convert(tiny_vit_dir, "derf", tmp_path / "out", calibration_data=image_folder, calibration_samples=8,
                     evaluation_samples=4, fold=True, heal_steps=0)  # fmt: skip
    assert report["options"]["derf_per_channel"] is True and list(report["stages"]) == ["naive", "calibrated"]
    assert "erf(alpha * x + shift)" in report["calibration"]["method"]
    naive, calibrated = (report["stages"][stage]["end_to_end"] for stage in ("naive", "calibrated"))
    assert calibrated["mean_cosine"] > naive["mean_cosine"] and calibrated["max_abs_diff"] < naive["max_abs_diff"]
    assert len(report["folding"]["folded"]) == 5 and report["folding"]["max_abs_diff_to_unfolded"] <= 1e-4
    model = AutoModel.from_pretrained(tmp_path / "out")
    layers = [m for m in model.modules() if isinstance(m, hf_norms.DynamicErf)]
    assert len(layers) == 5 and all(m.shift.shape == (m.weight.shape[0],) for m in layers)
    assert any(m.shift.abs().max() > 0 for m in layers)  # the shift was fitted, not left at its init
    healed = healing.heal(tmp_path / "out", image_folder, max_steps=2, warmup_steps=0, batch_size=4, progress=False)
    assert healed["healing"]["steps"] == 2 and "healed" in healed["stages"]


def test_fidelity_compared_in_parts_equals_one_pass(tiny_vit_dir, monkeypatch):
    """`measure_fidelity` runs at most `EXAMPLES_PER_FORWARD` examples per forward pass (memory); the parts add up to
    what one pass over the batch gives."""
    from hf_norms.conversion import fidelity
    from hf_norms.conversion.calibration import norms_in_forward_order

    teacher = ViTForImageClassification.from_pretrained(tiny_vit_dir).eval()
    student = hf_norms.ViTNormForImageClassification.from_pretrained(tiny_vit_dir, norm_type="dyt").eval()
    batch = {"pixel_values": torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
    assert [len(part["pixel_values"]) for part in fidelity.split_batch(batch, 2)] == [2, 2, 1]
    names = norms_in_forward_order(teacher, batch)
    monkeypatch.setattr(fidelity, "EXAMPLES_PER_FORWARD", 2)
    parts = fidelity.measure_fidelity(student, teacher, [batch], names)
    monkeypatch.setattr(fidelity, "EXAMPLES_PER_FORWARD", 5)
    whole = fidelity.measure_fidelity(student, teacher, [batch], names)
    assert parts["end_to_end"]["top1_agreement"] == whole["end_to_end"]["top1_agreement"]
    for key in ("max_abs_diff", "mean_cosine", "kl_divergence"):
        assert parts["end_to_end"][key] == pytest.approx(whole["end_to_end"][key], rel=1e-5)
    assert parts["per_norm"] == pytest.approx(whole["per_norm"], rel=1e-5)
    assert whole["end_to_end"]["mean_cosine"] < 0.999  # a naive DyT swap: the metrics are not trivially equal


def test_same_inputs_give_byte_identical_weights(tiny_vit_dir, image_folder, tmp_path):
    before = tree_digest(tiny_vit_dir)
    for name in ("a", "b"):
        convert(tiny_vit_dir, "dyt", tmp_path / name, calibration_data=image_folder, calibration_samples=8,
                heal_steps=20)  # fmt: skip
    first, second = ((tmp_path / name / "model.safetensors").read_bytes() for name in ("a", "b"))
    assert first == second
    assert tree_digest(tiny_vit_dir) == before


def test_checkpoint_loads_through_auto_and_remote_code(tiny_bert_dir, tmp_path):
    out = tmp_path / "bert-sepnorm"
    report = convert(tiny_bert_dir, "sepnorm", out, max_length=16)
    assert report["evaluation"]["data"] == "built-in probe sentences"
    assert report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5
    assert report["stages"]["exact"]["end_to_end"]["top1_agreement"] == 1.0  # the MLM head's logits

    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["A first sentence.", "And a second, longer one."], padding=True, return_tensors="pt")
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    assert type(model).__name__ == "BertNormForMaskedLM"
    with torch.no_grad():
        expected = BertForMaskedLM.from_pretrained(tiny_bert_dir).eval()(**batch).logits
        assert (model(**batch).logits - expected).abs().max().item() <= 1e-5
    torch.save({"batch": dict(batch), "expected": expected}, tmp_path / "reference.pt")
    code = f"""
        import torch
        from transformers import AutoModelForMaskedLM
        model = AutoModelForMaskedLM.from_pretrained({str(out)!r}, trust_remote_code=True).eval()
        reference = torch.load({str(tmp_path / "reference.pt")!r})
        with torch.no_grad():
            logits = model(**reference["batch"]).logits
        print(type(model).__name__, (logits - reference["expected"]).abs().max().item())
    """
    name, difference = run_without_hf_norms(code, tmp_path).split()
    assert name == "BertNormForMaskedLM" and float(difference) <= 1e-5


def test_cli_converts_a_private_hub_source_with_token(tiny_bert_dir, tmp_path, monkeypatch):
    """`hf-norms convert org/name --token T` (the console script, `--norm_type` spelling) downloads a private repo
    through HF_ENDPOINT (the loopback hub) with that token alone, records the revision and never prints the token."""
    import huggingface_hub
    from huggingface_hub import HfApi

    token = "hf_convert-private-token-2024"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest is offline; this is loopback
    with HubServer(tmp_path / "hub", tokens=[token]) as hub:
        api = HfApi(endpoint=hub.url, token=token)
        api.create_repo("org/tiny-bert", private=True)
        commit = api.upload_folder(folder_path=tiny_bert_dir, repo_id="org/tiny-bert").oid
        env = {**os.environ, **hub.client_env(), "HF_HOME": str(tmp_path / "hf-home")}  # no HF_TOKEN, no stored login
        env.pop("HF_TOKEN", None)
        command = [str(HF_NORMS_SCRIPT), "convert", "org/tiny-bert", "--norm_type", "dtn"]
        command += ["--output", str(tmp_path / "out"), "--max_length", "16", "--token", token]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "exact: max abs diff" in result.stdout and token not in result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / REPORT_JSON).read_text())
    assert report["source"] == "org/tiny-bert" and report["source_revision"] == commit
    assert report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5


# --------------------------------------------------------------------------------------------------------------------
# Bad input: a clear error, and nothing written
# --------------------------------------------------------------------------------------------------------------------


def copy_checkpoint(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def truncated(source: Path, folder: Path) -> Path:
    folder = copy_checkpoint(source, folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) - 100])
    return folder


def corrupt_header(source: Path, folder: Path) -> Path:
    folder = copy_checkpoint(source, folder)
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[10:20] = b"#" * 10
    (folder / "model.safetensors").write_bytes(bytes(data))
    return folder


def pickle_only(source: Path, folder: Path) -> Path:
    folder = copy_checkpoint(source, folder)
    model = ViTForImageClassification.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


def unsupported_architecture(source: Path, folder: Path) -> Path:
    GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50)).save_pretrained(folder)
    return folder


BAD_INPUTS = {
    "truncated safetensors": (truncated, "sepnorm", {}, "truncated or corrupt"),
    "corrupt safetensors header": (corrupt_header, "sepnorm", {}, "corrupt"),
    "pickle-only checkpoint": (pickle_only, "sepnorm", {}, "--allow-pickle"),
    "unsupported architecture": (unsupported_architecture, "sepnorm", {}, "model_type 'gpt2' is not supported"),
    "unknown norm_type": (None, "groupnorm", {}, "norm_type 'groupnorm' is not supported"),
    "option that does not fit": (None, "dtn", {"options": {"dtn_num_heads": 5}}, "does not fit"),
    "unknown option": (None, "dyt", {"options": {"dyt_alpha": 1.0}}, "Unknown norm option"),
    "DyT without calibration data": (None, "dyt", {}, "calibration data"),
    "Derf without calibration data": (None, "derf", {}, "'derf' cannot reproduce LayerNorm without calibration"),
    "text data for an image model": (None, "dyt", {"calibration_data": ["a text"]}, "PIL images"),
    "missing data path": (None, "dyt", {"calibration_data": "/nonexistent/data.txt"}, "There is no file or folder"),
    "BERT folding": ("bert", "sepnorm", {"fold": True}, "post-LN"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_and_nothing_is_written(case, tiny_vit_dir, tiny_bert_dir, tmp_path):
    make_source, norm_type, kwargs, message = BAD_INPUTS[case]
    if make_source == "bert":
        source = tiny_bert_dir
    elif make_source is None:
        source = tiny_vit_dir
    else:
        source = make_source(tiny_vit_dir, tmp_path / "source")
    before = tree_digest(source)
    with pytest.raises(ConversionError, match=message):
        convert(source, norm_type, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path, "out")
    assert tree_digest(source) == before


def test_pickle_checkpoint_converts_with_allow_pickle(tiny_vit_dir, tmp_path):
    source = pickle_only(tiny_vit_dir, tmp_path / "source")
    report = convert(source, "sepnorm", tmp_path / "out", allow_pickle=True)
    assert report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5
    assert (tmp_path / "out" / "model.safetensors").is_file()  # the output is safetensors


def test_existing_output_is_replaced_only_with_overwrite_and_only_when_hf_norms_wrote_it(tiny_vit_dir, tmp_path):
    out = tmp_path / "out"
    convert(tiny_vit_dir, "lape", out)
    with pytest.raises(OutputFolderError, match="--overwrite"):
        convert(tiny_vit_dir, "dtn", out)
    convert(tiny_vit_dir, "dtn", out, overwrite=True)
    assert json.loads((out / REPORT_JSON).read_text())["norm_type"] == "dtn"
    assert not leftovers(tmp_path, "out")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    with pytest.raises(OutputFolderError, match="hf-norms did not write it"):
        convert(tiny_vit_dir, "lape", mine, overwrite=True)
    assert os.listdir(mine) == ["keep.txt"]


def test_output_inside_the_source_is_refused(tiny_vit_dir):
    with pytest.raises(OutputFolderError, match="inside the source"):
        convert(tiny_vit_dir, "lape", tiny_vit_dir / "converted")
    assert not (tiny_vit_dir / "converted").exists()


def test_cli_reports_errors_with_exit_code_2(tiny_vit_dir, tmp_path, capsys):
    assert cli.main(["convert", str(tiny_vit_dir), "--norm-type", "dyt", "--output", str(tmp_path / "o")]) == 2
    assert "calibration data" in capsys.readouterr().err
    assert cli.main(["convert", "x", "--norm-type", "dyt", "--output", "o", "--option", "bogus=1"]) == 2
    assert "bogus=1" in capsys.readouterr().err
    assert parse_norm_options(["dyt_per_channel_alpha=false", "dtn_gate_init=0.25", "dtn_num_heads=none"]) == {
        "dyt_per_channel_alpha": False,
        "dtn_gate_init": 0.25,
        "dtn_num_heads": None,
    }
    assert hf_norms.__version__


@pytest.mark.parametrize("kind", [".csv", ".jsonl", ".parquet"])
def test_calibration_and_evaluation_data_read_as_finetune_reads_them(kind, tiny_bert_dir, tmp_path, capsys):
    """`convert --calibration-data news.csv` was refused ("not a .txt file") while finetune takes CSV, JSON and
    Parquet: every kind is read by `datasets.load_dataset`, its column named by --text-column (or found by name)."""
    import datasets

    rows = {
        "title": [f"title {i}" for i in range(40)],
        "body": [f"article {i} about markets and the match" for i in range(40)],
    }
    data = datasets.Dataset.from_dict(rows)
    path = tmp_path / f"news{kind}"
    {".csv": data.to_csv, ".jsonl": data.to_json, ".parquet": data.to_parquet}[kind](str(path))
    output = tmp_path / "bert-dyt"
    argv = ["convert", str(tiny_bert_dir), "--norm-type", "dyt", "--calibration-data", str(path),
            "--calibration-samples", "24", "--eval-samples", "8", "--text-column", "body", "--heal-steps", "0", "--output", str(output)]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    report = json.loads((output / REPORT_JSON).read_text())
    assert (report["calibration"]["data"], report["calibration"]["samples"]) == (str(path), 24)
    assert (report["evaluation"]["samples"], report["evaluation"]["start"], report["evaluation"]["column"]) == (
        8,
        24,
        "body",
    )
    if kind == ".jsonl":  # heal reloads the evaluation examples from the same column (its --data takes no CSV yet)
        heal = [
            "heal",
            str(output),
            "--data",
            str(path),
            "--text-column",
            "body",
            "--max-steps",
            "1",
            "--batch-size",
            "4",
        ]
        assert cli.main(heal) == 0, capsys.readouterr().err
        evaluation = healing._evaluation_examples(report, "text", None)[0].items
        assert evaluation == rows["body"][24:32]
        healed = json.loads((output / REPORT_JSON).read_text())
        assert healed["stages"]["healed"]["end_to_end"]["mean_cosine"] > 0 and healed["healing"]["steps"] == 1
    assert cli.main([*argv[:-1], str(tmp_path / "other"), "--text-column", "summary"]) == 2
    assert f"{path} has no text column 'summary'; its columns are ['title', 'body']" in capsys.readouterr().err
