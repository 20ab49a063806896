"""Dynamic Tanh (DyT): `y = weight * tanh(alpha * x) + bias`, the normalization-free layer of Zhu et al.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import initialization as init

from .runtime import is_traced
from .token_layout import TokenLayout


class DynamicTanh(nn.Module):
    """Dynamic Tanh (DyT), Zhu et al., "Transformers without Normalization", CVPR 2025 (arXiv 2503.10622).

    `y = weight * tanh(alpha * x) + bias`, with no statistics and no eps. `alpha` is one learnable scalar (`[1]`) or,
    with `per_channel=True`, one per channel (`[hidden]`); `weight` and `bias` are `[hidden]`.

    Input and output: `[batch, seq_len, hidden]`.
    """

    def __init__(self, hidden_size: int, alpha_init: float = 0.5, per_channel: bool = False):
        super().__init__()
        self.alpha_init = alpha_init
        self.alpha = nn.Parameter(torch.full((hidden_size if per_channel else 1,), alpha_init))
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.fast_path = True  # False (tests, benchmarks): the paper's tanh formula as written

    @classmethod
    def from_config(cls, config, hidden_size: int, num_prefix_tokens: int, one_dimensional: bool) -> DynamicTanh:
        return cls(hidden_size, alpha_init=config.dyt_alpha_init, per_channel=config.dyt_per_channel_alpha)

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        """Evaluated as `(2 * weight) * sigmoid(2 * alpha * x) + (bias - weight)`, the same function through
        `tanh(z) = 2 * sigmoid(2z) - 1`: CPU `sigmoid` is much faster than `tanh` (docs/speed.md), and without autograd the three
        passes run in place in one buffer (eagerly only: tracers get the functional form). Half-precision inputs are
        computed in float32 and rounded once; under autocast too (its float32 result is rounded to the input's dtype).
        With `fast_path` False, the paper's formula as written."""
        if not self.fast_path:
            return self.weight * torch.tanh(self.alpha * hidden_states) + self.bias
        compute_dtype = torch.promote_types(hidden_states.dtype, torch.float32)
        scaled = hidden_states.to(compute_dtype) * (2 * self.alpha).to(compute_dtype)
        weight = self.weight.to(compute_dtype)
        offset = self.bias.to(compute_dtype) - weight
        if torch.is_grad_enabled() or is_traced():
            out = torch.addcmul(offset, torch.sigmoid(scaled), 2 * weight)
        else:
            out = torch.addcmul(offset, scaled.sigmoid_(), 2 * weight, out=scaled)
        return out.to(hidden_states.dtype)

    def learned_state(self) -> dict[str, float]:
        """What training logs of this norm: alpha (its mean over channels when per channel)."""
        return {"alpha": self.alpha.detach().float().mean().item()}

    def init_parameters(self) -> None:
        init.constant_(self.alpha, self.alpha_init)
        init.ones_(self.weight)
        init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha_init={self.alpha_init}, per_channel={self.alpha.numel() > 1}"
