"""Building hf-norms' normalization layers from a config, through the registry (`registry.NORM_TYPES`).

Every layer takes `hidden_states` of shape `[batch, seq_len, hidden]` and an optional `TokenLayout`, and returns a
tensor of the same shape. Per-channel affine parameters are called `weight` and `bias` everywhere, so the state dict of
an `nn.LayerNorm` loads into every variant; only the parameters a variant adds are missing. Each method lives in its
own file (`dyt.py`, `derf.py`, `dtn.py`, `sepnorm.py`, `lape.py`, ...).

Part of the modeling file of a checkpoint's remote code (`checkpoint_code`), less what is `@package_only`.
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from collections.abc import Iterable
from typing import Any

from torch import nn

from ..package_only import package_only
from .registry import NORM_NAMES, NORM_TYPES, STOCK, layer_class_named, unknown_norm_type
from .spec import NormSpec
from .token_layout import TokenLayout

__all__ = [
    "NORM_NAMES",
    "NORM_TYPES",
    "STOCK",
    "NormSpec",
    "TokenLayout",
    "build_norm",
    "build_position_norm",
    "fine_tuning_config",
    "function_preserving_options",
    "init_norm_parameters",
    "norm_spec",
    "preserves_layernorm_function",
    "spec_of_module",
]

# Where a model's norms sit, as encoder layer indices for `build_norm`: the norms after the encoder (the final norm, a
# task head's norm) count as the last layer's, BERT's embedding norm as the first layer's.
FIRST_LAYER = 0
LAST_LAYER = -1


@package_only
def __getattr__(name: str) -> type:
    """A registered norm's layer class by its name (`DynamicTanh`), imported from its file when first asked for."""
    return layer_class_named(name)


# Parameters a norm_type adds to a LayerNorm checkpoint: the only keys allowed to be missing when loading the source.
NEW_PARAMETER_SUFFIXES = tuple(
    dict.fromkeys(suffix for spec in NORM_TYPES.values() for suffix in spec.added_parameters)
)


def norm_spec(norm_type: str) -> NormSpec:
    """The registry entry of `norm_type`; a name that is not one is a `ValueError` listing the choices."""
    spec = NORM_TYPES.get(norm_type) if isinstance(norm_type, str) else None
    if spec is None:
        raise ValueError(unknown_norm_type(norm_type))
    return spec


@package_only
def spec_of_module(module: nn.Module) -> NormSpec | None:
    """The registry entry whose layer class `module` is (the first, for a class several entries share), or None."""
    return next((spec for spec in NORM_TYPES.values() if type(module) is spec.layer()), None)


@package_only
def function_preserving_options(norm_type: str, explicit: Iterable[str] = ()) -> dict[str, Any] | None:
    """The options that make a LayerNorm checkpoint loaded into `norm_type` compute the same function, leaving out
    those the user set (`explicit`); None when `norm_type` cannot preserve it (DyT, Derf)."""
    preserving = norm_spec(norm_type).preserving_options
    if preserving is None:
        return None
    return {name: value for name, value in preserving.items() if name not in set(explicit)}


@package_only
def preserves_layernorm_function(config) -> bool:
    """Whether a LayerNorm checkpoint loaded with `config` computes its function: `config.norm_type` has
    `preserving_options` and the config holds each of their values."""
    preserving = config.norm_spec.preserving_options
    return preserving is not None and all(getattr(config, name) == value for name, value in preserving.items())


@package_only
def fine_tuning_config(config) -> tuple[dict[str, Any], list[NormSpec]]:
    """(the config values the norms of `config` fine-tune best with, `NormSpec.fine_tuning_config`, where `config` holds
    another value; the registry entries that chose them)."""
    kinds = dict.fromkeys(getattr(config, "layer_norm_types", None) or [config.norm_type])
    specs = [norm_spec(kind) for kind in kinds if norm_spec(kind).fine_tuning_config]
    chosen = {
        name: value
        for spec in specs
        for name, value in spec.fine_tuning_config.items()
        if hasattr(config, name) and getattr(config, name) != value
    }
    return chosen, specs


def build_norm(
    config,
    num_prefix_tokens: int,
    *,
    layer_index: int,
    one_dimensional: bool = False,
    per_token: bool = False,
) -> nn.Module:
    """The norm that encoder layer `layer_index`'s norm_type (`config.norm_type_at`) puts where the stock model has a
    LayerNorm of size `config.hidden_size`; norms outside the layers pass `FIRST_LAYER` or `LAST_LAYER`.

    `per_token=True` asks for a norm that needs no `TokenLayout` (a task head's norm): norm types that mix tokens
    (DTN) give a LayerNorm there, as the official DTN keeps LayerNorm outside the token grid.
    """
    spec = NORM_TYPES[config.norm_type_at(layer_index)]
    if per_token and not spec.per_token:
        spec = NORM_TYPES[STOCK]
    return spec.layer().from_config(config, config.hidden_size, num_prefix_tokens, one_dimensional)


def build_position_norm(config) -> nn.Module | None:
    """LaPE's `pe_norm` for one layer, or None when `config.norm_type` has no position norms."""
    spec = NORM_TYPES[config.norm_type]
    if not spec.position_norms:
        return None
    return spec.position_norm()(config.hidden_size, eps=1e-6, zero_init=config.lape_keep_input_pe)


def adds_input_position_embeddings(config) -> bool:
    """Whether the embeddings add the position embeddings to the input sum (LaPE may move them into the layers)."""
    return config.norm_spec.keeps_input_position_embeddings(config)


def init_norm_parameters(module: nn.Module) -> None:
    """`_init_weights` hook: give a norm its documented initial values (its `init_parameters`, which writes through
    `transformers.initialization` and so skips loaded tensors)."""
    init_parameters = getattr(module, "init_parameters", None)
    if callable(init_parameters):
        init_parameters()
