"""RoBERTa, XLM-RoBERTa and CLIP's vision tower used as their users would (issue 46, "try it as its users would"):
what a careless user's checkpoint does, each refused in one line naming what to do."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
