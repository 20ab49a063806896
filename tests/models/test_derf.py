"""Derf (Dynamic erf): the paper's formula in every path, its gradients, its options and their round trip."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

import hf_norms
from hf_norms import DynamicErf


def derf_reference(layer: DynamicErf, x: torch.Tensor) -> torch.Tensor:
    """The paper's `weight * erf(alpha * x + shift) + bias`."""
    return layer.weight * torch.erf(layer.alpha * x + layer.shift) + layer.bias


def random_derf(per_channel: bool, dtype: torch.dtype = torch.float32) -> DynamicErf:
    torch.manual_seed(0)
    layer = DynamicErf(16, per_channel=per_channel).to(dtype)
    with torch.no_grad():
        layer.alpha.uniform_(0.2, 1.5)
        layer.shift.uniform_(-0.5, 0.5)
        layer.weight.normal_()
        layer.bias.normal_()
    return layer


def test_derf_starts_as_the_official_code():
    layer = DynamicErf(8)
    assert layer.alpha.shape == layer.shift.shape == (1,)
    assert layer.alpha.item() == 0.5 and layer.shift.item() == 0.0
    assert torch.equal(layer.weight, torch.ones(8)) and torch.equal(layer.bias, torch.zeros(8))
    per_channel = DynamicErf(8, alpha_init=0.3, shift_init=0.1, per_channel=True)
    assert per_channel.alpha.shape == per_channel.shift.shape == (8,)
    with torch.no_grad():
        per_channel.alpha.zero_(), per_channel.shift.zero_()
    per_channel.init_parameters()
    assert torch.allclose(per_channel.alpha, torch.full((8,), 0.3)) and torch.allclose(
        per_channel.shift, torch.full((8,), 0.1)
    )
    assert "shift_init=0.1, per_channel=True" in repr(per_channel)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("fast_path", [False, True])
def test_derf_is_the_papers_formula_with_and_without_autograd(per_channel, fast_path):
    layer = random_derf(per_channel)
    layer.fast_path = fast_path
    x = torch.randn(3, 7, 16) * 3
    reference = derf_reference(layer, x).detach()
    assert (layer(x) - reference).abs().max() <= 1e-6
    with torch.no_grad():  # the in-place path
        assert (layer(x) - reference).abs().max() <= 1e-6


@pytest.mark.parametrize("per_channel", [False, True])
def test_derf_gradients_pass_gradcheck(per_channel):
    layer = random_derf(per_channel, torch.float64)
    x = torch.randn(2, 3, 16, dtype=torch.float64, requires_grad=True)

    def function(x, alpha, shift, weight, bias):
        return torch.func.functional_call(layer, {"alpha": alpha, "shift": shift, "weight": weight, "bias": bias}, (x,))

    parameters = [p.detach().clone().requires_grad_() for p in (layer.alpha, layer.shift, layer.weight, layer.bias)]
    assert torch.autograd.gradcheck(function, (x, *parameters))


def test_derf_bf16_is_computed_in_float32_and_rounded_once():
    layer = random_derf(per_channel=False).to(torch.bfloat16)
    x = torch.randn(4, 17, 16).to(torch.bfloat16)
    out = layer(x)
    assert out.dtype == torch.bfloat16
    reference = derf_reference(layer.float(), x.float())
    assert (out.float() - reference).abs().max() <= reference.abs().max() * 2**-8
    with torch.no_grad():
        torch.testing.assert_close(layer(x), out)


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_derf_options_round_trip_through_save_and_load(family, tmp_path):
    config = tiny_config(family, "derf", derf_alpha_init=0.3, derf_shift_init=-0.2, derf_per_channel=True)
    model_class = hf_norms.ViTNormModel if family == "vit" else hf_norms.BertNormModel
    model = model_class(config)
    layers = [m for m in model.modules() if isinstance(m, DynamicErf)]
    assert layers and all(m.alpha.shape == (48,) for m in layers)
    assert all(
        torch.allclose(m.alpha, torch.tensor(0.3)) and torch.allclose(m.shift, torch.tensor(-0.2)) for m in layers
    )
    model.save_pretrained(tmp_path)
    loaded = model_class.from_pretrained(tmp_path)
    assert (loaded.config.derf_alpha_init, loaded.config.derf_shift_init, loaded.config.derf_per_channel) == (
        0.3,
        -0.2,
        True,
    )
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0)
