"""Dynamic erf (Derf): `y = weight * erf(alpha * x + shift) + bias`, the normalization-free layer of Chen et al.

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


class DynamicErf(nn.Module):
    """Dynamic erf (Derf), Chen, Lu, Zhu, Sun, Liu, "Stronger Normalization-Free Transformers", CVPR 2026
    (arXiv 2512.10938).

    `y = weight * erf(alpha * x + shift) + bias`, with no statistics and no eps. As in the official code
    (zlab-princeton/Derf, `ViT/dynamic_erf.py`): `alpha` is one learnable scalar (`[1]`, init 0.5), `shift` one
    learnable scalar (`[1]`, init 0.0), `weight` `[hidden]` ones and `bias` `[hidden]` zeros. With `per_channel=True`
    (an hf-norms extension, used by the converter, which fits each channel on its own) both `alpha` and `shift` are
    `[hidden]`: a per-channel scale with a scalar shift could not centre each channel's saturation on its own data.

    Input and output: `[batch, seq_len, hidden]`.
    """

    def __init__(self, hidden_size: int, alpha_init: float = 0.5, shift_init: float = 0.0, per_channel: bool = False):
        super().__init__()
        self.alpha_init = alpha_init
        self.shift_init = shift_init
        size = hidden_size if per_channel else 1
        self.alpha = nn.Parameter(torch.full((size,), alpha_init))
        self.shift = nn.Parameter(torch.full((size,), shift_init))
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.fast_path = True  # False (tests, benchmarks): the paper's formula as written, in the input's dtype

    @classmethod
    def from_config(cls, config, hidden_size: int, num_prefix_tokens: int, one_dimensional: bool) -> DynamicErf:
        return cls(hidden_size, alpha_init=config.derf_alpha_init, shift_init=config.derf_shift_init,
                   per_channel=config.derf_per_channel)  # fmt: skip

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        """Evaluated as `addcmul(bias, erf(addcmul(shift, x, alpha)), weight)`: two fused multiply-adds around `erf`;
        without autograd, eagerly, all three passes run in place in one buffer (docs/speed.md measures the gain).
        Tracers and autograd get the
        same functional form. Half-precision inputs are computed in float32 and rounded once; under autocast too.
        With `fast_path` False, the paper's formula as written."""
        if not self.fast_path:
            return self.weight * torch.erf(self.alpha * hidden_states + self.shift) + self.bias
        compute_dtype = torch.promote_types(hidden_states.dtype, torch.float32)
        x = hidden_states.to(compute_dtype)
        alpha, shift = self.alpha.to(compute_dtype), self.shift.to(compute_dtype)
        weight, bias = self.weight.to(compute_dtype), self.bias.to(compute_dtype)
        if torch.is_grad_enabled() or is_traced():
            out = torch.addcmul(bias, torch.erf(torch.addcmul(shift, x, alpha)), weight)
        else:
            out = torch.addcmul(shift, x, alpha).erf_()
            out = torch.addcmul(bias, out, weight, out=out)
        return out.to(hidden_states.dtype)

    def learned_state(self) -> dict[str, float]:
        """What training logs of this norm: alpha and shift (their means over channels when per channel)."""
        return {"alpha": self.alpha.detach().float().mean().item(), "shift": self.shift.detach().float().mean().item()}

    def init_parameters(self) -> None:
        init.constant_(self.alpha, self.alpha_init)
        init.constant_(self.shift, self.shift_init)
        init.ones_(self.weight)
        init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (
            f"{self.weight.shape[0]}, alpha_init={self.alpha_init}, shift_init={self.shift_init}, "
            f"per_channel={self.alpha.numel() > 1}"
        )
