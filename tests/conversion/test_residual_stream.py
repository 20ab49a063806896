"""Centring the residual stream of a pre-LN vision transformer keeps what its LayerNorms compute: the logits do not
move, and every hidden state becomes mean-free over its channels (what lets an RMS-type norm replace LayerNorm
exactly)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

import hf_norms
from hf_norms.conversion.residual_stream import center_residual_stream

HEADS = {
    "vit": hf_norms.ViTNormForImageClassification,
    "deit": hf_norms.DeiTNormForImageClassificationWithTeacher,
    "dinov2": hf_norms.Dinov2NormForImageClassification,  # LayerScale 0.5 in the tiny config: folded first
}


@pytest.mark.parametrize("family", sorted(HEADS))
def test_centring_keeps_the_logits_and_makes_every_hidden_state_mean_free(family):
    torch.manual_seed(0)
    model = HEADS[family](tiny_config(family, "layernorm")).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # no zero means anywhere to begin with
            parameter.add_(0.1 * torch.randn_like(parameter))
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(pixel_values=pixels, output_hidden_states=True)
        center_residual_stream(model)
        after = model(pixel_values=pixels, output_hidden_states=True)
    assert (after.logits - before.logits).abs().max().item() <= 1e-5
    assert max(state.mean(-1).abs().max().item() for state in before.hidden_states) > 0.1
    assert max(state.mean(-1).abs().max().item() for state in after.hidden_states) <= 1e-6
