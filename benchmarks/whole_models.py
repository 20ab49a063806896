"""Whole models per norm_type, as ratios to the `layernorm` model in the same run: a ViT-S/16-sized ViT at batch 8
(224 px), the real MiniLM BERT at batch 16 x 128 tokens and the real DINOv2-S/14 at batch 8 (224 px: a 16x16 grid);
eager and `torch.compile`, inference and a training step. DTN runs with the paper's gates at 0.5 everywhere: loaded
from a LayerNorm checkpoint its gates would start at 1, where eager inference returns LayerNorm's output.

    python -m benchmarks.whole_models                     # everything (compiling takes minutes on 2 cores)
    python -m benchmarks.whole_models --no-compile        # eager only
    python -m benchmarks.whole_models --modes inference --executions compiled   # one kind of table
    python -m benchmarks.whole_models --norm-types dtn    # only DTN against layernorm (always included)
    python -m benchmarks.whole_models --families dinov2   # one model family
    python -m benchmarks.whole_models --smoke             # tiny sizes, few rounds (run by the test suite)

Every table has `layernorm (control)`, a second copy of the baseline model (its ratio is the run's noise: candidates
run in a new random order each round), and eager tables `dtn, plain formula`, DTN without its fast path. Inference
tables have two more rows: `dyt, folded` (ViT: `hf_norms.folding.fold_norms`, DyT's weight/bias moved into the next
Linear layers) and `no norm`, the layernorm model with every norm replaced by the identity: the floor that no norm
implementation can go below, which shows how much of the model's time its norms take at all.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Sequence

import torch
from transformers import AutoTokenizer

import hf_norms
from benchmarks.timing import TIMING_HEADER, markdown_table, ratio_rows, time_interleaved
from hf_norms import packaged
from hf_norms.conversion.folding import fold_norms
from hf_norms.norms.build import LayerNorm

NORM_VARIANTS = {
    "layernorm": {},
    "dyt": {},
    "derf": {},
    "dtn": {"dtn_gate_init": 0.5},
    "sepnorm": {"sepnorm_prefix_norm": "batchnorm"},
    "lape": {},
}


def vit_models(
    smoke: bool, norm_types: Sequence[str] = tuple(NORM_VARIANTS)
) -> tuple[dict[str, torch.nn.Module], dict]:
    size = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, image_size=224)
    if smoke:
        size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32)
    batch = 2 if smoke else 8
    models = {}
    for norm_type in norm_types:
        options = NORM_VARIANTS[norm_type]
        torch.manual_seed(0)
        config = hf_norms.ViTNormConfig(norm_type=norm_type, patch_size=16, num_labels=10, **size, **options)
        models[norm_type] = hf_norms.ViTNormForImageClassification(config)
    inputs = {
        "pixel_values": torch.randn(batch, 3, size["image_size"], size["image_size"]),
        "labels": torch.arange(batch) % 10,
    }
    return models, inputs


def bert_models(
    smoke: bool, norm_types: Sequence[str] = tuple(NORM_VARIANTS)
) -> tuple[dict[str, torch.nn.Module], dict]:
    batch, length = (2, 16) if smoke else (16, 128)
    tokenizer = AutoTokenizer.from_pretrained(packaged.minilm_path())
    texts = [text for text, _ in packaged.bbc_news()[:batch]]
    inputs = dict(tokenizer(texts, padding="max_length", truncation=True, max_length=length, return_tensors="pt"))
    inputs["labels"] = torch.arange(batch) % 5
    models = {}
    for norm_type in norm_types:
        options = NORM_VARIANTS[norm_type]
        if smoke:
            config = hf_norms.BertNormConfig(
                norm_type=norm_type,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                num_labels=5,
                **options,
            )
            models[norm_type] = hf_norms.BertNormForSequenceClassification(config)
        else:
            models[norm_type] = hf_norms.BertNormForSequenceClassification.from_pretrained(
                packaged.minilm_path(), norm_type=norm_type, num_labels=5, **options
            )
    return models, inputs


def dinov2_models(
    smoke: bool, norm_types: Sequence[str] = tuple(NORM_VARIANTS)
) -> tuple[dict[str, torch.nn.Module], dict]:
    """The real DINOv2-S/14 (`packaged.dinov2_small_path()`, its norms replaced) with a 10-class head, or a tiny
    random DINOv2 for the smoke run."""
    batch, image_size = (2, 28) if smoke else (8, 224)
    models = {}
    for norm_type in norm_types:
        options = NORM_VARIANTS[norm_type]
        torch.manual_seed(0)
        if smoke:
            config = hf_norms.Dinov2NormConfig(
                norm_type=norm_type, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                image_size=image_size, patch_size=14, num_labels=10, **options,
            )  # fmt: skip
            models[norm_type] = hf_norms.Dinov2NormForImageClassification(config)
        else:
            models[norm_type] = hf_norms.Dinov2NormForImageClassification.from_pretrained(
                packaged.dinov2_small_path(), norm_type=norm_type, num_labels=10, **options
            )
    inputs = {"pixel_values": torch.randn(batch, 3, image_size, image_size), "labels": torch.arange(batch) % 10}
    return models, inputs


class NoNorm(torch.nn.Module):
    """Returns its input: stands in for every norm in the `no norm` floor row."""

    def forward(self, hidden_states: torch.Tensor, layout=None) -> torch.Tensor:
        return hidden_states


def inference_variants(models: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:
    """The models plus `dyt, folded` (pre-LN vision models only) and the `no norm` floor."""
    variants = dict(models)
    if "dyt" in models and not models["dyt"].config.model_type.startswith("bert"):
        folded = copy.deepcopy(models["dyt"])
        fold_norms(folded)
        variants["dyt, folded"] = folded
    floor = copy.deepcopy(models["layernorm"])
    for name, module in list(floor.named_modules()):
        if isinstance(module, LayerNorm):
            floor.set_submodule(name, NoNorm())
    variants["no norm"] = floor
    return variants


def inference(model: torch.nn.Module, inputs: dict) -> Callable[[], object]:
    model.eval()
    features = {k: v for k, v in inputs.items() if k != "labels"}

    def run():
        with torch.inference_mode():
            return model(**features).logits

    return run


def training_step(model: torch.nn.Module, inputs: dict) -> Callable[[], object]:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def run():
        optimizer.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()

    return run


def control_variants(models: dict[str, torch.nn.Module], compiled: bool) -> dict[str, torch.nn.Module]:
    """The models plus `layernorm (control)`, a second copy of the baseline: its ratio shows the run's noise; and,
    eagerly, `dtn, plain formula`, DTN without its fast path (what compile and export run), which the fast path must
    beat."""
    variants = dict(models)
    variants["layernorm (control)"] = copy.deepcopy(models["layernorm"])
    if not compiled and "dtn" in models:
        plain = copy.deepcopy(models["dtn"])
        for module in plain.modules():
            if hasattr(module, "fast_path"):
                module.fast_path = False
        variants["dtn, plain formula"] = plain
    return variants


def section(title: str, models: dict, inputs: dict, make: Callable, compile_models: bool, rounds: int) -> str:
    models = control_variants(models, compile_models)
    if make is inference:
        models = inference_variants(models)
    runners = {}
    for name, model in models.items():
        runner_model = torch.compile(model) if compile_models else model
        runners[name] = make(runner_model, inputs)
    timings = time_interleaved(runners, rounds=rounds, warmup=3 if compile_models else 2)
    return f"\n{title}\n\n" + markdown_table(TIMING_HEADER, ratio_rows(timings, "layernorm"))


FAMILIES = {"vit": ("ViT", vit_models), "bert": ("BERT", bert_models), "dinov2": ("DINOv2", dinov2_models)}
KINDS = {"ViT": "ViT-S/16 size", "BERT": "real MiniLM", "DINOv2": "real DINOv2-S/14"}
MODES = {"inference": ("inference", inference), "training": ("training step (AdamW)", training_step)}
EXECUTIONS = {"eager": False, "compiled": True}


def run(
    smoke: bool,
    rounds: int,
    families: Sequence[str] = tuple(FAMILIES),
    modes: Sequence[str] = tuple(MODES),
    executions: Sequence[str] = tuple(EXECUTIONS),
    norm_types: Sequence[str] = tuple(NORM_VARIANTS),
) -> str:
    out = [f"Whole models, {torch.get_num_threads()} threads, fp32."]
    for family_key in families:
        family, build = FAMILIES[family_key]
        models, inputs = build(smoke, [name for name in NORM_VARIANTS if name in {"layernorm", *norm_types}])
        shape = "x".join(str(size) for size in next(iter(inputs.values())).shape)
        kind = "tiny" if smoke else KINDS[family]
        family = f"{family} ({kind}), input {shape}"
        for mode_key in modes:
            mode, make = MODES[mode_key]
            for execution in executions:
                compiled = EXECUTIONS[execution]
                if compiled and smoke and (mode_key == "training" or family_key != "vit"):
                    continue  # the smoke run compiles one section only, to keep the test suite short
                title = f"{family}: {mode}, {'torch.compile' if compiled else 'eager'}"
                out.append(section(title, models, inputs, make, compiled, rounds))
                torch._dynamo.reset()
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.whole_models`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few rounds, to check that it runs")
    parser.add_argument("--no-compile", action="store_true", help="eager only (same as --executions eager)")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--executions", nargs="+", choices=list(EXECUTIONS), default=list(EXECUTIONS))
    parser.add_argument("--norm-types", nargs="+", choices=list(NORM_VARIANTS), default=list(NORM_VARIANTS))
    parser.add_argument("--rounds", type=int, default=10)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    executions = ["eager"] if args.no_compile else args.executions
    rounds = 2 if args.smoke else args.rounds
    print(run(args.smoke, rounds, args.families, args.modes, executions, args.norm_types))


if __name__ == "__main__":
    main()
