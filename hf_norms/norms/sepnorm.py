"""SepNorm: one norm for the prefix tokens ([CLS], DeiT's distillation token), another for the rest (Chen et al.).

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .runtime import is_traced
from .token_layout import TokenLayout, layout_of


class PrefixBatchNorm(nn.BatchNorm1d):
    """SepNorm's BatchNorm over the batch and the prefix tokens (input `[batch, hidden, prefix]`), whose running
    statistics stay as they are while its parameters are frozen.

    Frozen parameters (`requires_grad=False`) mean a frozen norm: in training it still normalises with the batch
    statistics, but leaves `running_mean` and `running_var` alone. peft freezes every base-model parameter under LoRA
    and saves only what it trains (the adapter, `modules_to_save`), so statistics updated underneath it would be lost
    on reload: the reloaded model would differ from the trained one. With this norm in `modules_to_save`, peft trains
    and saves a copy whose parameters are not frozen, and that copy updates its statistics as any BatchNorm does.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.training and self.weight is not None and not self.weight.requires_grad:
            return F.batch_norm(hidden_states, None, None, self.weight, self.bias, True, 0.0, self.eps)
        return super().forward(hidden_states)


class SeparateNorm(nn.Module):
    """SepNorm, Chen et al., "On Separate Normalization in Self-supervised Transformers", NeurIPS 2023 (arXiv 2309.12931).

    The first `p` tokens of each sequence (`layout.num_prefix_tokens`, else `num_prefix_tokens`: [CLS]; [CLS] and
    distillation for DeiT) are normalised by `prefix_norm`, the others by a LayerNorm whose affine parameters are this
    module's `weight` and `bias`:

        y[:, :p] = prefix_norm(x[:, :p]),    y[:, p:] = (x[:, p:] - E[x]) / sqrt(Var[x] + eps) * weight + bias

    `prefix_norm` is a LayerNorm (exact conversion from a LayerNorm checkpoint when both copy its parameters) or a
    `PrefixBatchNorm` over the batch and the prefix tokens (the official default; SyncBatchNorm under DDP), whose running
    statistics stay the base model's while its parameters are frozen (peft's LoRA).
    A sequence's first tokens are the first `p` of each row unless the layout marks them elsewhere
    (`layout.prefix_mask`: text padded on the left, rows packed with several sequences), found from the attention mask
    and the position ids. Input and output: `[batch, seq_len, hidden]`.
    """

    def __init__(
        self,
        hidden_size: int,
        num_prefix_tokens: int,
        eps: float = 1e-5,
        prefix_norm: str = "batchnorm",
    ):
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.prefix_norm = (
            nn.LayerNorm(hidden_size, eps=eps) if prefix_norm == "layernorm" else PrefixBatchNorm(hidden_size)
        )
        # Known from the config, not from the module's type: wrappers (peft's `modules_to_save`) hide the type.
        self.prefix_over_batch = prefix_norm == "batchnorm"
        self.fast_path = True  # False (tests, benchmarks) or tracing: normalise both parts and concatenate

    @classmethod
    def from_config(cls, config, hidden_size: int, num_prefix_tokens: int, one_dimensional: bool) -> SeparateNorm:
        return cls(hidden_size, num_prefix_tokens, eps=config.layer_norm_eps, prefix_norm=config.sepnorm_prefix_norm)

    def fold_blocker(self) -> str | None:
        """Why this norm's affine cannot fold into the next Linear layers (None: it can): the prefix norm must be a
        LayerNorm with the same affine as the token norm."""
        prefix = self.prefix_norm
        if not isinstance(prefix, nn.LayerNorm):
            return "SepNorm's prefix norm is a BatchNorm with its own affine"
        if not (torch.equal(prefix.weight, self.weight) and torch.equal(prefix.bias, self.bias)):
            return "SepNorm's prefix norm has a different affine from its token norm"
        return None

    def reset_affine(self) -> None:
        """Identity affine for both parts, once it is folded into the next Linear layers."""
        for norm in (self, self.prefix_norm):
            norm.weight.fill_(1.0)
            norm.bias.zero_()

    def init_parameters(self) -> None:
        """The prefix norm starts as a copy of the token norm's affine (the loaded LayerNorm's, when converting)."""
        init.ones_(self.weight)
        init.zeros_(self.bias)
        init.copy_(self.prefix_norm.weight, self.weight)
        init.copy_(self.prefix_norm.bias, self.bias)

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        layout = layout_of(self, hidden_states, layout)
        if layout is not None and layout.prefix_mask is not None:
            return self.separate_by_mask(hidden_states, layout)
        prefix = layout.num_prefix_tokens if layout is not None else self.num_prefix_tokens
        if hidden_states.shape[1] < prefix:
            raise ValueError(
                f"SepNorm separates {prefix} prefix token(s) from the rest, but the sequence has only "
                f"{hidden_states.shape[1]} token(s): give it at least {prefix}."
            )
        prefix_states = hidden_states[:, :prefix]
        if self.prefix_over_batch:  # BatchNorm1d takes [B, C, prefix]
            prefix_out = self.prefix_norm(prefix_states.transpose(1, 2)).transpose(1, 2)
        else:
            prefix_out = self.prefix_norm(prefix_states)
        if not self.fast_path or is_traced():
            tokens = F.layer_norm(hidden_states[:, prefix:], self.weight.shape, self.weight, self.bias, self.eps)
            return torch.cat([prefix_out, tokens], dim=1)
        # Eagerly, one output buffer: every token through the token norm, then the few prefix rows overwritten in place
        # (layer_norm's backward does not need its output), instead of normalising two slices and concatenating.
        out = F.layer_norm(hidden_states, self.weight.shape, self.weight, self.bias, self.eps)
        out[:, :prefix] = prefix_out
        return out

    def separate_by_mask(self, hidden_states: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
        """SepNorm with the prefix tokens wherever `layout.prefix_mask` (`[batch, seq_len]` bool) marks them: each
        sequence's first tokens in rows padded on the left or packed with several sequences.

        The prefix norm sees every marked token: a BatchNorm's statistics are those of the batch's prefix tokens, as
        over `[batch, hidden, prefix]` when each row holds one sequence. Traced, shapes cannot depend on values: a
        prefix norm that normalises each token on its own (a LayerNorm, a BatchNorm with its running statistics) runs
        on every token and `torch.where` picks its rows; a BatchNorm in training takes each row's `num_prefix_tokens`
        marked tokens, which packed rows (a number of sequences per row known only from the values) do not have.
        """
        prefix_mask, hidden = layout.prefix_mask, hidden_states.shape[-1]
        out = F.layer_norm(hidden_states, self.weight.shape, self.weight, self.bias, self.eps)
        if not is_traced():
            prefix_out = self.prefix_norm(hidden_states[prefix_mask])  # BatchNorm1d and LayerNorm take [tokens, hidden]
            return out.masked_scatter(prefix_mask.unsqueeze(-1), prefix_out)
        if not (self.prefix_over_batch and self.training):
            prefix_out = self.prefix_norm(hidden_states.reshape(-1, hidden)).view_as(hidden_states)
            return torch.where(prefix_mask.unsqueeze(-1), prefix_out, out)
        if layout.packed:
            raise ValueError(
                "SepNorm with a BatchNorm prefix norm cannot be traced in training on packed rows (the number of "
                "sequences in a row decides its shapes): train it eagerly, pad the batch instead of packing it, or use "
                "sepnorm_prefix_norm='layernorm'."
            )
        count = layout.num_prefix_tokens
        index = prefix_mask.long().argsort(dim=1, descending=True, stable=True)[:, :count, None].expand(-1, -1, hidden)
        prefix_states = hidden_states.gather(1, index)  # [batch, prefix, hidden]: each row's marked tokens, in order
        prefix_out = self.prefix_norm(prefix_states.transpose(1, 2)).transpose(1, 2)
        return out.scatter(1, index, prefix_out)
