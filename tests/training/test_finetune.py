"""Fine-tuning every family x norm_type with the Trainer on real data (Fashion-MNIST, BBC News, the real MiniLM).

Tiny models keep each fit to a few seconds; one longer run checks that a model really learns. Metrics come from the
metric modules shipped in `hf_norms/metrics`; best-model reload and resume are compared tensor by tensor; every bad input
fails before training with a message that names the fix.
"""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from finetune_setup import TINY_VISION, tiny_data_args, tiny_model_args, training_args
from safetensors.torch import load_file
from transformers import (
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
    Trainer,
)

import hf_norms
from hf_norms.norms.build import DynamicTanh
from hf_norms.training.data import FinetuneInputError
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune
from hf_norms.training.metrics import METRICS_DIR, load_metric
from hf_norms.training.trainer import NormTrainer, no_decay_parameter_names

NORM_TYPES = sorted(hf_norms.NORM_TYPES)
pytestmark = pytest.mark.usefixtures("one_thread")


def state_dict_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_same_tensors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert set(actual) == set(expected), sorted(set(actual) ^ set(expected))[:5]
    different = [name for name in expected if not torch.equal(actual[name], expected[name])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


# --------------------------------------------------------------------------------------------------------------------
# Fit + evaluate, every family x norm_type
# --------------------------------------------------------------------------------------------------------------------

EXPECTED_NORM_STATE = {
    "dyt": (".alpha",),
    "derf": (".alpha", ".shift"),
    "dtn": (".mean_gate", ".var_gate"),
    "lape": (".pe_gain",),
}


@pytest.mark.parametrize("norm_type", NORM_TYPES)
@pytest.mark.parametrize("family", ["vit", "deit", "bert"])
def test_fit_and_evaluate(family, norm_type, minilm_dir, tmp_path):
    result = finetune(
        tiny_model_args(family, norm_type, minilm_dir=minilm_dir), tiny_data_args(family), training_args(tmp_path)
    )
    trainer = result.trainer
    assert trainer.model.config.norm_type == norm_type
    assert trainer.state.global_step == 4 and math.isfinite(result.train_metrics["train_loss"])

    # The reported metrics are those of the model's own predictions, through the shipped metric modules.
    prediction = trainer.predict(trainer.eval_dataset)
    predicted = prediction.predictions.argmax(-1)
    assert len(predicted) == 24
    assert result.eval_metrics["eval_accuracy"] == pytest.approx(float(np.mean(predicted == prediction.label_ids)))
    assert 0.0 <= result.eval_metrics["eval_f1"] <= 1.0

    # The norms' learned state is in the logs and in trainer_state.json.
    saved_state = json.loads((tmp_path / "trainer_state.json").read_text())
    logged = [key for key in saved_state["log_history"][0] if key.startswith("norm_state/")]
    suffixes = EXPECTED_NORM_STATE.get(norm_type, ())
    assert sorted({key[key.rindex(".") :] for key in logged}) == sorted(suffixes)
    if norm_type == "dyt":  # every DyT module, one alpha each
        assert len(logged) == sum(isinstance(m, DynamicTanh) for m in trainer.model.modules())

    # What was saved reloads through the Auto classes into the same weights.
    auto_class = AutoModelForSequenceClassification if family == "bert" else AutoModelForImageClassification
    reloaded = auto_class.from_pretrained(tmp_path)
    assert type(reloaded) is type(trainer.model)
    assert_same_tensors(state_dict_of(reloaded), state_dict_of(trainer.model))


def test_a_short_fine_tune_learns(tmp_path):
    """SepNorm ViT from scratch on 2000 Fashion-MNIST images: well above the 10 % of chance after 300 steps (0.76 here)."""
    result = finetune(
        ModelArguments(
            model_type="vit_norm",
            norm_type="sepnorm",
            config_overrides=TINY_VISION.replace("hidden_size=32", "hidden_size=64").replace(
                "intermediate_size=64", "intermediate_size=128"
            ),
        ),
        DataArguments(dataset="packaged:fashion-mnist", max_train_samples=2000, max_eval_samples=400),
        training_args(tmp_path, max_steps=300, per_device_train_batch_size=32, warmup_steps=30, logging_steps=50),
    )
    assert result.eval_metrics["eval_accuracy"] > 0.6, result.eval_metrics


def test_masked_lm_fine_tune(minilm_dir, tmp_path):
    result = finetune(
        tiny_model_args("bert", "dyt", minilm_dir=minilm_dir),
        tiny_data_args("bert", task="masked-lm", mlm_probability=0.3),
        training_args(tmp_path),
    )
    assert type(result.trainer.model).__name__ == "BertNormForMaskedLM"
    assert 0.0 <= result.eval_metrics["eval_accuracy"] <= 1.0 and math.isfinite(result.eval_metrics["eval_loss"])


def test_dataset_objects_and_saved_datasets(tmp_path):
    """A `datasets` DatasetDict passed in Python, and the same saved with `save_to_disk` and named by its folder."""
    from hf_norms.training.data import packaged_dataset

    splits = packaged_dataset("fashion-mnist", max_train_samples=32)
    splits["test"] = splits["test"].select(range(16))
    in_memory = finetune(
        tiny_model_args("deit", "lape"),
        DataArguments(),
        training_args(tmp_path / "object", max_steps=2),
        dataset=splits,
    )
    splits.save_to_disk(tmp_path / "saved")
    from_disk = finetune(
        tiny_model_args("deit", "lape"),
        DataArguments(dataset=str(tmp_path / "saved")),
        training_args(tmp_path / "disk", max_steps=2),
    )
    assert len(in_memory.trainer.eval_dataset) == len(from_disk.trainer.eval_dataset) == 16
    assert in_memory.eval_metrics["eval_loss"] == from_disk.eval_metrics["eval_loss"]
    with pytest.raises(FinetuneInputError, match="Give exactly one dataset"):
        finetune(tiny_model_args("deit", "lape"), DataArguments(), training_args(tmp_path / "none"))


# --------------------------------------------------------------------------------------------------------------------
# Metrics: the shipped modules
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["accuracy", "f1", "conversion_fidelity"])
def test_metric_modules_load_from_the_package(name):
    metric = load_metric(name)
    source = inspect.getsource(type(metric))
    assert source in (METRICS_DIR / f"{name}.py").read_text()


