"""Dynamic Token Normalization (DTN): LayerNorm statistics mixed, per head, with position-aware statistics across
tokens (Shao et al., ICLR 2022), in one file: the plain formula, DTN as one operator under the dynamo ONNX exporter,
and the module, which picks one path per runtime. Its eager float32 fast path is `dtn_fast.py`, which earns its place
by its measured gain (docs/speed.md, "DTN").

The plain formula (`token_norm_formula`: the separable token mixing as plain functional tensor code) is what
`torch.compile`, `torch.export`, the ONNX exporters, autocast and 16-bit weights run, and the reference every other
path is tested against.

DTN as one operator: traced as its plain formula, each DTN is some 70 ATen operations that the dynamo ONNX exporter
(`torch.onnx.export(..., dynamo=True)`) traces, decomposes, translates and optimises one by one, which made exporting
a ViT with DTNs several times slower than its LayerNorm twin (docs/speed.md). Under that exporter only
(`runtime.is_dynamo_onnx_export`), every DTN is one call of the custom operator `hf_norms::dynamic_token_norm`
(`torch.library`, computing `token_norm_formula`), which `torch.export` keeps as one node, and `onnx_token_norm`
(registered with the exporter when the first DTN is built) writes it as about 30 standard ONNX operations in the
layout `[B, H, rows, cols, D]`, where LayerNorm's statistics need no copies. `torch.export` and `torch.compile` keep
the plain formula, which other backends (AOTInductor, ExecuTorch) can run without Python. If the translation cannot be
registered (no onnxscript, or its registry API changed), DTN exports as its plain formula; `tests/models/test_runtimes.py`
checks both against eager float32 in onnxruntime.
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import functools
import itertools
import logging
import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .dtn_fast import TokenGrid, fast_token_norm, gates_are_one
from .runtime import autocast_off, compute_dtype, is_dynamo_onnx_export, is_eager_full_precision, result_dtype
from .token_layout import TokenLayout, layout_of

logger = logging.getLogger(__name__)


# The plain formula


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


# DTN as one operator under the dynamo ONNX exporter


def free_operator_name() -> str:
    """`hf_norms::dynamic_token_norm`, or with a suffix if another copy of this file (an installed hf-norms beside a
    checkpoint's remote code) has taken the name: each copy keeps its own operator."""
    names = itertools.chain(["dynamic_token_norm"], (f"dynamic_token_norm_{index}" for index in itertools.count(1)))
    return "hf_norms::" + next(name for name in names if not hasattr(torch.ops.hf_norms, name))


OPERATOR_NAME = free_operator_name()


@torch.library.custom_op(OPERATOR_NAME, mutates_args=())
def token_norm_operator(
    hidden_states: torch.Tensor,
    source_mask: torch.Tensor | None,
    position_weight: torch.Tensor,
    mean_gate: torch.Tensor,
    var_gate: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    num_prefix_tokens: int,
    rows: int,
    cols: int,
    eps: float,
) -> torch.Tensor:
    """`token_norm_formula` for `hidden_states` `[B, N, C]` on a `rows x cols` grid after `num_prefix_tokens`; `cols`
    -1 for one row of the remaining `N - num_prefix_tokens` tokens (text of dynamic length)."""
    if cols < 0:
        cols = hidden_states.shape[1] - num_prefix_tokens
    parameters = TokenNormParameters(position_weight, mean_gate, var_gate, weight, bias)
    return token_norm_formula(hidden_states, source_mask, parameters, num_prefix_tokens, (rows, cols), eps)


@token_norm_operator.register_fake
def _(hidden_states, *args) -> torch.Tensor:
    return torch.empty_like(hidden_states)


def exported_token_norm(
    hidden_states: torch.Tensor,
    source_mask: torch.Tensor | None,
    parameters: TokenNormParameters,
    num_prefix_tokens: int,
    grid_size: tuple[int, int],
    eps: float,
) -> torch.Tensor:
    """`token_norm_formula`'s result, as one `token_norm_operator` call where the ONNX translation is registered and the
    grid has a static shape (images) or is one row (text); otherwise the formula itself."""
    rows, cols = grid_size
    one_row_of_any_length = rows == 1 and not isinstance(cols, int)
    if isinstance(rows, int) and (isinstance(cols, int) or one_row_of_any_length) and onnx_translation_registered():
        return token_norm_operator(
            hidden_states, source_mask, *parameters, num_prefix_tokens, rows, -1 if one_row_of_any_length else cols, eps
        )
    return token_norm_formula(hidden_states, source_mask, parameters, num_prefix_tokens, grid_size, eps)


@functools.cache
def onnx_translation_registered() -> bool:
    """Registers `onnx_token_norm` for `token_norm_operator` in onnxscript's torchlib registry. The dynamo exporter
    copies that registry when an export starts, before it traces the model, so `DynamicTokenNorm.__init__` calls this
    (importing onnxscript takes about a second, once per process, paid only by DTN models). False, with one warning,
    if onnxscript has no such registry (and silently without onnxscript, which the exporter itself needs)."""
    try:
        from onnxscript.function_libs.torch_lib.registration import torch_op
    except ImportError:  # without onnxscript there is no dynamo ONNX export to prepare for
        return False
    try:
        torch_op(OPERATOR_NAME, trace_only=True)(onnx_token_norm)
    except Exception as error:  # an onnxscript whose registry API changed: export the plain formula
        logger.warning("DTN exports to ONNX as its plain formula (slower to export): %s", error)
        return False
    return True


def onnx_token_norm(
    hidden_states,
    source_mask,
    position_weight,
    mean_gate,
    var_gate,
    weight,
    bias,
    num_prefix_tokens: int,
    rows: int,
    cols: int,
    eps: float,
):
    """The ONNX graph of `token_norm_operator` (an onnxscript trace-only function: runs at export time on symbolic
    tensors). The same equations as `token_norm_formula`, in the layout `[B, H, rows, cols, D]`, where LayerNorm's
    statistics are a mean over axes 1 and 4, and in the form

        x - mu_h      = (x - mu_ln) + (1 - l_mu) (mu_ln - P_h x)
        var_h + eps   = l_var var_ln + (1 - l_var) max(P_h x^2 - (P_h x)^2, 0) + eps

    Prefix tokens get ONNX's `LayerNormalization`. Every constant (shapes, axes, offsets, numbers) is passed as a
    Python value, which the exporter turns into one Constant node per distinct value for the whole model: as Constant
    nodes of their own, each DTN left some 20 unused ones after constant folding, and onnxscript's `SlicesSplit` rule
    indexes every node of the graph for each node it tries (time quadratic in the node count; docs/speed.md).
    """
    from onnxscript import opset18 as op

    hidden, heads, p = weight.shape[0], mean_gate.shape[0], num_prefix_tokens
    depth = hidden // heads
    grid = op.Slice(hidden_states, [p], [np.iinfo(np.int64).max], [1])
    x = op.Transpose(op.Reshape(grid, [0, rows, cols, heads, depth]), perm=[0, 3, 1, 2, 4])
    mean_ln = op.ReduceMean(x, [1, 4], keepdims=1)  # [B, 1, rows, cols, 1]
    centred = op.Sub(x, mean_ln)
    var_ln = op.ReduceMean(op.Mul(centred, centred), [1, 4], keepdims=1)
    columns, row_mixing = onnx_mixing_matrices(op, position_weight, source_mask, hidden_states, p, rows, cols, heads)
    mixed = op.MatMul(columns, op.Concat(x, op.Mul(x, x), axis=-1))  # [B, H, rows, cols, 2D]
    if row_mixing is not None:
        by_rows = op.MatMul(row_mixing, op.Reshape(mixed, [0, heads, rows, cols * 2 * depth]))
        mixed = op.Reshape(by_rows, [0, heads, rows, cols, 2 * depth])
    mean_inter, square_inter = op.Split(mixed, num_outputs=2, axis=-1)
    var_inter = op.Relu(op.Sub(square_inter, op.Mul(mean_inter, mean_inter)))
    mean_gate, var_gate = op.Reshape(mean_gate, [heads, 1, 1, 1]), op.Reshape(var_gate, [heads, 1, 1, 1])
    centred = op.Add(centred, op.Mul(op.Sub(mean_ln, mean_inter), op.Sub(1.0, mean_gate)))
    var_eps = op.Add(op.Add(op.Mul(var_ln, var_gate), op.Mul(var_inter, op.Sub(1.0, var_gate))), eps)
    tokens = op.Transpose(op.Div(centred, op.Sqrt(var_eps)), perm=[0, 2, 3, 1, 4])  # [B, rows, cols, H, D]
    tokens = op.Add(op.Mul(op.Reshape(tokens, [0, -1, hidden]), weight), bias)
    if p == 0:
        return tokens
    prefix = op.Slice(hidden_states, [0], [p], [1])
    prefix, _, _ = op.LayerNormalization(prefix, weight, bias, axis=-1, epsilon=eps)  # Y, mean, 1 / std
    return op.Concat(prefix, tokens, axis=1)


def onnx_mixing_matrices(op, position_weight, source_mask, hidden_states, p: int, rows: int, cols: int, heads: int):
    """`(P_cols, P_rows)` of `mixing_matrices` in ONNX, shaped to broadcast against `[B, H, rows,
    cols, 2D]`: `P_cols` `[H, 1, cols, cols]` (`[B, H, 1, cols, cols]` with `source_mask`), `P_rows` `[H, rows, rows]`
    or None for one row. `cols` -1: the offsets come from the sequence length. With a static grid they depend on the
    parameters only, and the exporter's constant folding turns them into initializers."""

    def coefficient(index):  # a_h[index] as [H, 1, 1]
        return op.Reshape(op.Slice(position_weight, [index], [index + 1], [1]), [heads, 1, 1])

    def axis_logits(length, linear):  # (linear + a_h2 d) d for d = j - i: [H, length, length]
        if length >= 0:  # the offsets as one flat constant, the logits reshaped after the product
            offsets = tuple(float(j - i) for i in range(length) for j in range(length))
            logits = op.Mul(op.Add(linear, op.Mul(coefficient(2), offsets)), offsets)
            return op.Reshape(logits, [heads, length, length])
        length = op.Squeeze(op.Sub(op.Shape(hidden_states, start=1, end=2), [p]))
        positions = op.Cast(op.Range(0, length, 1), to=hidden_states.dtype)
        offsets = op.Sub(op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1]))
        return op.Mul(op.Add(linear, op.Mul(coefficient(2), offsets)), offsets)

    logits = axis_logits(cols, coefficient(0))
    if source_mask is None:
        columns = op.Unsqueeze(op.Softmax(logits, axis=-1), [1])
    else:
        keep = op.Unsqueeze(op.Cast(source_mask, to=9), [1, 2])  # BOOL, [B, 1, 1, cols]
        lowest = float(np.finfo(hidden_states.dtype.numpy()).min)
        columns = op.Unsqueeze(op.Softmax(op.Where(keep, logits, lowest), axis=-1), [2])
    return columns, None if rows == 1 else op.Softmax(axis_logits(rows, coefficient(1)), axis=-1)


