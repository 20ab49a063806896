"""CLIP's vision tower with a selectable normalization layer: the stock CLIP vision classes with their LayerNorms
replaced.

CLIP's vision tower is pre-LN: the embeddings ([CLS] `class_embedding`, the `patch_embedding` convolution, the
`position_embedding` table) go through `pre_layrnorm` (counted as the first layer's norm), then each layer computes
`x = x + attn(layer_norm1(x)); x = x + mlp(layer_norm2(x))`; `post_layernorm` normalises the pooled [CLS] state only
(a single token, so it stays a per-token norm: DTN keeps a LayerNorm there), and `last_hidden_state` is not normed.
Each class is the stock class with `NormPreTrainedMixin` in front (see `modeling_vit_norm`).

What converts exactly from a LayerNorm checkpoint: SepNorm, DTN and LaPE (as for ViT), with `layernorm` the stock
model itself. RMSNorm does not: the residual stream starts at `pre_layrnorm`'s output `gamma * z + beta`, which is not
mean-free, and centring the stream would change what `pre_layrnorm` outputs; RMSNorm is calibrated, like DyT and Derf.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers.models.clip.modeling_clip import (
    CLIPPreTrainedModel,
    CLIPVisionModel,
    CLIPVisionModelWithProjection,
)

from ..modeling_norm_utils import NormPreTrainedMixin, register_stock_key_renames
from ..norm_placement import FamilyLayout
from .configuration_clip_vision_norm import CLIPVisionNormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_clip_vision_norm.CLIPVisionNormConfig",
    "AutoModel": "modeling_clip_vision_norm.CLIPVisionNormModel",
}


class CLIPVisionNormPreTrainedModel(NormPreTrainedMixin, CLIPPreTrainedModel):
    config_class = CLIPVisionNormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = FamilyLayout(
        layers="encoder.layers",
        attention_input="self_attn",
        text=False,
        per_token_parts=("post_layernorm",),
        first_layer_norms=("pre_layrnorm",),
        pooled_norms=("post_layernorm",),
    )


class CLIPVisionNormModel(CLIPVisionNormPreTrainedModel, CLIPVisionModel):
    """[`CLIPVisionModel`] with `config.norm_type` norms; the pooler output is the final [CLS] state, normed."""

    _auto_class = "AutoModel"


class CLIPVisionNormModelWithProjection(CLIPVisionNormPreTrainedModel, CLIPVisionModelWithProjection):
    """[`CLIPVisionModelWithProjection`] with `config.norm_type` norms: `image_embeds` is the normed final [CLS]
    state through `visual_projection`. transformers maps no Auto class to it, nor does hf-norms."""

    _auto_class = None


# by class name: the stock mapping strips `vision_model.` (a WithProjection or CLIPModel checkpoint loads into the
# bare model), which must not reach the WithProjection head, whose weights sit under `vision_model.`
register_stock_key_renames("CLIPVisionNormModel", "CLIPVisionModel")

__all__ = [
    "CLIPVisionNormModel",
    "CLIPVisionNormModelWithProjection",
    "CLIPVisionNormPreTrainedModel",
]
