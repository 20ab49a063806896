"""CLIP's vision tower end to end (issue 46): `hf-norms convert` of a small random stock `CLIPVisionModel` to SepNorm,
exact; `hf-norms push` to the loopback Hub with an image-feature-extraction card; loaded back by id with
`import hf_norms` and with `trust_remote_code=True` where hf_norms cannot be imported; calibrated DyT and RMSNorm;
`finetune` refused in one line (transformers has no classification head on a CLIPVisionConfig)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from family_publishing import load_by_id, tree_digest
from PIL import Image
from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, CLIPVisionModelWithProjection

from hf_norms import cli
from hf_norms.conversion.convert import convert

TOKEN = "hf_clip-vision-secret-5307"
SIZE = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=30,
            patch_size=2, projection_dim=16)  # fmt: skip

pytestmark = pytest.mark.usefixtures("hub_online")

LOAD_BY_ID = """
import json, torch, transformers
IMPORT_LINE
reference = torch.load(REFERENCE)
model = transformers.AutoModel.from_pretrained(REPO, **KWARGS).eval()
with torch.no_grad():
    outputs = model(pixel_values=reference["pixels"])
diff = max((outputs[key] - reference[key]).abs().max().item() for key in ("last_hidden_state", "pooler_output"))
print(json.dumps({"class": type(model).__name__, "module": type(model).__module__, "diff": diff}))
"""


def save_stock(folder: Path, stock_class: type = CLIPVisionModel) -> Path:
    """A random stock CLIP vision checkpoint (30 px, patch 2) with its image processor."""
    torch.manual_seed(0)
    stock_class(CLIPVisionConfig(**SIZE)).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}).save_pretrained(folder)
    return folder


def save_images(folder: Path, count: int) -> Path:
    """`count` deterministic 30 px RGB PNGs (a colour per image, with noise) in `folder`."""
    folder.mkdir(parents=True)
    generator = np.random.default_rng(0)
    for index in range(count):
        pixels = generator.uniform(0, 255, size=3) + generator.normal(0, 25, (30, 30, 3))
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / f"{index:03d}.png")
    return folder


def test_convert_push_and_load_by_id(hub, api, monkeypatch, tmp_path):
    stock_dir = save_stock(tmp_path / "stock")
    before = tree_digest(stock_dir)
    out = tmp_path / "clip-sepnorm"
    assert cli.main(["convert", str(stock_dir), "--norm-type", "sepnorm", "--output", str(out)]) == 0
    report = json.loads((out / "conversion_report.json").read_text())
    assert (report["family"], report["exact"], report["architecture"]) == ("clipvision", True, "CLIPVisionNormModel")
    assert report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5
    assert {"configuration_clip_vision_norm.py", "modeling_clip_vision_norm.py"} <= set(os.listdir(out))
    assert tree_digest(stock_dir) == before  # the source is only read

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", "org/clip-vision-sepnorm", str(out)]) == 0
    info = api.model_info("org/clip-vision-sepnorm")
    assert info.pipeline_tag == "image-feature-extraction"
    assert {"clipvision", "sepnorm", "custom_code", "hf-norms"} <= set(info.card_data["tags"])
    readme = Path(api.hf_hub_download("org/clip-vision-sepnorm", "README.md", cache_dir=tmp_path / "c")).read_text()
    assert "A CLIP vision model (`CLIPVisionNormModel`)" in readme
    assert "- The conversion is exact, so the model computes what the source computes" in readme

    pixels = torch.randn(2, 3, 30, 30, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        stock = CLIPVisionModel.from_pretrained(stock_dir).eval()(pixel_values=pixels)
    torch.save({"pixels": pixels, **{key: stock[key] for key in ("last_hidden_state", "pooler_output")}},
               tmp_path / "reference.pt")  # fmt: skip
    for with_hf_norms in (True, False):
        result = load_by_id(
            hub, TOKEN, LOAD_BY_ID, "org/clip-vision-sepnorm", tmp_path / "reference.pt", tmp_path, with_hf_norms
        )
        assert result["class"] == "CLIPVisionNormModel" and result["diff"] <= 1e-5
        assert ("transformers_modules" in result["module"]) is not with_hf_norms


def test_dyt_and_rmsnorm_are_calibrated_and_the_card_says_so(hub, api, monkeypatch, tmp_path):
    """DyT and RMSNorm (not exact on CLIP: its stream starts at pre_layrnorm's affine output) are calibrated on 16
    images: closer to the source than the naive start; the card says the weights were converted without training."""
    stock_dir = save_stock(tmp_path / "stock")
    images = save_images(tmp_path / "images", 24)
    for norm_type in ("dyt", "rmsnorm"):
        report = convert(stock_dir, norm_type, tmp_path / norm_type, calibration_data=images, calibration_samples=16,
                         evaluation_samples=8, heal_steps=0)  # fmt: skip
        assert report["exact"] is False and list(report["stages"]) == ["naive", "calibrated"], norm_type
        naive, calibrated = (report["stages"][stage]["end_to_end"] for stage in ("naive", "calibrated"))
        assert calibrated["mean_cosine"] > naive["mean_cosine"], (norm_type, naive, calibrated)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli.main(["push", "org/clip-vision-rmsnorm", str(tmp_path / "rmsnorm")]) == 0
    assert api.model_info("org/clip-vision-rmsnorm").pipeline_tag == "image-feature-extraction"
    readme = Path(api.hf_hub_download("org/clip-vision-rmsnorm", "README.md", cache_dir=tmp_path / "c")).read_text()
    assert "- The weights were converted without any training" in readme


def test_finetune_is_refused_in_one_line(tmp_path):
    """No head of a CLIPVisionConfig classifies: `hf-norms finetune` says so in one line, exit 2, writing nothing."""
    stock_dir = save_stock(tmp_path / "stock")
    before = tree_digest(stock_dir)
    done = subprocess.run(
        [sys.executable, "-m", "hf_norms.cli", "finetune", "--model_name_or_path", str(stock_dir), "--dataset",
         "packaged:fashion-mnist", "--output_dir", str(tmp_path / "out"), "--use_cpu", "--max_steps", "1"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("hf-norms finetune: error: hf-norms fine-tunes no task on CLIP vision: "), lines
    assert not (tmp_path / "out").exists() and tree_digest(stock_dir) == before


def test_convert_refuses_the_projection_head_in_one_line(tmp_path, capsys):
    """`CLIPVisionModelWithProjection` has no Auto class in transformers, so it is not a head hf-norms converts or
    publishes (it loads in Python: `CLIPVisionNormModelWithProjection`); convert says so, exit 2, writing nothing."""
    stock_dir = save_stock(tmp_path / "stock", CLIPVisionModelWithProjection)
    assert cli.main(["convert", str(stock_dir), "--norm-type", "sepnorm", "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hf-norms convert: error: {stock_dir}: architecture 'CLIPVisionModelWithProjection' is not a CLIP vision "
        "head hf-norms converts (those are ['CLIPVisionModel']): load it with transformers' "
        "CLIPVisionModel.from_pretrained, save that with save_pretrained and convert the saved folder."
    )
    assert not (tmp_path / "out").exists()
