"""Configuration of ViT models with a selectable normalization layer (`model_type="vit_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import ViTConfig

from ..norm_options import NormOptions


@strict
class ViTNormConfig(NormOptions, ViTConfig):
    r"""[`ViTConfig`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, `dtn_gate_init`, ...).

    ```python
    >>> from hf_norms import ViTNormConfig, ViTNormModel
    >>> model = ViTNormModel(ViTNormConfig(norm_type="dyt", hidden_size=192, num_attention_heads=3))
    ```"""

    model_type = "vit_norm"
    num_prefix_tokens = 1  # [CLS]


__all__ = ["ViTNormConfig"]
