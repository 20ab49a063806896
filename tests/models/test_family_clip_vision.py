"""CLIP's vision tower as a family (issue 46): small random checkpoints built with the stock transformers classes.

`layernorm` is the stock model bit for bit on both heads; SepNorm, DTN and LaPE load a LayerNorm checkpoint exactly
(measured max abs diff 0.0); `pre_layrnorm` counts as the first layer's norm, `post_layernorm` (the pooled [CLS] only)
as a one-token prefix; RMSNorm is not exact by centring (the stream starts at `pre_layrnorm`'s affine output), so the
family declares no residual writes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from transformers import CLIPVisionConfig, CLIPVisionModel, CLIPVisionModelWithProjection

import hf_norms
from hf_norms.conversion.convert import convert_model
from hf_norms.models import family_registry
from hf_norms.models.clip_vision.modeling_clip_vision_norm import (
    CLIPVisionNormConfig,
    CLIPVisionNormModel,
    CLIPVisionNormModelWithProjection,
)
from hf_norms.models.family_spec import ResidualWrites

HEADS = [(CLIPVisionModel, CLIPVisionNormModel), (CLIPVisionModelWithProjection, CLIPVisionNormModelWithProjection)]
SIZE = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=30,
            patch_size=2, projection_dim=16)  # fmt: skip


def stock_checkpoint(stock_class: type, folder) -> nn.Module:
    """A random stock model whose norms are not the identity (gamma, beta perturbed), saved in `folder`."""
    torch.manual_seed(0)
    model = stock_class(CLIPVisionConfig(**SIZE)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    return model


def pixels(size: int = 30) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


def max_diffs(ours, stock) -> dict[str, float]:
    return {key: (ours[key] - stock[key]).abs().max().item() for key in stock.keys() if torch.is_tensor(stock[key])}


@pytest.mark.parametrize(("stock_class", "norm_class"), HEADS, ids=[head[1].__name__ for head in HEADS])
@pytest.mark.parametrize("norm_type", ["layernorm", "sepnorm", "dtn", "lape"])
def test_layernorm_checkpoint_loads_exactly(stock_class, norm_class, norm_type, tmp_path):
    stock = stock_checkpoint(stock_class, tmp_path)
    model = norm_class.from_pretrained(tmp_path, norm_type=norm_type).eval()
    with torch.no_grad():
        diffs = max_diffs(model(pixel_values=pixels()), stock(pixel_values=pixels()))
    assert set(diffs) == ({"last_hidden_state", "pooler_output"} if stock_class is CLIPVisionModel else
                          {"last_hidden_state", "image_embeds"})  # fmt: skip
    assert max(diffs.values()) == 0.0 if norm_type == "layernorm" else max(diffs.values()) <= 1e-5, diffs


@pytest.mark.parametrize("norm_class", [CLIPVisionNormModel, CLIPVisionNormModelWithProjection])
@pytest.mark.parametrize("norm_type", list(hf_norms.NORM_TYPES))
def test_every_norm_type_trains_and_interpolates(norm_class, norm_type):
    """Forward and backward through every norm at the trained size, and at 34 px with `interpolate_pos_encoding`;
    every norm gets a gradient (the pooled one through the pooler output or the projection)."""
    torch.manual_seed(0)
    model = norm_class(CLIPVisionNormConfig(norm_type=norm_type, lape_keep_input_pe=False, **SIZE)).train()
    for size, interpolate in ((30, False), (34, True)):
        model.zero_grad()
        outputs = model(pixel_values=pixels(size), interpolate_pos_encoding=interpolate)
        assert outputs.last_hidden_state.shape == (2, 1 + (size // 2) ** 2, 32)
        pooled = outputs.pooler_output if norm_class is CLIPVisionNormModel else outputs.image_embeds
        (outputs.last_hidden_state.square().mean() + pooled.square().mean()).backward()
        norms = {
            name: module
            for name, module in model.named_modules()
            if name.endswith(("norm1", "norm2", "rnorm", "layernorm", "pe_norm"))
        }
        assert len(norms) == 6 + (2 if norm_type == "lape" else 0)
        grads = [[p.grad for p in module.parameters() if p.grad is not None] for module in norms.values()]
        assert all(any(g.abs().sum() > 0 for g in module) for module in grads), norm_type  # SepNorm's pooled: prefix


def test_pre_layrnorm_counts_as_the_first_layer_and_post_layernorm_as_the_last():
    """With DyT in one layer only: `pre_layrnorm` follows the first layer, `post_layernorm` the last."""
    for per_layer, pre, post in ((["dyt", "layernorm"], "DynamicTanh", "LayerNorm"),
                                 (["layernorm", "dyt"], "LayerNorm", "DynamicTanh")):  # fmt: skip
        model = CLIPVisionNormModel(CLIPVisionNormConfig(norm_type="dyt", layer_norm_types=per_layer, **SIZE))
        assert (type(model.pre_layrnorm).__name__, type(model.post_layernorm).__name__) == (pre, post)


def test_sepnorm_normalises_the_pooled_cls_with_its_prefix_norm():
    """`post_layernorm` sees `[batch, hidden]`: SepNorm treats it as the one prefix token, so its prefix norm (here a
    LayerNorm with its own gamma) normalises the pooled [CLS]; DTN keeps a LayerNorm there (one token, no grid)."""
    torch.manual_seed(0)
    config = CLIPVisionNormConfig(norm_type="sepnorm", sepnorm_prefix_norm="layernorm", **SIZE)
    model = CLIPVisionNormModel(config).eval()
    with torch.no_grad():
        model.post_layernorm.prefix_norm.weight.normal_()
        outputs = model(pixel_values=pixels())
        expected = model.post_layernorm.prefix_norm(outputs.last_hidden_state[:, 0])
    assert (outputs.pooler_output - expected).abs().max().item() == 0.0
    dtn = CLIPVisionNormModel(CLIPVisionNormConfig(norm_type="dtn", **SIZE))
    assert (type(dtn.post_layernorm).__name__, type(dtn.pre_layrnorm).__name__) == ("LayerNorm", "DynamicTokenNorm")


def test_rmsnorm_by_centring_is_not_exact_so_the_family_declares_no_residual_writes(tmp_path, monkeypatch):
    """Centring every write (class, position and patch embeddings, out_proj, fc2) leaves `pre_layrnorm`'s output
    gamma * z + beta in the stream, which is not mean-free: RMSNorm then differs from the stock pooled output by far
    more than float32 rounding (0.050 measured), so the registry keeps RMSNorm calibrated."""
    assert family_registry.FAMILIES["clipvision"].residual is None
    writes = ResidualWrites(tables=("embeddings.class_embedding",), position_table="embeddings.position_embedding",
                            input_projection="embeddings.patch_embedding", output_projections=("self_attn.out_proj",
                                                                                               "mlp.fc2"))  # fmt: skip
    centred = dataclasses.replace(family_registry.FAMILIES["clipvision"], residual=writes)
    monkeypatch.setitem(family_registry.FAMILIES, "clipvision", centred)
    stock = stock_checkpoint(CLIPVisionModel, tmp_path)
    converted = convert_model(stock, "rmsnorm")
    with torch.no_grad():
        diff = (converted(pixel_values=pixels()).pooler_output - stock(pixel_values=pixels()).pooler_output).abs()
    assert diff.max().item() > 1e-2


@pytest.mark.parametrize("norm_type", ["sepnorm", "dtn"])
def test_lora_defaults_target_attention_and_the_adapter_round_trips(norm_type, tmp_path):
    """`LoraConfig()` without target modules adapts CLIP's q_proj and v_proj (peft's defaults for `clip_vision_model`
    or hf-norms' q/v choice), never a norm; the saved adapter loads back to the same outputs."""
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(CLIPVisionNormModel(CLIPVisionNormConfig(norm_type=norm_type, **SIZE)), LoraConfig())
    adapted = {name.split(".lora_A")[0].split(".")[-1] for name, _ in model.named_parameters() if "lora_A" in name}
    assert adapted == {"q_proj", "v_proj"}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    model.eval().save_pretrained(tmp_path)
    torch.manual_seed(0)
    base = CLIPVisionNormModel(CLIPVisionNormConfig(norm_type=norm_type, **SIZE))
    loaded = PeftModel.from_pretrained(base, tmp_path).eval()
    with torch.no_grad():
        diff = (loaded(pixel_values=pixels()).pooler_output - model(pixel_values=pixels()).pooler_output).abs().max()
    assert diff.item() == 0.0
