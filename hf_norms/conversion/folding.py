"""Fold a norm's per-channel affine (gamma/beta, DyT's and Derf's weight/bias) into the Linear layers that read its output.

A norm ending in `y = weight * z + bias` (`z` the normalised input: `(x - mean) / std` for LayerNorm, `tanh(alpha x)`
for DyT, `erf(alpha x + shift)` for Derf, DTN's mixed statistics) that feeds only Linear layers `W y + c` can hand its affine over to them:

    W (weight * z + bias) + c = (W diag(weight)) z + (c + W bias),  so  W' = W diag(weight),  c' = c + W bias,

after which the norm keeps weight 1 and bias 0 (DyT and Derf keep alpha and shift), and the checkpoint is still a normal one.

Where this holds, in the pre-LN families (their `FamilySpec.folding`): each layer's attention norm (ViT's
`layernorm_before`, DINOv2's `norm1`) feeds q/k/v only, its MLP norm (`layernorm_after`, `norm2`) feeds the MLP's
input projections only (`fc1`; DINOv2's SwiGLU: its gate and up projections), and a final norm that `final_norm` names
feeds only the Linear classification heads of `head_linears` (when there is one; otherwise its output is the model's
output and stays as it is; DINOv2's head reads [CLS] and the patches' mean side by side, so it stays too). LayerScale
comes after the attention and the MLP, not between a norm and its readers. Where it does not hold:

- Post-LN families (BERT): each norm's output is also the residual stream, and the MLM head's decoder shares its
  weight with the word embeddings; nothing can be folded there.
- LaPE adds its normalised position embedding after `layernorm_before` (`attn(norm(x) + pos)`): folding that norm
  would rescale pos's contribution, so it stays unfolded.
- SepNorm folds only while its prefix norm is a LayerNorm with the same affine as the token norm (as right after an
  exact conversion); a BatchNorm prefix norm or a different prefix affine stays unfolded.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import ConversionError
from ..models.family_registry import family_of
from ..models.family_spec import FamilySpec
from ..norms.build import spec_of_module
from .data import run_model


@dataclass
class FoldResult:
    """`folded`: `{norm name: [Linear names]}` that absorbed its affine; `skipped`: `{norm name: reason}`."""

    folded: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def check_foldable(family: FamilySpec, fold: bool) -> None:
    """Refuse `--fold` for a family whose norms do not feed Linear layers alone (post-LN), in one line."""
    if fold and family.folding is None:
        raise ConversionError(
            f"{family.display_name} is post-LN: every norm's output also feeds the residual stream, so gamma/beta "
            "cannot be folded into the next Linear layers without changing the model; convert it without --fold."
        )


def fold_targets(model: nn.Module) -> dict[str, list[str]]:
    """`{norm name: [names of the Linear layers that are its only readers]}` for a model of a pre-LN family (see the
    module docstring, and the family's `FamilySpec.folding`)."""
    family = family_of(model.config.model_type)
    check_foldable(family, fold=True)
    layout = family.folding
    prefix = "" if model.base_model is model else f"{model.base_model_prefix}."
    layers = f"{prefix}{model.family_layout.layers}"
    targets = {}
    for index, layer_module in enumerate(model.encoder_layers):
        layer = f"{layers}.{index}"
        mlp_readers = [name for name in layout.mlp_readers if _has(layer_module, name)]
        targets[f"{layer}.{layout.attention_norm}"] = [f"{layer}.{name}" for name in layout.attention_readers]
        targets[f"{layer}.{layout.mlp_norm}"] = [f"{layer}.{name}" for name in mlp_readers]
    heads = [name for name in layout.head_linears if isinstance(getattr(model, name, None), nn.Linear)]
    if heads and layout.final_norm is not None:
        targets[f"{prefix}{layout.final_norm}"] = heads
    return targets


def _has(module: nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


def fold_norms(model: nn.Module) -> FoldResult:
    """Fold the affine of every foldable norm of a pre-LN `model` into its reader Linears, in place."""
    result = FoldResult()
    position_norms = model.config.norm_spec.position_norms
    targets = fold_targets(model)  # refuses a post-LN family first
    attention_norm = family_of(model.config.model_type).folding.attention_norm
    for norm_name, linear_names in targets.items():
        norm = model.get_submodule(norm_name)
        reason = _why_not_foldable(norm, position_norms and norm_name.endswith(attention_norm))
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


def fold_and_check(model: nn.Module, batches: list[dict]) -> dict[str, Any]:
    """Fold `model`'s norm affines (see `folding`) and check the folded model computes what the unfolded one did.

    Folding is exact algebra, but float32 rounds the reordered products differently; to show how large that is
    against float32's own error, both models are also compared with the unfolded model evaluated in float64.
    """

    def outputs(network: nn.Module, batch: dict) -> torch.Tensor:
        if next(network.parameters()).dtype == torch.float64:
            batch = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
        with torch.no_grad():
            result = run_model(network, batch)
        return next(v for k, v in result.items() if k in ("logits", "last_hidden_state", "reconstruction"))

    def max_diff(first: list[torch.Tensor], second: list[torch.Tensor]) -> float:
        return max((a.double() - b.double()).abs().max().item() for a, b in zip(first, second, strict=True))

    exact = [outputs(copy.deepcopy(model).double(), batch) for batch in batches]
    before = [outputs(model, batch) for batch in batches]
    result = fold_norms(model)
    after = [outputs(model, batch) for batch in batches]
    return {
        "folded": result.folded,
        "skipped": result.skipped,
        "max_abs_diff_to_unfolded": max_diff(after, before),
        "max_abs_output": max(ref.abs().max().item() for ref in before),  # float32 rounding scales with this
        "max_abs_diff_to_float64": {"unfolded": max_diff(before, exact), "folded": max_diff(after, exact)},
    }
