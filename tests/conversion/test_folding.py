"""Folding norm affines into the next Linear layers keeps ViT/DeiT outputs; BERT (post-LN) is refused."""

from __future__ import annotations

import pytest
import torch
from conftest import image_inputs, tiny_config
from torch import nn

import hf_norms
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.conversion.folding import fold_norms

FOLD_CASES = [
    ("layernorm", {}),
    ("dyt", {"dyt_per_channel_alpha": True}),
    ("derf", {"derf_per_channel": True}),
    ("dtn", {}),
    ("sepnorm", {"sepnorm_prefix_norm": "layernorm"}),
    ("lape", {"lape_keep_input_pe": True}),
]
HEADS = ["ViTNormForImageClassification", "ViTNormModel", "DeiTNormForImageClassificationWithTeacher"]


def randomise_norms(model: nn.Module) -> None:
    """Give every norm parameter a non-trivial value, so folding has something to move."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(part in name for part in ("layernorm", "pe_norm")) and "pos_proj" not in name:
                param.copy_(param + 0.3 * torch.randn(param.shape, generator=generator))
                if name.endswith("alpha"):
                    param.abs_()
        for module in model.modules():
            if isinstance(module, hf_norms.SeparateNorm):  # an exact SepNorm shares its prefix affine
                module.prefix_norm.weight.copy_(module.weight)
                module.prefix_norm.bias.copy_(module.bias)


def first_output(outputs) -> torch.Tensor:
    return outputs.logits if getattr(outputs, "logits", None) is not None else outputs.last_hidden_state


@pytest.mark.parametrize("class_name", HEADS)
@pytest.mark.parametrize(("norm_type", "options"), FOLD_CASES, ids=[case[0] for case in FOLD_CASES])
def test_folding_keeps_outputs(class_name, norm_type, options, tmp_path):
    family = "deit" if class_name.startswith("DeiT") else "vit"
    torch.manual_seed(0)
    model = getattr(hf_norms, class_name)(tiny_config(family, norm_type, **options)).eval()
    randomise_norms(model)
    inputs = image_inputs(model.config, with_labels=False)
    with torch.no_grad():
        before = first_output(model(**inputs))
    result = fold_norms(model)
    with torch.no_grad():
        after = first_output(model(**inputs))
    assert (after - before).abs().max().item() <= 1e-5

    layers = model.config.num_hidden_layers
    prefix = "" if class_name.endswith("NormModel") else f"{model.base_model_prefix}."
    lape_skips = {f"{prefix}layers.{i}.layernorm_before" for i in range(layers)}
    assert set(result.skipped) == (lape_skips if norm_type == "lape" else set())
    assert len(result.folded) == 2 * layers - len(result.skipped) + (0 if class_name.endswith("NormModel") else 1)
    for name in result.folded:
        norm = model.get_submodule(name)
        assert torch.equal(norm.weight, torch.ones_like(norm.weight))
        assert torch.equal(norm.bias, torch.zeros_like(norm.bias))

    if norm_type not in ("dyt", "derf"):
        return
    model.save_pretrained(tmp_path / "folded")  # a normal checkpoint: it loads and computes the same
    reloaded = type(model).from_pretrained(tmp_path / "folded").eval()
    with torch.no_grad():
        assert (first_output(reloaded(**inputs)) - before).abs().max().item() <= 1e-5


def test_sepnorm_with_batchnorm_prefix_is_not_folded():
    model = hf_norms.ViTNormModel(tiny_config("vit", "sepnorm")).eval()
    result = fold_norms(model)
    assert not result.folded
    assert all("BatchNorm" in reason for reason in result.skipped.values())


def test_bert_folding_is_refused_as_post_ln():
    model = hf_norms.BertNormForMaskedLM(tiny_config("bert", "dyt"))
    with pytest.raises(ConversionError, match="post-LN"):
        fold_norms(model)
