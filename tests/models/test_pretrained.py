"""The real pretrained MiniLM BERT and DINOv2-S ViT load into every norm_type; the exact variants equal the stock model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, BertModel, Dinov2Model, ViTModel

import hf_norms

EXACT_OPTIONS = {
    "layernorm": {},
    "sepnorm": {"sepnorm_prefix_norm": "layernorm"},
    "dtn": {"dtn_gate_init": 1.0},
    "lape": {"lape_keep_input_pe": True},
}


def load_variant(model_class, stock, path, norm_type: str, **options):
    model, info = model_class.from_pretrained(path, norm_type=norm_type, output_loading_info=True, **options)
    added = set(model.state_dict()) - set(stock.state_dict())
    assert set(info["missing_keys"]) == added, f"missing {sorted(info['missing_keys'])[:5]}, added {sorted(added)[:5]}"
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    if norm_type == "layernorm":
        assert not added
    return model.eval()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return BertModel.from_pretrained(minilm_dir).eval()


@pytest.fixture(scope="module")
def text_batch(minilm_dir, news_sentences):
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    return tokenizer(news_sentences, padding=True, truncation=True, max_length=64, return_tensors="pt")


@pytest.fixture(scope="module")
def dinov2_as_vit(dinov2_vit_dir):
    return ViTModel.from_pretrained(dinov2_vit_dir, add_pooling_layer=False).eval()


@pytest.fixture(scope="module")
def dinov2(dinov2_dir):
    return Dinov2Model.from_pretrained(dinov2_dir).eval()


@pytest.mark.parametrize("norm_type", sorted(hf_norms.NORM_TYPES))
def test_minilm_loads_into_every_norm_type(minilm, minilm_dir, text_batch, norm_type):
    model = load_variant(hf_norms.BertNormModel, minilm, minilm_dir, norm_type, **EXACT_OPTIONS.get(norm_type, {}))
    with torch.no_grad():
        ours = model(**text_batch).last_hidden_state
        stock = minilm(**text_batch).last_hidden_state
    real = text_batch["attention_mask"].bool()
    diff = (ours - stock)[real].abs().max().item()
    if norm_type in EXACT_OPTIONS:
        assert diff <= 1e-5, f"{norm_type}: max abs diff {diff}"
    else:  # DyT cannot reproduce LayerNorm: it loads and runs, and the conversion issue calibrates it
        assert torch.isfinite(ours).all()


@pytest.mark.parametrize("norm_type", sorted(hf_norms.NORM_TYPES))
@pytest.mark.parametrize("family", ["dinov2", "vit"])
def test_dinov2_loads_into_every_norm_type(family, request, photo_pixels, norm_type):
    """The real DINOv2-S weights as the `Dinov2Model` users have (LayerScale, 37x37 grid interpolated to 224 px), and as
    a plain ViT."""
    folder, stock_model, model_class, options = {
        "dinov2": ("dinov2_dir", "dinov2", hf_norms.Dinov2NormModel, {}),
        "vit": ("dinov2_vit_dir", "dinov2_as_vit", hf_norms.ViTNormModel, {"add_pooling_layer": False}),
    }[family]
    stock_model = request.getfixturevalue(stock_model)
    folder = request.getfixturevalue(folder)
    model = load_variant(model_class, stock_model, folder, norm_type, **options, **EXACT_OPTIONS.get(norm_type, {}))
    with torch.no_grad():
        ours = model(pixel_values=photo_pixels).last_hidden_state
        stock = stock_model(pixel_values=photo_pixels).last_hidden_state
    diff = (ours - stock).abs().max().item()
    if norm_type in EXACT_OPTIONS:
        assert diff <= 1e-5, f"{norm_type}: max abs diff {diff}"
    else:
        assert torch.isfinite(ours).all()


def test_dtn_bert_outputs_do_not_change_when_padded(minilm_dir, news_sentences):
    """Padding in a batch must not enter DTN's inter-token statistics (gates at the paper's 0.5, so they matter)."""
    model = hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type="dtn", dtn_gate_init=0.5).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    short, long = "Shares rose sharply.", news_sentences[0]
    alone = tokenizer([short], return_tensors="pt")
    batch = tokenizer([short, long], padding=True, return_tensors="pt")
    assert batch["attention_mask"][0].sum() < batch["attention_mask"].shape[1]  # really padded
    with torch.no_grad():
        out_alone = model(**alone).last_hidden_state[0]
        out_batch = model(**batch).last_hidden_state[0, : out_alone.shape[0]]
        stock_like = hf_norms.BertNormModel.from_pretrained(minilm_dir).eval()(**alone).last_hidden_state[0]
    assert (out_alone - out_batch).abs().max().item() < 1e-5
    assert (out_alone - stock_like).abs().max().item() > 1e-3  # DTN at gate 0.5 is not LayerNorm


def test_dtn_vit_rejects_a_sequence_that_is_not_a_patch_grid():
    layer = hf_norms.DynamicTokenNorm(48, num_heads=4)
    layout = hf_norms.TokenLayout(num_prefix_tokens=1, grid_size=(4, 4))
    with pytest.raises(ValueError, match=r"17 tokens.*has 15 tokens|has 15 tokens.*4x4"):
        layer(torch.randn(2, 15, 48), layout)
