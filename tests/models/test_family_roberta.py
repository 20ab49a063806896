"""The RoBERTa and XLM-RoBERTa families: every stock head has its hf-norms head; loaded from a small random stock
checkpoint, `layernorm` is bit-identical to the stock head and SepNorm, DTN and LaPE keep its outputs; every norm_type
trains every head; DTN keeps the padding (id 1) out of its statistics and LaPE reads RoBERTa's padding-aware
positions."""

from __future__ import annotations

import importlib

import pytest
import torch
import transformers
from huggingface_hub.errors import StrictDataclassClassValidationError
from text_families import HEAD_SUFFIXES, ROBERTA, XLM_ROBERTA, head_overrides, labels_for, padded_batch

from hf_norms.models.auto_registration import stock_head
from hf_norms.models.family_registry import FAMILIES, MODEL_CLASSES, family_of
from hf_norms.norms.registry import NORM_TYPES

TEXT_FAMILIES = [ROBERTA, XLM_ROBERTA]
EXACT_LOADS = {"layernorm": 0.0, "sepnorm": 1e-5, "dtn": 1e-5, "lape": 1e-5}  # norm_type: max abs diff to stock
AUTO_CLASSES = {
    "Model": "AutoModel",
    "ForCausalLM": "AutoModelForCausalLM",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering",
    "ForMultipleChoice": "AutoModelForMultipleChoice",
}


def first_output(outputs) -> torch.Tensor:
    for key in ("logits", "start_logits", "last_hidden_state"):
        if getattr(outputs, key, None) is not None:
            return getattr(outputs, key)
    raise AssertionError(f"no tensor output in {list(outputs.keys())}")


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_every_stock_head_has_its_hf_norms_head(family):
    spec = FAMILIES[family.name]
    module = spec.stock_config_class.__module__.replace(".configuration_", ".modeling_")
    stock = {name for name in importlib.import_module(module).__all__ if not name.endswith("PreTrainedModel")}
    assert {stock_head(cls).__name__ for cls in spec.heads} == stock == {family.prefix + s for s in HEAD_SUFFIXES}
    assert family_of(spec.stock_model_type) is spec and family_of(spec.model_type) is spec
    assert spec.model_type == f"{family.module}_norm" and not spec.pre_ln and spec.modality == "text"
    assert transformers.AutoConfig.for_model(spec.model_type).__class__ is spec.config_class


@pytest.mark.parametrize("norm_type", EXACT_LOADS)
@pytest.mark.parametrize("suffix", HEAD_SUFFIXES)
@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_loading_a_stock_head_keeps_its_outputs(family, suffix, norm_type, tmp_path):
    """Through its Auto class with `norm_type`: `layernorm` bit-identical, SepNorm, DTN and LaPE within 1e-5 (DTN
    refuses the causal LM, a decoder)."""
    folder = family.save_stock(tmp_path, suffix)
    stock = family.stock_class(suffix).from_pretrained(folder).eval()
    auto_class = getattr(transformers, AUTO_CLASSES[suffix])
    if suffix == "ForCausalLM" and norm_type == "dtn":  # the stock causal LM is a decoder, which DTN cannot be
        with pytest.raises(
            StrictDataclassClassValidationError, match=r"causal decoder \(is_decoder=True\) would see future"
        ):
            auto_class.from_pretrained(folder, norm_type=norm_type)
        return
    ours = auto_class.from_pretrained(folder, norm_type=norm_type).eval()
    assert type(ours).__name__ == family.norm_class_name(suffix) and ours.config.norm_type == norm_type
    batch = padded_batch(family, suffix)
    with torch.no_grad():
        expected, got = first_output(stock(**batch)), first_output(ours(**batch))
    if suffix != "ForMultipleChoice":  # the padded positions are masked out of what any head reads
        real = batch["attention_mask"].bool()
        expected, got = (expected[real] if expected.dim() > 2 else expected), (got[real] if got.dim() > 2 else got)
    assert (got - expected).abs().max().item() <= EXACT_LOADS[norm_type]


