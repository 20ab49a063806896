"""The same fine-tune on 2 CPU processes (torchrun, gloo), with SepNorm's BatchNorm synchronised across them.

torch's `SyncBatchNorm` refuses CPU tensors and DDP refuses it on CPU modules, so hf-norms converts SepNorm's BatchNorm
to `CPUSyncBatchNorm` (a differentiable all-reduce of the batch statistics). Checked here:

- the layer itself: 2 processes holding 5 and 3 examples give the output, input gradients, summed weight gradients and
  running statistics of one BatchNorm over all 8 (and an unsynchronised BatchNorm does not);
- the whole fine-tune: both ranks end with identical weights and BatchNorm buffers, equal to what the run saved, and
  the 2 x 8 run follows the 1 x 16 single-process run (same batches) step for step;
- the losses a run logs and saves: a BERT head (whose loss ignores the Trainer's `num_items_in_batch`) fine-tuned on
  2 x 4 examples writes the training losses and `eval_loss` of the 1 x 8 run, not twice them (transformers 5.23
  multiplies such a loss by the world size; its stock BERT heads log 3.22 where one process logs 1.61).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainingArguments

from hf_norms import packaged
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune

TINY_SEPNORM_VIT = ModelArguments(
    model_type="vit_norm",
    norm_type="sepnorm",
    config_overrides=(
        "image_size=28,patch_size=7,num_channels=1,hidden_size=32,num_hidden_layers=2,num_attention_heads=4,"
        "intermediate_size=64,hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0"
    ),
)
DATA = DataArguments(dataset="packaged:fashion-mnist", max_train_samples=96, max_eval_samples=32)
TINY_DTN_BERT = ModelArguments(
    model_type="bert_norm",
    norm_type="dtn",
    config_overrides=(
        "hidden_size=32,num_hidden_layers=2,num_attention_heads=4,intermediate_size=64,max_position_embeddings=64,"
        "hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0"
    ),
    tokenizer_name=str(packaged.minilm_path()),
)
TEXT_DATA = DataArguments(dataset="packaged:bbc-news", max_train_samples=24, max_eval_samples=16, max_seq_length=32)


pytestmark = pytest.mark.usefixtures("one_thread")


def training_args(output_dir, per_device_batch: int, max_steps: int = 6) -> TrainingArguments:
    """SGD, so that parameters whose gradient is only rounding noise are not blown up to full steps as Adam does."""
    return TrainingArguments(
        output_dir=str(output_dir),
        use_cpu=True,
        max_steps=max_steps,
        per_device_train_batch_size=per_device_batch,
        per_device_eval_batch_size=per_device_batch,
        optim="sgd",
        learning_rate=0.05,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )


RANK_SCRIPT = """
import copy, json, sys
import torch, torch.distributed as dist
from safetensors.torch import save_file
sys.path.insert(0, {test_dir!r})
from test_distributed import DATA, TEXT_DATA, TINY_DTN_BERT, TINY_SEPNORM_VIT, training_args
from hf_norms import SeparateNorm
from hf_norms.training.finetune import finetune
from hf_norms.training.sync_batchnorm import CPUSyncBatchNorm, convert_sync_batchnorm

output_dir = sys.argv[1]
torch.set_num_threads(1)

# 1. The layer: SepNorm with BatchNorm on 2 prefix tokens, 8 examples split 5 + 3 over the ranks.
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
inputs, upstream = torch.randn(8, 6, 16) * 3 + 1, torch.randn(8, 6, 16)
reference = SeparateNorm(16, num_prefix_tokens=2)
with torch.no_grad():
    reference.prefix_norm.weight.uniform_(0.5, 1.5)
    reference.prefix_norm.bias.uniform_(-1, 1)
unsynchronised = copy.deepcopy(reference)
synchronised = convert_sync_batchnorm(copy.deepcopy(reference))
share = slice(0, 5) if rank == 0 else slice(5, 8)
full, part, alone = inputs.clone().requires_grad_(), inputs[share].clone().requires_grad_(), inputs[share].clone()
for _ in range(2):  # two steps, so the running statistics are compared after more than one update
    expected = reference(full)
    (expected * upstream).sum().backward()
    output = synchronised(part)
    (output * upstream[share]).sum().backward()
weight_grad = synchronised.prefix_norm.weight.grad.clone()
dist.all_reduce(weight_grad)
layer = {{
    "converted": type(synchronised.prefix_norm).__name__,
    "output": (output - expected[share]).abs().max().item(),
    "input_grad": (part.grad - full.grad[share]).abs().max().item(),
    "weight_grad": (weight_grad - reference.prefix_norm.weight.grad).abs().max().item(),
    "running_mean": (synchronised.prefix_norm.running_mean - reference.prefix_norm.running_mean).abs().max().item(),
    "running_var": (synchronised.prefix_norm.running_var - reference.prefix_norm.running_var).abs().max().item(),
    "unsynchronised_output": (unsynchronised(alone) - expected[share]).abs().max().item(),
}}