# The module


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


class PositionProjection(nn.Module):
    """DTN's `pos_proj`, the paper's `Linear(3, H)` from relative offsets `(dx, dy, dx^2 + dy^2)` to each head's logit,
    held as the parameter `weight` `[H, 3]` (`a_h`) and the buffer `bias` `[H]` (`b_h`), the state-dict keys of the
    Linear.

    Not an `nn.Linear`, so that tools which adapt every Linear layer (peft's `target_modules="all-linear"`) leave this
    part of the norm alone. DTN never applies it as a layer: the logits are separable (`axis_mixing`) and `b_h`
    cancels in the softmax, so its gradient is always zero; a buffer, it is saved and loaded under its key but is no
    parameter that an optimizer, DDP (`find_unused_parameters=False`) or gradient checks would expect a gradient for.
    """

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.register_buffer("bias", torch.zeros(weight.shape[0]))

    def extra_repr(self) -> str:
        return f"in_features=3, out_features={self.weight.shape[0]}"


def compiles_once() -> bool:
    """Whether `torch.compile` (not export) traces an inference graph: there every DTN of a model reuses one traced and
    compiled formula (`torch.compiler.nested_compile_region`, hierarchical compilation). Not with autograd: inductor
    in torch 2.13 lets the backward of a reused region overwrite inputs that an earlier call saved (wrong gradients;
    pytorch/pytorch#193960), and not in torch versions without nested regions."""
    return (
        torch.compiler.is_compiling()
        and not torch.compiler.is_exporting()
        and not torch.is_grad_enabled()
        and hasattr(torch.compiler, "nested_compile_region")
    )


