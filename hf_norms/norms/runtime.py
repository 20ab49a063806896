"""Which runtime a norm is running in, decided from Python state known when a graph is traced (never tensor values).

The norms keep eager fast paths (work in place, custom autograd Functions, branches on tensor values) only where they
are safe: plain eager execution. `torch.compile`, `torch.export`, both ONNX exporters and `torch.jit.trace` see the
plain formulas instead, and so do 16-bit inputs and autocast.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

import contextlib

import torch


def is_traced() -> bool:
    """True while `torch.compile`, `torch.export` (strict or not, hence the dynamo ONNX exporter) or `torch.jit.trace`
    (hence the TorchScript ONNX exporter) records the model rather than running it."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def is_dynamo_onnx_export() -> bool:
    """True while `torch.onnx.export(..., dynamo=True)` traces the model (its `torch.export` step); False under a plain
    `torch.export`, `torch.compile` and the TorchScript ONNX exporter."""
    return torch.compiler.is_exporting() and torch.onnx.is_in_onnx_export()


def is_eager_full_precision(hidden_states: torch.Tensor, *parameters: torch.Tensor) -> bool:
    """The runtime the eager fast paths are written for: not traced, no autocast, float32 (or float64, for gradcheck)
    input and parameters."""
    return (
        not is_traced()
        and not torch.is_autocast_enabled(hidden_states.device.type)
        and all(t.dtype in (torch.float32, torch.float64) for t in (hidden_states, *parameters))
    )


def autocast_off(hidden_states: torch.Tensor) -> contextlib.AbstractContextManager:
    """A context in which autocast is off, if it is on for `hidden_states`' device: there a norm computes its statistics
    in float32 and returns float32, as autocast runs LayerNorm."""
    device = hidden_states.device.type
    return torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) else contextlib.nullcontext()


def compute_dtype(hidden_states: torch.Tensor) -> torch.dtype:
    """The dtype a norm's statistics are computed in: float32, or float64 for float64 input (16-bit is too coarse)."""
    return torch.promote_types(hidden_states.dtype, torch.float32)


def result_dtype(hidden_states: torch.Tensor) -> torch.dtype:
    """The dtype a norm returns: the input's, except under autocast, where LayerNorm returns float32 and so do we."""
    if torch.is_autocast_enabled(hidden_states.device.type):
        return compute_dtype(hidden_states)
    return hidden_states.dtype
