"""`convert` of CLIP's vision tower (issue 46): DTN, LaPE and SepNorm exactly (max abs diff to the stock model),
SepNorm also with its layers' norms folded into q/k/v and fc1 (`post_layernorm`, on the pooled [CLS] only, is not)."""

from __future__ import annotations

import pytest
import torch
from transformers import CLIPVisionConfig, CLIPVisionModel

from hf_norms.conversion.convert import convert
from hf_norms.models.clip_vision.modeling_clip_vision_norm import CLIPVisionNormModel

SIZE = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=30,
            patch_size=2)  # fmt: skip


@pytest.mark.parametrize(("norm_type", "fold"), [("dtn", False), ("lape", False), ("sepnorm", True)])
def test_exact_conversion_against_the_stock_model(norm_type, fold, tmp_path):
    torch.manual_seed(0)
    stock = CLIPVisionModel(CLIPVisionConfig(**SIZE)).eval()
    with torch.no_grad():
        for parameter in stock.parameters():  # norms that are not the identity, so folding has something to fold
            parameter.add_(0.1 * torch.randn_like(parameter))
    stock.save_pretrained(tmp_path / "source")
    report = convert(tmp_path / "source", norm_type, tmp_path / "out", fold=fold)
    assert (report["family"], report["exact"], report["architecture"]) == ("clipvision", True, "CLIPVisionNormModel")
    assert report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5
    if fold:
        assert report["folding"]["max_abs_diff_to_unfolded"] <= 1e-5
        assert sorted(report["folding"]["folded"]) == [f"encoder.layers.{i}.layer_norm{j}" for i in (0, 1)
                                                       for j in (1, 2)]  # fmt: skip
    converted = CLIPVisionNormModel.from_pretrained(tmp_path / "out").eval()
    pixels = torch.randn(2, 3, 30, 30, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = converted(pixel_values=pixels), stock(pixel_values=pixels)
    assert (ours.pooler_output - theirs.pooler_output).abs().max().item() <= 1e-5
    assert (ours.last_hidden_state - theirs.last_hidden_state).abs().max().item() <= 1e-5