def test_the_documented_evaluate_load_of_a_metric_module_runs(tmp_path):
    """The example of docs/fine-tuning.md, as a user pastes it into a fresh interpreter: `evaluate.load` of the module's
    path, and the F1 it prints is scikit-learn's."""
    from sklearn.metrics import f1_score

    page = (Path(__file__).parents[2] / "docs" / "fine-tuning.md").read_text()
    example = page.split("## The metric modules with `evaluate`", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout.splitlines()
    assert printed[0] == str({"f1": f1_score([0, 2, 2, 1], [0, 1, 2, 2], average="macro")}) == "{'f1': 0.5}"
    assert printed[1].strip()


def test_accuracy_and_f1_match_scikit_learn():
    from sklearn.metrics import accuracy_score, f1_score

    rng = np.random.default_rng(0)
    predictions, references = rng.integers(0, 5, 200), rng.integers(0, 5, 200)
    weights = rng.random(200)
    accuracy, f1 = load_metric("accuracy"), load_metric("f1")
    assert accuracy.compute(predictions=predictions, references=references)["accuracy"] == pytest.approx(
        accuracy_score(references, predictions)
    )
    assert accuracy.compute(predictions=predictions, references=references, sample_weight=weights)[
        "accuracy"
    ] == pytest.approx(accuracy_score(references, predictions, sample_weight=weights))
    for average in ("micro", "macro", "weighted"):
        ours = f1.compute(predictions=predictions, references=references, average=average)["f1"]
        assert ours == pytest.approx(f1_score(references, predictions, average=average)), average
    binary = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    assert f1.compute(predictions=binary[0], references=binary[1])["f1"] == pytest.approx(
        f1_score(binary[1], binary[0])
    )
    with pytest.raises(ValueError, match="average='binary' needs at most 2 classes"):
        f1.compute(predictions=predictions, references=references)


def test_conversion_fidelity_on_real_minilm(minilm_dir, news_sentences):
    """An exact conversion (DTN with gates at 1) scores ~perfect against the stock MiniLM; a naive DyT swap does not."""
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    batch = tokenizer(news_sentences, padding=True, truncation=True, max_length=64, return_tensors="pt")

    def pooled(model) -> np.ndarray:
        with torch.no_grad():
            hidden = model.eval()(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return ((hidden * mask).sum(1) / mask.sum(1)).numpy()

    reference = pooled(BertModel.from_pretrained(minilm_dir))
    fidelity = load_metric("conversion_fidelity")
    exact = fidelity.compute(
        predictions=pooled(hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type="dtn", dtn_gate_init=1.0)),
        references=reference,
        is_logits=False,
    )
    naive = fidelity.compute(
        predictions=pooled(hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type="dyt")),
        references=reference,
        is_logits=False,
    )
    assert exact["min_cosine"] > 0.99999 and exact["max_abs_diff"] < 1e-4
    assert naive["mean_cosine"] < 0.5 and "top1_agreement" not in naive


def test_conversion_fidelity_on_logits():
    fidelity = load_metric("conversion_fidelity")
    outputs, reference = np.array([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0]]), np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
    result = fidelity.compute(predictions=outputs, references=reference)
    log_p = reference - np.log(np.exp(reference).sum(1, keepdims=True))
    log_q = outputs - np.log(np.exp(outputs).sum(1, keepdims=True))
    assert result["top1_agreement"] == 0.5
    assert result["max_abs_diff"] == 2.0
    assert result["mean_kl"] == pytest.approx(np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=1)))


# --------------------------------------------------------------------------------------------------------------------
# Optimizer groups
# --------------------------------------------------------------------------------------------------------------------

VISION_TOKENS = ("cls_token", "distillation_token", "mask_token", "position_embeddings")


