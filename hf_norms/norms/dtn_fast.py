"""DTN's fast path for eager float32 (and float64, for gradcheck): the same mathematics as `dtn.token_norm_formula`, in one autograd Function with a written-out backward, and in place without autograd.

The grid tokens' heads and their squares, `[x_h, x_h * x_h]`, are stored once in the mixing layout (`TokenGrid`) and
mixed together by two products per norm, one `[cols, cols] @ [cols, B * rows * 2D]` GEMM per head and one batch of
`[rows, rows] @ [rows, 2D]` products, from the mixing matrices built once per call (`dtn.mixing_matrices`). Every
elementwise step after the mixing is one pass with at most one broadcast operand, the case PyTorch vectorises (a step
with two broadcast operands, as `lerp` with a per-head weight and a per-token end, is not). docs/speed.md says where
the time goes.

`DynamicTokenNorm` picks this path only in eager float32 or float64 (`runtime.is_eager_full_precision`): it works in
place, uses an autograd Function and branches on tensor values (`gates_are_one`), which tracers must not see.

It imports nothing of `dtn.py`, which imports it.
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenGrid:
    """Views between DTN's `[B, N, C]` activations and its per-head grid order `[H, B, cols, rows, D]`.

    Buffers of the mixing layout are stored rows first, `[H, rows, cols, (2,) B, D]`, so that each mixing step is a
    few large GEMMs: along rows one `[rows, rows] @ [rows, cols * 2 * B * D]` product per head, along columns one
    `[cols, cols] @ [cols, 2 * B * D]` product per head and row (with columns first, the row step was a product per
    column, half and example: 1344 products with an inner dimension of 14 at ViT-S b8, the slowest step of DTN). With
    one column matrix per example (`per_example`: padded text, one row) they are stored `[H, B, cols, rows, (2,) D]`.
    Every function takes and returns them in grid order (`[H, B, cols, rows, 2, D]`, permuted views).
    """

    num_prefix_tokens: int
    grid_size: tuple[int, int]  # (rows, cols)
    num_heads: int
    shape: torch.Size  # [B, N, C]
    per_example: bool

    @property
    def normalized_shape(self) -> tuple[int]:
        return (self.shape[-1],)

    def view(self, tensor: torch.Tensor) -> torch.Tensor:
        """`[B, N, C]` -> the grid tokens as `[H, B, cols, rows, D]` (a view)."""
        batch, _, hidden = self.shape
        rows, cols = self.grid_size
        grid = tensor[:, self.num_prefix_tokens :].reshape(batch, rows, cols, self.num_heads, hidden // self.num_heads)
        return grid.permute(3, 0, 2, 1, 4)

    def empty(self, like: torch.Tensor, stacked: bool) -> torch.Tensor:
        """An uninitialised `[H, B, cols, rows, D]` (or, `stacked`, `[H, B, cols, rows, 2, D]`) in the mixing layout."""
        batch, _, hidden = self.shape
        rows, cols = self.grid_size
        depth = hidden // self.num_heads
        if self.per_example:
            return like.new_empty(self.num_heads, batch, cols, rows, *((2, depth) if stacked else (depth,)))
        if stacked:
            return self.grid_order(like.new_empty(self.num_heads, rows, cols, 2, batch, depth))
        return like.new_empty(self.num_heads, rows, cols, batch, depth).permute(0, 3, 2, 1, 4)

    def memory_order(self, stacked: torch.Tensor) -> torch.Tensor:
        """A stacked buffer in grid order -> the view in its memory order (contiguous)."""
        return stacked if self.per_example else stacked.permute(0, 3, 2, 4, 1, 5)

    def grid_order(self, stored: torch.Tensor) -> torch.Tensor:
        """The inverse of `memory_order`."""
        return stored if self.per_example else stored.permute(0, 4, 2, 1, 3, 5)

    def per_token(self, statistic: torch.Tensor) -> torch.Tensor:
        """`[B, N, 1]` -> `[1, B, cols, rows, 1]`."""
        rows, cols = self.grid_size
        return statistic[:, self.num_prefix_tokens :].view(1, self.shape[0], rows, cols, 1).transpose(2, 3)

    def per_head(self, gate: torch.Tensor) -> torch.Tensor:
        """`[H]` -> `[H, 1, 1, 1, 1]`."""
        return gate.view(self.num_heads, 1, 1, 1, 1)

    def per_channel(self, parameter: torch.Tensor) -> torch.Tensor:
        """`[C]` -> `[H, 1, 1, 1, D]`."""
        return parameter.view(self.num_heads, 1, 1, 1, -1)


def gates_are_one(mean_gate: torch.Tensor, var_gate: torch.Tensor) -> bool:
    return bool((mean_gate == 1).all() and (var_gate == 1).all())


def stack_values(hidden_states: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
    """`[x_h, x_h * x_h]` for the grid tokens of `hidden_states` `[B, N, C]`: `[H, B, cols, rows, 2, D]`."""
    stacked = grid.empty(hidden_states, stacked=True)
    values = stacked[..., 0, :]
    values.copy_(grid.view(hidden_states))
    torch.mul(values, values, out=stacked[..., 1, :])
    return stacked


def mix(
    stacked: torch.Tensor, columns: torch.Tensor, rows: torch.Tensor | None, grid: TokenGrid
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(P_cols-mixed, P_h @ stacked)` for the stacked values `[H, B, cols, rows, 2, D]` (`TokenGrid.empty`); both
    the same shape and layout. `P_h = P_rows (x) P_cols` (`dtn.mixing_matrices`), columns mixed first.

    `columns`: `[H, cols, cols]`, one `[cols, cols] @ [cols, 2 * B * D]` GEMM per head and row, or `[B, H, cols,
    cols]` (`per_example`: text with padding, one row), one product per example and head. `rows`: `[H, rows, rows]`,
    one `[rows, rows] @ [rows, cols * 2 * B * D]` GEMM per head, or None for one row (then both results are one).
    """
    stored = grid.memory_order(stacked)
    if columns.dim() == 4:  # [H * B, cols, cols] @ [H * B, cols, 2 * D]
        heads, batch, cols = stored.shape[:3]
        per_example = columns.transpose(0, 1).reshape(heads * batch, cols, cols)
        mixed = torch.bmm(per_example, stored.view(heads * batch, cols, -1)).view(stored.shape)
    else:  # [H, 1, cols, cols] @ [H, rows, cols, 2 * B * D]
        heads, num_rows, cols = stored.shape[:3]
        mixed = torch.matmul(columns[:, None], stored.view(heads, num_rows, cols, -1)).view(stored.shape)
    if rows is None:
        return grid.grid_order(mixed), grid.grid_order(mixed)
    by_rows = torch.bmm(rows, mixed.view(heads, num_rows, -1))  # [H, rows, rows] @ [H, rows, cols * 2 * B * D]
    return grid.grid_order(mixed), grid.grid_order(by_rows.view(stored.shape))


