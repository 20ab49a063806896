"""Dynamic Token Normalization (DTN): LayerNorm statistics mixed, per head, with position-aware statistics across
tokens (Shao et al.): the module, which picks one of three paths per runtime: the plain formula every tracer can
follow (`norm_dtn_formula.py`), the eager float32 fast path (`norm_dtn_fast.py`) and, under the dynamo ONNX exporter,
DTN as one operator with its own ONNX translation (`norm_dtn_export.py`).

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .norm_dtn_export import exported_token_norm, onnx_translation_registered
from .norm_dtn_fast import TokenGrid, fast_token_norm, gates_are_one
from .norm_dtn_formula import TokenNormParameters, mixing_matrices, token_norm_formula
from .runtime import autocast_off, compute_dtype, is_dynamo_onnx_export, is_eager_full_precision, result_dtype
from .token_layout import TokenLayout, layout_of


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
    ONNX translation under the dynamo ONNX exporter (`norm_dtn_export`), one nested compile region reused by every DTN
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

        In eager float32 (or float64), the fast path of `norm_dtn_fast` (gates at exactly 1 then keep LayerNorm's output
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
        """`norm_dtn_fast.fast_token_norm`, with LayerNorm itself when the gates are exactly 1 without autograd."""
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
