"""Conversion of a model object in memory (`hf_norms.convert_model`), and loading a LayerNorm checkpoint into another
norm_type with `from_pretrained`, which keeps its function wherever the mathematics allows."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import EXACT_TYPES, HEAD_CASES, head_config, primary_output
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertModel

import hf_norms
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.norms.build import function_preserving_options


def outputs(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return primary_output(model.eval()(**inputs))


@pytest.mark.parametrize("norm_type", EXACT_TYPES)
@pytest.mark.parametrize(
    "case", [case for case in HEAD_CASES if case.model_class._auto_class != "AutoModelForCausalLM"], ids=str
)  # a causal LM refuses DTN, and is covered by the folder conversion
def test_convert_model_is_exact_in_memory_and_leaves_the_model_as_it_was(case, norm_type):
    torch.manual_seed(0)
    source = case.model_class(head_config(case, "layernorm")).eval()
    before = {name: tensor.clone() for name, tensor in source.state_dict().items()}
    inputs = case.inputs(source.config, with_labels=False)
    converted = hf_norms.convert_model(source, norm_type)
    assert type(converted) is type(source) and converted.config.norm_type == norm_type
    assert (outputs(converted, inputs) - outputs(source, inputs)).abs().max().item() <= 1e-5
    report = converted.conversion_report
    assert report["exact"] and report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5
    assert all(torch.equal(before[name], tensor) for name, tensor in source.state_dict().items())
    assert source.config.norm_type == "layernorm"


def test_convert_model_calibrates_dyt_on_texts_with_the_tokenizer(minilm_dir, news_sentences):
    model = AutoModelForMaskedLM.from_pretrained(minilm_dir)  # a stock class, with a new MLM head
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    texts = news_sentences * 4
    converted = hf_norms.convert_model(
        model,
        "dyt",
        texts,
        processor=tokenizer,
        calibration_samples=8,
        evaluation_samples=8,
        max_length=32,
        heal_steps=0,
    )
    stages = converted.conversion_report["stages"]
    assert type(converted).__name__ == "BertNormForMaskedLM"
    assert stages["calibrated"]["end_to_end"]["mean_cosine"] > stages["naive"]["end_to_end"]["mean_cosine"] + 0.3
    with pytest.raises(ConversionError, match="calibration data"):
        hf_norms.convert_model(model, "dyt")
    with pytest.raises(ConversionError, match="tokenizer"):
        hf_norms.convert_model(model, "dyt", texts)
    with pytest.raises(ConversionError, match="already uses norm_type='dyt'"):
        hf_norms.convert_model(converted, "dtn")


def test_loading_a_layernorm_checkpoint_keeps_its_function_unless_asked_otherwise(minilm_dir, news_sentences, caplog):
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    inputs = tokenizer(news_sentences, padding=True, return_tensors="pt")
    stock = outputs(BertModel.from_pretrained(minilm_dir), inputs)
    for norm_type in EXACT_TYPES:
        loaded = hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type=norm_type)
        assert (outputs(loaded, inputs) - stock).abs().max().item() == 0, norm_type
        assert all(getattr(loaded.config, k) == v for k, v in function_preserving_options(norm_type).items())
    explicit = hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type="dtn", dtn_gate_init=0.5)
    assert explicit.config.dtn_gate_init == 0.5 and (outputs(explicit, inputs) - stock).abs().max().item() > 1e-2
    batchnorm = hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type="sepnorm", sepnorm_prefix_norm="batchnorm")
    assert isinstance(batchnorm.embeddings.LayerNorm.prefix_norm, torch.nn.BatchNorm1d)
    assert torch.equal(batchnorm.embeddings.LayerNorm.prefix_norm.weight, batchnorm.embeddings.LayerNorm.weight)
    with caplog.at_level(logging.WARNING):
        hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type="dyt")
    assert "hf_norms.convert_model" in caplog.text
