"""Where each token of a sequence sits: prefix tokens, then a grid of patches (or one row of text), and padding.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from dataclasses import dataclass

import torch


@dataclass
class TokenLayout:
    """Where each token of a `[batch, seq_len, hidden]` sequence sits.

    The first `num_prefix_tokens` tokens ([CLS], DeiT's distillation token) carry no position on the grid. The
    remaining tokens fill a `grid_size = (rows, cols)` grid in row-major order: the patch grid of an image, or a
    single row for text. `padding_mask` (`[batch, seq_len]`, 1 for real tokens, 0 for padding) marks tokens that must
    not contribute to statistics shared between tokens. `prefix_mask` (`[batch, seq_len]` bool, `sequence_prefix_mask`)
    marks each sequence's prefix tokens where they are not the first `num_prefix_tokens` of every row: text padded on
    the left, or rows packed with several sequences (padding-free batches, `packed`); None where they are.
    """

    num_prefix_tokens: int
    grid_size: tuple[int, int]
    padding_mask: torch.Tensor | None = None
    prefix_mask: torch.Tensor | None = None
    packed: bool = False

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


def sequence_prefix_mask(
    num_prefix_tokens: int, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, shape: torch.Size
) -> torch.Tensor:
    """`[batch, seq_len]` bool: True at the first `num_prefix_tokens` real tokens (`attention_mask` 1, or every token
    without one) of each sequence of a `shape = (batch, seq_len)` batch of text.

    A row holds one sequence, unless `position_ids` is given: then a new sequence starts wherever a position does not
    follow the one before it (rows packed by `DataCollatorWithFlattening` restart at 0), as transformers'
    `find_packed_sequence_indices` separates packed sequences for attention. No branch on values and only operators ONNX
    has (cumsum, scatter, gather), so it traces and exports as it runs.
    """
    device = attention_mask.device if attention_mask is not None else position_ids.device
    real = attention_mask.bool() if attention_mask is not None else torch.ones(shape, dtype=torch.bool, device=device)
    count = real.long().cumsum(-1)  # real tokens up to and including each token
    before = torch.zeros_like(count)  # real tokens before the token's sequence starts
    if position_ids is not None:
        positions = position_ids.expand(shape)
        starts = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1) != 1
        sequence = starts.long().cumsum(-1)  # 0 for the row's first sequence, k at the k-th start after it
        # each start's count of real tokens before it, at its sequence's index (non-starts go to an unread last slot)
        slots = torch.where(starts, sequence, shape[1])
        at_starts = torch.zeros(shape[0], shape[1] + 1, dtype=count.dtype, device=device)
        before = at_starts.scatter(1, slots, count - real.long()).gather(1, sequence)
    return real & (count - before <= num_prefix_tokens)


def layout_of(norm, hidden_states: torch.Tensor, layout: TokenLayout | None) -> TokenLayout | None:
    """`layout` when given, else that of the model call running now (`norm.norm_context`, set when hf-norms placed
    the norm in a model; `norm_placement.NormContext`), else None."""
    if layout is not None:
        return layout
    context = getattr(norm, "norm_context", None)
    return context.layout_for(hidden_states) if context is not None else None
