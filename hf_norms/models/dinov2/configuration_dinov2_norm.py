"""Configuration of DINOv2 models with a selectable normalization layer (`model_type="dinov2_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import Dinov2Config

from ..norm_options import NormOptions


@strict
class Dinov2NormConfig(NormOptions, Dinov2Config):
    r"""[`Dinov2Config`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, `dtn_gate_init`, ...).

    DINOv2 is a pre-LN ViT with LayerScale on both branches, patch 14, and a position grid interpolated to every
    input size; the norms replace `norm1`, `norm2` of each layer and the final `layernorm`.
    """

    model_type = "dinov2_norm"
    num_prefix_tokens = 1  # [CLS]


__all__ = ["Dinov2NormConfig"]