@pytest.mark.parametrize("norm_type", NORM_TYPES)
@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_every_norm_type_trains_every_head(family, norm_type):
    """Built from the hf-norms config (the causal LM as a decoder, except DTN, which refuses to be causal): a finite
    loss whose gradients reach the norms."""
    spec = FAMILIES[family.name]
    for suffix in HEAD_SUFFIXES:
        stock_config = family.stock_config(**head_overrides(suffix, decoder=norm_type != "dtn"))
        config = spec.config_class.from_stock_config(stock_config, norm_type=norm_type)
        torch.manual_seed(0)
        model = MODEL_CLASSES[family.norm_class_name(suffix)](config).train()
        batch = padded_batch(family, suffix)
        outputs = model(**batch, **labels_for(suffix, batch))
        loss = outputs.loss if suffix != "Model" else outputs.last_hidden_state.pow(2).mean()
        assert torch.isfinite(loss), suffix
        loss.backward()
        norm_grads = [p.grad for n, p in model.named_parameters() if "LayerNorm" in n or "layer_norm" in n]
        assert any(g is not None and g.abs().sum() > 0 for g in norm_grads), suffix
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None), suffix


def alone_and_padded(model, family) -> tuple[torch.Tensor, torch.Tensor]:
    """The short sentence's last hidden state alone and as the padded row of a batch (its real tokens)."""
    tokenizer = family.tokenizer()
    alone = tokenizer(["Shares rose sharply."], return_tensors="pt")
    batch = padded_batch(family, "Model")
    assert batch["input_ids"][0, -1].item() == 1 and batch["attention_mask"][0].sum() < batch["input_ids"].shape[1]
    with torch.no_grad():
        single = model(input_ids=alone["input_ids"], attention_mask=alone["attention_mask"]).last_hidden_state[0]
        padded = model(**batch).last_hidden_state[0, : single.shape[0]]
    return single, padded


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_dtn_keeps_the_padding_out_of_its_statistics(family, tmp_path):
    """At the paper's gates (0.5, so the inter-token statistics matter) the padded row computes what it computes alone."""
    folder = family.save_stock(tmp_path, "Model")
    model = transformers.AutoModel.from_pretrained(folder, norm_type="dtn", dtn_gate_init=0.5).eval()
    single, padded = alone_and_padded(model, family)
    assert (single - padded).abs().max().item() < 1e-5
    stock = transformers.AutoModel.from_pretrained(folder).eval()
    assert (single - alone_and_padded(stock, family)[0]).abs().max().item() > 1e-3  # DTN at 0.5 is not LayerNorm


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=lambda f: f.name)
def test_lape_normalises_the_padding_aware_positions(family):
    """LaPE from the config (its position norms at their init, the input positions left out): each layer reads the
    positions RoBERTa computes after the padding index, per row, so padding changes nothing for the real tokens."""
    spec = FAMILIES[family.name]
    torch.manual_seed(0)
    model = MODEL_CLASSES[family.norm_class_name("Model")](
        spec.config_class.from_stock_config(family.stock_config(), norm_type="lape")
    ).eval()
    single, padded = alone_and_padded(model, family)
    assert (single - padded).abs().max().item() < 1e-5
    positions = model.embeddings.position_embeddings.weight
    layer_inputs = model.embeddings.LayerNorm.norm_context.per_layer_positions
    batch = padded_batch(family, "Model")
    assert len(layer_inputs) == 2 and layer_inputs[0].shape == (*batch["input_ids"].shape, 48)
    with torch.no_grad():  # <s> sits at position padding_idx + 1, a padding token at padding_idx
        start, pad = model.encoder.layer[0].pe_norm(positions[2]), model.encoder.layer[0].pe_norm(positions[1])
    assert (layer_inputs[0][:, 0] - start).abs().max().item() < 1e-6
    assert (layer_inputs[0][0, -1] - pad).abs().max().item() < 1e-6
