"""RoBERTa, XLM-RoBERTa and CLIP's vision tower used as their users would (issue 46, "try it as its users would"):
what a careless user's checkpoint does, each refused in one line naming what to do."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import transformers
from text_families import XLM_ROBERTA

import hf_norms
from hf_norms.models import modeling_clip_vision_norm

CLIP_VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=30,
                   patch_size=2, projection_dim=16)  # fmt: skip
CLIP_TEXT = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, vocab_size=99,
                 bos_token_id=0, eos_token_id=2, pad_token_id=1)  # fmt: skip


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def test_the_clip_projection_head_is_public_as_the_docs_name_it():
    """docs/models.md names `CLIPVisionNormModelWithProjection` among the model classes; it has no Auto class, and
    `from hf_norms import CLIPVisionNormModelWithProjection` failed with AttributeError."""
    assert hf_norms.CLIPVisionNormModelWithProjection is modeling_clip_vision_norm.CLIPVisionNormModelWithProjection
    assert "CLIPVisionNormModelWithProjection" in hf_norms.__all__


def test_an_hf_norms_checkpoint_under_the_stock_model_type_is_refused_in_one_line(tmp_path):
    """An XLM-R DTN checkpoint whose config.json says `model_type: "xlm-roberta"` (the stock type) instead of
    `xlm_roberta_norm`: the Auto class loaded the stock XLMRobertaForSequenceClassification, dropping DTN's weights,
    even when asked for norm_type="dtn" (the config took the keyword). It is refused in one line naming the fix."""
    folder = tmp_path / "xlmr-dtn"
    torch.manual_seed(0)
    config = hf_norms.XLMRobertaNormConfig.from_stock_config(XLM_ROBERTA.stock_config(), norm_type="dtn")
    hf_norms.XLMRobertaNormForSequenceClassification(config).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, "model_type": "xlm-roberta"}))
    before = tree_digest(folder)
    expected = (
        f"{folder}: its config.json holds norm_type='dtn' under the stock model_type 'xlm-roberta': it is an "
        "hf-norms checkpoint; set its model_type to 'xlm_roberta_norm' to load it."
    )
    for options in ({}, {"norm_type": "dtn"}):
        with pytest.raises(ValueError) as error:
            transformers.AutoModelForSequenceClassification.from_pretrained(folder, **options)
        assert str(error.value) == expected
    assert tree_digest(folder) == before
