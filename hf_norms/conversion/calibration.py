"""Data-driven calibration of DyT layers converted from a LayerNorm checkpoint.

DyT computes `y = weight * tanh(alpha * x) + bias` per element, with no per-token statistics, so it cannot reproduce
LayerNorm's `y = gamma * (x - mean_t) / std_t + beta` exactly; copying gamma/beta with alpha 0.5 (the naive swap) gives
a model whose outputs are unrelated to the original's. `calibrate_dyt` fits every DyT layer, in forward order, on the
*partially converted* model: layer k sees the inputs that the already-calibrated layers 0..k-1 produce, and is fitted
against the original LayerNorm's outputs there, so each fit also corrects the drift accumulated before it.

Each fit is per channel c, on the real tokens' input `x[:, c]` and target `y[:, c]`:
  1. for every alpha on a grid scaled by the channel's spread, the optimal `weight_c, bias_c` are a closed-form
     1-D least squares fit of `y[:, c]` on `tanh(alpha * x[:, c])`; keep the alpha with the smallest error (one alpha
     per channel with `per_channel=True`, else the one minimising the summed error);
  2. refine `log(alpha), weight, bias` jointly with L-BFGS on the mean squared error.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..models.norms import DynamicTanh, LayerNorm
from .checkpoint_io import ConversionError
from .data import real_token_mask, run_model


class _StopForward(Exception):
    """Raised by a hook once the activation it waits for is captured: the rest of the forward is not needed."""


def capture_norm_io(model: nn.Module, name: str, batch: dict, output: bool) -> torch.Tensor:
    """The input (or output) of module `name` on `batch`: `[batch, seq_len, hidden]`; stops the forward there."""
    captured = {}
    module = model.get_submodule(name)

    def hook(_module, args, result=None):
        captured["value"] = result if output else args[0]
        raise _StopForward

    handle = module.register_forward_hook(hook) if output else module.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            run_model(model, batch)
    except _StopForward:
        pass
    finally:
        handle.remove()
    if "value" not in captured:
        raise RuntimeError(f"{name} was not called in the forward pass.")
    return captured["value"]


def norms_in_forward_order(model: nn.Module, batch: dict) -> list[str]:
    """Names of the `nn.LayerNorm` modules of `model` (excluding LaPE's position norms) in the order `batch` calls them.

    The order does not depend on the examples, so one forward pass of the batch's first example finds it."""
    batch = {key: value[:1] for key, value in batch.items()}
    order: list[str] = []
    handles = [
        module.register_forward_hook(lambda _m, _a, _o, name=name: order.append(name))
        for name, module in model.named_modules()
        if isinstance(module, nn.LayerNorm) and not name.endswith("pe_norm")
    ]
    try:
        with torch.no_grad():
            run_model(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    return list(dict.fromkeys(order))


def _rows(tensor: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`[tokens, hidden]` rows of the real tokens of a `[batch, seq_len, hidden]` activation."""
    return (tensor[mask] if mask is not None else tensor.reshape(-1, tensor.shape[-1])).float()


def _sample_rows(count: int, max_rows: int) -> torch.Tensor | None:
    if count <= max_rows:
        return None
    generator = torch.Generator().manual_seed(0)
    return torch.randperm(count, generator=generator)[:max_rows].sort().values


@dataclass
class DyTFit:
    """Fitted DyT parameters: `alpha` `[1]` or `[hidden]`, `weight` and `bias` `[hidden]`; `relative_error` is
    `||dyt(x) - y|| / ||y||` on the fitting rows."""

    alpha: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    relative_error: float


def fit_dyt(x: torch.Tensor, y: torch.Tensor, per_channel: bool, refine_steps: int = 50, grid_size: int = 48) -> DyTFit:
    """Least-squares fit of `weight * tanh(alpha * x) + bias` to `y`, both `[tokens, hidden]` (see module docstring).

    The alpha grid spans `[0.03, 30] / spread_c` log-uniformly, with `spread_c` the channel's (or, for a scalar
    alpha, the layer's) root mean square deviation, so it covers both tanh's linear range and its saturation.
    """
    x, y = x.float(), y.float()
    spread = (x - x.mean(0)).pow(2).mean(0).sqrt().clamp_min(1e-6)
    if not per_channel:
        spread = spread.pow(2).mean().sqrt().expand_as(spread)
    factors = torch.logspace(math.log10(0.03), math.log10(30.0), grid_size)
    y_mean = y.mean(0)
    alphas, weights, biases, errors = [], [], [], []
    for factor in factors:
        alpha = factor / spread
        z = torch.tanh(alpha * x)
        z_centred = z - z.mean(0)
        weight = (z_centred * (y - y_mean)).mean(0) / z_centred.pow(2).mean(0).clamp_min(1e-12)
        bias = y_mean - weight * z.mean(0)
        alphas.append(alpha), weights.append(weight), biases.append(bias)
        errors.append((weight * z + bias - y).pow(2).mean(0))
    errors = torch.stack(errors)  # [grid, hidden]
    best = errors.argmin(0) if per_channel else errors.sum(1).argmin().expand(errors.shape[1])
    best_alpha, best_weight, best_bias = (torch.stack(t).gather(0, best[None])[0] for t in (alphas, weights, biases))
    log_alpha = best_alpha.log() if per_channel else best_alpha[:1].log()
    if refine_steps > 0:
        log_alpha, best_weight, best_bias = _refine(x, y, log_alpha, best_weight, best_bias, refine_steps)
    alpha = log_alpha.exp()
    fitted = best_weight * torch.tanh(alpha * x) + best_bias
    relative_error = ((fitted - y).norm() / y.norm().clamp_min(1e-12)).item()
    return DyTFit(alpha, best_weight, best_bias, relative_error)


def dyt_fit_loss_and_gradients(
    x: torch.Tensor,
    y: torch.Tensor,
    log_alpha: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """`L = mean((weight * tanh(alpha * x) + bias - y)^2) / mean(y^2)`, `alpha = exp(log_alpha)`, and its gradients
    with respect to `(log_alpha, weight, bias)`, written out rather than by autograd.

    With `t = tanh(alpha x)` and `r = weight t + bias - y`, per channel and up to the factor `2 / (numel mean(y^2))`:
    `dL/dbias = sum_n r`, `dL/dweight = sum_n r t`, `dL/dlog_alpha = alpha weight sum_n r (1 - t^2) x` (summed over
    channels for a scalar alpha). `buffers` (three tensors shaped like `x`) are reused when given: autograd's fresh
    `[tokens, hidden]` buffers per evaluation cost page faults and grew the process by hundreds of MB (glibc keeps freed
    large blocks).
    """
    tanh, residual, product = buffers if buffers is not None else tuple(torch.empty_like(x) for _ in range(3))
    factor = 2.0 / (x.numel() * y.pow(2).mean().clamp_min(1e-12).item())
    with torch.no_grad():
        alpha = log_alpha.exp()
        torch.mul(x, alpha, out=tanh).tanh_()
        torch.mul(tanh, weight, out=residual).add_(bias).sub_(y)
        flat = residual.view(-1)
        loss = torch.dot(flat, flat) * (factor / 2)
        bias_grad = residual.sum(0) * factor
        weight_grad = torch.mul(residual, tanh, out=product).sum(0) * factor
        derivative = tanh.mul_(tanh).neg_().add_(1)  # 1 - t^2, in the tanh buffer
        alpha_grad = torch.mul(residual, derivative, out=product).mul_(x).sum(0) * weight * alpha * factor
        if log_alpha.numel() == 1:
            alpha_grad = alpha_grad.sum().reshape(1)
    return loss, (alpha_grad, weight_grad, bias_grad)


def _refine(
    x: torch.Tensor, y: torch.Tensor, log_alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Jointly minimise `dyt_fit_loss_and_gradients`'s relative error with L-BFGS from the grid fit (the relative loss
    keeps L-BFGS's tolerances meaningful)."""
    params = [tensor.detach().clone().requires_grad_(True) for tensor in (log_alpha, weight, bias)]
    buffers = (torch.empty_like(x), torch.empty_like(x), torch.empty_like(x))
    optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        loss, gradients = dyt_fit_loss_and_gradients(x, y, *params, buffers=buffers)
        for param, gradient in zip(params, gradients, strict=True):
            param.grad = gradient
        return loss

    optimizer.step(closure)
    return tuple(param.detach() for param in params)


@dataclass
class CalibrationResult:
    """What `calibrate_dyt` did: the method in words, the seconds it took and each norm's relative fitting error."""

    method: str
    seconds: float
    fit_errors: dict[str, float]


def calibrate_dyt(
    student: nn.Module,
    teacher: nn.Module,
    batches: Sequence[dict],
    norm_names: Iterable[str],
    refine_steps: int = 50,
    max_rows: int = 16384,
    progress: bool = False,
) -> CalibrationResult:
    """Fit every DyT layer `norm_names` of `student` (a DyT conversion of `teacher`) sequentially, in forward order.

    Before the fit the DyT layers are swapped for copies of the teacher's LayerNorms; step k puts back DyT layer k,
    fitted on the inputs the student computes with layers 0..k-1 already DyT, against the teacher's LayerNorm outputs
    at k on the same examples (real tokens only; at most `max_rows` tokens, a fixed random subset). Alpha is per
    channel when the DyT layers were built with one alpha per channel (`dyt_per_channel_alpha`), else one scalar.
    """
    start = time.perf_counter()
    names = list(norm_names)
    dyt_layers = {name: student.get_submodule(name) for name in names}
    if not all(isinstance(layer, DynamicTanh) for layer in dyt_layers.values()):
        raise ConversionError("calibrate_dyt needs a student whose replaced norms are all DynamicTanh.")
    for name in names:
        student.set_submodule(name, _layer_norm_copy(teacher.get_submodule(name)))
    rows = _row_selections(teacher, names[0], batches, max_rows)
    targets = teacher_norm_outputs(teacher, names, batches, rows)
    fit_errors = {}
    try:
        for name in _progress(names, progress, "calibrating DyT"):
            inputs = torch.cat(
                [r(capture_norm_io(student, name, b, False)) for b, r in zip(batches, rows, strict=True)]
            )
            layer = dyt_layers[name]
            fit = fit_dyt(inputs, targets.pop(name), per_channel=layer.alpha.numel() > 1, refine_steps=refine_steps)
            with torch.no_grad():
                layer.alpha.copy_(fit.alpha.reshape(layer.alpha.shape))
                layer.weight.copy_(fit.weight)
                layer.bias.copy_(fit.bias)
            student.set_submodule(name, layer)
            fit_errors[name] = fit.relative_error
    finally:
        for name, layer in dyt_layers.items():  # never leave LayerNorm copies behind, even on error
            student.set_submodule(name, layer)
    per_channel = any(layer.alpha.numel() > 1 for layer in dyt_layers.values())
    method = (
        "sequential: each DyT fitted in forward order on the partially converted model's own inputs against the "
        f"original LayerNorm's outputs; {'per-channel' if per_channel else 'scalar'} alpha grid + per-channel least "
        f"squares for weight/bias, then L-BFGS refinement ({refine_steps} iterations)"
    )
    return CalibrationResult(method=method, seconds=time.perf_counter() - start, fit_errors=fit_errors)


class _RowSelection:
    """Callable turning a `[batch, seq_len, hidden]` activation of one batch into `[rows, hidden]`: its real tokens,
    then the subset `keep` of them (all when None)."""

    def __init__(self, batch: dict, keep: torch.Tensor | None):
        self.mask, self.keep = real_token_mask(batch), keep

    def __call__(self, activation: torch.Tensor) -> torch.Tensor:
        rows = _rows(activation, self.mask)
        return rows if self.keep is None else rows[self.keep]


def _row_selections(teacher: nn.Module, first_norm: str, batches: Sequence[dict], max_rows: int) -> list[_RowSelection]:
    """Per batch, which rows the fits use: its real tokens, restricted to a fixed random subset of at most `max_rows`
    rows over all batches."""
    masks = [real_token_mask(batch) for batch in batches]
    if masks[0] is None:  # images: every token is real; the sequence length comes from one partial forward
        seq_len = capture_norm_io(teacher, first_norm, batches[0], output=False).shape[1]
        counts = [next(iter(batch.values())).shape[0] * seq_len for batch in batches]
    else:
        counts = [int(mask.sum()) for mask in masks]
    keep = _sample_rows(sum(counts), max_rows)
    if keep is None:
        return [_RowSelection(batch, None) for batch in batches]
    offsets = torch.tensor([0, *counts]).cumsum(0).tolist()
    return [
        _RowSelection(batch, keep[(keep >= start) & (keep < stop)] - start)
        for batch, start, stop in zip(batches, offsets[:-1], offsets[1:], strict=True)
    ]


def teacher_norm_outputs(
    teacher: nn.Module, names: list[str], batches: Sequence[dict], rows: Sequence[_RowSelection]
) -> dict[str, torch.Tensor]:
    """`{name: [rows, hidden]}`: the teacher's output of each norm on the selected rows of all batches, one pass each."""
    outputs: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for batch, select in zip(batches, rows, strict=True):
        handles = [
            teacher.get_submodule(name).register_forward_hook(
                lambda _m, _a, output, name=name, select=select: outputs[name].append(select(output))
            )
            for name in names
        ]
        try:
            with torch.no_grad():
                run_model(teacher, batch)
        finally:
            for handle in handles:
                handle.remove()
    return {name: torch.cat(parts) for name, parts in outputs.items()}


def _layer_norm_copy(layer_norm: nn.Module) -> nn.LayerNorm:
    """A standalone `nn.LayerNorm` with the teacher norm's eps and affine parameters (accepts a TokenLayout arg)."""
    copy = LayerNorm(layer_norm.normalized_shape, eps=layer_norm.eps)
    with torch.no_grad():
        copy.weight.copy_(layer_norm.weight)
        copy.bias.copy_(layer_norm.bias)
    return copy


def _progress(items: list, enabled: bool, description: str) -> Iterable:
    if not enabled:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=description, unit="norm")