# 2. The fine-tune, through the same entry point as one process.
result = finetune(TINY_SEPNORM_VIT, DATA, training_args(output_dir, per_device_batch=8))
model = result.trainer.model
save_file({{k: v.contiguous() for k, v in model.state_dict().items()}}, f"{{output_dir}}/rank{{rank}}.safetensors")
report = {{
    "world_size": dist.get_world_size(),
    "layer": layer,
    "prefix_norms": sorted({{type(m).__name__ for n, m in model.named_modules() if n.endswith("prefix_norm")}}),
    "losses": [entry["loss"] for entry in result.trainer.state.log_history if "loss" in entry],
    "eval_loss": result.eval_metrics["eval_loss"],
}}
with open(f"{{output_dir}}/rank{{rank}}.json", "w") as stream:
    json.dump(report, stream)

# 3. A BERT head, whose loss ignores `num_items_in_batch`: the run writes trainer_state.json and eval_results.json.
finetune(TINY_DTN_BERT, TEXT_DATA, training_args(f"{{output_dir}}/bert", per_device_batch=4, max_steps=3))
"""


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """Run the rank script under `torchrun --standalone --nproc_per_node 2` (a free port); return its output folder."""
    folder = tmp_path_factory.mktemp("distributed")
    script = folder / "rank_script.py"
    script.write_text(RANK_SCRIPT.format(test_dir=os.path.dirname(__file__)))
    output = folder / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(output),
    ]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return output


@pytest.mark.slow
def test_cpu_sync_batchnorm_equals_one_batchnorm_over_all_processes(two_process_run):
    for rank in (0, 1):
        layer = json.loads((two_process_run / f"rank{rank}.json").read_text())["layer"]
        assert layer["converted"] == "CPUSyncBatchNorm"
        for quantity in ("output", "input_grad", "weight_grad", "running_mean", "running_var"):
            assert layer[quantity] < 1e-5, (rank, quantity, layer[quantity])
        assert layer["unsynchronised_output"] > 1e-2  # without the all-reduce, each rank normalises differently


@pytest.mark.slow
def test_two_process_fine_tune_matches_one_process(two_process_run, tmp_path):
    reports = [json.loads((two_process_run / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [report["world_size"] for report in reports] == [2, 2]
    assert all(report["prefix_norms"] == ["CPUSyncBatchNorm"] for report in reports)

    # Every rank ends with the same weights and BatchNorm buffers, and that is what the run saved.
    rank0, rank1 = (load_file(two_process_run / f"rank{rank}.safetensors") for rank in (0, 1))
    saved = load_file(two_process_run / "model.safetensors")
    assert set(rank0) == set(rank1) == set(saved)
    assert all(torch.equal(rank0[name], rank1[name]) and torch.equal(rank0[name], saved[name]) for name in saved)
    assert reports[0]["losses"] == reports[1]["losses"] and len(reports[0]["losses"]) == 6

    # One process with the global batch of 16 sees the same examples at every step: same losses, same weights.
    single = finetune(TINY_SEPNORM_VIT, DATA, training_args(tmp_path, per_device_batch=16))
    single_losses = [entry["loss"] for entry in single.trainer.state.log_history if "loss" in entry]
    assert single_losses == pytest.approx(reports[0]["losses"], abs=1e-5)
    assert single.eval_metrics["eval_loss"] == pytest.approx(reports[0]["eval_loss"], abs=1e-5)
    single_state = single.trainer.model.state_dict()
    differences = {name: (single_state[name].float() - saved[name].float()).abs().max().item() for name in saved}
    assert max(differences.values()) < 1e-4, sorted(differences.items(), key=lambda item: -item[1])[:3]
    assert any(name.endswith("prefix_norm.running_var") for name in saved)


def logged_losses(output_dir) -> tuple[list[float], float]:
    """The training losses of `trainer_state.json`'s log history and the `eval_loss` of `eval_results.json`."""
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    eval_loss = json.loads((output_dir / "eval_results.json").read_text())["eval_loss"]
    return [entry["loss"] for entry in history if "loss" in entry], eval_loss


@pytest.mark.slow
def test_two_processes_log_and_save_the_loss_of_one_process(two_process_run, tmp_path):
    two_losses, two_eval_loss = logged_losses(two_process_run / "bert")
    finetune(TINY_DTN_BERT, TEXT_DATA, training_args(tmp_path, per_device_batch=8, max_steps=3))
    one_losses, one_eval_loss = logged_losses(tmp_path)
    assert len(one_losses) == 3 and 1.0 < one_losses[0] < 2.0  # about ln(5) for 5 classes at the start
    assert two_losses == pytest.approx(one_losses, abs=1e-5)
    assert two_eval_loss == pytest.approx(one_eval_loss, abs=1e-5)
