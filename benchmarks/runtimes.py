"""Every family x norm_type in the runtimes users put models in: the max abs difference of each from eager float32.

    python -m benchmarks.runtimes                       # every check but inductor (about 20 minutes on 2 cores)
    python -m benchmarks.runtimes --checks compiled --norm-types dtn   # inductor: one to two minutes per model
    python -m benchmarks.runtimes --families vit_norm --norm-types dtn

Families come from `hf_norms.models.family_registry.FAMILIES` and norm types from `hf_norms.NORM_TYPES`, so new ones
join automatically. Each case is a tiny model (hidden 32, 2 layers, 16x16 images or 9 tokens with padded examples, batch 8) of
the family's classification head, with every parameter moved off its initial value (DTN gates strictly inside (0, 1),
DyT alpha perturbed, LaPE's position norms and every affine away from 1 and 0, unit-variance Linear layers so outputs
are of order 1). `tests/models/test_runtimes.py` asserts the same checks against `CHECKS` (`tolerance`).
"""

from __future__ import annotations

import argparse
import copy
import io
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import hf_norms
from benchmarks.timing import markdown_table
from hf_norms.models.family_registry import FAMILIES, MODEL_CLASSES

# A batch of 8: SepNorm's BatchNorm prefix norm normalises [CLS] over the batch, nearly equal values at 2 examples,
# where 16-bit rounding changes its output by 100 %.
HIDDEN, LAYERS, HEADS, IMAGE_SIZE, PATCH_SIZE, BATCH, SEQ_LEN, VOCAB, LABELS = 32, 2, 2, 16, 4, 8, 9, 101, 3


@dataclass
class Case:
    """One family x norm_type: a float32 model in eval mode and two batches of inputs (with labels), the second of
    another batch size (and, for text, length) to check dynamic shapes."""

    family: str
    norm_type: str
    model: nn.Module
    inputs: dict[str, torch.Tensor]
    other_inputs: dict[str, torch.Tensor]

    @property
    def name(self) -> str:
        return f"{self.family}-{self.norm_type}"

    @property
    def is_text(self) -> bool:
        return "input_ids" in self.inputs

    def copy(self) -> nn.Module:
        return copy.deepcopy(self.model)


def family_heads() -> dict[str, type]:
    """Model type -> the head of the family's default fine-tuning task (a classification head with a loss), for every
    hf-norms family."""
    return {
        family.model_type: MODEL_CLASSES[family.task_heads[family.default_task]]
        for family in FAMILIES.values()
        if family.default_task is not None
    }


def tiny_model(head: type, norm_type: str) -> nn.Module:
    options = dict(
        norm_type=norm_type, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=2 * HIDDEN, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=LABELS,
    )  # fmt: skip
    if head.main_input_name == "pixel_values":
        options.update(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, encoder_stride=PATCH_SIZE)
    else:
        options.update(vocab_size=VOCAB, max_position_embeddings=64)
    return head(head.config_class(**options)).eval()


@torch.no_grad()
def move_off_initial_values(model: nn.Module, generator: torch.Generator) -> None:
    """Parameters where no special value hides a bug: unit-variance Linear and Conv weights (outputs of order 1), DTN
    gates in (0.2, 0.8), DyT's and Derf's alpha scaled by 0.7-1.3, every other parameter (norm affines, Derf's shift,
    LaPE's `pe_norm`, DTN's position projection, biases, embeddings, DeiT's zero-initialised tokens) shifted by
    N(0, 0.1), BatchNorm running statistics away from (0, 1)."""

    def normal(shape: torch.Size, std: float) -> torch.Tensor:
        return torch.randn(shape, generator=generator) * std

    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            module.weight.copy_(normal(module.weight.shape, module.weight[0].numel() ** -0.5))
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.copy_(normal(module.running_mean.shape, 0.1))
            module.running_var.copy_(1 + normal(module.running_var.shape, 0.1).abs())
    layer_weights = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))}
    for name, parameter in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("mean_gate", "var_gate"):
            parameter.copy_(0.2 + 0.6 * torch.rand(parameter.shape, generator=generator))
        elif leaf == "alpha":
            parameter.mul_(0.7 + 0.6 * torch.rand(parameter.shape, generator=generator))
        elif id(parameter) not in layer_weights:
            parameter.add_(normal(parameter.shape, 0.1))