def mix_backward(
    grad_mixed: torch.Tensor,
    stacked: torch.Tensor,
    column_mixed: torch.Tensor,
    columns: torch.Tensor,
    rows: torch.Tensor | None,
    grid: TokenGrid,
    matrix_grads: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The gradients of `mix` from the gradient of its result (`TokenGrid.empty` layout): `(grad_stacked,
    grad_columns, grad_rows)`, the matrices' gradients None unless `matrix_grads`.

    `d stacked = P^T d mixed` and `d P = d mixed @ stacked^T`, per mixing step, rows first.
    """
    grad, stored = grid.memory_order(grad_mixed), grid.memory_order(stacked)
    heads, shape = stored.shape[0], stored.shape
    grad_rows = None
    if rows is not None:
        flat = (heads, rows.shape[-1], -1)  # [H, rows, cols * 2 * B * D]
        if matrix_grads:
            grad_rows = torch.bmm(grad.view(flat), grid.memory_order(column_mixed).view(flat).transpose(1, 2))
        grad = torch.bmm(rows.transpose(1, 2), grad.view(flat)).view(shape)
    if columns.dim() == 4:
        batch, cols = shape[1:3]
        per_example = columns.transpose(0, 1).reshape(heads * batch, cols, cols)
        grad_values, values = grad.view(heads * batch, cols, -1), stored.view(heads * batch, cols, -1)
        grad_stacked = torch.bmm(per_example.transpose(1, 2), grad_values).view(shape)
        grad_columns = None
        if matrix_grads:
            grad_columns = torch.bmm(grad_values, values.transpose(1, 2)).view(heads, batch, cols, cols).transpose(0, 1)
        return grid.grid_order(grad_stacked), grad_columns, grad_rows
    by_rows = (*shape[:3], -1)  # [H, rows, cols, 2 * B * D]
    grad_values, values = grad.view(by_rows), stored.view(by_rows)
    grad_stacked = torch.matmul(columns.transpose(1, 2)[:, None], grad_values).view(shape)
    grad_columns = torch.matmul(grad_values, values.transpose(2, 3)).sum(1) if matrix_grads else None
    return grid.grid_order(grad_stacked), grad_columns, grad_rows


@dataclass(frozen=True)
class Statistics:
    """The per-head and per-token factors of DTN's statistics, `[H, B, cols, rows, 1]` at most (small tensors):
    `mu_h = mean_ln_part + (1 - l_mu) (P x)`, `var_h + eps = var_ln_part + (1 - l_var) max(P x^2 - (P x)^2, 0)`."""

    mean_ln: torch.Tensor  # [1, B, cols, rows, 1]
    var_ln: torch.Tensor  # [1, B, cols, rows, 1], biased, without eps
    mean_gate: torch.Tensor  # [H, 1, 1, 1, 1]
    var_gate: torch.Tensor
    mean_ln_part: torch.Tensor  # l_mu * mean_ln
    var_ln_part: torch.Tensor  # l_var * var_ln + eps

    @classmethod
    def of(cls, mean_ln, inv_std_ln, mean_gate, var_gate, eps: float, grid: TokenGrid) -> Statistics:
        """From `native_layer_norm`'s `mean`, `rstd` (`[B, N, 1]`) and the gates `[H]`."""
        mean_ln, var_eps_ln = grid.per_token(mean_ln), grid.per_token(inv_std_ln).pow(-2)
        mean_gate, var_gate = grid.per_head(mean_gate), grid.per_head(var_gate)
        var_ln_part = torch.addcmul((1 - var_gate) * eps, var_gate, var_eps_ln)  # l (var_ln + eps) + (1 - l) eps
        return cls(mean_ln, var_eps_ln - eps, mean_gate, var_gate, mean_gate * mean_ln, var_ln_part)


def normalize(
    mixed: torch.Tensor, values: torch.Tensor, stats: Statistics, grid: TokenGrid, keep: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(x - mu_h) / sqrt(var_h + eps)` from `mixed = [P x, P x^2]` and the grid values `x`, in the mixing layout.

    Returns `(normalized, inv_std, variance)` with `variance = P x^2 - (P x)^2` before the clamp at 0. Without `keep`
    the buffers of `mixed` and `values` are reused (and overwritten); with `keep`, `mixed`'s second half becomes
    `variance` and the first stays `P x`, for the backward.
    """
    mean_inter, variance = mixed[..., 0, :], mixed[..., 1, :].addcmul_(mixed[..., 0, :], mixed[..., 0, :], value=-1)
    if keep:
        inv_std = torch.clamp_min(variance, 0, out=grid.empty(values, stacked=False))
        normalized = torch.sub(values, stats.mean_ln_part, out=grid.empty(values, stacked=False))
    else:
        inv_std, normalized = variance.clamp_min_(0), values.sub_(stats.mean_ln_part)
    inv_std.mul_(1 - stats.var_gate).add_(stats.var_ln_part).rsqrt_()
    normalized.addcmul_(mean_inter, stats.mean_gate - 1).mul_(inv_std)  # x - l mean_ln - (1 - l) P x
    return normalized, inv_std, variance


class TokenNormFunction(torch.autograd.Function):
    """DTN's output `[B, N, C]` with autograd: inputs `hidden_states` `[B, N, C]`, the mixing matrices (`mix`), the
    gates `[H]`, `weight`, `bias` `[C]`, `eps` and the `TokenGrid`. Prefix tokens, and all tokens when every gate is
    exactly 1, keep `native_layer_norm`'s output bit for bit.

    Backward, per element of the grid (sums over the broadcast dimensions), with `g = dy * weight`, `r = inv_std`,
    `n = normalized`, `v = P x^2 - (P x)^2`:
        dx += g r                                  (through x - mu_h; d mu_h = -g r)
        dvar_h = -g n r^2 / 2
        dl_mu = sum g r (P x - mean_ln),           dl_var = sum dvar_h (var_ln - max(v, 0))
        d(P x^2) = dv = (1 - l_var) dvar_h [v >= 0],   d(P x) = -(1 - l_mu) g r - 2 (P x) dv
        d[x, x^2], dP: `mix_backward`;             dx += d[x] + 2 x d[x^2]
        dx += (sum_h,d l_mu dmu_h) / C + (sum_h,d l_var dvar_h) * 2 (x - mean_ln) / C   (LayerNorm statistics)
    Prefix tokens take LayerNorm's own backward.
    """

    @staticmethod
    def forward(ctx, hidden_states, columns, rows, mean_gate, var_gate, weight, bias, eps, grid):
        out, mean_ln, inv_std_ln = torch.native_layer_norm(hidden_states, grid.normalized_shape, weight, bias, eps)
        stacked = stack_values(hidden_states, grid)
        column_mixed, mixed = mix(stacked, columns, rows, grid)
        stats = Statistics.of(mean_ln, inv_std_ln, mean_gate, var_gate, eps, grid)
        normalized, inv_std, _ = normalize(mixed, stacked[..., 0, :], stats, grid, keep=True)
        if not gates_are_one(mean_gate, var_gate):
            torch.addcmul(grid.per_channel(bias), normalized, grid.per_channel(weight), out=grid.view(out))
        ctx.grid, ctx.stats, ctx.eps = grid, stats, eps
        saved = (hidden_states, mean_ln, inv_std_ln, stacked, column_mixed, mixed, normalized, inv_std)
        ctx.save_for_backward(*saved, columns, rows, weight, bias)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, mean_ln, inv_std_ln, stacked, column_mixed, mixed, normalized, inv_std, columns, rows, weight, bias = (
            ctx.saved_tensors
        )
        grid, stats = ctx.grid, ctx.stats
        grad_output = grad_output.contiguous()
        grad_mixed, grad_centred, grad_stats, grad_gates, grad_weight = normalize_backward(
            grad_output, mixed, normalized, inv_std, stats, weight, grid
        )
        matrix_grads = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        grad_stacked, grad_columns, grad_rows = mix_backward(
            grad_mixed, stacked, column_mixed, columns, rows, grid, matrix_grads
        )
        grad_x = torch.empty_like(x)
        input_backward(grad_x, grad_stacked, stacked[..., 0, :], grad_centred, grad_stats, stats, grid)
        prefix = grid.num_prefix_tokens
        if prefix:
            grad_prefix, grad_weight_prefix, _ = torch.ops.aten.native_layer_norm_backward(
                *(t[:, :prefix].contiguous() for t in (grad_output, x)), grid.normalized_shape,
                *(t[:, :prefix].contiguous() for t in (mean_ln, inv_std_ln)), weight, bias, [True, True, False],
            )  # fmt: skip
            grad_x[:, :prefix] = grad_prefix
            grad_weight += grad_weight_prefix
        grad_bias = grad_output.sum((0, 1))  # over every token at once: over the grid slice it is 10-20x slower
        return grad_x, grad_columns, grad_rows, *grad_gates, grad_weight, grad_bias, None, None


def normalize_backward(grad_output, mixed, normalized, inv_std, stats: Statistics, weight, grid: TokenGrid):
    """From `dy` `[B, N, C]`: `(d mixed, g r, (d mean_ln, d var_ln) [1, B, cols, rows, 1], (dl_mu, dl_var), dweight
    over the grid)`, by the equations of `TokenNormFunction`, in passes with at most one broadcast operand; the two
    halves of `d mixed` serve as scratch until they are written."""
    grad_grid = grid.view(grad_output)
    grad_mixed = grid.empty(normalized, stacked=True)
    scratch, grad_var = grad_mixed[..., 0, :], grad_mixed[..., 1, :]
    grad_weight = torch.mul(grad_grid, normalized, out=scratch).sum((1, 2, 3)).reshape(-1)
    grad_centred = torch.mul(grad_grid, grid.per_channel(weight), out=grid.empty(normalized, stacked=False))
    grad_centred.mul_(inv_std)  # g r
    torch.mul(grad_centred, normalized, out=grad_var).mul_(inv_std)  # g n r^2 = -2 dvar_h
    grad_centred_sum, grad_var_sum = grad_centred.sum(4, keepdim=True), grad_var.sum(4, keepdim=True)
    mean_inter, variance = mixed[..., 0, :], mixed[..., 1, :]
    dims = (1, 2, 3, 4)
    # dl_mu = sum g r (P x - mean_ln), dl_var = sum g n r^2 (max(v, 0) - var_ln) / 2
    grad_mean_gate = torch.mul(grad_centred, mean_inter, out=scratch).sum(dims)
    grad_mean_gate -= (grad_centred_sum * stats.mean_ln).sum(dims)
    grad_var_gate = torch.clamp_min(variance, 0, out=scratch).mul_(grad_var).sum(dims)
    grad_var_gate = (grad_var_gate - (grad_var_sum * stats.var_ln).sum(dims)) / 2
    grad_mean_ln = -(grad_centred_sum * stats.mean_gate).sum(0, keepdim=True)
    grad_var_ln = -(grad_var_sum * stats.var_gate).sum(0, keepdim=True) / 2
    grad_variance = grad_var.mul_((stats.var_gate - 1) / 2)  # (1 - l_var) dvar_h
    grad_variance.mul_(torch.ge(variance, 0, out=scratch))  # a float mask: a bool one is 5-20x slower here
    torch.mul(grad_centred, stats.mean_gate - 1, out=scratch).addcmul_(mean_inter, grad_variance, value=-2)
    grad_stats, grad_gates = (grad_mean_ln, grad_var_ln), (grad_mean_gate, grad_var_gate)
    return grad_mixed, grad_centred, grad_stats, grad_gates, grad_weight


def input_backward(grad_x, grad_stacked, values, grad_centred, grad_stats, stats: Statistics, grid: TokenGrid) -> None:
    """Writes `dx` of the grid tokens into `grad_x` `[B, N, C]`: `d[x] + 2 x d[x^2] + g r` plus LayerNorm's statistics'
    part, `d mean_ln / C + d var_ln * 2 (x - mean_ln) / C = beta + x alpha` (per token)."""
    grad_mean_ln, grad_var_ln = grad_stats
    channels = grid.shape[-1]
    alpha = grad_var_ln * (2 / channels)
    beta = grad_mean_ln / channels - stats.mean_ln * alpha
    through_squares = torch.add(alpha, grad_stacked[..., 1, :], alpha=2, out=grad_stacked[..., 1, :])
    grad_values = torch.addcmul(grad_stacked[..., 0, :], values, through_squares, out=grad_stacked[..., 0, :])
    torch.add(grad_values.add_(grad_centred), beta, out=grid.view(grad_x))


def fast_token_norm(
    hidden_states: torch.Tensor,
    grid: TokenGrid,
    mixing: tuple[torch.Tensor, torch.Tensor | None],
    parameters: tuple[torch.Tensor, ...],
    eps: float,
) -> torch.Tensor:
    """DTN's output `[B, N, C]` for float32 or float64 `hidden_states` `[B, N, C]`, eagerly, with the column and row
    `mixing` matrices of `mix` and the gates and affine of `parameters` (`dtn.TokenNormParameters`). With autograd, `TokenNormFunction`; without,
    the normalisation runs in place in the mixing buffers."""
    (columns, rows), (_, mean_gate, var_gate, weight, bias) = mixing, parameters
    inputs = (hidden_states, columns, rows, mean_gate, var_gate, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        return TokenNormFunction.apply(hidden_states, columns, rows, mean_gate, var_gate, weight, bias, eps, grid)
    out, mean_ln, inv_std_ln = torch.native_layer_norm(hidden_states, grid.normalized_shape, weight, bias, eps)
    if gates_are_one(mean_gate, var_gate):
        return out
    stacked = stack_values(hidden_states, grid)
    _, mixed = mix(stacked, columns, rows, grid)
    stats = Statistics.of(mean_ln, inv_std_ln, mean_gate, var_gate, eps, grid)
    normalized, _, _ = normalize(mixed, stacked[..., 0, :], stats, grid, keep=False)
    torch.addcmul(grid.per_channel(bias), normalized, grid.per_channel(weight), out=grid.view(out))
    return out
