"""LaPE: each layer's own LayerNorm of the position embedding, added to that layer's attention input (Yu et al.).

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import initialization as init


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

    def init_parameters(self) -> None:
        (init.zeros_ if self.zero_init else init.ones_)(self.weight)
        init.zeros_(self.bias)


class LapePositionCache:
    """LaPE's per-layer position embeddings, remembered between inference calls.

    `pos_l = pe_norm_l(pos_{l-1})` (cascade) or `pe_norm_l(pos_0)` (shared) depends only on parameters, so without
    autograd and outside training the list is computed once and reused while the position source (`source_key`, e.g.
    the position-embedding parameter and the grid), every `pe_norm` parameter (storage and in-place version counter,
    which optimizer steps and `load_state_dict` bump), dtype and device stay the same. Returns `[1 or batch, seq_len,
    hidden]` tensors, one per layer.
    """

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.value: list[torch.Tensor] = []

    def __call__(
        self,
        pe_norms: list[PositionEmbeddingNorm],
        position_embeddings: torch.Tensor,
        cascade: bool,
        source_key: tuple | None,
        training: bool,
    ) -> list[torch.Tensor]:
        cacheable = source_key is not None and not training and not torch.is_grad_enabled()
        key = (
            source_key,
            cascade,
            position_embeddings.dtype,
            position_embeddings.device,
            tuple((p.data_ptr(), p._version) for norm in pe_norms for p in (norm.weight, norm.bias)),
        )
        if cacheable and key == self.key:
            return self.value
        per_layer, current = [], position_embeddings
        for pe_norm in pe_norms:
            current = pe_norm(current if cascade else position_embeddings)
            per_layer.append(current)
        if cacheable:
            self.key, self.value = key, per_layer
        return per_layer
