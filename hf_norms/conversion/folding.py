"""Fold a norm's per-channel affine (gamma/beta, DyT's and Derf's weight/bias) into the Linear layers that read its output.

A norm ending in `y = weight * z + bias` (`z` the normalised input: `(x - mean) / std` for LayerNorm, `tanh(alpha x)`
for DyT, `erf(alpha x + shift)` for Derf, DTN's mixed statistics) that feeds only Linear layers `W y + c` can hand its affine over to them:

    W (weight * z + bias) + c = (W diag(weight)) z + (c + W bias),  so  W' = W diag(weight),  c' = c + W bias,

after which the norm keeps weight 1 and bias 0 (DyT and Derf keep alpha and shift), and the checkpoint is still a normal one.

Where this holds, in the pre-LN ViT, DeiT and DINOv2: `layernorm_before` (DINOv2: `norm1`) feeds q/k/v only,
`layernorm_after` (`norm2`) feeds fc1 only (DINOv2's SwiGLU: its gate and up projections), and the final `layernorm`
of ViT and DeiT feeds only a linear classification head (when there is one; otherwise its output is the model's
output and stays as it is; DINOv2's head reads [CLS] and the patches' mean side by side, so it stays too). LayerScale
comes after the attention and the MLP, not between a norm and its readers. Where it does not hold:

- BERT is post-LN: each norm's output is also the residual stream, and the MLM head's decoder shares its weight with
  the word embeddings; nothing can be folded there.
- LaPE adds its normalised position embedding after `layernorm_before` (`attn(norm(x) + pos)`): folding that norm
  would rescale pos's contribution, so it stays unfolded.
- SepNorm folds only while its prefix norm is a LayerNorm with the same affine as the token norm (as right after an
  exact conversion); a BatchNorm prefix norm or a different prefix affine stays unfolded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import ConversionError
from ..models.norms import norm_spec, spec_of_module

POST_LN_MESSAGE = (
    "BERT is post-LN: every norm's output also feeds the residual stream (and the MLM head's decoder is tied to the "
    "word embeddings), so gamma/beta cannot be folded into the next Linear layers without changing the model. "
    "--fold works for the pre-LN ViT and DeiT only; convert this model without --fold."
)
HEAD_LINEARS = ("classifier", "cls_classifier", "distillation_classifier")
LAYER_NAMES = ("layernorm_before", "layernorm_after", "layers")  # ViT and DeiT: attention norm, MLP norm, layer list


@dataclass
class FoldResult:
    """`folded`: `{norm name: [Linear names]}` that absorbed its affine; `skipped`: `{norm name: reason}`."""

    folded: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def fold_targets(model: nn.Module) -> dict[str, list[str]]:
    """`{norm name: [names of the Linear layers that are its only readers]}` for a ViT, DeiT or DINOv2 model (see the
    module docstring); the first norm of each layer is the attention's input, the second the MLP's."""
    if model.config.model_type.startswith("bert"):
        raise ConversionError(POST_LN_MESSAGE)
    base = model.base_model
    prefix = "" if base is model else f"{model.base_model_prefix}."
    dinov2 = model.config.model_type.startswith("dinov2")
    attention_norm, mlp_norm, layers = ("norm1", "norm2", "encoder.layer") if dinov2 else LAYER_NAMES
    mlp_readers = ["gate_proj", "up_proj"] if getattr(model.config, "use_swiglu_ffn", False) else ["fc1"]
    targets = {}
    for index in range(len(model.encoder_layers)):
        layer = f"{prefix}{layers}.{index}"
        targets[f"{layer}.{attention_norm}"] = [f"{layer}.attention.{p}_proj" for p in "qkv"]
        targets[f"{layer}.{mlp_norm}"] = [f"{layer}.mlp.{name}" for name in mlp_readers]
    heads = [name for name in HEAD_LINEARS if isinstance(getattr(model, name, None), nn.Linear)]
    if heads and not dinov2:  # DINOv2's classifier reads [CLS] and the patches' mean side by side
        targets[f"{prefix}layernorm"] = heads
    return targets


def fold_norms(model: nn.Module) -> FoldResult:
    """Fold the affine of every foldable norm of a ViT/DeiT `model` into its reader Linears, in place."""
    result = FoldResult()
    position_norms = norm_spec(model.config.norm_type).position_norms
    for norm_name, linear_names in fold_targets(model).items():
        norm = model.get_submodule(norm_name)
        reason = _why_not_foldable(norm, position_norms and norm_name.endswith(("layernorm_before", "norm1")))
        if reason:
            result.skipped[norm_name] = reason
            continue
        linears = [model.get_submodule(name) for name in linear_names]
        with torch.no_grad():
            weight, bias = norm.weight.double(), norm.bias.double()
            for linear in linears:
                matrix = linear.weight.double()
                if linear.bias is None:
                    raise ConversionError(
                        f"Cannot fold {norm_name} into a Linear without bias; it has no place for beta."
                    )
                linear.bias.copy_((linear.bias.double() + matrix @ bias).to(linear.bias.dtype))
                linear.weight.copy_((matrix * weight[None, :]).to(linear.weight.dtype))
            if hasattr(norm, "reset_affine"):  # a norm with another affine to reset besides its own (SepNorm)
                norm.reset_affine()
            else:
                norm.weight.fill_(1.0)
                norm.bias.zero_()
        result.folded[norm_name] = linear_names
    return result


def _why_not_foldable(norm: nn.Module, adds_position_after: bool) -> str | None:
    """None when `norm`'s output is `weight * z + bias` with `z` independent of weight/bias, else the reason."""
    if adds_position_after:
        return "LaPE adds the position embedding after this norm: folding would rescale its contribution"
    spec = spec_of_module(norm)
    if spec is None or not spec.folds:
        return f"{type(norm).__name__} is not a norm with a per-channel affine"
    return norm.fold_blocker() if hasattr(norm, "fold_blocker") else None
