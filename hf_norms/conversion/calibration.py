"""Data-driven calibration of the norms that cannot reproduce LayerNorm exactly (DyT, Derf; the registry's
`calibration`), converted from a LayerNorm checkpoint.

DyT computes `y = weight * tanh(alpha * x) + bias` and Derf `y = weight * erf(alpha * x + shift) + bias` per element,
with no per-token statistics, so neither can reproduce LayerNorm's `y = gamma * (x - mean_t) / std_t + beta` exactly;
copying gamma/beta with alpha 0.5 (the naive swap) gives a model whose outputs are unrelated to the original's.
`calibrate_norms` fits every such layer, in forward order, on the *partially converted* model: layer k sees the
inputs that the already-calibrated layers 0..k-1 produce, and is fitted against the original LayerNorm's outputs
there, so each fit also corrects the drift accumulated before it. The per-layer fit is the norm's `calibration`:
`tanh` and `erf` (a grid over alpha, and shift for Derf, with closed-form per-channel least squares for weight/bias,
then L-BFGS: `elementwise_fit.fit_elementwise`), or `gradient` (L-BFGS on all the layer's parameters from where the
conversion put them: `fit_by_gradient`).
Then `calibrate_pooler` refits the pooler that stock classification heads read (BERT, ViT), which restores the scale
of what the head reads: from the calibrated MiniLM DyT's final [CLS] state, the source pooler's output has 2.7x less
between-class spread than LayerNorm's, and dropout noise 4.1x that spread instead of 1.3x.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..norms.build import LayerNorm, NormSpec
from .data import model_device, on_device, real_token_mask, run_model
from .elementwise_fit import SATURATING_FUNCTIONS, ElementwiseFit, fit_elementwise
from .fidelity import forward_with_norms


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
class CalibrationResult:
    """What `calibrate_norms` did: the method in words, the seconds it took and each norm's relative fitting error."""

    method: str
    seconds: float
    fit_errors: dict[str, float]


def calibrate_norms(
    student: nn.Module,
    teacher: nn.Module,
    batches: Sequence[dict],
    norm_names: Iterable[str],
    spec: NormSpec,
    progress: bool,
    refine_steps: int = 50,
    max_rows: int = 16384,
) -> CalibrationResult:
    """Fit every norm `norm_names` of `student` (a `spec` conversion of `teacher`, on the teacher's device) with the
    fit `spec.calibration` names, sequentially, in forward order, on that device.

    Before the fit those layers are swapped for copies of the teacher's LayerNorms; step k puts back layer k, fitted
    on the inputs the student computes with layers 0..k-1 already converted, against the teacher's LayerNorm outputs
    at k on the same examples (real tokens only; at most `max_rows` tokens, a fixed random subset). DyT's and Derf's
    alpha (and Derf's shift) is per channel when the layers were built per channel (`dyt_per_channel_alpha`,
    `derf_per_channel`), else one scalar.
    """
    start = time.perf_counter()
    batches = [on_device(batch, model_device(student)) for batch in batches]  # the teacher is on the same device
    names = list(norm_names)
    layers = {name: student.get_submodule(name) for name in names}
    for name in names:
        student.set_submodule(name, _layer_norm_copy(teacher.get_submodule(name)))
    rows = _row_selections(teacher, names[0], batches, max_rows)
    targets = teacher_norm_outputs(teacher, names, batches, rows)
    fit_errors = {}
    try:
        for name in _progress(names, progress, "calibrating"):
            inputs = torch.cat(
                [r(capture_norm_io(student, name, b, False)) for b, r in zip(batches, rows, strict=True)]
            )
            fit_errors[name] = fit_layer(layers[name], inputs, targets.pop(name), spec.calibration, refine_steps)
            student.set_submodule(name, layers[name])
    finally:
        for name, layer in layers.items():  # never leave LayerNorm copies behind, even on error
            student.set_submodule(name, layer)
    pooler_error = calibrate_pooler(student, teacher, batches)
    if pooler_error is not None:
        fit_errors["pooler.dense"] = pooler_error
    method = _method(spec.calibration, layers.values(), refine_steps) + (
        POOLER_METHOD if pooler_error is not None else ""
    )
    return CalibrationResult(method, time.perf_counter() - start, fit_errors)


def fit_layer(
    layer: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, calibration: str, refine_steps: int
) -> float:
    """Fit `layer`, in place, so that it maps `inputs` to `targets` (both `[rows, hidden]`) with the fit
    `calibration` names; returns the relative error `||layer(inputs) - targets|| / ||targets||`."""
    function = SATURATING_FUNCTIONS.get(calibration)
    if function is None:
        return fit_by_gradient(layer, inputs, targets, refine_steps)
    fit = fit_elementwise(inputs, targets, function, layer.alpha.numel() > 1, refine_steps)
    _load_fit(layer, fit)
    return fit.relative_error


