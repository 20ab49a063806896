"""DTN as one operator under the dynamo ONNX exporter (`torch.onnx.export(..., dynamo=True)`), with its own ONNX
translation.

Traced as its plain formula, each DTN is some 70 ATen operations that the exporter traces, decomposes, translates and
then optimises one by one (onnxscript's rewriter tries each of its rules on each node), which made exporting a
ViT with DTNs several times slower than its LayerNorm twin (docs/speed.md). Here every DTN is one call of the
custom operator `hf_norms::dynamic_token_norm` (`torch.library`, computing `norm_dtn_formula.token_norm_formula`),
which `torch.export` keeps as one node, and `onnx_token_norm` (registered with the exporter when the first DTN is
built) writes it as about 30 standard ONNX operations in the layout `[B, H, rows, cols, D]`, where LayerNorm's
statistics need no copies. The operator is used only inside that exporter's trace (`runtime.is_dynamo_onnx_export`):
`torch.export` and `torch.compile` keep the plain formula, which other backends (AOTInductor, ExecuTorch) can run
without Python.

If the translation cannot be registered (no onnxscript, or its registry API changed), DTN exports as its plain
formula, as before; `tests/models/test_runtimes.py` checks both against eager float32 in onnxruntime.

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import functools
import itertools
import logging

import numpy as np
import torch

from .norm_dtn_formula import TokenNormParameters, token_norm_formula

logger = logging.getLogger(__name__)


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
    """`(P_cols, P_rows)` of `norm_dtn_formula.mixing_matrices` in ONNX, shaped to broadcast against `[B, H, rows,
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
