"""`layernorm` is the stock model bit for bit, and stock checkpoints (4.x and 5.x key layouts) load into every norm_type."""

from __future__ import annotations

import pytest
import torch
import transformers
from conftest import HEAD_CASES, head_config, primary_output

from hf_norms.models.norm_options import NormOptions

NORM_FIELDS = set(NormOptions.__dataclass_fields__)


def stock_class(case):
    return getattr(transformers, case.class_name.replace("Norm", "", 1))


def stock_config(config):
    """The stock config with the same architecture (the norm fields dropped)."""
    stock_config_class = getattr(transformers, type(config).__name__.replace("Norm", "", 1))
    fields = {
        k: v
        for k, v in config.to_dict().items()
        if k not in NORM_FIELDS and k in stock_config_class.__dataclass_fields__
    }
    return stock_config_class(**fields)


@pytest.mark.parametrize("case", HEAD_CASES, ids=str)
def test_layernorm_is_bit_identical_to_stock(case):
    torch.manual_seed(0)
    ours = case.model_class(head_config(case, "layernorm")).eval()
    stock = stock_class(case)(stock_config(ours.config)).eval()
    stock.load_state_dict(ours.state_dict(), strict=True)
    inputs = case.inputs(ours.config)
    out_ours = ours(**inputs, output_hidden_states=True)
    out_stock = stock(**inputs, output_hidden_states=True)
    assert torch.equal(primary_output(out_ours), primary_output(out_stock))
    for ours_hidden, stock_hidden in zip(out_ours.hidden_states, out_stock.hidden_states, strict=True):
        assert torch.equal(ours_hidden, stock_hidden)
    if case.has_loss:
        assert torch.equal(out_ours.loss, out_stock.loss)
        out_ours.loss.backward()
        out_stock.loss.backward()
        stock_grads = dict(stock.named_parameters())
        for name, param in ours.named_parameters():
            if param.grad is not None:
                assert torch.equal(param.grad, stock_grads[name].grad), name


@pytest.mark.parametrize("original_layout", [True, False], ids=["4.x-layout", "5.x-layout"])
@pytest.mark.parametrize(
    "case",
    [
        c
        for c in HEAD_CASES
        if c.class_name in {"ViTNormForImageClassification", "DeiTNormModel", "BertNormForMaskedLM"}
    ],
    ids=str,
)
def test_stock_checkpoint_loads_into_every_norm_type(case, norm_type, original_layout, tmp_path):
    torch.manual_seed(0)
    stock = stock_class(case)(stock_config(head_config(case, "layernorm"))).eval()
    stock.save_pretrained(tmp_path, save_original_format=original_layout)
    if original_layout and case.family != "bert":
        saved_keys = transformers.modeling_utils.load_state_dict(str(tmp_path / "model.safetensors")).keys()
        assert any("encoder.layer." in key for key in saved_keys)  # really the 4.x names

    model, info = case.model_class.from_pretrained(tmp_path, norm_type=norm_type, output_loading_info=True)
    added = set(model.state_dict()) - set(stock.state_dict())
    assert set(info["missing_keys"]) == added
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    stock_state = stock.state_dict()
    for name, tensor in model.state_dict().items():
        if name in stock_state:
            assert torch.equal(tensor, stock_state[name]), name
        else:
            assert torch.isfinite(tensor.float()).all(), name


def test_new_parameters_get_their_documented_initial_values(tmp_path):
    from conftest import tiny_config

    import hf_norms

    torch.manual_seed(0)
    transformers.ViTModel(stock_config(tiny_config("vit", "layernorm"))).save_pretrained(tmp_path)
    dyt = hf_norms.ViTNormModel.from_pretrained(tmp_path, norm_type="dyt", dyt_alpha_init=0.7)
    assert all(torch.equal(m.alpha, torch.tensor([0.7])) for m in dyt.modules() if isinstance(m, hf_norms.DynamicTanh))
    derf = hf_norms.ViTNormModel.from_pretrained(tmp_path, norm_type="derf", derf_alpha_init=0.3, derf_shift_init=0.2)
    derf_layers = [m for m in derf.modules() if isinstance(m, hf_norms.DynamicErf)]
    assert derf_layers and all(torch.equal(m.alpha, torch.tensor([0.3])) for m in derf_layers)
    assert all(torch.equal(m.shift, torch.tensor([0.2])) for m in derf_layers)
    dtn = hf_norms.ViTNormModel.from_pretrained(tmp_path, norm_type="dtn", dtn_gate_init=1.0)
    for module in dtn.modules():
        if isinstance(module, hf_norms.DynamicTokenNorm):
            assert torch.equal(module.mean_gate, torch.ones(4)) and torch.equal(module.var_gate, torch.ones(4))
            assert torch.equal(module.pos_proj.weight[:, 2], -torch.ones(4))
    sep = hf_norms.ViTNormModel.from_pretrained(tmp_path, norm_type="sepnorm", sepnorm_prefix_norm="layernorm")
    for module in sep.modules():
        if isinstance(module, hf_norms.SeparateNorm):
            assert torch.equal(module.prefix_norm.weight, module.weight)
            assert torch.equal(module.prefix_norm.bias, module.bias)
    lape = hf_norms.ViTNormModel.from_pretrained(tmp_path, norm_type="lape", lape_keep_input_pe=True)
    pe_norms = [m for m in lape.modules() if isinstance(m, hf_norms.PositionEmbeddingNorm)]
    assert len(pe_norms) == 2 and all(torch.equal(m.weight, torch.zeros(48)) for m in pe_norms)
