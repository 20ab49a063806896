"""Dynamic Token Normalization (DTN): LayerNorm statistics mixed, per head, with position-aware statistics across
tokens (Shao et al.), with its fast paths: separable token mixing and written-out backwards.

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init

from .token_layout import TokenLayout


def local_position_init(num_heads: int, one_dimensional: bool) -> torch.Tensor:
    """ConViT-style local init of DTN's `pos_proj.weight` (`[num_heads, 3]`).

    Head h gets `(2*d_x, 2*d_y, -1)`, so its logits `-(dx - d_x)^2 - (dy - d_y)^2 + const` peak at offset
    `(d_x, d_y)`: heads look at the neighbours on a centred `k x k` grid of offsets (`k = ceil(sqrt(H))`), or along a line
    of offsets for text.
    """
    weight = torch.zeros(num_heads, 3)
    if one_dimensional:
        offsets = [(h - num_heads // 2, 0) for h in range(num_heads)]
    else:
        k = math.ceil(math.sqrt(num_heads))
        offsets = [(h % k - k // 2, h // k - k // 2) for h in range(num_heads)]
    for h, (d_x, d_y) in enumerate(offsets):
        weight[h] = torch.tensor([2.0 * d_x, 2.0 * d_y, -1.0])
    return weight


def axis_mixing(
    length: int, linear: torch.Tensor, quadratic: torch.Tensor, source_mask: torch.Tensor | None
) -> torch.Tensor:
    """Per-head softmax over source positions j of `linear_h * d + quadratic_h * d^2`, `d = j - i`, along one axis.

    `linear`, `quadratic`: `[H]`; `source_mask`: `[B, length]` (False: padding, never a source). Returns
    `[H, length(i), length(j)]`, or `[B, H, length, length]` with a mask; rows sum to 1.
    """
    positions = torch.arange(length, device=linear.device, dtype=linear.dtype)
    offsets = positions[None, :] - positions[:, None]
    logits = linear[:, None, None] * offsets + quadratic[:, None, None] * offsets * offsets
    if source_mask is not None:
        logits = logits.unsqueeze(0).masked_fill(~source_mask[:, None, None, :], torch.finfo(logits.dtype).min)
    return logits.softmax(dim=-1)


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


class DynamicTokenNorm(nn.Module):
    """Dynamic Token Normalization (DTN), Shao et al., ICLR 2022 (arXiv 2112.02624), in the paper's exact form.

    Channels split into `H` groups ("heads") of `D = hidden / H`. For a grid token i in head h, with `mu_ln, var_ln` the
    token's statistics over all channels (biased variance, as LayerNorm) and `x_h` the head's channels of all grid
    tokens:

        mu_h  = l_mu  * mu_ln  + (1 - l_mu)  * (P_h @ x_h)
        var_h = l_var * var_ln + (1 - l_var) * (P_h @ (x_h * x_h) - (P_h @ x_h) ** 2)
        y     = weight * (x - mu_h) / sqrt(var_h + eps) + bias

    `P_h = softmax_j(a_h . R_ij + b_h)` mixes tokens by their relative offsets `R_ij = (dx, dy, dx^2 + dy^2)`, with
    `pos_proj = Linear(3, H)` holding `a_h, b_h`. Padding tokens (`layout.padding_mask == 0`) get no weight in `P_h`.
    Prefix tokens use plain LayerNorm statistics. The gates `l_mu, l_var` (`mean_gate`, `var_gate`, `[H]`) are stored
    as their value, kept in `[0, 1]` by projection (`gates`): 0.5 is the paper's initial `sigmoid(0)`, and exactly 1
    is LayerNorm, from where training can still move them.

    Extra parameters over LayerNorm: `3H + H` (pos_proj) `+ 2H` (gates) `= 6H`.
    Input and output: `[batch, seq_len, hidden]`; needs a `TokenLayout`.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        eps: float = 1e-5,
        gate_init: float = 0.5,
        one_dimensional: bool = False,
    ):
        super().__init__()
        if hidden_size % num_heads != 0:
            raise ValueError(f"DTN heads ({num_heads}) must divide the hidden size ({hidden_size}).")
        self.num_heads = num_heads
        self.eps = eps
        self.gate_init = gate_init
        self.one_dimensional = one_dimensional
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.pos_proj = nn.Linear(3, num_heads)
        self.mean_gate = nn.Parameter(torch.full((num_heads,), gate_init))
        self.var_gate = nn.Parameter(torch.full((num_heads,), gate_init))

    def init_parameters(self) -> None:
        init.ones_(self.weight)
        init.zeros_(self.bias)
        init.copy_(
            self.pos_proj.weight,
            local_position_init(self.num_heads, self.one_dimensional),
        )
        init.zeros_(self.pos_proj.bias)
        init.constant_(self.mean_gate, self.gate_init)
        init.constant_(self.var_gate, self.gate_init)

    def gates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`l_mu, l_var` in [0, 1], by projected gradient descent.

        In training the stored gates are first projected back into [0, 1] in place (undoing an optimizer step that
        left the range), so the clamp below is the identity with its gradient passing, also at exactly 1 (LayerNorm,
        where a converted model starts): a plain clamp would stop the gradient for good once a step went past 1.
        """
        if self.training:
            with torch.no_grad():
                self.mean_gate.clamp_(0, 1)
                self.var_gate.clamp_(0, 1)
        return self.mean_gate.clamp(0, 1), self.var_gate.clamp(0, 1)

    @staticmethod
    def source_mask(layout: TokenLayout) -> torch.Tensor | None:
        """`[B, cols]` bool mask of the grid tokens that may be mixed (False: padding), or None when all may be."""
        if layout.padding_mask is None:
            return None
        if layout.grid_size[0] != 1:
            raise ValueError("DTN takes a padding mask only for one-row layouts (text); images have no padding.")
        mask = layout.padding_mask[:, layout.num_prefix_tokens :].bool()
        return None if bool(mask.all()) else mask

    def mix_tokens(self, stacked: torch.Tensor, source_mask: torch.Tensor | None) -> torch.Tensor:
        """`P_h @ values` for `stacked` values of shape `[H, B, cols, rows, K, D]` (from `StackValues`), without
        forming the `[H, M, M]` matrix `P_h`; returns the same shape.

        The logits `a_h . (dx, dy, dx^2 + dy^2) + b_h` split into a column term `a_h0 dx + a_h2 dx^2` and a row term
        `a_h1 dy + a_h2 dy^2` (`b_h` is constant over the source token and cancels in the softmax), so the softmax over
        the grid is the product of a softmax over columns and one over rows: `P_h = P_rows (x) P_cols`. Mixing along
        columns then along rows costs `M * (rows + cols)` instead of `M^2` per channel. Without padding, columns are
        mixed by one `[cols, cols] @ [cols, B * rows * K * D]` product per head (memory ordered columns first); with
        `source_mask` (`[B, cols]`, one-row layouts: text), each example has its own `[cols, cols]` matrix.
        """
        heads, batch, cols, rows = stacked.shape[:4]
        weight = self.pos_proj.weight  # [H, 3]: coefficients of dx, dy, dx^2 + dy^2
        column_mixing = axis_mixing(cols, weight[:, 0], weight[:, 2], source_mask).to(stacked.dtype)
        if source_mask is not None:  # [H, B, cols, cols] @ [H, B, cols, K * D]
            values = stacked.reshape(heads, batch, cols, -1)
            return (column_mixing.transpose(0, 1) @ values).view(stacked.shape)
        columns_first = stacked.transpose(1, 2)  # [H, cols, B, rows, K, D]
        mixed = column_mixing @ columns_first.reshape(heads, cols, -1)  # [H, cols, cols] @ [H, cols, B * rows * K * D]
        if rows > 1:
            row_mixing = axis_mixing(rows, weight[:, 1], weight[:, 2], None).to(stacked.dtype)  # [H, rows, rows]
            mixed = row_mixing[:, None] @ mixed.view(heads, cols * batch, rows, -1)
        return mixed.view(columns_first.shape).transpose(1, 2)

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        """The formula of the class docstring, per head and grid token, in the layout `[H, B, cols, rows, D]`.

        Prefix tokens keep LayerNorm's output, and the token statistics come with it (`native_layer_norm`). Gates at
        exactly 1 keep LayerNorm's output for every token, so an exactly converted model is bit-identical to the
        original; without autograd the inter-token work is then skipped, and otherwise it runs in place in two
        buffers. With autograd, `TokenNormFunction` gives the written-out backward.
        """
        if layout is None:
            raise ValueError("DynamicTokenNorm needs a TokenLayout (prefix tokens, grid size, padding mask).")
        layout.check_sequence(hidden_states)
        grid = TokenGrid(layout.num_prefix_tokens, layout.grid_size, self.num_heads, hidden_states.shape)
        mean_gate, var_gate = self.gates()
        source_mask = self.source_mask(layout)
        if torch.is_grad_enabled():
            stacked = StackValues.apply(hidden_states, grid, source_mask is None)
            mixed = self.mix_tokens(stacked, source_mask)
            return TokenNormFunction.apply(
                hidden_states, stacked, mixed, mean_gate, var_gate, self.weight, self.bias, self.eps, grid
            )
        layer_norm = torch.native_layer_norm(hidden_states, grid.normalized_shape, self.weight, self.bias, self.eps)
        if gates_are_one(mean_gate, var_gate):
            return layer_norm[0]
        stacked = StackValues.apply(hidden_states, grid, source_mask is None)
        mixed = self.mix_tokens(stacked, source_mask)
        out, _ = token_norm(
            layer_norm, stacked, mixed, mean_gate, var_gate, self.weight, self.bias, self.eps, grid, keep=False
        )
        return out

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, num_heads={self.num_heads}, eps={self.eps}, gate_init={self.gate_init}"
