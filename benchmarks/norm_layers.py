"""Each norm layer alone, forward and forward+backward, fp32 and bf16, as ratios to `nn.LayerNorm` in the same run.

python -m benchmarks.norm_layers              # [32, 197, 384]: ViT-S/16 at batch 32
python -m benchmarks.norm_layers --no-compile # without the torch.compile rows (compiling takes a minute)
python -m benchmarks.norm_layers --smoke      # tiny sizes, a few rounds (run by the test suite)

The fp32 forward table also has `torch.compile` rows for LayerNorm and DyT: compiled, DyT's three elementwise passes
fuse into one loop, the fused kernel eager PyTorch does not have.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

import torch

from benchmarks.timing import TIMING_HEADER, markdown_table, ratio_rows, time_interleaved
from hf_norms.norms.build import (
    DynamicErf,
    DynamicTanh,
    DynamicTokenNorm,
    LayerNorm,
    PositionEmbeddingNorm,
    SeparateNorm,
    TokenLayout,
)


def norm_layers(hidden: int, heads: int, prefix: int) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    layers = {
        "layernorm": LayerNorm(hidden, eps=1e-6),
        "dyt": DynamicTanh(hidden),
        "dyt (per-channel alpha)": DynamicTanh(hidden, per_channel=True),
        "derf": DynamicErf(hidden),
        "derf (per-channel alpha, shift)": DynamicErf(hidden, per_channel=True),
        "dtn": DynamicTokenNorm(hidden, heads, eps=1e-6),
        "sepnorm (LayerNorm prefix)": SeparateNorm(hidden, prefix, eps=1e-6, prefix_norm="layernorm"),
        "sepnorm (BatchNorm prefix)": SeparateNorm(hidden, prefix, eps=1e-6, prefix_norm="batchnorm"),
    }
    layers["dtn"].init_parameters()
    return layers


def plain_formula(layer: torch.nn.Module) -> torch.nn.Module:
    """A copy of `layer` with its fast path off: DyT's tanh and Derf's erf formulas as written, DTN's plain formula (what compile and
    export run). The fast path must beat it to earn its place."""
    plain = copy.deepcopy(layer)
    plain.fast_path = False
    return plain


def candidates(
    layers: dict[str, torch.nn.Module], x: torch.Tensor, layout: TokenLayout, backward: bool
) -> dict[str, Callable[[], object]]:
    def forward_only(layer):
        def run():
            with torch.no_grad():
                return layer(x, layout)

        return run

    def forward_backward(layer):
        x_grad = x.detach().requires_grad_()
        grad_out = torch.ones_like(x)

        def run():
            layer(x_grad, layout).backward(grad_out)

        return run

    make = forward_backward if backward else forward_only
    return {name: make(layer) for name, layer in layers.items()}


def compiled_forward(layer: torch.nn.Module, x: torch.Tensor, layout: TokenLayout) -> Callable[[], object]:
    compiled = torch.compile(layer, fullgraph=True)

    def run():
        with torch.no_grad():
            return compiled(x, layout)

    return run


def run(batch: int, tokens_side: int, hidden: int, heads: int, rounds: int, compile_layers: bool) -> str:
    prefix = 1
    layout = TokenLayout(prefix, (tokens_side, tokens_side))
    sections = [f"Norm layers on [{batch}, {prefix + tokens_side**2}, {hidden}], {torch.get_num_threads()} threads."]
    for dtype in (torch.float32, torch.bfloat16):
        for backward in (False, True):
            layers = {name: layer.to(dtype) for name, layer in norm_layers(hidden, heads, prefix).items()}
            layers["dyt, naive tanh formula"] = plain_formula(layers["dyt"])
            layers["derf, plain erf formula"] = plain_formula(layers["derf"])
            layers["dtn, plain formula"] = plain_formula(layers["dtn"])
            x = torch.randn(batch, prefix + tokens_side**2, hidden, dtype=dtype)
            runners = candidates(layers, x, layout, backward)
            if compile_layers and dtype == torch.float32 and not backward:
                for name in ("layernorm", "dyt", "dyt (per-channel alpha)", "derf"):
                    runners[f"{name}, torch.compile"] = compiled_forward(layers[name], x, layout)
            timings = time_interleaved(runners, rounds=rounds)
            title = f"{'forward+backward' if backward else 'forward'}, {str(dtype).removeprefix('torch.')}"
            sections.append(f"\n{title}\n\n" + markdown_table(TIMING_HEADER, ratio_rows(timings, "layernorm")))
    pe_norm = PositionEmbeddingNorm(hidden)
    pe = torch.randn(1, prefix + tokens_side**2, hidden)
    timings = time_interleaved({"layernorm": lambda: pe_norm(pe)}, rounds=rounds)
    sections.append(
        f"\nLaPE's per-layer pe_norm on one [1, {pe.shape[1]}, {hidden}] position embedding (each layer, each call): "
        f"{timings['layernorm'].median * 1e3:.3f} ms"
    )
    return "\n".join(sections)


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.norm_layers`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few rounds, to check that it runs")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--rounds", type=int, default=30)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.smoke:
        print(run(batch=2, tokens_side=3, hidden=16, heads=2, rounds=2, compile_layers=False))
    else:
        print(
            run(batch=32, tokens_side=14, hidden=384, heads=6, rounds=args.rounds, compile_layers=not args.no_compile)
        )


if __name__ == "__main__":
    main()