@pytest.mark.parametrize("norm_type", NORM_TYPES)
@pytest.mark.parametrize("family", ["vit", "deit", "bert"])
def test_no_weight_decay_on_norm_and_1d_parameters(family, norm_type, tmp_path):
    model_class = {
        "vit": hf_norms.ViTNormForImageClassification,
        "deit": hf_norms.DeiTNormForImageClassification,
        "bert": hf_norms.BertNormForSequenceClassification,
    }[family]
    model = model_class(tiny_config(family, norm_type))
    trainer = NormTrainer(model=model, args=training_args(tmp_path, weight_decay=0.05))
    decayed, exempt = trainer.create_optimizer().param_groups
    assert decayed["weight_decay"] == 0.05 and exempt["weight_decay"] == 0.0
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    decayed_names = {names[id(p)] for p in decayed["params"]}
    exempt_names = {names[id(p)] for p in exempt["params"]}
    assert decayed_names | exempt_names == set(names.values()) and not decayed_names & exempt_names

    # Decayed: only matrices of linear, convolution and embedding layers.
    modules = dict(model.named_modules())
    for name in decayed_names:
        module = modules[name.rsplit(".", 1)[0]]
        assert isinstance(module, (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Embedding)), name
        assert name.endswith(".weight") and ".pos_proj." not in name, name
    # Exempt: every 1-D parameter (norm affine, DyT alpha, DTN gates, biases), DTN's position projection, vision tokens.
    expected_exempt = {
        name
        for name, parameter in model.named_parameters()
        if parameter.ndim <= 1 or ".pos_proj." in name or name.rsplit(".", 1)[-1] in VISION_TOKENS
    }
    assert exempt_names == expected_exempt
    specific = {
        "dyt": ".alpha",
        "derf": ".shift",
        "dtn": "_gate",
        "lape": "pe_norm.weight",
        "sepnorm": "prefix_norm.weight",
    }
    if norm_type in specific:
        assert any(name.endswith(specific[norm_type]) for name in exempt_names)


def test_norm_groups_do_not_depend_on_module_names(tmp_path):
    """The stock Trainer finds norms by name ("norm", "bias"); a DyT named "1" would be decayed. Ours goes by type."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), DynamicTanh(4))
    args = training_args(tmp_path, weight_decay=0.1)
    assert "1.alpha" in Trainer(model=model, args=args).get_decay_parameter_names(model)
    assert no_decay_parameter_names(model) == {"0.bias", "1.alpha", "1.weight", "1.bias"}


# --------------------------------------------------------------------------------------------------------------------
# Checkpoints: best-model reload and resume
# --------------------------------------------------------------------------------------------------------------------


def test_load_best_model_at_end_restores_the_best_checkpoint(tmp_path):
    """SepNorm (BatchNorm buffers included) and DTN parameters come back exactly from the best checkpoint."""
    args = training_args(
        tmp_path,
        max_steps=6,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="loss",
        greater_is_better=True,  # the worst loss is the best: the first checkpoint, never the last
    )
    model_args = tiny_model_args("vit", "sepnorm")
    model_args.config_overrides += ",dtn_num_heads=2"
    result = finetune(model_args, tiny_data_args("vit"), args)
    state = result.trainer.state
    assert state.best_model_checkpoint.endswith("checkpoint-2")
    best = load_file(f"{state.best_model_checkpoint}/model.safetensors")
    last = load_file(tmp_path / "checkpoint-6" / "model.safetensors")
    final = state_dict_of(result.trainer.model)
    assert_same_tensors(final, best)
    assert any(not torch.equal(best[name], last[name]) for name in best)
    assert any(name.endswith("prefix_norm.running_mean") for name in best)
    assert_same_tensors(load_file(tmp_path / "model.safetensors"), best)  # save_model wrote the best weights


def test_resume_continues_with_identical_losses_and_weights(tmp_path):
    """With dropout on (so the RNG state matters), a run resumed from step 3 equals the uninterrupted run exactly."""
    model_args = tiny_model_args("deit", "dtn", extra=",hidden_dropout_prob=0.1,attention_probs_dropout_prob=0.1")
    full = finetune(
        model_args,
        tiny_data_args("deit", max_train_samples=40),
        training_args(tmp_path / "full", max_steps=6, save_strategy="steps", save_steps=3),
    )
    resumed = finetune(
        model_args,
        tiny_data_args("deit", max_train_samples=40),
        training_args(
            tmp_path / "resumed",
            max_steps=6,
            save_strategy="steps",
            save_steps=3,
            resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"),
        ),
    )

    def losses(result) -> dict[int, float]:
        return {entry["step"]: entry["loss"] for entry in result.trainer.state.log_history if "loss" in entry}

    assert sorted(losses(full)) == list(range(1, 7))
    assert {step: loss for step, loss in losses(resumed).items() if step > 3} == {
        step: loss for step, loss in losses(full).items() if step > 3
    }
    assert_same_tensors(state_dict_of(resumed.trainer.model), state_dict_of(full.trainer.model))
