"""The hf-norms models are the stock models with their norms replaced (`hf_norms/models/norm_placement.py`): the stock
classes' `forward` runs, and the norms get what they need from the call (token layout, LaPE's positions)."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from conftest import tiny_config
from huggingface_hub.errors import StrictDataclassClassValidationError

import hf_norms
from hf_norms.models.family_registry import FAMILIES, MODEL_CLASSES


@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_every_class_is_its_stock_class_with_the_stock_forward(name):
    model_class = MODEL_CLASSES[name]
    stock_class = getattr(transformers, name.replace("Norm", "", 1))
    assert issubclass(model_class, stock_class)
    assert model_class.forward is stock_class.forward
    assert model_class.__init__ is stock_class.__init__


def sepnorm_decoder():
    config = tiny_config("bert", "sepnorm", is_decoder=True, sepnorm_prefix_norm="layernorm")
    torch.manual_seed(0)
    model = hf_norms.BertNormLMHeadModel(config).eval()
    with torch.no_grad():  # a prefix norm unlike the token norm, so that taking a token for [CLS] shows
        for module in model.modules():
            if isinstance(module, hf_norms.SeparateNorm):
                module.prefix_norm.weight.uniform_(0.5, 2.0)
    return model


def test_sepnorm_in_the_lm_head_knows_which_tokens_hold_cls():
    """`logits_to_keep` and cached decoding give the full pass's logits: the head's SepNorm treats as [CLS] only the
    sequence's first token, not the first of the tokens it is given."""
    model = sepnorm_decoder()
    ids = torch.randint(5, 90, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(input_ids=ids).logits
        last = model(input_ids=ids, logits_to_keep=3).logits
        prompt = model(input_ids=ids[:, :8], use_cache=True)
        step = model(input_ids=ids[:, 8:], past_key_values=prompt.past_key_values).logits
    assert (last - full[:, -3:]).abs().max().item() < 1e-6
    assert (step[:, -1] - full[:, -1]).abs().max().item() < 1e-6


@pytest.mark.parametrize(("family", "norm_type"), [("bert", "dtn"), ("vit", "lape"), ("dinov2", "sepnorm")])
def test_a_deep_copy_computes_what_the_model_computes(family, norm_type):
    """A copy's hooks fill the context its norms read (peft, EMA and distillation copy models)."""
    config = tiny_config(family, norm_type)
    torch.manual_seed(0)
    model = getattr(hf_norms, {"bert": "BertNormModel", "vit": "ViTNormModel", "dinov2": "Dinov2NormModel"}[family])(
        config
    ).eval()
    copied = copy.deepcopy(model)
    if family == "bert":
        mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
        inputs = {"input_ids": torch.randint(5, 90, (2, 8)), "attention_mask": mask}
    else:
        inputs = {"pixel_values": torch.randn(2, 3, config.image_size, config.image_size)}
    with torch.no_grad():
        assert torch.equal(model(**inputs).last_hidden_state, copied(**inputs).last_hidden_state)


def test_configs_accept_what_the_stock_configs_accept():
    """transformers' own model tests build configs the stock configs accept: any positive eps, and heads that do not
    divide the hidden size (which the stock attention refuses when the model is built)."""
    config = hf_norms.BertNormConfig(layer_norm_eps=1.0, hidden_size=32)  # 12 heads by default
    assert config.layer_norm_eps == 1.0
    with pytest.raises(ValueError, match="multiple of the number of attention heads"):
        hf_norms.BertNormModel(config)
    with pytest.raises((ValueError, StrictDataclassClassValidationError), match="layer_norm_eps must be positive"):
        hf_norms.BertNormConfig(layer_norm_eps=0.0)


def test_lape_refuses_reentrant_checkpointing_and_trains_without_it():
    """Reentrant checkpointing would silently leave LaPE's position norms untrained: one line says what to pass."""
    model = hf_norms.ViTNormModel(tiny_config("vit", "lape"), add_pooling_layer=False).train()
    with pytest.raises(ValueError, match="use_reentrant': False"):  # the old name, and the new one where it exists
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    if hasattr(model, "activation_checkpointing_enable"):
        with pytest.raises(ValueError, match="use_reentrant': False"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    pixels = torch.randn(2, 3, model.config.image_size, model.config.image_size)
    model(pixel_values=pixels).last_hidden_state.pow(2).mean().backward()
    assert all(layer.pe_norm.weight.grad is not None for layer in model.encoder_layers)


@pytest.mark.parametrize("norm_type", ["dtn", "sepnorm"])
def test_token_aware_norms_refuse_feed_forward_chunking(norm_type):
    """BERT's feed-forward chunks would run the norm after it on chunks of tokens."""
    with pytest.raises((ValueError, StrictDataclassClassValidationError), match="chunk_size_feed_forward"):
        tiny_config("bert", norm_type, chunk_size_feed_forward=2)
    assert tiny_config("bert", "dyt", chunk_size_feed_forward=2).chunk_size_feed_forward == 2


CAUSAL_LM_CLASSES = [
    name for name in sorted(MODEL_CLASSES) if MODEL_CLASSES[name]._auto_class == "AutoModelForCausalLM"
]


@pytest.mark.parametrize("name", CAUSAL_LM_CLASSES)
def test_causal_lm_heads_inherit_generation_mixin_and_generate_alike_with_and_without_the_cache(name):
    """transformers 5 asks a generating class to name `GenerationMixin` among its own bases (its generation tests
    check `"GenerationMixin" in str(model_class.__bases__)`, as the stock heads do); greedy decoding of a tiny random
    model gives the same tokens with the KV cache as without it, SepNorm's [CLS] included."""
    model_class = MODEL_CLASSES[name]
    assert "GenerationMixin" in str(model_class.__bases__)
    family = next(spec.name for spec in FAMILIES.values() if model_class in spec.heads)
    config = tiny_config(family, "sepnorm", is_decoder=True, sepnorm_prefix_norm="layernorm", pad_token_id=0)
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, hf_norms.SeparateNorm):
                module.prefix_norm.weight.uniform_(0.5, 2.0)
    prompt = torch.randint(5, 90, (2, 5), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 6, "do_sample": False, "attention_mask": torch.ones_like(prompt)}
    cached = model.generate(prompt, use_cache=True, **settings)
    uncached = model.generate(prompt, use_cache=False, **settings)
    assert cached.shape == (2, 11)
    assert torch.equal(cached, uncached)
