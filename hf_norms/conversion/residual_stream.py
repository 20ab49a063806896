"""Keep the residual stream of a pre-LN transformer (ViT, DeiT, DINOv2: the families with `FamilySpec.residual`) free
of its channel mean.

In a pre-LN transformer the residual stream `x` is a sum of writes: the embeddings (patch projection, prefix and mask
tokens, position embeddings) and, in every layer, the attention's and the MLP's output projections (after DINOv2's
LayerScale). Every norm reads `x`, and LayerNorm first subtracts its channel mean, so subtracting the mean from every
write changes no norm's output: `LN(x - mean(x)) = LN(x)`. After `center_residual_stream`, `mean(x) = 0` for every
token at every depth, where LayerNorm and RMSNorm agree: `LN(x) = gamma * x / rms(x) + beta` (SliceGPT, Ashkboos et
al., arXiv 2401.15024, section 3). A norm that needs that (the registry's `centered_families`) then converts exactly.

Each write is centred in float64 and rounded once: a Linear or Conv2d `W x + b` whose outputs are channels becomes
`(W - 1 mean_rows(W)) x + (b - mean(b))`; a token or embedding table `t` becomes `t - mean(t)` over its channels.
DINOv2's LayerScale `lambda * (W x + b)` is folded into `W` and `b` first (and set to 1). The hidden states the model
returns change (they are now centred); its last hidden state and logits, which come after the final norm, do not.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.family_registry import family_of
from ..norms.build import adds_input_position_embeddings


@torch.no_grad()
def center_residual_stream(model: nn.Module) -> None:
    """Centre every write into the residual stream of `model` (an hf-norms model of a pre-LN family, any head, whose
    `FamilySpec.residual` names the writes), in place; see the module docstring."""
    writes = family_of(model.config.model_type).residual
    base = model.base_model
    tables = [*writes.tables, *([writes.position_table] if adds_input_position_embeddings(model.config) else [])]
    for name in tables:
        table = _submodule(base, name)
        if table is not None:
            _center_table(table if isinstance(table, nn.Parameter) else table.weight)
    _center_output(base.get_submodule(writes.input_projection))
    for layer in model.encoder_layers:
        for scale_name, projection_name in writes.layer_scales:
            scale = _submodule(layer, scale_name)
            projection = _submodule(layer, projection_name)
            if scale is not None and projection is not None:
                _fold_scale(scale, projection)
        for name in writes.output_projections:
            projection = _submodule(layer, name)
            if projection is not None:
                _center_output(projection)


def _submodule(module: nn.Module, name: str) -> nn.Module | nn.Parameter | None:
    """The module or parameter at `name` below `module`, None where it has none (a head without a mask token)."""
    try:
        return module.get_submodule(name)
    except AttributeError:
        try:
            return module.get_parameter(name)
        except AttributeError:
            return None


def _center_table(table: nn.Parameter) -> None:
    """`t - mean(t)` over the channels (the last dimension) of a token or embedding table."""
    values = table.double()
    table.copy_((values - values.mean(-1, keepdim=True)).to(table.dtype))


def _center_output(layer: nn.Module) -> None:
    """A Linear or Conv2d whose output channels are the residual stream's: its outputs made mean-free over channels."""
    weight = layer.weight.double()
    layer.weight.copy_((weight - weight.mean(0, keepdim=True)).to(layer.weight.dtype))
    if layer.bias is not None:
        bias = layer.bias.double()
        layer.bias.copy_((bias - bias.mean()).to(layer.bias.dtype))


def _fold_scale(scale: nn.Module, projection: nn.Linear) -> None:
    """`lambda * (W x + b)` as `(lambda W) x + lambda b`, with `lambda` set to 1."""
    factor = scale.lambda1.double()
    projection.weight.copy_((factor[:, None] * projection.weight.double()).to(projection.weight.dtype))
    if projection.bias is not None:
        projection.bias.copy_((factor * projection.bias.double()).to(projection.bias.dtype))
    scale.lambda1.fill_(1.0)
