"""RMSNorm: each token divided by its root mean square, then a per-channel affine (Zhang and Sennrich).

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import initialization as init

from .token_layout import TokenLayout


class RMSNorm(nn.Module):
    """Root Mean Square Layer Normalization, Zhang and Sennrich, NeurIPS 2019 (arXiv 1910.07467).

    `y = weight * x / sqrt(mean(x^2) + eps) + bias`, the mean over the channels of each token: LayerNorm without its
    re-centring. `weight` and `bias` are `[hidden]`; `bias` is optional (`bias=False`: none). On an input whose channel
    mean is 0 it equals LayerNorm with the same affine and eps, which is how a pre-LN transformer converts to it
    exactly (`conversion.residual_stream`). Half-precision inputs are computed in float32 and rounded once.

    Input and output: `[batch, seq_len, hidden]`.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size)) if bias else None

    @classmethod
    def from_config(cls, config, hidden_size: int, num_prefix_tokens: int, one_dimensional: bool) -> RMSNorm:
        return cls(hidden_size, eps=config.layer_norm_eps, bias=config.rmsnorm_bias)

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        x = hidden_states.to(torch.promote_types(hidden_states.dtype, torch.float32))
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.to(hidden_states.dtype)

    def init_parameters(self) -> None:
        init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, bias={self.bias is not None}"
