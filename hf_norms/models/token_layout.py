"""Where each token of a sequence sits: prefix tokens, then a grid of patches (or one row of text), and padding.

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from dataclasses import dataclass

import torch


@dataclass
class TokenLayout:
    """Where each token of a `[batch, seq_len, hidden]` sequence sits.

    The first `num_prefix_tokens` tokens ([CLS], DeiT's distillation token) carry no position on the grid. The
    remaining tokens fill a `grid_size = (rows, cols)` grid in row-major order: the patch grid of an image, or a
    single row for text. `padding_mask` (`[batch, seq_len]`, 1 for real tokens, 0 for padding) marks tokens that must
    not contribute to statistics shared between tokens.
    """

    num_prefix_tokens: int
    grid_size: tuple[int, int]
    padding_mask: torch.Tensor | None = None

    def fits(self, hidden_states: torch.Tensor) -> bool:
        """Whether `hidden_states` `[batch, seq_len, hidden]` has this layout's length (and padding mask's batch)."""
        rows, cols = self.grid_size
        mask = self.padding_mask
        batch_fits = mask is None or mask.shape[0] == hidden_states.shape[0]
        return self.num_prefix_tokens + rows * cols == hidden_states.shape[1] and batch_fits

    def check_sequence(self, hidden_states: torch.Tensor) -> None:
        rows, cols = self.grid_size
        seq_len = hidden_states.shape[1]
        if self.num_prefix_tokens + rows * cols != seq_len:
            raise ValueError(
                f"The sequence has {seq_len} tokens, but the token layout expects {self.num_prefix_tokens} prefix "
                f"tokens followed by a {rows}x{cols} grid ({self.num_prefix_tokens + rows * cols} tokens). DTN "
                "needs every non-prefix token on the patch grid: pass whole images, without dropping or adding tokens."
            )


def layout_of(norm, hidden_states: torch.Tensor, layout: TokenLayout | None) -> TokenLayout | None:
    """`layout` when given, else that of the model call running now (`norm.norm_context`, set when hf-norms placed
    the norm in a model; `norm_placement.NormContext`), else None."""
    if layout is not None:
        return layout
    context = getattr(norm, "norm_context", None)
    return context.layout_for(hidden_states) if context is not None else None
