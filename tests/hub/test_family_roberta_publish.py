"""The RoBERTa-like text families end to end: `hf-norms convert` of a small random stock checkpoint to SepNorm, exact;
`hf-norms push` to the loopback Hub with a card naming the right pipeline tag and caveats; the model loaded back by id
with `import hf_norms` and with `trust_remote_code=True` where hf_norms cannot be imported; calibrated DyT and Derf;
and `finetune` (the Trainer) from the stock checkpoint."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from family_publishing import load_by_id, tree_digest
from text_families import ROBERTA, XLM_ROBERTA, TextFamily, news_lines, padded_batch
from transformers import TrainingArguments

from hf_norms import cli
from hf_norms.conversion.convert import convert
from hf_norms.models.family_registry import FAMILIES
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune

TOKEN = "hf_text-families-secret-4721"
TEXT_FAMILIES = [ROBERTA, XLM_ROBERTA]

pytestmark = pytest.mark.usefixtures("hub_online")

LOAD_BY_ID = """
import json, torch, transformers
IMPORT_LINE
reference = torch.load(REFERENCE)
model = transformers.AutoModelForMaskedLM.from_pretrained(REPO, **KWARGS).eval()
with torch.no_grad():
    logits = model(**reference["batch"]).logits
real = reference["batch"]["attention_mask"].bool()
diff = (logits[real] - reference["expected"][real]).abs().max().item()
print(json.dumps({"class": type(model).__name__, "module": type(model).__module__, "diff": diff}))
"""


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_convert_push_and_load_by_id(family: TextFamily, hub, api, monkeypatch, tmp_path):
    stock_dir = family.save_stock(tmp_path / "stock")
    before = tree_digest(stock_dir)
    out = tmp_path / f"{family.name}-sepnorm"
    assert cli.main(["convert", str(stock_dir), "--norm-type", "sepnorm", "--output", str(out)]) == 0
    report = json.loads((out / "conversion_report.json").read_text())
    assert report["family"] == family.name and report["exact"] is True
    assert report["architecture"] == family.norm_class_name("ForMaskedLM")
    assert report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5
    assert {f"configuration_{family.module}_norm.py", f"modeling_{family.module}_norm.py"} <= set(os.listdir(out))
    assert tree_digest(stock_dir) == before  # the source is only read

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    repo_id = f"org/{family.name}-sepnorm"
    assert cli.main(["push", repo_id, str(out)]) == 0
    info = api.model_info(repo_id)
    assert info.pipeline_tag == "fill-mask"
    assert {family.name, "sepnorm", "custom_code", "hf-norms"} <= set(info.card_data["tags"])
    readme = Path(api.hf_hub_download(repo_id, "README.md", cache_dir=tmp_path / "cache")).read_text()
    assert f"A {FAMILIES[family.name].display_name} model (`{family.norm_class_name('ForMaskedLM')}`)" in readme
    assert "- The conversion is exact, so the model computes what the source computes" in readme
    assert "- The prefix norm is a LayerNorm (for an exact conversion)" in readme

    batch = padded_batch(family, "ForMaskedLM")
    with torch.no_grad():
        expected = family.stock_class("ForMaskedLM").from_pretrained(stock_dir).eval()(**batch).logits
    torch.save({"batch": batch, "expected": expected}, tmp_path / "reference.pt")
    for with_hf_norms in (True, False):
        result = load_by_id(hub, TOKEN, LOAD_BY_ID, repo_id, tmp_path / "reference.pt", tmp_path, with_hf_norms)
        assert result["class"] == family.norm_class_name("ForMaskedLM") and result["diff"] <= 1e-5
        assert ("transformers_modules" in result["module"]) is not with_hf_norms


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_dyt_and_derf_are_calibrated_and_the_card_says_post_ln(family: TextFamily, hub, api, monkeypatch, tmp_path):
    """Calibrated on 48 real news lines: closer to the source than the naive start; the DyT card says the family is
    post-LN, outside what the DyT paper tested."""
    stock_dir = family.save_stock(tmp_path / "stock")
    data = tmp_path / "news.txt"
    data.write_text("\n".join(news_lines(64)) + "\n")
    for norm_type in ("dyt", "derf"):
        out = tmp_path / norm_type
        report = convert(stock_dir, norm_type, out, calibration_data=str(data), calibration_samples=48,
                         evaluation_samples=16, heal_steps=0)  # fmt: skip
        assert list(report["stages"]) == ["naive", "calibrated"] and report["calibration"]["samples"] == 48
        naive, calibrated = (report["stages"][stage]["end_to_end"] for stage in ("naive", "calibrated"))
        assert calibrated["mean_cosine"] > naive["mean_cosine"], (norm_type, naive, calibrated)
        assert math.isfinite(calibrated["kl_divergence"])
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    repo_id = f"org/{family.name}-dyt"
    assert cli.main(["push", repo_id, str(tmp_path / "dyt")]) == 0
    readme = Path(api.hf_hub_download(repo_id, "README.md", cache_dir=tmp_path / "cache")).read_text()
    name = FAMILIES[family.name].display_name
    assert f"- {name} is post-LN; the DyT paper tested pre-LN transformers only, so DyT on {name} is outside" in readme
    assert "- The weights were converted without any training" in readme


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_finetune_from_a_stock_checkpoint(family: TextFamily, tmp_path):
    """`finetune` (NormTrainer) converts the stock checkpoint to DTN as it loads and trains its default task."""
    stock_dir = family.save_stock(tmp_path / "stock", "Model")
    arguments = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, max_steps=4,
                                  per_device_train_batch_size=8, learning_rate=3e-3, save_strategy="no",
                                  disable_tqdm=True, seed=0, data_seed=0)  # fmt: skip
    result = finetune(
        ModelArguments(model_name_or_path=str(stock_dir), norm_type="dtn"),
        DataArguments(dataset="packaged:bbc-news", max_train_samples=32, max_eval_samples=16, max_seq_length=64),
        arguments,
    )
    model = result.trainer.model
    assert type(model).__name__ == family.norm_class_name("ForSequenceClassification")
    assert model.config.norm_type == "dtn" and result.trainer.state.global_step == 4
    assert math.isfinite(result.train_metrics["train_loss"]) and 0.0 <= result.eval_metrics["eval_accuracy"] <= 1.0