def fit_by_gradient(layer: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, steps: int) -> float:
    """Minimise `mean((layer(x) - y)^2) / mean(y^2)` over all of `layer`'s parameters with L-BFGS (`steps`
    iterations), from their current values; the rows of `inputs` (`[rows, hidden]`) are one sequence of tokens, so the
    layer must be per token. Returns the relative error after the fit."""
    x, y = inputs.float()[None], targets.float()
    scale = y.pow(2).mean().clamp_min(1e-12)
    parameters = [parameter for parameter in layer.parameters() if parameter.is_floating_point()]
    optimizer = torch.optim.LBFGS(parameters, lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = (layer(x)[0] - y).pow(2).mean() / scale
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    with torch.no_grad():
        return ((layer(x)[0] - y).norm() / y.norm().clamp_min(1e-12)).item()


POOLER_RIDGE = 0.1  # ridge penalty towards the pooler's weights, relative to the mean squared [CLS] feature x examples
POOLER_METHOD = (
    "; then the pooler's dense layer refitted by ridge regression (towards its weights) from the final [CLS] state to "
    "the original pooler's pre-activation"
)


def _pooler_dense(model: nn.Module) -> nn.Linear | None:
    dense = getattr(getattr(model.base_model, "pooler", None), "dense", None)
    return dense if isinstance(dense, nn.Linear) else None


def calibrate_pooler(student: nn.Module, teacher: nn.Module, batches: Sequence[dict]) -> float | None:
    """Refit `student`'s pooler dense layer (BERT and ViT poolers compute `tanh(W h + b)` on the final [CLS] state
    `h`, and a stock classification head reads that), by ridge regression of the teacher's pre-activation `W_t g + b_t`
    (on its own [CLS] state `g`) on the student's `h`, over the examples of `batches`:

        min over W, b of  sum_i ||W h_i + b - (W_t g_i + b_t)||^2 + lambda ||W - W_0||^2,
        lambda = POOLER_RIDGE * sum_i ||h_i||^2 / hidden,

    pulled towards the current weights `W_0` (few examples leave it there). Returns the relative error
    `||W h + b - y||^2 / ||y||^2` after the fit, or None when either model has no pooler."""
    dense, reference = _pooler_dense(student), _pooler_dense(teacher)
    if dense is None or reference is None:
        return None
    features, targets = [], []
    for batch in batches:
        features.append(forward_with_norms(student, batch, [])["final"][:, 0].double())
        with torch.no_grad():
            targets.append(reference(forward_with_norms(teacher, batch, [])["final"][:, 0]).double())
    h, y = torch.cat(features), torch.cat(targets)
    h_mean, y_mean = h.mean(0), y.mean(0)
    centred = h - h_mean
    start = dense.weight.detach().double()
    penalty = POOLER_RIDGE * h.pow(2).sum() / h.shape[1]
    gram = centred.T @ centred + penalty * torch.eye(h.shape[1], dtype=h.dtype)
    weight = torch.linalg.solve(gram, centred.T @ (y - y_mean) + penalty * start.T).T  # [out, in]
    bias = y_mean - weight @ h_mean
    with torch.no_grad():
        dense.weight.copy_(weight.to(dense.weight.dtype))
        dense.bias.copy_(bias.to(dense.bias.dtype))
    return ((h @ weight.T + bias - y).pow(2).sum() / y.pow(2).sum().clamp_min(1e-30)).item()


def _load_fit(layer: nn.Module, fit: ElementwiseFit) -> None:
    with torch.no_grad():
        layer.alpha.copy_(fit.alpha.reshape(layer.alpha.shape))
        if fit.shift is not None:
            layer.shift.copy_(fit.shift.reshape(layer.shift.shape))
        layer.weight.copy_(fit.weight)
        layer.bias.copy_(fit.bias)


def _method(calibration: str, layers: Iterable[nn.Module], refine_steps: int) -> str:
    """The calibration in words, for the report."""
    layers = list(layers)
    function = SATURATING_FUNCTIONS.get(calibration)
    if function is None:
        return (
            "sequential: each norm's parameters fitted in forward order on the partially converted model's own inputs "
            f"against the original LayerNorm's outputs, by L-BFGS on the mean squared error ({refine_steps} iterations)"
        )
    kinds = f"weight * {function.name}(alpha * x{' + shift' if function.has_shift else ''}) + bias"
    shift = " and shift" if function.has_shift else ""
    per_channel = any(layer.alpha.numel() > 1 for layer in layers)
    return (
        f"sequential: each norm ({kinds}) fitted in forward order on the partially converted model's own inputs "
        f"against the original LayerNorm's outputs; {'per-channel' if per_channel else 'scalar'} alpha{shift} grid + "
        f"per-channel least squares for weight/bias, then L-BFGS refinement ({refine_steps} iterations)"
    )


class _RowSelection:
    """Callable turning a `[batch, seq_len, hidden]` activation of one batch into `[rows, hidden]`: its real tokens,
    then the subset `keep` of them (all when None)."""

    def __init__(self, batch: dict, keep: torch.Tensor | None):
        self.mask, self.keep = real_token_mask(batch), keep

    def __call__(self, activation: torch.Tensor) -> torch.Tensor:
        rows = _rows(activation, self.mask)
        return rows if self.keep is None else rows[self.keep.to(rows.device)]


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
