"""Per-layer norm choice (`layer_norm_types`): each encoder layer builds its own norm_type, the norms after the encoder
follow the last layer and BERT's embedding norm the first; saved, loaded and run like any option."""

from __future__ import annotations

import pytest
import torch
from conftest import HEAD_CASES, head_config, primary_output, run_without_hf_norms, tiny_config

from hf_norms import BertNormForMaskedLM, ViTNormModel
from hf_norms.norms.dyt import DynamicTanh
from hf_norms.norms.layernorm import LayerNorm


def norm_classes(model) -> dict[str, str]:
    """`{module name: class name}` of every norm module (LaPE's position norms aside)."""
    return {
        name: type(module).__name__
        for name, module in model.named_modules()
        if name.endswith(("layernorm_before", "layernorm_after", "layernorm", "norm1", "norm2", "LayerNorm"))
    }


@pytest.mark.parametrize("case", HEAD_CASES, ids=str)
def test_each_layer_builds_its_own_norm_and_the_model_round_trips(case, tmp_path):
    config = head_config(case, "dyt")
    config.layer_norm_types = ["dyt", "layernorm"]
    torch.manual_seed(0)
    model = case.model_class(config).eval()
    classes = norm_classes(model)
    in_layer = lambda index: {n: c for n, c in classes.items() if f".{index}." in n}  # noqa: E731
    assert set(in_layer(0).values()) == {"DynamicTanh"} and len(in_layer(0)) == 2
    assert set(in_layer(1).values()) == {"LayerNorm"} and len(in_layer(1)) == 2
    outside = {n: c for n, c in classes.items() if ".0." not in n and ".1." not in n}
    for name, class_name in outside.items():  # BERT's embedding norm follows layer 0, all others the last layer
        assert class_name == ("DynamicTanh" if "embeddings" in name else "LayerNorm"), name

    model.save_pretrained(tmp_path)
    reloaded = case.model_class.from_pretrained(tmp_path).eval()
    assert reloaded.config.layer_norm_types == ["dyt", "layernorm"]
    for (name, saved), loaded in zip(model.state_dict().items(), reloaded.state_dict().values(), strict=True):
        assert torch.equal(saved, loaded), name
    inputs = case.inputs(config, with_labels=False)
    with torch.no_grad():  # equal weights; a matmul may round differently on a loaded tensor's memory (1e-9 seen)
        diff = (primary_output(model(**inputs)) - primary_output(reloaded(**inputs))).abs().max().item()
    assert diff <= 1e-6


def test_layernorm_in_every_layer_computes_the_layernorm_model():
    torch.manual_seed(0)
    stock = ViTNormModel(tiny_config("vit", "layernorm")).eval()
    mixed = ViTNormModel(tiny_config("vit", "dyt", layer_norm_types=["layernorm", "layernorm"])).eval()
    assert mixed.load_state_dict(stock.state_dict(), strict=True)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(mixed(pixels).last_hidden_state, stock(pixels).last_hidden_state)


def test_the_norms_after_the_encoder_follow_the_last_layer_and_bert_embeddings_the_first():
    model = BertNormForMaskedLM(tiny_config("bert", "dyt", layer_norm_types=["layernorm", "dyt"]))
    assert isinstance(model.bert.embeddings.LayerNorm, LayerNorm)
    assert isinstance(model.cls.predictions.transform.LayerNorm, DynamicTanh)
    assert model.config.norm_type_at(0) == "layernorm" and model.config.norm_type_at(-1) == "dyt"
    assert tiny_config("bert", "dtn").norm_type_at(1) == "dtn"  # no per-layer choice: norm_type everywhere


@pytest.mark.parametrize(
    ("norm_type", "layer_norm_types", "message"),
    [
        ("dyt", ["dyt"], "one norm type per encoder layer"),
        ("dyt", "dyt,dyt", "one norm type per encoder layer"),
        ("dyt", ["dtn", "dyt"], "only norm_type"),
        ("lape", ["lape", "layernorm"], "LaPE"),
    ],
)
def test_wrong_layer_norm_types_are_refused_with_what_to_do(norm_type, layer_norm_types, message):
    with pytest.raises(Exception, match=message):
        tiny_config("vit", norm_type, layer_norm_types=layer_norm_types)


def test_remote_code_loads_a_mixed_checkpoint_without_hf_norms(tmp_path):
    config = tiny_config("bert", "dtn", layer_norm_types=["dtn", "layernorm"])
    torch.manual_seed(0)
    model = BertNormForMaskedLM(config).eval()
    model.save_pretrained(tmp_path)
    inputs = {"input_ids": torch.tensor([[2, 5, 7, 9, 3]])}
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.save(inputs, tmp_path / "inputs.pt")
    result = run_without_hf_norms(
        f"""
        import torch
        torch.set_num_threads({torch.get_num_threads()})  # as here: other thread counts round the sums differently
        from transformers import AutoModelForMaskedLM
        model = AutoModelForMaskedLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        kinds = sorted({{type(m).__name__ for n, m in model.named_modules() if n.endswith("LayerNorm")}})
        with torch.no_grad():
            logits = model(**torch.load({str(tmp_path / "inputs.pt")!r})).logits
        torch.save(logits, {str(tmp_path / "logits.pt")!r})
        print(kinds)
        """,
        tmp_path,
    )
    assert "['DynamicTokenNorm', 'LayerNorm']" in result
    assert torch.equal(torch.load(tmp_path / "logits.pt"), expected)
