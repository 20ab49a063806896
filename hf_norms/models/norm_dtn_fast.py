"""DTN's fast path for eager float32: the grid tokens mixed in a columns-first memory order, the normalisation in place
without autograd, and written-out backwards (`StackValues`, `TokenNormFunction`) with autograd.

The same mathematics as `norm_dtn.token_norm_formula`, which every other runtime (compile, export, autocast, 16-bit)
runs; `DynamicTokenNorm` picks this path only in eager float32 or float64 (`runtime.is_eager_full_precision`), because
it works in place, uses custom autograd Functions and branches on tensor values (`gates_are_one`), which tracers must
not see.

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenGrid:
    """Views between DTN's `[B, N, C]` activations and its per-head grid layout `[H, B, cols, rows, D]`."""

    num_prefix_tokens: int
    grid_size: tuple[int, int]  # (rows, cols)
    num_heads: int
    shape: torch.Size  # [B, N, C]

    @property
    def normalized_shape(self) -> tuple[int]:
        return (self.shape[-1],)

    def view(self, tensor: torch.Tensor) -> torch.Tensor:
        """`[B, N, C]` -> the grid tokens as `[H, B, cols, rows, D]` (a view)."""
        batch, _, hidden = self.shape
        rows, cols = self.grid_size
        grid = tensor[:, self.num_prefix_tokens :].reshape(batch, rows, cols, self.num_heads, hidden // self.num_heads)
        return grid.permute(3, 0, 2, 1, 4)

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


def token_norm(
    layer_norm: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    stacked: torch.Tensor,
    mixed: torch.Tensor,
    mean_gate: torch.Tensor,
    var_gate: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    grid: TokenGrid,
    keep: bool,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """DTN's output `[B, N, C]` from `native_layer_norm`'s `(output, mean, rstd)` of the input, the values
    `stacked = [x_h, x_h * x_h]` and their mixing `mixed = [P_h @ x_h, P_h @ (x_h * x_h)]` (both `[H, B, cols, rows,
    2, D]`, in the same memory order), by the formula of `DynamicTokenNorm`.

    Without `keep`, `mixed` and LayerNorm's output are overwritten (and returned as the output) and nothing is kept;
    with `keep` (for the backward), the inputs are left as they are and the tensors the backward needs are returned: `(inter, inv_std, normalized, not_clamped)`, with
    `inter = max(P_h @ x^2 - (P_h @ x)^2, 0) + eps`, `inv_std = 1 / sqrt(var_h + eps)`, `normalized = (x - mu_h) *
    inv_std` and `not_clamped = P_h @ x^2 - (P_h @ x)^2 >= 0`.
    """
    out, mean_ln, inv_std_ln = layer_norm
    mean_ln, var_eps_ln = grid.per_token(mean_ln), grid.per_token(inv_std_ln.pow(-2))  # var_ln + eps
    mean_inter, square_inter = mixed[..., 0, :], mixed[..., 1, :]  # P_h @ x_h, P_h @ (x_h * x_h)
    mean_gate, var_gate = grid.per_head(mean_gate), grid.per_head(var_gate)
    if keep:
        variance = torch.addcmul(square_inter, mean_inter, mean_inter, value=-1)
        not_clamped = variance >= 0
        inter = variance.clamp_min_(0).add_(eps)
        inv_std = torch.lerp(inter, var_eps_ln, var_gate).rsqrt_()
        mean = torch.lerp(mean_inter, mean_ln, mean_gate)
    else:
        inter = square_inter.addcmul_(mean_inter, mean_inter, value=-1).clamp_min_(0).add_(eps)
        inv_std = inter.lerp_(var_eps_ln, var_gate).rsqrt_()
        mean = mean_inter.lerp_(mean_ln, mean_gate)
    normalized = torch.sub(stacked[..., 0, :], mean, out=mean).mul_(inv_std)
    if not gates_are_one(mean_gate, var_gate):
        torch.addcmul(grid.per_channel(bias), normalized, grid.per_channel(weight), out=grid.view(out))
    return out, ((inter, inv_std, normalized, not_clamped) if keep else None)


class StackValues(torch.autograd.Function):
    """`[x_h, x_h * x_h]`: the grid tokens of `hidden_states` `[B, N, C]` and their squares side by side,
    `[H, B, cols, rows, 2, D]`, for one token mixing of both. With `columns_first` the memory is ordered
    `[H, cols, B, rows, 2, D]` (a transposed view is returned), so `DynamicTokenNorm.mix_tokens` mixes columns with
    one `[cols, cols]` product per head. The backward, `dx = d[x] + 2 x d[x * x]` for grid tokens and 0 for prefix
    tokens, is written into `[B, N, C]` order in one pass.
    """

    @staticmethod
    def forward(ctx, hidden_states: torch.Tensor, grid: TokenGrid, columns_first: bool) -> torch.Tensor:
        values = grid.view(hidden_states)
        heads, batch, cols, rows, depth = values.shape
        if columns_first:
            stacked = values.new_empty(heads, cols, batch, rows, 2, depth).transpose(1, 2)
        else:
            stacked = values.new_empty(heads, batch, cols, rows, 2, depth)
        stacked[..., 0, :] = values
        torch.mul(stacked[..., 0, :], stacked[..., 0, :], out=stacked[..., 1, :])
        ctx.grid = grid
        ctx.save_for_backward(stacked)
        return stacked

    @staticmethod
    def backward(ctx, grad_stacked: torch.Tensor):
        (stacked,) = ctx.saved_tensors
        grid: TokenGrid = ctx.grid
        grad_x = grad_stacked.new_empty(grid.shape)
        grad_x[:, : grid.num_prefix_tokens] = 0
        values, grad_values, grad_squares = stacked[..., 0, :], grad_stacked[..., 0, :], grad_stacked[..., 1, :]
        torch.addcmul(grad_values, values, grad_squares, value=2, out=grid.view(grad_x))
        return grad_x, None, None


class TokenNormFunction(torch.autograd.Function):
    """`token_norm` with a written-out backward: autograd's took four times as long through some 40 elementwise steps.

    Inputs: `hidden_states` `[B, N, C]`, `stacked` and `mixed` `[H, B, cols, rows, 2, D]` (see `token_norm`), the gates
    `[H]`, `weight`, `bias` `[C]`, `eps` and the `TokenGrid`. The gradient of `mixed` continues through the token mixing
    under autograd; `stacked` gets none here (its `x` half serves as `x` in the mixing order).

    Backward, per element of the grid (sums over the broadcast dimensions), with `g = dy * weight`, `r = inv_std`,
    `n = normalized`:
        dx += g r                                  (through x - mu_h)
        dvar_h = -g n r^2 / 2,   dmu_h = -g r
        dl_mu = sum dmu_h (mu_ln - P x),           dl_var = sum dvar_h (var_ln + eps - inter)
        d(P x) = (1 - l_mu) dmu_h - 2 (P x) dv,    d(P x^2) = dv,  with dv = (1 - l_var) dvar_h [not clamped]
        dx_token += (sum_h,d l_mu dmu_h) / C + (sum_h,d l_var dvar_h) * 2 (x - mu_ln) / C   (LayerNorm statistics)
    Prefix tokens take LayerNorm's own backward.
    """

    @staticmethod
    def forward(ctx, hidden_states, stacked, mixed, mean_gate, var_gate, weight, bias, eps, grid):
        layer_norm = torch.native_layer_norm(hidden_states, grid.normalized_shape, weight, bias, eps)
        out, saved = token_norm(layer_norm, stacked, mixed, mean_gate, var_gate, weight, bias, eps, grid, keep=True)
        ctx.grid = grid
        ctx.save_for_backward(hidden_states, *layer_norm[1:], stacked, mixed, mean_gate, var_gate, weight, bias, *saved)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, mean_ln, inv_std_ln, stacked, mixed, mean_gate, var_gate, weight, bias, *saved = ctx.saved_tensors
        inter, inv_std, normalized, not_clamped = saved
        grid: TokenGrid = ctx.grid
        grad_output = grad_output.contiguous()
        # Fresh large buffers cost page faults on CPU: the temporaries share one `scratch` buffer, and everything is
        # computed in the memory order of the saved tensors.
        grad_grid = torch.empty_like(normalized).copy_(grid.view(grad_output))
        scratch = torch.empty_like(normalized)
        grad_weight = torch.mul(grad_grid, normalized, out=scratch).sum((1, 2, 3)).reshape(-1)
        grad_bias = grad_grid.sum((1, 2, 3)).reshape(-1)
        grad_x = torch.empty_like(x)
        prefix = grid.num_prefix_tokens
        if prefix:
            grad_prefix, grad_weight_prefix, grad_bias_prefix = torch.ops.aten.native_layer_norm_backward(
                *(t[:, :prefix].contiguous() for t in (grad_output, x)), grid.normalized_shape,
                *(t[:, :prefix].contiguous() for t in (mean_ln, inv_std_ln)), weight, bias, [True, True, True],
            )  # fmt: skip
            grad_x[:, :prefix] = grad_prefix
            grad_weight += grad_weight_prefix
            grad_bias += grad_bias_prefix
        mean_token, var_eps_token = grid.per_token(mean_ln), grid.per_token(inv_std_ln.pow(-2))
        mean_inter = mixed[..., 0, :]
        grad_normalized = grad_grid.mul_(grid.per_channel(weight))
        grad_centred = grad_normalized * inv_std  # d/dx through x - mu_h; d/dmu_h is its negative
        grad_var = grad_normalized.mul_(normalized).mul_(inv_std).mul_(inv_std).mul_(-0.5)  # d/dvar_h
        grad_mean_gate = torch.sub(mean_inter, mean_token, out=scratch).mul_(grad_centred).sum((1, 2, 3, 4))
        grad_var_gate = torch.sub(var_eps_token, inter, out=scratch).mul_(grad_var).sum((1, 2, 3, 4))
        mean_gate, var_gate = grid.per_head(mean_gate), grid.per_head(var_gate)
        grad_mean_token = -(grad_centred.sum(4, keepdim=True) * mean_gate).sum(0, keepdim=True)
        grad_var_token = (grad_var.sum(4, keepdim=True) * var_gate).sum(0, keepdim=True)
        grad_variance = grad_var.mul_(1 - var_gate).mul_(not_clamped)
        grad_mixed = torch.empty_like(mixed)
        torch.mul(grad_centred, mean_gate - 1, out=grad_mixed[..., 0, :]).addcmul_(mean_inter, grad_variance, value=-2)
        grad_mixed[..., 1, :] = grad_variance
        channels = x.shape[-1]
        grad_token_x = torch.sub(stacked[..., 0, :], mean_token, out=scratch).mul_(grad_var_token * (2 / channels))
        grid.view(grad_x).copy_(grad_token_x.add_(grad_centred).add_(grad_mean_token / channels))
        return grad_x, None, grad_mixed, grad_mean_gate, grad_var_gate, grad_weight, grad_bias, None, None


def mix_stacked(stacked: torch.Tensor, column_mixing: torch.Tensor, row_mixing: torch.Tensor | None) -> torch.Tensor:
    """`P_h @ values` for `stacked` values `[H, B, cols, rows, K, D]` (from `StackValues`); returns the same shape.

    `P_h = P_rows (x) P_cols` (see `norm_dtn.axis_mixing`): columns are mixed first, then rows. `column_mixing` is `[H,
    cols, cols]`, applied to all examples as one `[cols, cols] @ [cols, B * rows * K * D]` product per head (`stacked`
    is stored columns first for this), or `[B, H, cols, cols]` with padding (one-row layouts: text), one matrix per
    example. `row_mixing` is `[H, rows, rows]`, or None for one row.
    """
    heads, batch, cols, rows = stacked.shape[:4]
    column_mixing = column_mixing.to(stacked.dtype)
    if column_mixing.dim() == 4:  # [H, B, cols, cols] @ [H, B, cols, K * D]
        values = stacked.reshape(heads, batch, cols, -1)
        return (column_mixing.transpose(0, 1) @ values).view(stacked.shape)
    columns_first = stacked.transpose(1, 2)  # [H, cols, B, rows, K, D]
    mixed = column_mixing @ columns_first.reshape(heads, cols, -1)  # [H, cols, cols] @ [H, cols, B * rows * K * D]
    if row_mixing is not None:
        mixed = row_mixing.to(stacked.dtype)[:, None] @ mixed.view(heads, cols * batch, rows, -1)
    return mixed.view(columns_first.shape).transpose(1, 2)


def fast_token_norm(
    hidden_states: torch.Tensor,
    grid: TokenGrid,
    column_mixing: torch.Tensor,
    row_mixing: torch.Tensor | None,
    mean_gate: torch.Tensor,
    var_gate: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """DTN's output `[B, N, C]` for float32 or float64 `hidden_states` `[B, N, C]`, eagerly, with the mixing matrices of
    `mix_stacked`. Prefix tokens keep LayerNorm's output, and the token statistics come with it (`native_layer_norm`).

    With autograd, `TokenNormFunction` gives the written-out backward; without, the normalisation runs in place in two
    buffers.
    """
    columns_first = column_mixing.dim() == 3
    if torch.is_grad_enabled():
        stacked = StackValues.apply(hidden_states, grid, columns_first)
        mixed = mix_stacked(stacked, column_mixing, row_mixing)
        return TokenNormFunction.apply(hidden_states, stacked, mixed, mean_gate, var_gate, weight, bias, eps, grid)
    layer_norm = torch.native_layer_norm(hidden_states, grid.normalized_shape, weight, bias, eps)
    stacked = StackValues.apply(hidden_states, grid, columns_first)
    mixed = mix_stacked(stacked, column_mixing, row_mixing)
    out, _ = token_norm(layer_norm, stacked, mixed, mean_gate, var_gate, weight, bias, eps, grid, keep=False)
    return out
