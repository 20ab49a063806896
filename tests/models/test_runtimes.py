"""Every family x norm_type in the runtimes users put models in, against eager float32: the fast paths against the
plain formulas, bf16/fp16 autocast (a training step), bf16/fp16 weights, `torch.export` and the dynamo ONNX exporter
run by onnxruntime (dynamic batch, and length for text), the TorchScript ONNX exporter, a peft LoRA round trip, and
`torch.compile`. `benchmarks/runtimes.py` holds the cases, the checks and their tolerances, and prints the table of
`docs/runtimes.md` on the whole grid (`python -m benchmarks.runtimes`, about 20 minutes on 2 cores).

Families and norm types come from the code (`family_registry.FAMILIES`, `hf_norms.NORM_TYPES`), so new ones join.
The checks that take seconds run on the whole grid. Exporting takes 5-45 s per tiny model and compiling with inductor
one to two minutes (2 shared cores, cold cache), so here: export for every norm type (families in turn) and DTN in
every family; `torch.compile` with the `aot_eager` backend (dynamo's single graph and AOTAutograd's functional forward
and backward, what inductor compiles) for every norm type; inductor itself on DTN with padded text.
"""

from __future__ import annotations

import functools

import pytest
import torch
from conftest import tiny_config

import hf_norms
from benchmarks import runtimes
from hf_norms.models.family_registry import FAMILIES

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILY_NAMES = sorted(runtimes.family_heads())
NORM_TYPES = sorted(hf_norms.NORM_TYPES)
GRID = [(family, norm_type) for family in FAMILY_NAMES for norm_type in NORM_TYPES]
# Seconds per tiny model each: every family x norm_type
GRID_CHECKS = [
    runtimes.eager_plain_formulas,
    runtimes.autocast_training,
    runtimes.half_weights,
    runtimes.exported_torchscript,
    runtimes.lora_round_trip,
]
# 5-45 s per tiny model each (DTN the most): every norm type in one family, the families taken in turn, and DTN in
# every family; `python -m benchmarks.runtimes` runs them on the whole grid.
ROTATION = [(FAMILY_NAMES[i % len(FAMILY_NAMES)], norm_type) for i, norm_type in enumerate(NORM_TYPES)]
EXPORT_CASES = sorted(set(ROTATION) | {(family, "dtn") for family in FAMILY_NAMES})


@functools.cache
def case(family: str, norm_type: str) -> runtimes.Case:
    """Each case built once for all checks (the checks work on copies)."""
    return runtimes.make_case(family, norm_type, runtimes.family_heads()[family])


def assert_within_tolerances(check, case: runtimes.Case) -> None:
    results = check(case)
    assert results.keys() == runtimes.CHECKS[check].keys()
    for row, difference in results.items():
        assert difference <= runtimes.tolerance(row, case.norm_type), f"{case.name}, {row}: {difference:.2e}"


@pytest.mark.parametrize("check", GRID_CHECKS, ids=lambda check: check.__name__)
@pytest.mark.parametrize(("family", "norm_type"), GRID)
def test_every_runtime_computes_what_eager_float32_computes(family, norm_type, check):
    assert_within_tolerances(check, case(family, norm_type))


@pytest.mark.slow
@pytest.mark.parametrize(("family", "norm_type"), EXPORT_CASES)
def test_torch_export_and_the_dynamo_onnx_exporter_compute_what_eager_computes(family, norm_type):
    assert_within_tolerances(runtimes.exported, case(family, norm_type))


@pytest.mark.slow
@pytest.mark.parametrize(("family", "norm_type"), ROTATION)
def test_compiled_graphs_compute_what_eager_computes(family, norm_type):
    assert_within_tolerances(runtimes.compiled_aot_eager, case(family, norm_type))


@pytest.mark.slow
def test_dtn_compiled_with_inductor_computes_what_eager_computes_with_padding():
    """Inductor itself (about two minutes on 2 shared cores, cold): DTN on text with padded examples."""
    assert_within_tolerances(runtimes.compiled, case("bert_norm", "dtn"))


def test_the_grid_covers_every_family_and_norm_type():
    # the checks compare a head's loss: a family without one (CLIP vision) is covered by its own tests
    assert {family.model_type for family in FAMILIES.values() if family.task_heads} == set(FAMILY_NAMES)
    assert {"bert_norm", "deit_norm", "vit_norm"} <= set(FAMILY_NAMES)
    assert {norm_type for _, norm_type in GRID} == {norm_type for _, norm_type in ROTATION} == set(NORM_TYPES)


def test_cases_have_parameters_off_their_initial_values():
    model = case("vit_norm", "dtn").model
    gates = torch.cat([p for name, p in model.named_parameters() if name.endswith(("mean_gate", "var_gate"))])
    assert 0 < gates.min() and gates.max() < 1 and gates.std() > 0
    alphas = torch.cat([p for name, p in case("bert_norm", "dyt").model.named_parameters() if name.endswith("alpha")])
    assert not torch.allclose(alphas, torch.full_like(alphas, 0.5))
    pe_norms = [p for name, p in case("deit_norm", "lape").model.named_parameters() if ".pe_norm." in name]
    assert pe_norms and all(p.abs().min() > 0 for p in pe_norms)
    assert (case("bert_norm", "dtn").inputs["attention_mask"] == 0).any()  # text checks run with padding


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_peft_lora_defaults_target_attention_and_all_linear_leaves_norm_internals_alone(family):
    from peft import LoraConfig, get_peft_model

    dtn = case(family, "dtn")
    adapted = get_peft_model(dtn.copy(), LoraConfig(r=2))
    targets = {name.rsplit(".", 1)[-1] for name, module in adapted.named_modules() if hasattr(module, "lora_A")}
    assert targets in ({"query", "value"}, {"q_proj", "v_proj"})
    adapted = get_peft_model(dtn.copy(), LoraConfig(r=2, target_modules="all-linear"))
    wrapped = [name for name, module in adapted.named_modules() if hasattr(module, "lora_A")]
    assert wrapped and not any("pos_proj" in name for name in wrapped)
    saved_keys = {".".join(name.split(".")[-2:]) for name in dtn.model.state_dict()}
    assert {"pos_proj.weight", "pos_proj.bias"} <= saved_keys  # checkpoints keep their keys


