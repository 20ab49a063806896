"""DTN's plain formula: the separable token mixing and `token_norm_formula`, as plain functional tensor code. It is what
`torch.compile`, `torch.export`, the ONNX exporters, autocast and 16-bit weights run (`norm_dtn.DynamicTokenNorm`
picks it), what the dynamo ONNX exporter's one-operator DTN computes (`norm_dtn_export`), and the reference every
other path is tested against.

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from typing import NamedTuple

import torch


def axis_mixing(
    offsets: torch.Tensor, linear: torch.Tensor, quadratic: torch.Tensor, source_mask: torch.Tensor | None
) -> torch.Tensor:
    """Per-head softmax over source positions j of `linear_h * d + quadratic_h * d^2` along one axis, for the offsets
    `d = j - i` (`[length(i), length(j)]`, from `axis_offsets`).

    `linear`, `quadratic`: `[H, 1, 1]`; `source_mask`: `[B, length]` (False: padding, never a source). Returns
    `[H, length, length]`, or `[B, H, length, length]` with a mask; rows sum to 1.
    """
    logits = (linear + quadratic * offsets) * offsets
    if source_mask is not None:
        logits = logits.masked_fill(~source_mask[:, None, None, :], torch.finfo(logits.dtype).min)
    return logits.softmax(dim=-1)


def axis_offsets(length: int, like: torch.Tensor) -> torch.Tensor:
    """`d = j - i` for positions `i, j < length` along one axis: `[length, length]`, dtype and device of `like`."""
    positions = torch.arange(length, device=like.device, dtype=like.dtype)
    return positions[None, :] - positions[:, None]


def mixing_matrices(
    position_weight: torch.Tensor, grid_size: tuple[int, int], source_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`P_h` as `(P_cols, P_rows)`: the `[H, cols, cols]` (`[B, H, cols, cols]` with `source_mask`) and `[H, rows,
    rows]` (None for one row) softmaxes whose product is the softmax over the grid, `P_h = P_rows (x) P_cols`, built
    once per call from `pos_proj.weight` `[H, 3]` and shared by the mean and the variance.

    The logits `a_h . (dx, dy, dx^2 + dy^2) + b_h` split into a column term `a_h0 dx + a_h2 dx^2` and a row term
    `a_h1 dy + a_h2 dy^2` (`b_h` is constant over the source token and cancels in the softmax), so mixing along
    columns then along rows costs `M * (rows + cols)` instead of `M^2` per channel.
    """
    rows, cols = grid_size
    coefficients = position_weight.view(-1, 3, 1)
    d_x, d_y, square = coefficients[:, 0:1], coefficients[:, 1:2], coefficients[:, 2:3]  # [H, 1, 1] each
    column_offsets = axis_offsets(cols, position_weight)
    columns = axis_mixing(column_offsets, d_x, square, source_mask)
    if rows == 1:
        return columns, None
    row_offsets = column_offsets if rows == cols else axis_offsets(rows, position_weight)
    return columns, axis_mixing(row_offsets, d_y, square, None)