compiled_token_norm_formula = getattr(torch.compiler, "nested_compile_region", lambda function: function)(
    token_norm_formula
)


def traced_formula():
    """The form of `token_norm_formula` that a runtime other than the eager fast path runs: one operator with its own
    ONNX translation under the dynamo ONNX exporter (`exported_token_norm`), one nested compile region reused by every DTN
    under `torch.compile` without autograd (`compiles_once`), the plain formula everywhere else."""
    if is_dynamo_onnx_export():
        return exported_token_norm
    if compiles_once():
        return compiled_token_norm_formula
    return token_norm_formula


class DynamicTokenNorm(nn.Module):
    """Dynamic Token Normalization (DTN), Shao et al., ICLR 2022 (arXiv 2112.02624), in the paper's exact form.

    Channels split into `H` groups ("heads") of `D = hidden / H`. For a grid token i in head h, with `mu_ln, var_ln` the
    token's statistics over all channels (biased variance, as LayerNorm) and `x_h` the head's channels of all grid
    tokens:

        mu_h  = l_mu  * mu_ln  + (1 - l_mu)  * (P_h @ x_h)
        var_h = l_var * var_ln + (1 - l_var) * (P_h @ (x_h * x_h) - (P_h @ x_h) ** 2)
        y     = weight * (x - mu_h) / sqrt(var_h + eps) + bias

    `P_h = softmax_j(a_h . R_ij + b_h)` mixes tokens by their relative offsets `R_ij = (dx, dy, dx^2 + dy^2)`, with
    `pos_proj` (`PositionProjection`, the paper's `Linear(3, H)`) holding `a_h, b_h`. Padding tokens (`layout.padding_mask == 0`) get no weight in `P_h`.
    Prefix tokens use plain LayerNorm statistics. The gates `l_mu, l_var` (`mean_gate`, `var_gate`, `[H]`) are stored
    as their value, kept in `[0, 1]` by projection (`gates`): 0.5 is the paper's initial `sigmoid(0)`, and exactly 1
    is LayerNorm, from where training can still move them.

    Extra parameters over LayerNorm: `3H` (pos_proj) `+ 2H` (gates) `= 5H`, and pos_proj's `H` biases as a buffer.
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
        self.pos_proj = PositionProjection(local_position_init(num_heads, one_dimensional))
        self.mean_gate = nn.Parameter(torch.full((num_heads,), gate_init))
        self.var_gate = nn.Parameter(torch.full((num_heads,), gate_init))
        # False runs the plain formula in eager float32 too (tests and benchmarks compare the two paths)
        self.fast_path = True
        onnx_translation_registered()  # before any torch.onnx.export starts (it copies the registry first)

    @classmethod
    def from_config(cls, config, hidden_size: int, num_prefix_tokens: int, one_dimensional: bool) -> DynamicTokenNorm:
        return cls(hidden_size, num_heads=config.dtn_num_heads or config.num_attention_heads, eps=config.layer_norm_eps,
                   gate_init=config.dtn_gate_init, one_dimensional=one_dimensional)  # fmt: skip

    def learned_state(self) -> dict[str, float]:
        """What training logs of this norm: the effective gates `clamp(l, 0, 1)` averaged over heads (1: LayerNorm)."""
        return {name: getattr(self, name).detach().float().clamp(0, 1).mean().item()
                for name in ("mean_gate", "var_gate")}  # fmt: skip

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

    def source_mask(self, layout: TokenLayout, fast_path: bool) -> torch.Tensor | None:
        """`[B, cols]` bool mask of the grid tokens that may be mixed (False: padding), or None when all may be.

        Only the eager fast path looks at the mask's values (an all-ones mask takes the shared-matrix path there);
        traced runtimes keep any given mask, which computes the same.
        """
        if layout.padding_mask is None:
            return None
        if layout.grid_size[0] != 1:
            raise ValueError("DTN takes a padding mask only for one-row layouts (text); images have no padding.")
        mask = layout.padding_mask[:, layout.num_prefix_tokens :].bool()
        return None if fast_path and bool(mask.all()) else mask

    def forward(self, hidden_states: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        """The formula of the class docstring for `hidden_states` `[B, N, C]`.

        In eager float32 (or float64), the fast path of `dtn_fast` (gates at exactly 1 then keep LayerNorm's output
        for every token, bit for bit, and without autograd skip the inter-token work); everywhere else (compile, export,
        ONNX, autocast, 16-bit) the plain formula (`traced_formula`), in float32 with autocast off, as autocast runs LayerNorm.
        The gates' in-place projection in training is traced as a mutation of the parameters (checked under compile).
        """
        layout = layout_of(self, hidden_states, layout)
        if layout is None:
            raise ValueError("DynamicTokenNorm needs a TokenLayout (prefix tokens, grid size, padding mask).")
        layout.check_sequence(hidden_states)
        mean_gate, var_gate = self.gates()
        if self.fast_path and is_eager_full_precision(hidden_states, self.weight):
            return self.fast_forward(hidden_states, layout, mean_gate, var_gate)
        out_dtype, dtype = result_dtype(hidden_states), compute_dtype(hidden_states)
        with autocast_off(hidden_states):
            formula = traced_formula()
            parameters = TokenNormParameters(*(
                t if t.dtype == dtype else t.to(dtype)
                for t in (self.pos_proj.weight, mean_gate, var_gate, self.weight, self.bias)
            ))  # fmt: skip
            out = formula(
                hidden_states if hidden_states.dtype == dtype else hidden_states.to(dtype),
                self.source_mask(layout, False), parameters, layout.num_prefix_tokens, layout.grid_size, self.eps,
            )  # fmt: skip
        return out if out.dtype == out_dtype else out.to(out_dtype)

    def fast_forward(
        self, hidden_states: torch.Tensor, layout: TokenLayout, mean_gate: torch.Tensor, var_gate: torch.Tensor
    ) -> torch.Tensor:
        """`dtn_fast.fast_token_norm`, with LayerNorm itself when the gates are exactly 1 without autograd."""
        if not torch.is_grad_enabled() and gates_are_one(mean_gate, var_gate):
            return F.layer_norm(hidden_states, hidden_states.shape[-1:], self.weight, self.bias, self.eps)
        source_mask = self.source_mask(layout, True)
        grid = TokenGrid(
            layout.num_prefix_tokens, layout.grid_size, self.num_heads, hidden_states.shape, source_mask is not None
        )
        position_weight = self.pos_proj.weight.to(hidden_states.dtype)
        column_mixing, row_mixing = mixing_matrices(position_weight, layout.grid_size, source_mask)
        parameters = TokenNormParameters(position_weight, mean_gate, var_gate, self.weight, self.bias)
        return fast_token_norm(hidden_states, grid, (column_mixing, row_mixing), parameters, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, num_heads={self.num_heads}, eps={self.eps}, gate_init={self.gate_init}"
