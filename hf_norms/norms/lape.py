"""LaPE: each layer's own LayerNorm of the position embedding, added to that layer's attention input (Yu et al.).

LaPE's registry entry names this file: its token norms are LayerNorms (`LayerNorm`, from `layernorm.py`) and its
per-layer position norms `PositionEmbeddingNorm`. Part of the modeling file of a checkpoint's remote code
(`checkpoint_code`), which keeps `PositionEmbeddingNorm` for LaPE checkpoints only.
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import initialization as init

from .layernorm import LayerNorm  # noqa: F401  # LaPE's token norms (its registry entry's layer class)


class PositionEmbeddingNorm(nn.LayerNorm):
    """LaPE's per-layer LayerNorm of the position embedding, Yu et al., ICCV 2023 (arXiv 2212.05262).

    Layer l computes `pos_l = pe_norm_l(pos_{l-1})` ("cascade", ICCV) or `pe_norm_l(pos_0)` ("shared", arXiv v1) and adds
    it to its attention input. `zero_init=True` starts weight and bias at 0, so the branch adds nothing until trained:
    a stock model keeps its function exactly. Input and output: `[1 or batch, seq_len, hidden]`.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, zero_init: bool = False):
        super().__init__(hidden_size, eps=eps)
        self.zero_init = zero_init
        if zero_init:
            nn.init.zeros_(self.weight)

    def learned_state(self) -> dict[str, float]:
        """What training logs of this norm: the mean `|weight|` (0 while the branch adds nothing)."""
        return {"pe_gain": self.weight.detach().float().abs().mean().item()}

    def init_parameters(self) -> None:
        (init.zeros_ if self.zero_init else init.ones_)(self.weight)
        init.zeros_(self.bias)


def lape_position_embeddings(
    pe_norms: list[nn.LayerNorm], position_embeddings: torch.Tensor, cascade: bool
) -> list[torch.Tensor]:
    """Each layer's normalised position embedding, `[1 or batch, seq_len, hidden]` like `position_embeddings`.

    `pos_l = pe_norm_l(pos_{l-1})` (cascade) or `pe_norm_l(pos_0)` (shared), with `pos_0 = position_embeddings`.
    Computed on every call: a few LayerNorms of one `[1, seq_len, hidden]` tensor per layer, a negligible part of
    inference, where a cache could serve stale values after an edit through `.data`.
    """
    per_layer, current = [], position_embeddings
    for pe_norm in pe_norms:
        current = pe_norm(current if cascade else position_embeddings)
        per_layer.append(current)
    return per_layer
