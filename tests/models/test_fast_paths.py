"""Every fast path equals the reference formula it replaces: forward and gradients, fp32 and bf16; LaPE has no cache; DTN
against its plain formula."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

import hf_norms
from hf_norms import DynamicTanh, SeparateNorm


def dyt_reference(layer: DynamicTanh, x: torch.Tensor) -> torch.Tensor:
    """The paper's `weight * tanh(alpha * x) + bias`."""
    return layer.weight * torch.tanh(layer.alpha * x) + layer.bias


def random_dyt(per_channel: bool) -> DynamicTanh:
    torch.manual_seed(0)
    layer = DynamicTanh(64, alpha_init=0.5, per_channel=per_channel)
    with torch.no_grad():
        layer.alpha.uniform_(0.2, 1.5)
        layer.weight.normal_()
        layer.bias.normal_()
    return layer


@pytest.mark.parametrize("per_channel", [False, True])
def test_dyt_sigmoid_form_equals_tanh_forward_and_backward(per_channel):
    layer = random_dyt(per_channel)
    x = (torch.randn(4, 17, 64) * 3).requires_grad_()
    fast = layer(x)
    grads_fast = torch.autograd.grad(fast.square().sum(), [x, *layer.parameters()])
    reference = dyt_reference(layer, x)
    grads_reference = torch.autograd.grad(reference.square().sum(), [x, *layer.parameters()])
    torch.testing.assert_close(fast, reference, rtol=0, atol=2e-6)
    for fast_grad, reference_grad in zip(grads_fast, grads_reference, strict=True):
        torch.testing.assert_close(fast_grad, reference_grad, rtol=1e-5, atol=1e-4)
    with torch.no_grad():  # the in-place inference path
        torch.testing.assert_close(layer(x), reference, rtol=0, atol=2e-6)


def test_dyt_bf16_is_within_bf16_rounding_of_the_fp32_reference():
    layer = random_dyt(per_channel=False).to(torch.bfloat16)
    x = torch.randn(4, 17, 64).to(torch.bfloat16)
    out = layer(x)
    assert out.dtype == torch.bfloat16
    reference = dyt_reference(layer.float(), x.float())
    # one rounding of the result to bf16 (8 mantissa bits): half an ulp of the largest output, relative
    assert (out.float() - reference).abs().max() <= reference.abs().max() * 2**-8
    with torch.no_grad():
        torch.testing.assert_close(layer(x), out)
    x.requires_grad_()
    layer(x).float().sum().backward()
    assert x.grad.dtype == torch.bfloat16 and torch.isfinite(x.grad.float()).all()


