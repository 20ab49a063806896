"""The one registry of hf-norms' normalization layers: `norm_type` -> what it builds from a config.

Every layer takes `hidden_states` of shape `[batch, seq_len, hidden]` and an optional `TokenLayout`, and returns a
tensor of the same shape. Per-channel affine parameters are called `weight` and `bias` everywhere, so the state dict of
an `nn.LayerNorm` loads into every variant; only the parameters a variant adds are missing. Each method lives in its
own file (`norm_dyt.py`, `norm_derf.py`, `norm_dtn.py`, `norm_sepnorm.py`, `norm_lape.py`).

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from torch import nn

from .norm_derf import DynamicErf
from .norm_dtn import DynamicTokenNorm
from .norm_dyt import DynamicTanh
from .norm_lape import PositionEmbeddingNorm, lape_position_embeddings
from .norm_layernorm import LayerNorm
from .norm_sepnorm import SeparateNorm
from .token_layout import TokenLayout

__all__ = [
    "NORM_TYPES",
    "DynamicErf",
    "DynamicTanh",
    "DynamicTokenNorm",
    "LayerNorm",
    "NormSpec",
    "PositionEmbeddingNorm",
    "SeparateNorm",
    "TokenLayout",
    "build_norm",
    "build_position_norm",
    "function_preserving_options",
    "init_norm_parameters",
    "lape_position_embeddings",
    "norm_type_at",
    "preserves_layernorm_function",
]

# Where a model's norms sit, as encoder layer indices for `build_norm`: the norms after the encoder (the final norm, a
# task head's norm) count as the last layer's, BERT's embedding norm as the first layer's.
FIRST_LAYER = 0
LAST_LAYER = -1


@dataclass(frozen=True)
class NormSpec:
    """One `norm_type`: how to build its token norm from a config, and what else it brings.

    `build(config, hidden_size, num_prefix_tokens, one_dimensional)` returns the module. `per_token` says whether each
    token's output depends only on that token (then the norm can sit where no `TokenLayout` is known, e.g. a task head).
    `position_norms` says whether each layer gets a LaPE `pe_norm`. `preserving_options` are the option values under
    which a LayerNorm checkpoint loaded into this norm_type computes exactly the same function, or None when no
    option values can (DyT and Derf have no statistics); `preserving_note` says, for a count of modules, what such a
    load sets the parameters the norm adds to.
    """

    build: Callable[..., nn.Module]
    per_token: bool
    preserving_options: dict[str, Any] | None
    position_norms: bool = False
    arxiv_id: str | None = None
    preserving_note: str = ""


NORM_TYPES: dict[str, NormSpec] = {
    "layernorm": NormSpec(
        build=lambda config, hidden_size, num_prefix_tokens, one_dimensional: LayerNorm(
            hidden_size, eps=config.layer_norm_eps
        ),
        per_token=True,
        preserving_options={},
    ),
    "dyt": NormSpec(
        build=lambda config, hidden_size, num_prefix_tokens, one_dimensional: DynamicTanh(
            hidden_size,
            alpha_init=config.dyt_alpha_init,
            per_channel=config.dyt_per_channel_alpha,
        ),
        per_token=True,
        preserving_options=None,
        arxiv_id="2503.10622",
    ),
    "derf": NormSpec(
        build=lambda config, hidden_size, num_prefix_tokens, one_dimensional: DynamicErf(
            hidden_size,
            alpha_init=config.derf_alpha_init,
            shift_init=config.derf_shift_init,
            per_channel=config.derf_per_channel,
        ),
        per_token=True,
        preserving_options=None,
        arxiv_id="2512.10938",
    ),
    "dtn": NormSpec(
        build=lambda config, hidden_size, num_prefix_tokens, one_dimensional: DynamicTokenNorm(
            hidden_size,
            num_heads=config.dtn_num_heads or config.num_attention_heads,
            eps=config.layer_norm_eps,
            gate_init=config.dtn_gate_init,
            one_dimensional=one_dimensional,
        ),
        per_token=False,
        preserving_options={"dtn_gate_init": 1.0},  # gates at 1: LayerNorm's statistics for every token
        arxiv_id="2112.02624",
        preserving_note="mean and variance gates at 1 (LayerNorm's statistics) in {count} DTN norms",
    ),
    "sepnorm": NormSpec(
        build=lambda config, hidden_size, num_prefix_tokens, one_dimensional: SeparateNorm(
            hidden_size,
            num_prefix_tokens,
            eps=config.layer_norm_eps,
            prefix_norm=config.sepnorm_prefix_norm,
        ),
        per_token=True,
        preserving_options={"sepnorm_prefix_norm": "layernorm"},  # both parts start as copies of the LayerNorm
        arxiv_id="2309.12931",
        preserving_note="prefix_norm copied from the LayerNorm in {count} SepNorm norms",
    ),
    "lape": NormSpec(
        build=lambda config, hidden_size, num_prefix_tokens, one_dimensional: LayerNorm(
            hidden_size, eps=config.layer_norm_eps
        ),
        per_token=True,
        preserving_options={"lape_keep_input_pe": True},  # the input PE stays, every pe_norm starts at zero
        position_norms=True,
        arxiv_id="2212.05262",
        preserving_note="the input position embedding kept and pe_norm at zero in {count} layers",
    ),
}


def function_preserving_options(norm_type: str, explicit: Iterable[str] = ()) -> dict[str, Any] | None:
    """The options that make a LayerNorm checkpoint loaded into `norm_type` compute the same function, leaving out
    those the user set (`explicit`); None when `norm_type` cannot preserve it (DyT, Derf)."""
    preserving = NORM_TYPES[norm_type].preserving_options
    if preserving is None:
        return None
    return {name: value for name, value in preserving.items() if name not in set(explicit)}


def preserves_layernorm_function(config) -> bool:
    """Whether a LayerNorm checkpoint loaded with `config` computes its function: `config.norm_type` has
    `preserving_options` and the config holds each of their values."""
    preserving = NORM_TYPES[config.norm_type].preserving_options
    return preserving is not None and all(getattr(config, name) == value for name, value in preserving.items())


def norm_type_at(config, layer_index: int) -> str:
    """The norm_type of encoder layer `layer_index` (negative indices count from the last layer):
    `config.layer_norm_types[layer_index]` when the config chooses a norm per layer, else `config.norm_type`."""
    per_layer = getattr(config, "layer_norm_types", None)
    return per_layer[layer_index] if per_layer else config.norm_type


def build_norm(
    config,
    num_prefix_tokens: int,
    *,
    layer_index: int,
    one_dimensional: bool = False,
    per_token: bool = False,
) -> nn.Module:
    """The norm that encoder layer `layer_index`'s norm_type (`norm_type_at`) puts where the stock model has a
    LayerNorm of size `config.hidden_size`; norms outside the layers pass `FIRST_LAYER` or `LAST_LAYER`.

    `per_token=True` asks for a norm that needs no `TokenLayout` (a task head's norm): norm types that mix tokens
    (DTN) give a LayerNorm there, as the official DTN keeps LayerNorm outside the token grid.
    """
    spec = NORM_TYPES[norm_type_at(config, layer_index)]
    if per_token and not spec.per_token:
        spec = NORM_TYPES["layernorm"]
    return spec.build(config, config.hidden_size, num_prefix_tokens, one_dimensional)


def build_position_norm(config) -> PositionEmbeddingNorm | None:
    """LaPE's `pe_norm` for one layer, or None when `config.norm_type` has no position norms."""
    if not NORM_TYPES[config.norm_type].position_norms:
        return None
    return PositionEmbeddingNorm(config.hidden_size, eps=1e-6, zero_init=config.lape_keep_input_pe)


def init_norm_parameters(module: nn.Module) -> None:
    """`_init_weights` hook: give a norm of this file its documented initial values (skipping loaded tensors)."""
    if isinstance(module, (DynamicTanh, DynamicErf, DynamicTokenNorm, SeparateNorm, PositionEmbeddingNorm)):
        module.init_parameters()
