"""Least-squares fit of an element-wise norm `y = weight * f(alpha * x + shift) + bias` to a LayerNorm's outputs.

DyT (`f = tanh`, no shift) and Derf (`f = erf`, with a learnable shift) differ only in the saturating function and in
whether a shift exists, so one fit serves both; `SATURATING_FUNCTIONS` maps the registry's `calibration` names to a
`SaturatingFunction` (the function, its derivative, whether it has a shift). A new element-wise norm needs one more
entry, not a new fit.

Each fit is per channel c, on the real tokens' input `x[:, c]` and target `y[:, c]`:
  1. for every alpha on a grid scaled by the channel's spread (and, with a shift, for the shifts 0 and
     `-alpha * mean(x[:, c])`, the latter centring the saturation on the channel's data), the optimal
     `weight_c, bias_c` are a closed-form 1-D least squares fit of `y[:, c]` on `f(alpha * x[:, c] + shift)`; keep the
     candidate with the smallest error (per channel with `per_channel=True`, else the one minimising the summed error);
  2. refine `log(alpha)`, `weight`, `bias` (and `shift`) jointly with L-BFGS on the mean squared error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class SaturatingFunction:
    """The `f` of an element-wise norm: `into(z, out)` writes `f(z)` to `out`; `derivative_(z, value)` overwrites the
    buffer `z` with `f'(z)`, given `value = f(z)`; `has_shift` says whether the norm adds a learnable shift to
    `alpha * x`."""

    name: str
    into: Callable[[Tensor, Tensor], Tensor]
    derivative_: Callable[[Tensor, Tensor], Tensor]
    has_shift: bool

    def __call__(self, z: Tensor) -> Tensor:
        return self.into(z, torch.empty_like(z))


TANH = SaturatingFunction(
    name="tanh",
    into=lambda z, out: torch.tanh(z, out=out),
    derivative_=lambda z, value: torch.mul(value, value, out=z).neg_().add_(1),  # 1 - tanh^2
    has_shift=False,
)
ERF = SaturatingFunction(
    name="erf",
    into=lambda z, out: torch.erf(z, out=out),
    derivative_=lambda z, value: z.square_().neg_().exp_().mul_(2 / math.sqrt(math.pi)),  # 2/sqrt(pi) exp(-z^2)
    has_shift=True,
)
# a norm's `calibration` in the registry -> its saturating function
SATURATING_FUNCTIONS: dict[str, SaturatingFunction] = {function.name: function for function in (TANH, ERF)}


@dataclass
class ElementwiseFit:
    """Fitted parameters: `alpha` (and `shift`, None without one) `[1]` or `[hidden]`, `weight` and `bias` `[hidden]`;
    `relative_error` is `||fitted(x) - y|| / ||y||` on the fitting rows."""

    alpha: Tensor
    weight: Tensor
    bias: Tensor
    relative_error: float
    shift: Tensor | None = None


def _candidates(x: Tensor, function: SaturatingFunction, per_channel: bool, grid_size: int):
    """`(alpha, shift)` pairs to try, each `[hidden]` (shift None without one); see the module docstring. The alpha
    grid spans `[0.03, 30] / spread_c` log-uniformly, with `spread_c` the channel's (or, for a scalar alpha, the
    layer's) root mean square deviation, so it covers both the function's linear range and its saturation."""
    centre = x.mean(0)
    spread = (x - centre).pow(2).mean(0).sqrt().clamp_min(1e-6)
    if not per_channel:
        spread = spread.pow(2).mean().sqrt().expand_as(spread)
        centre = centre.mean().expand_as(centre)
    for factor in torch.logspace(math.log10(0.03), math.log10(30.0), grid_size, device=x.device):
        alpha = factor / spread
        if not function.has_shift:
            yield alpha, None
        else:
            yield alpha, torch.zeros_like(alpha)
            yield alpha, -alpha * centre


def fit_elementwise(
    x: Tensor, y: Tensor, function: SaturatingFunction, per_channel: bool, refine_steps: int = 50, grid_size: int = 48
) -> ElementwiseFit:
    """Least-squares fit of `weight * f(alpha * x + shift) + bias` to `y`, both `[tokens, hidden]` (see the module
    docstring)."""
    x, y = x.float(), y.float()
    y_mean = y.mean(0)
    found: list[tuple[Tensor, ...]] = []  # (alpha, shift, weight, bias) per candidate
    errors = []
    for alpha, shift in _candidates(x, function, per_channel, grid_size):
        z = function(alpha * x if shift is None else torch.addcmul(shift, x, alpha))
        z_centred = z - z.mean(0)
        weight = (z_centred * (y - y_mean)).mean(0) / z_centred.pow(2).mean(0).clamp_min(1e-12)
        bias = y_mean - weight * z.mean(0)
        found.append((alpha, torch.zeros_like(alpha) if shift is None else shift, weight, bias))
        errors.append((weight * z + bias - y).pow(2).mean(0))
    errors = torch.stack(errors)  # [candidates, hidden]
    best = errors.argmin(0) if per_channel else errors.sum(1).argmin().expand(errors.shape[1])
    alpha, shift, weight, bias = (torch.stack(t).gather(0, best[None])[0] for t in zip(*found, strict=True))
    log_alpha = alpha.log() if per_channel else alpha[:1].log()
    shift = (shift if per_channel else shift[:1]) if function.has_shift else None
    if refine_steps > 0:
        log_alpha, weight, bias, shift = _refine(x, y, function, log_alpha, weight, bias, shift, refine_steps)
    alpha = log_alpha.exp()
    fitted = weight * function(alpha * x if shift is None else torch.addcmul(shift, x, alpha)) + bias
    relative_error = ((fitted - y).norm() / y.norm().clamp_min(1e-12)).item()
    return ElementwiseFit(alpha, weight, bias, relative_error, shift)


def fit_loss_and_gradients(
    x: Tensor,
    y: Tensor,
    function: SaturatingFunction,
    log_alpha: Tensor,
    weight: Tensor,
    bias: Tensor,
    shift: Tensor | None = None,
    buffers: tuple[Tensor, Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """`L = mean((weight * f(z) + bias - y)^2) / mean(y^2)`, `z = exp(log_alpha) * x + shift`, and its gradients
    with respect to `(log_alpha, weight, bias[, shift])`, written out rather than by autograd.

    With `t = f(z)` and `r = weight t + bias - y`, per channel and up to the factor `2 / (numel mean(y^2))`:
    `dL/dbias = sum_n r`, `dL/dweight = sum_n r t`, `dL/dshift = weight sum_n r f'(z)`,
    `dL/dlog_alpha = alpha weight sum_n r f'(z) x` (summed over channels for a scalar alpha or shift). `buffers` (four
    tensors shaped like `x`) are reused when given: autograd's fresh `[tokens, hidden]` buffers per evaluation cost
    page faults and grew the process by hundreds of MB (glibc keeps freed large blocks).
    """
    value, residual, product, slope = buffers if buffers is not None else tuple(torch.empty_like(x) for _ in range(4))
    factor = 2.0 / (x.numel() * y.pow(2).mean().clamp_min(1e-12).item())
    with torch.no_grad():
        alpha = log_alpha.exp()
        z = torch.mul(x, alpha, out=slope) if shift is None else torch.addcmul(shift, x, alpha, out=slope)
        function.into(z, value)
        torch.mul(value, weight, out=residual).add_(bias).sub_(y)
        flat = residual.view(-1)
        loss = torch.dot(flat, flat) * (factor / 2)
        bias_grad = residual.sum(0) * factor
        weight_grad = torch.mul(residual, value, out=product).sum(0) * factor
        derivative = function.derivative_(slope, value)  # f'(z), in the z buffer
        torch.mul(residual, derivative, out=product)
        gradients = [None, weight_grad, bias_grad]
        if shift is not None:
            shift_grad = product.sum(0) * weight * factor
            gradients.append(shift_grad.sum().reshape(1) if shift.numel() == 1 else shift_grad)
        alpha_grad = product.mul_(x).sum(0) * weight * alpha * factor
        gradients[0] = alpha_grad.sum().reshape(1) if log_alpha.numel() == 1 else alpha_grad
    return loss, tuple(gradients)


def _refine(
    x: Tensor,
    y: Tensor,
    function: SaturatingFunction,
    log_alpha: Tensor,
    weight: Tensor,
    bias: Tensor,
    shift: Tensor | None,
    steps: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Jointly minimise `fit_loss_and_gradients`'s relative error with L-BFGS from the grid fit (the relative loss
    keeps L-BFGS's tolerances meaningful)."""
    start = (log_alpha, weight, bias) if shift is None else (log_alpha, weight, bias, shift)
    params = [tensor.detach().clone().requires_grad_(True) for tensor in start]
    buffers = tuple(torch.empty_like(x) for _ in range(4))
    optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        loss, gradients = fit_loss_and_gradients(x, y, function, *params[:3], *params[3:], buffers=buffers)
        for param, gradient in zip(params, gradients, strict=True):
            param.grad = gradient
        return loss

    optimizer.step(closure)
    fitted = [param.detach() for param in params]
    return fitted[0], fitted[1], fitted[2], fitted[3] if shift is not None else None