@pytest.mark.parametrize("prefix_norm", ["layernorm", "batchnorm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sepnorm_single_buffer_equals_concatenated_reference(prefix_norm, dtype):
    torch.manual_seed(0)
    layer = SeparateNorm(32, num_prefix_tokens=2, prefix_norm=prefix_norm).to(dtype)
    with torch.no_grad():
        for param in layer.parameters():
            param.normal_()
    reference_layer = SeparateNorm(32, num_prefix_tokens=2, prefix_norm=prefix_norm).to(dtype)
    reference_layer.load_state_dict(layer.state_dict())
    x = torch.randn(4, 9, 32, dtype=dtype, requires_grad=True)
    x_reference = x.detach().clone().requires_grad_()

    out = layer(x)
    prefix = x_reference[:, :2]
    prefix_norm_module = reference_layer.prefix_norm
    prefix_out = (
        prefix_norm_module(prefix.transpose(1, 2)).transpose(1, 2)
        if prefix_norm == "batchnorm"
        else prefix_norm_module(prefix)
    )
    tokens = F.layer_norm(x_reference[:, 2:], (32,), reference_layer.weight, reference_layer.bias, reference_layer.eps)
    reference = torch.cat([prefix_out, tokens], dim=1)
    assert torch.equal(out, reference)
    out.float().square().sum().backward()
    reference.float().square().sum().backward()
    torch.testing.assert_close(x.grad, x_reference.grad)
    for (name, param), reference_param in zip(layer.named_parameters(), reference_layer.parameters(), strict=True):
        torch.testing.assert_close(param.grad, reference_param.grad, msg=name)


def lape_model(family: str, mode: str):
    torch.manual_seed(0)
    config = tiny_config(family, "lape", lape_mode=mode)
    model = (hf_norms.ViTNormModel if family == "vit" else hf_norms.BertNormModel)(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, hf_norms.PositionEmbeddingNorm):
                module.weight.normal_()
                module.bias.normal_()
    return model


def lape_inputs(family: str) -> dict:
    if family == "vit":
        return {"pixel_values": torch.randn(2, 3, 32, 32)}
    return {"input_ids": torch.randint(3, 100, (2, 7))}


@pytest.mark.parametrize("mode", ["cascade", "shared"])
@pytest.mark.parametrize("family", ["vit", "bert"])
def test_lape_positions_follow_every_change_of_their_parameters(family, mode):
    """Nothing is cached: an in-place edit through `.data` (EMA updates, weight surgery), which no version counter sees,
    changes the next output as it changes a fresh model's."""
    model = lape_model(family, mode)
    inputs = lape_inputs(family)
    with torch.no_grad():
        first = model(**inputs).last_hidden_state
    for module in model.modules():
        if isinstance(module, hf_norms.PositionEmbeddingNorm):
            module.bias.data.add_(0.5)
    with torch.no_grad():
        changed = model(**inputs).last_hidden_state
    assert not torch.equal(changed, first)
    fresh = lape_model(family, mode)
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh(**inputs).last_hidden_state, changed, rtol=0, atol=0)


def dtn_pair(one_dimensional: bool) -> tuple[hf_norms.DynamicTokenNorm, hf_norms.DynamicTokenNorm]:
    """A DTN with every parameter off its initial value (head 0's gates exactly 1, as after a conversion) and a copy
    that runs the plain formula."""
    torch.manual_seed(0)
    fast = hf_norms.DynamicTokenNorm(64, 4, one_dimensional=one_dimensional)
    with torch.no_grad():
        fast.weight.uniform_(0.5, 1.5)
        fast.bias.normal_()
        fast.pos_proj.weight.add_(torch.randn_like(fast.pos_proj.weight) * 0.3)
        fast.mean_gate.uniform_(0, 1)
        fast.var_gate.uniform_(0, 1)
        fast.mean_gate[0] = fast.var_gate[0] = 1
    plain = copy.deepcopy(fast)
    plain.fast_path = False
    return fast, plain


DTN_LAYOUTS = {
    "image grid with [CLS]": (1, (5, 6), None),
    "text": (0, (1, 11), None),
    "padded text": (0, (1, 11), torch.tensor([[1] * 11, [1] * 7 + [0] * 4, [1] * 11])),
}


@pytest.mark.parametrize("layout_name", DTN_LAYOUTS)
def test_dtn_fast_path_equals_the_plain_formula_forward_and_backward(layout_name):
    """The eager fast path (in place without autograd, `TokenNormFunction` with) against `token_norm_formula`, which
    every traced runtime runs, in float32 (activations of scale 3): outputs within 1e-5, every gradient within 1e-5 of
    its largest value (gradients of the gates and `pos_proj` are sums over every element: both paths are 1e-6 to 3e-6
    of it from float64)."""
    prefix, grid, mask = DTN_LAYOUTS[layout_name]
    layout = hf_norms.TokenLayout(prefix, grid, mask)
    fast, plain = dtn_pair(one_dimensional=grid[0] == 1)
    x = torch.randn(3, prefix + grid[0] * grid[1], 64) * 3 + 1
    real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
    with torch.no_grad():
        torch.testing.assert_close(fast(x, layout)[real], plain(x, layout)[real], rtol=0, atol=1e-5)
    upstream = torch.randn(x.shape) * real[..., None]
    gradients = []
    for layer in (fast, plain):
        x_grad = x.clone().requires_grad_()
        out = layer(x_grad, layout)
        (out * upstream).sum().backward()
        gradients.append({"out": out.detach()[real], "x": x_grad.grad})
        gradients[-1].update({name: param.grad for name, param in layer.named_parameters() if param.grad is not None})
    assert gradients[0].keys() == gradients[1].keys() >= {"x", "weight", "mean_gate", "var_gate", "pos_proj.weight"}
    for name, value in gradients[0].items():
        reference = gradients[1][name]
        assert (value - reference).abs().max() <= 1e-5 * max(1.0, reference.abs().max().item()), name


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "plain-formula"])
def test_dtn_follows_every_change_of_its_position_weights(fast_path):
    """The mixing matrices are built anew at every call (nothing cached): an edit of `pos_proj.weight` through `.data`,
    which no version counter sees, changes the next output as it changes a fresh layer's."""
    layer, _ = dtn_pair(one_dimensional=False)
    layer.fast_path = fast_path
    layout = hf_norms.TokenLayout(1, (5, 6))
    x = torch.randn(2, 31, 64)
    with torch.no_grad():
        first = layer(x, layout)
        layer.pos_proj.weight.data.mul_(-0.5)
        changed = layer(x, layout)
    fresh = copy.deepcopy(layer)
    with torch.no_grad():
        assert not torch.equal(changed, first)
        torch.testing.assert_close(fresh(x, layout), changed, rtol=0, atol=0)
