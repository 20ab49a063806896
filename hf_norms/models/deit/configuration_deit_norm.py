"""Configuration of DeiT models with a selectable normalization layer (`model_type="deit_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import DeiTConfig

from ..norm_options import NormOptions


@strict
class DeiTNormConfig(NormOptions, DeiTConfig):
    r"""[`DeiTConfig`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, `dtn_gate_init`, ...)."""

    model_type = "deit_norm"
    num_prefix_tokens = 2  # [CLS] and the distillation token


__all__ = ["DeiTNormConfig"]
