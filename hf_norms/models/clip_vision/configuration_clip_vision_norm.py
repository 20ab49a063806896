"""Configuration of CLIP vision towers with a selectable normalization layer (`model_type="clip_vision_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import CLIPVisionConfig

from ..norm_options import NormOptions


@strict
class CLIPVisionNormConfig(NormOptions, CLIPVisionConfig):
    r"""[`CLIPVisionConfig`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, ...).

    CLIP's vision tower is a pre-LN ViT with a norm before the encoder (`pre_layrnorm`, which counts as the first
    layer's), `layer_norm1`, `layer_norm2` in each layer, and `post_layernorm` on the pooled [CLS] state only.

    ```python
    >>> from hf_norms.models.clip_vision.modeling_clip_vision_norm import CLIPVisionNormConfig, CLIPVisionNormModel
    >>> model = CLIPVisionNormModel(CLIPVisionNormConfig(norm_type="dyt", hidden_size=192, num_attention_heads=3))
    ```"""

    model_type = "clip_vision_norm"
    num_prefix_tokens = 1  # [CLS]


__all__ = ["CLIPVisionNormConfig"]
