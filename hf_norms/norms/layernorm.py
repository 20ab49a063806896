"""LayerNorm with the call signature every hf-norms norm shares, `norm(hidden_states, layout)`.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn

from .token_layout import TokenLayout


class LayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` that accepts (and ignores) a `TokenLayout`, so all norms share one call signature.

    `y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias` over the last dimension; bit-identical to `nn.LayerNorm`.
    """

    @classmethod
    def from_config(cls, config, hidden_size: int, num_prefix_tokens: int, one_dimensional: bool) -> LayerNorm:
        return cls(hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        return super().forward(hidden_states)