def make_inputs(model: nn.Module, batch: int, seq_len: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Images `[batch, 3, 16, 16]`, or `seq_len` tokens of which examples end in 0, 2, 4 or 6 padding tokens."""
    labels = torch.arange(batch) % LABELS
    if model.main_input_name == "pixel_values":
        return {"pixel_values": torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator), "labels": labels}
    attention_mask = torch.ones(batch, seq_len, dtype=torch.long)
    for example in range(batch):
        attention_mask[example, seq_len - 2 * (example % 4) :] = 0
    input_ids = torch.randint(3, VOCAB, (batch, seq_len), generator=generator)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def make_case(family: str, norm_type: str, head: type) -> Case:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = tiny_model(head, norm_type)
    move_off_initial_values(model, generator)
    inputs = make_inputs(model, BATCH, SEQ_LEN, generator)
    return Case(family, norm_type, model, inputs, make_inputs(model, BATCH - 3, SEQ_LEN + 3, generator))


def all_cases(families: list[str] | None = None, norm_types: list[str] | None = None) -> list[Case]:
    heads = family_heads()
    return [
        make_case(family, norm_type, head)
        for family, head in heads.items()
        if families is None or family in families
        for norm_type in sorted(hf_norms.NORM_TYPES)
        if norm_types is None or norm_type in norm_types
    ]


# ---------------------------------------------------------------------------------------------------------------------
# What is compared: inference logits, and a training step's logits, loss and gradients.
# ---------------------------------------------------------------------------------------------------------------------


def features(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value for name, value in inputs.items() if name != "labels"}


def inference(model: Callable, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {"logits": model(**features(inputs)).logits.float()}


def training_step(model: nn.Module, inputs: dict[str, torch.Tensor], run: Callable | None = None) -> dict:
    """Forward and backward in train mode (through `run`, e.g. a compiled model, if given): logits, loss and every
    parameter's gradient."""
    model.train()
    outputs = (model if run is None else run)(**inputs)
    outputs.loss.backward()
    model.eval()
    results = {"logits": outputs.logits.detach().float(), "loss": outputs.loss.detach().float()}
    results.update({name: p.grad.float() for name, p in model.named_parameters() if p.grad is not None})
    return results


def max_abs_diff(results: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    assert results.keys() == reference.keys(), results.keys() ^ reference.keys()
    return max((results[name] - reference[name]).abs().max().item() for name in reference)


def max_relative_diff(results: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """The max abs difference of the logits, of the loss and of all gradients together, each over the max abs value of
    the same quantity in the reference (a gradient that is 0 in float32, such as DTN's `pos_proj.bias`, which cancels
    in the softmax, is measured against the scale of the other gradients); the largest of these."""
    assert results.keys() == reference.keys(), results.keys() ^ reference.keys()
    groups: dict[str, list[str]] = {}
    for name in reference:
        groups.setdefault(name if name in ("logits", "loss") else "gradients", []).append(name)
    return max(
        max((results[n] - reference[n]).abs().max().item() for n in names)
        / max(reference[n].abs().max().item() for n in names)
        for names in groups.values()
    )


def set_fast_paths(model: nn.Module, enabled: bool) -> nn.Module:
    for module in model.modules():
        if hasattr(module, "fast_path"):
            module.fast_path = enabled
    return model


# ---------------------------------------------------------------------------------------------------------------------
# The runtimes. Each check returns {row: difference}; one artifact (a compiled model, an exported program) serves
# every row it can.
# ---------------------------------------------------------------------------------------------------------------------


def eager_plain_formulas(case: Case) -> dict[str, float]:
    """The fast paths (default) against the plain formulas that the traced runtimes run (`fast_path = False`)."""
    fast, plain = case.copy(), set_fast_paths(case.copy(), False)
    inference_diff = max_abs_diff(inference(plain, case.inputs), inference(fast, case.inputs))
    training_diff = max_abs_diff(training_step(plain, case.inputs), training_step(fast, case.inputs))
    return {"eager: plain formulas vs fast paths": max(inference_diff, training_diff)}


def compiled(case: Case, backend: str = "inductor") -> dict[str, float]:
    """The whole model through `torch.compile(fullgraph=True)`: one graph, no branch on tensor values. Inference, then a
    training step (text: with padded examples) of the same compiled model. `aot_eager` stops before inductor: dynamo's
    graph and AOTAutograd's functional forward and backward, what inductor compiles, in a fraction of its time."""
    torch._dynamo.reset()  # every case compiles the same functions anew: no recompile limit across cases
    model = case.copy()
    compiled_model = torch.compile(model, backend=backend, fullgraph=True)
    inference_diff = max_abs_diff(inference(compiled_model, case.inputs), inference(case.model, case.inputs))
    training_diff = max_abs_diff(
        training_step(model, case.inputs, compiled_model), training_step(case.copy(), case.inputs)
    )
    return {
        f"torch.compile {backend}: inference": inference_diff,
        f"torch.compile {backend}: training step": training_diff,
    }


def compiled_aot_eager(case: Case) -> dict[str, float]:
    return compiled(case, backend="aot_eager")


def autocast_training(case: Case) -> dict[str, float]:
    """CPU autocast to bfloat16 and float16, a training step, relative to float32."""
    reference = training_step(case.copy(), case.inputs)
    rows = {}
    for dtype in (torch.bfloat16, torch.float16):
        model = case.copy()
        with torch.autocast("cpu", dtype=dtype):
            rows[f"autocast {dtype_name(dtype)}: training step (relative)"] = max_relative_diff(
                training_step(model, case.inputs), reference
            )
    return rows


def half_weights(case: Case) -> dict[str, float]:
    """Weights in bfloat16 and float16 (`model.to(dtype)`), inference, relative to float32."""
    reference = inference(case.model, case.inputs)
    return {
        f"{dtype_name(dtype)} weights: inference (relative)": max_relative_diff(
            inference(case.copy().to(dtype), half_inputs(case.inputs, dtype)), reference
        )
        for dtype in (torch.bfloat16, torch.float16)
    }


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def half_inputs(inputs: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {name: value.to(dtype) if value.is_floating_point() else value for name, value in inputs.items()}


def dynamic_shapes(case: Case) -> dict[str, dict[int, object]]:
    """Dynamic batch, and for text dynamic length too."""
    dims = {0: torch.export.Dim.DYNAMIC}
    if case.is_text:
        dims[1] = torch.export.Dim.DYNAMIC
    return {name: dims for name in features(case.inputs)}


def onnxruntime_logits(model_bytes: bytes, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    feed = {node.name: inputs[node.name].numpy() for node in session.get_inputs()}
    return {"logits": torch.from_numpy(session.run(None, feed)[0])}


def exported(case: Case) -> dict[str, float]:
    """`torch.export` with dynamic shapes, then the dynamo ONNX exporter on the same program and onnxruntime, and the
    dynamo ONNX exporter on the model itself (where DTN is one operator with its own translation, `norms/dtn.py`);
    all run on a batch of another size (and length) than the one exported with."""
    program = torch.export.export(case.copy(), (), kwargs=features(case.inputs), dynamic_shapes=dynamic_shapes(case))
    reference = inference(case.model, case.other_inputs)
    export_diff = max_abs_diff(inference(program.module(), case.other_inputs), reference)
    from_program = torch.onnx.export(program, dynamic_shapes=dynamic_shapes(case), dynamo=True, verbose=False)
    from_model = dynamo_onnx_program(case)
    onnx_diffs = (
        max_abs_diff(onnxruntime_logits(onnx.model_proto.SerializeToString(), case.other_inputs), reference)
        for onnx in (from_program, from_model)
    )
    return dict(zip(CHECKS[exported], (export_diff, *onnx_diffs), strict=True))


def dynamo_onnx_program(case: Case) -> torch.onnx.ONNXProgram:
    """`torch.onnx.export(model, dynamo=True)` as users call it, with a dynamic batch (and length)."""
    return torch.onnx.export(
        case.copy(), kwargs=features(case.inputs), dynamic_shapes=dynamic_shapes(case), dynamo=True, verbose=False
    )


def exported_torchscript(case: Case) -> dict[str, float]:
    """The TorchScript ONNX exporter (`dynamo=False`, as transformers' own ViT and BERT export), with dynamic axes."""
    inputs = features(case.inputs)
    axes = {name: {0: "batch", 1: "sequence"} if case.is_text else {0: "batch"} for name in inputs}
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            case.copy(), (), buffer, kwargs=inputs, dynamo=False, input_names=list(inputs), output_names=["logits"],
            dynamic_axes=axes,
        )  # fmt: skip
    logits = onnxruntime_logits(buffer.getvalue(), case.other_inputs)
    return {"ONNX TorchScript exporter + onnxruntime": max_abs_diff(logits, inference(case.model, case.other_inputs))}


def lora_round_trip(case: Case) -> dict[str, float]:
    """peft LoRA with its default target modules: one training step, `save_pretrained`, `PeftModel.from_pretrained` on
    a fresh copy of the base model; the reloaded model against the trained one."""
    from peft import LoraConfig, PeftModel, get_peft_model

    # Modules whose state training changes besides their parameters (BatchNorm's running statistics, in SepNorm's
    # default prefix norm) must be saved with the adapter, or the reloaded model has the base model's statistics.
    stateful = sorted({name.rsplit(".", 1)[-1] for name, m in case.model.named_modules() if has_running_stats(m)})
    task = {"task_type": "SEQ_CLS"} if case.is_text else {"modules_to_save": ["classifier"]}
    if stateful:
        task["modules_to_save"] = task.get("modules_to_save", []) + stateful
    peft_model = get_peft_model(case.copy(), LoraConfig(r=4, lora_alpha=8, **task))
    optimizer = torch.optim.SGD([p for p in peft_model.parameters() if p.requires_grad], lr=0.1)
    training_step(peft_model, case.inputs)
    optimizer.step()
    with tempfile.TemporaryDirectory() as folder:
        peft_model.save_pretrained(folder)
        reloaded = PeftModel.from_pretrained(case.copy(), folder).eval()
        diff = max_abs_diff(inference(reloaded, case.inputs), inference(peft_model.eval(), case.inputs))
    return {"peft LoRA: train, save, reload": diff}


def has_running_stats(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats


# check -> its rows and their tolerance on the difference (absolute, or relative to the float32 reference's max abs)
CHECKS: dict[Callable[[Case], dict[str, float]], dict[str, float]] = {
    eager_plain_formulas: {"eager: plain formulas vs fast paths": 1e-4},
    compiled: {"torch.compile inductor: inference": 1e-4, "torch.compile inductor: training step": 1e-4},
    compiled_aot_eager: {"torch.compile aot_eager: inference": 1e-4, "torch.compile aot_eager: training step": 1e-4},
    autocast_training: {
        "autocast bf16: training step (relative)": 5e-2,
        "autocast fp16: training step (relative)": 1e-2,
    },
    half_weights: {"bf16 weights: inference (relative)": 5e-2, "fp16 weights: inference (relative)": 1e-2},
    exported: {
        "torch.export": 1e-4,
        "ONNX dynamo exporter on torch.export's program + onnxruntime": 1e-4,
        "ONNX dynamo exporter on the model + onnxruntime": 1e-4,
    },
    exported_torchscript: {"ONNX TorchScript exporter + onnxruntime": 1e-4},
    lora_round_trip: {"peft LoRA: train, save, reload": 1e-6},
}


# SepNorm's default BatchNorm prefix norm normalises [CLS] over the batch; in the first layer every example's [CLS] is
# the same vector (variance 0), so the gradient through it is `(dy - mean(dy)) / sqrt(eps)`: bf16's rounding of `dy`
# survives the cancellation 300-fold in the prefix tokens' and position embeddings' gradients (measured 0.19 on DeiT).
TOLERANCE_EXCEPTIONS = {("sepnorm", "autocast bf16: training step (relative)"): 0.3}


def tolerance(row: str, norm_type: str) -> float:
    check = next(check for check, rows in CHECKS.items() if row in rows)
    return TOLERANCE_EXCEPTIONS.get((norm_type, row), CHECKS[check][row])


def table(cases: list[Case], checks: list[Callable]) -> str:
    norm_types = sorted({case.norm_type for case in cases})
    rows = []
    for check in checks:
        results = [check(case) for case in cases]
        for row, tolerance in CHECKS[check].items():
            worst = {
                t: max(r[row] for r, c in zip(results, cases, strict=True) if c.norm_type == t) for t in norm_types
            }
            rows.append([row, *(f"{worst[t]:.1e}" for t in norm_types), f"{tolerance:.0e}"])  # see TOLERANCE_EXCEPTIONS
            print(rows[-1], flush=True)
    return markdown_table(["runtime (max over families)", *norm_types, "tolerance"], rows)


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.runtimes`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", choices=sorted(family_heads()))
    parser.add_argument("--norm-types", nargs="+", choices=sorted(hf_norms.NORM_TYPES))
    parser.add_argument("--checks", nargs="+", choices=[check.__name__ for check in CHECKS])
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    default = [check for check in CHECKS if check is not compiled]  # inductor: minutes per model, only when asked
    checks = default if args.checks is None else [check for check in CHECKS if check.__name__ in args.checks]
    cases = all_cases(args.families, args.norm_types)
    print(
        f"Max abs difference from eager float32, {len(cases)} cases ({', '.join(sorted({c.family for c in cases}))})."
    )
    print(table(cases, checks))


if __name__ == "__main__":
    main()
