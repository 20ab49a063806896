"""Keep the residual stream of a pre-LN vision transformer (ViT, DeiT, DINOv2) free of its channel mean.

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

from ..models.norms import adds_input_position_embeddings

EMBEDDING_TABLES = ("cls_token", "distillation_token", "mask_token")
OUTPUT_PROJECTIONS = ("attention.o_proj", "mlp.fc2", "mlp.down_proj")
LAYER_SCALES = (("layer_scale1", "attention.o_proj"), ("layer_scale2", "mlp.fc2"), ("layer_scale2", "mlp.down_proj"))


@torch.no_grad()
def center_residual_stream(model: nn.Module) -> None:
    """Centre every write into the residual stream of `model` (an hf-norms ViT, DeiT or DINOv2 of any head), in
    place; see the module docstring."""
    base = model.base_model
    embeddings = base.embeddings
    for name in EMBEDDING_TABLES:
        table = getattr(embeddings, name, None)
        if table is not None:
            _center_table(table)
    if adds_input_position_embeddings(model.config):
        _center_table(embeddings.position_embeddings)
    _center_output(embeddings.patch_embeddings.projection)
    for layer in model.encoder_layers:
        for scale_name, projection_name in LAYER_SCALES:
            scale = getattr(layer, scale_name, None)
            projection = _submodule(layer, projection_name)
            if scale is not None and projection is not None:
                _fold_scale(scale, projection)
        for name in OUTPUT_PROJECTIONS:
            projection = _submodule(layer, name)
            if projection is not None:
                _center_output(projection)


def _submodule(module: nn.Module, name: str) -> nn.Module | None:
    try:
        return module.get_submodule(name)
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