def traced_graphs(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> list[torch.fx.GraphModule]:
    """The graphs dynamo hands to the backend while the compiled `model` runs each batch without autograd."""
    graphs = []

    def backend(graph: torch.fx.GraphModule, example_inputs) -> object:
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    compiled = torch.compile(model.eval(), backend=backend)
    with torch.no_grad():
        for inputs in batches:
            torch.testing.assert_close(compiled(**inputs).logits, model(**inputs).logits, rtol=0, atol=1e-5)
    return graphs


@pytest.mark.slow
@pytest.mark.parametrize("family", ["vit", "bert"])
def test_compiled_dtn_is_one_graph_traced_once_per_model_and_dynamic_in_the_batch(family):
    """No graph breaks; every DTN of an inference graph calls one nested compile region (traced and compiled once, not
    once per layer); new batch sizes (and text lengths, with padding) recompile once, to dynamic shapes, then never."""
    torch.manual_seed(0)
    config = tiny_config(family, "dtn", dtn_gate_init=0.5)
    if family == "vit":
        model = hf_norms.ViTNormForImageClassification(config)
        batches = [{"pixel_values": torch.randn(batch, 3, config.image_size, config.image_size)} for batch in (2, 3, 5)]
    else:
        model = hf_norms.BertNormForSequenceClassification(config)
        batches = []
        for batch, length in ((2, 7), (3, 9), (5, 11)):
            mask = torch.ones(batch, length, dtype=torch.long)
            mask[-1, length // 2 :] = 0
            batches.append({"input_ids": torch.randint(3, 100, (batch, length)), "attention_mask": mask})
    graphs = traced_graphs(model, batches)
    assert len(graphs) == 2  # the first shapes, then dynamic ones
    norms = sum(isinstance(module, hf_norms.DynamicTokenNorm) for module in model.modules())
    for graph in graphs:
        calls = [node for node in graph.graph.nodes if node.target is torch.ops.higher_order.invoke_subgraph]
        assert len(calls) == norms >= 3
        assert len({node.args[0].target for node in calls}) == 1  # one traced formula for all of them


@pytest.mark.slow
@pytest.mark.parametrize("family", ["dinov2_norm", "bert_norm"])
def test_the_dynamo_onnx_exporter_takes_each_dtn_as_one_operator_and_translates_it_to_standard_onnx(family):
    """Under `torch.onnx.export(model, dynamo=True)` every DTN is one `hf_norms::dynamic_token_norm` node of the traced
    program (DINOv2: prefix tokens and a 2-D grid; BERT: one row of dynamic length with padding), and the ONNX graph
    holds only standard operators (onnxruntime runs it: `exported`, above, checks its values)."""
    from hf_norms.norms.dtn import OPERATOR_NAME

    dtn = case(family, "dtn")
    onnx_program = runtimes.dynamo_onnx_program(dtn)
    targets = [str(node.target) for node in onnx_program.exported_program.graph.nodes]
    norms = sum(isinstance(module, hf_norms.DynamicTokenNorm) for module in dtn.model.modules())
    assert sum(target.startswith(OPERATOR_NAME.replace("::", ".")) for target in targets) == norms >= 3
    assert {node.domain for node in onnx_program.model_proto.graph.node} <= {"", "ai.onnx"}
    assert not onnx_program.model_proto.functions


def test_a_second_copy_of_the_dtn_module_takes_its_own_operator_name():
    """An installed hf-norms and a checkpoint's remote code each register the operator; neither replaces the other."""
    from hf_norms.norms import dtn

    assert dtn.OPERATOR_NAME == "hf_norms::dynamic_token_norm"
    assert dtn.free_operator_name() == "hf_norms::dynamic_token_norm_1"


def onnx_constant_nodes(norm_type: str, num_hidden_layers: int) -> int:
    """Constant nodes in the dynamo ONNX export of a tiny DINOv2 before the exporter's optimiser runs."""
    model = hf_norms.Dinov2NormModel(tiny_config("dinov2", norm_type, num_hidden_layers=num_hidden_layers)).eval()
    config = model.config
    pixels = torch.randn(2, 3, config.image_size, config.image_size)
    program = torch.onnx.export(
        model, (pixels,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},), dynamo=True, verbose=False, optimize=False
    )
    return sum(node.op_type == "Constant" for node in program.model.graph)


@pytest.mark.slow
def test_dtn_onnx_translations_share_their_constants_across_the_model():
    """Each DTN's translation passes its shapes, axes, offsets and numbers as Python values, which the exporter holds
    once per model: two more layers (four more DTNs) add the Constant nodes they add to the layernorm model and no
    more. (As Constant nodes of their own, 35 per DTN, most of them unused after folding, made onnxscript's
    quadratic `SlicesSplit` rule the largest part of DTN's export time; docs/speed.md.)"""
    added = {
        norm_type: onnx_constant_nodes(norm_type, 3) - onnx_constant_nodes(norm_type, 1)
        for norm_type in ("layernorm", "dtn")
    }
    assert added["dtn"] == added["layernorm"], added
