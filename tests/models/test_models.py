"""Every family x norm_type x head: forward, backward, loss, outputs, attention backends, checkpointing, save/load."""

from __future__ import annotations

import pytest
import torch
import transformers
from conftest import head_config, in_fresh_memory, primary_output

import hf_norms


def build(case, norm_type: str, seed: int = 0):
    torch.manual_seed(seed)
    return case.model_class(head_config(case, norm_type))


def loss_of(case, outputs) -> torch.Tensor:
    return outputs.loss if case.has_loss else primary_output(outputs).float().pow(2).mean()


def test_forward_backward_loss_and_outputs(head_case, norm_type):
    model = build(head_case, norm_type).train()
    config = model.config
    outputs = model(**head_case.inputs(config), output_hidden_states=True)
    loss = loss_of(head_case, outputs)
    assert torch.isfinite(loss)
    if head_case.has_loss:
        assert outputs.loss is not None and outputs.loss.ndim == 0
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert all(g is None or torch.isfinite(g).all() for g in grads.values())
    norm_grads = [g for n, g in grads.items() if "norm" in n.lower()]  # CLIP: layer_norm1, pre_layrnorm
    assert norm_grads and any(g is not None and g.abs().sum() > 0 for g in norm_grads)
    assert len(outputs.hidden_states) == config.num_hidden_layers + 1
    assert all(h.shape == outputs.hidden_states[0].shape for h in outputs.hidden_states)


def test_eager_attentions_and_sdpa_equals_eager(head_case, norm_type, tmp_path):
    build(head_case, norm_type).save_pretrained(tmp_path)
    eager = head_case.model_class.from_pretrained(tmp_path, attn_implementation="eager").eval()
    sdpa = head_case.model_class.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    inputs = head_case.inputs(eager.config, with_labels=False)
    with torch.no_grad():
        out_eager = eager(**inputs, output_attentions=True)
        out_sdpa = sdpa(**inputs)
    attentions = out_eager.attentions
    assert len(attentions) == eager.config.num_hidden_layers
    heads = eager.config.num_attention_heads
    assert attentions[0].shape[1] == heads and attentions[0].shape[-1] == attentions[0].shape[-2]
    torch.testing.assert_close(attentions[0].sum(-1), torch.ones_like(attentions[0].sum(-1)))
    diff = (primary_output(out_eager) - primary_output(out_sdpa)).abs().max().item()
    assert diff < 1e-5, f"sdpa differs from eager by {diff}"


def test_gradient_checkpointing_gives_the_same_gradients(head_case, norm_type):
    if norm_type == "sepnorm":  # BatchNorm's running stats would be updated twice; use the LayerNorm prefix norm
        reference = head_case.model_class(
            head_config(head_case, norm_type).__class__(
                **{**head_config(head_case, norm_type).to_dict(), "sepnorm_prefix_norm": "layernorm"}
            )
        )
    else:
        reference = build(head_case, norm_type)
    checkpointed = type(reference)(reference.config)
    checkpointed.load_state_dict(reference.state_dict())
    checkpointed.activation_checkpointing_enable()
    assert checkpointed.is_activation_checkpointing
    for model in (reference, checkpointed):
        model.train()
        loss_of(head_case, model(**head_case.inputs(model.config))).backward()
    for (name, p_ref), (_, p_ckpt) in zip(reference.named_parameters(), checkpointed.named_parameters(), strict=True):
        if p_ref.grad is None:
            assert p_ckpt.grad is None, name
        else:
            torch.testing.assert_close(p_ckpt.grad, p_ref.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_save_then_auto_from_pretrained_is_identical(head_case, norm_type, tmp_path):
    model = build(head_case, norm_type).eval()
    model.save_pretrained(tmp_path)
    auto_class_name = model._auto_class
    loaded, info = getattr(transformers, auto_class_name).from_pretrained(tmp_path, output_loading_info=True)
    assert type(loaded) is type(model)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    inputs = head_case.inputs(model.config, with_labels=False)
    with torch.no_grad():
        diff = (primary_output(model(**inputs)) - primary_output(in_fresh_memory(loaded).eval()(**inputs))).abs().max()
    assert diff == 0


def test_auto_classes_resolve_every_head():
    from hf_norms.models.family_registry import FAMILIES

    for family in FAMILIES.values():
        family_map = family.auto_map
        config_class = getattr(hf_norms, family_map["AutoConfig"].split(".")[1])
        assert transformers.AutoConfig.for_model(config_class.model_type).__class__ is config_class
        for auto_name, reference in family_map.items():
            if auto_name == "AutoConfig":
                continue
            registered = getattr(transformers, auto_name)._model_mapping[config_class]
            first = registered[0] if isinstance(registered, tuple) else registered
            assert first.__name__ == reference.split(".")[1]


def test_every_head_is_registered_under_its_auto_class():
    """Each head a family module defines sits in the mapping of the Auto class its `_auto_class` names, the
    `FAMILY_AUTO_MAP` entry first where a task has several heads."""
    from hf_norms.models.family_registry import FAMILIES

    for family in FAMILIES.values():
        config_class = family.config_class
        for cls in family.heads:
            registered = getattr(transformers, cls._auto_class)._model_mapping[config_class]
            assert cls in (registered if isinstance(registered, tuple) else (registered,)), cls.__name__
        for name, reference in family.auto_map.items():
            registered = name == "AutoConfig" or getattr(transformers, name)._model_mapping[config_class]
            assert name == "AutoConfig" or one_of(registered).__name__ == reference.split(".")[1]


def one_of(registered):
    """The class transformers uses when a checkpoint names none: the first of a tuple."""
    return registered[0] if isinstance(registered, tuple) else registered


@pytest.mark.parametrize("family", ["vit", "deit", "dinov2"])
def test_interpolated_position_encoding_and_other_grids(family, norm_type):
    from conftest import tiny_config

    config = tiny_config(family, norm_type)
    model = getattr(hf_norms, {"vit": "ViTNormModel", "deit": "DeiTNormModel", "dinov2": "Dinov2NormModel"}[family])
    model = model(config).eval()
    pixels = torch.randn(1, 3, 48, 40)
    options = {} if family == "dinov2" else {"interpolate_pos_encoding": True}  # DINOv2 always interpolates
    out = model(pixel_values=pixels, **options)
    assert out.last_hidden_state.shape[1] == config.num_prefix_tokens + (48 // 8) * (40 // 8)
    assert torch.isfinite(out.last_hidden_state).all()