def mix_values(values: torch.Tensor, columns: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """`P_h @ values` for `values` `[H, cols, B, rows, K]`, with `P_h = P_rows (x) P_cols` (`mixing_matrices`); returns
    `[B, rows, cols, H, K]` (a permuted view).

    `columns`: `[H, cols, cols]`, applied to all examples as one `[cols, cols] @ [cols, B * rows * K]` product per
    head, or `[B, H, cols, cols]` with padding (one row: text), one `[cols, cols] @ [cols, K]` product per example and
    head. `rows`: `[H, rows, rows]`, one `[rows, rows] @ [rows, cols * B * K]` product per head, or None for one row.
    """
    heads, cols, _, num_rows, depth = values.shape
    if columns.dim() == 4:  # [B, H, cols, cols] @ [B, H, cols, K]
        return (columns @ values[..., 0, :].permute(2, 0, 1, 3)).permute(0, 2, 1, 3).unsqueeze(1)
    mixed = torch.bmm(columns, values.reshape(heads, cols, -1))  # [H, cols, B * rows * K]
    if rows is None:
        return mixed.view(heads, cols, -1, 1, depth).permute(2, 3, 1, 0, 4)
    by_rows = mixed.view(heads, cols, -1, num_rows, depth).permute(0, 3, 1, 2, 4).reshape(heads, num_rows, -1)
    return torch.bmm(rows, by_rows).view(heads, num_rows, cols, -1, depth).permute(3, 1, 2, 0, 4)


class TokenNormParameters(NamedTuple):
    """DTN's learned tensors as its equations use them: the position projection `[H, 3]`, the gates `[H]`, the affine
    `[C]`."""

    position_weight: torch.Tensor
    mean_gate: torch.Tensor
    var_gate: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor


def token_norm_formula(
    hidden_states: torch.Tensor,
    source_mask: torch.Tensor | None,
    parameters: TokenNormParameters,
    num_prefix_tokens: int,
    grid_size: tuple[int, int],
    eps: float,
) -> torch.Tensor:
    """DTN's output `[B, N, C]` for `hidden_states` `[B, N, C]`, by the equations of `DynamicTokenNorm`, as plain
    functional tensor code: what `torch.compile`, `torch.export`, the ONNX exporters, autocast and 16-bit weights run,
    and the reference every other path is tested against. Written in few operations (each costs tracing and export
    time): the mixing matrices once (`mixing_matrices`), `[x_h, x_h * x_h]` stacked in the layout of the column product
    and mixed together (`mix_values`), and the gates as `a + l (b - a)`.

    `mu_ln, var_ln` are computed for every token; prefix tokens are normalised with them (LayerNorm). The inter-token
    variance is clamped at 0 against rounding. Shapes come from `grid_size` and the parameters, with -1 for the batch,
    so that every tracer keeps the batch size (and the text length, through `grid_size`) dynamic.
    """
    position_weight, mean_gate, var_gate, weight, bias = parameters
    rows, cols = grid_size
    heads, hidden, p = mean_gate.shape[0], weight.shape[0], num_prefix_tokens
    mean_ln = hidden_states.mean(-1, keepdim=True)  # [B, N, 1]
    centred = hidden_states - mean_ln
    var_eps_ln = (centred * centred).mean(-1, keepdim=True) + eps  # biased, as LayerNorm
    inv_std_ln = torch.rsqrt(var_eps_ln)
    column_mixing, row_mixing = mixing_matrices(position_weight, grid_size, source_mask)

    x_h = hidden_states.narrow(1, p, rows * cols).view(-1, rows, cols, heads, hidden // heads)  # [B, rows, cols, H, D]
    values = x_h.permute(3, 2, 0, 1, 4)  # [H, cols, B, rows, D]: the column product's layout
    mixed = mix_values(torch.cat([values, values * values], dim=-1), column_mixing, row_mixing)
    mean_inter, square_inter = mixed.split(
        hidden // heads, dim=-1
    )  # P_h @ x_h, P_h @ (x_h * x_h): [B, rows, cols, H, D]
    var_eps_inter = (square_inter - mean_inter * mean_inter).clamp_min(0) + eps
    per_token = (-1, rows, cols, 1, 1)
    l_mu, l_var = mean_gate.view(heads, 1), var_gate.view(heads, 1)
    mu = mean_inter + l_mu * (mean_ln.narrow(1, p, rows * cols).view(per_token) - mean_inter)
    var_eps = var_eps_inter + l_var * (var_eps_ln.narrow(1, p, rows * cols).view(per_token) - var_eps_inter)
    tokens = ((x_h - mu) * torch.rsqrt(var_eps)).reshape(-1, rows * cols, hidden)
    prefix = centred.narrow(1, 0, p) * inv_std_ln.narrow(1, 0, p)
    return torch.cat([prefix, tokens], dim=1) * weight + bias
