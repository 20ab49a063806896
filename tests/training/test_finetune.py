"""Fine-tuning every family x norm_type with the Trainer on real data (Fashion-MNIST, BBC News, the real MiniLM).

Tiny models keep each fit to a few seconds; one longer run checks that a model really learns. Metrics come from the
metric modules shipped in `hf_norms/metrics`; best-model reload and resume are compared tensor by tensor; every bad input
fails before training with a message that names the fix.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import HF_NORMS_SCRIPT, tiny_config
from huggingface_hub import HfApi, ModelCard
from PIL import Image
from safetensors.torch import load_file
from transformers import (
    AutoModelForImageClassification,
    AutoModelForSequenceClassification,
    Trainer,
    TrainingArguments,
)

import hf_norms
from hf_norms import cli, packaged
from hf_norms.hub.server import HubServer
from hf_norms.models.norms import DynamicTanh
from hf_norms.training import data as data_module
from hf_norms.training import finetune as finetune_module
from hf_norms.training.data import FinetuneInputError
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune
from hf_norms.training.metrics import METRICS_DIR, load_metric
from hf_norms.training.trainer import NormTrainer, no_decay_parameter_names

NORM_TYPES = sorted(hf_norms.NORM_TYPES)
TINY_VISION = (
    "image_size=28,patch_size=7,num_channels=1,hidden_size=32,num_hidden_layers=2,num_attention_heads=4,"
    "intermediate_size=64"
)
TINY_BERT = "hidden_size=32,num_hidden_layers=2,num_attention_heads=4,intermediate_size=64,max_position_embeddings=128"
NO_DROPOUT = ",hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0"


pytestmark = pytest.mark.usefixtures("one_thread")


def training_args(output_dir, **overrides) -> TrainingArguments:
    options = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        max_steps=4,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )
    options.update(overrides)
    return TrainingArguments(**options)


def tiny_model_args(family: str, norm_type: str, extra: str = NO_DROPOUT, minilm_dir=None) -> ModelArguments:
    if family == "bert":
        return ModelArguments(
            model_type="bert_norm",
            norm_type=norm_type,
            config_overrides=TINY_BERT + extra,
            tokenizer_name=str(minilm_dir),
        )
    return ModelArguments(model_type=f"{family}_norm", norm_type=norm_type, config_overrides=TINY_VISION + extra)


def tiny_data_args(family: str, **overrides) -> DataArguments:
    options = dict(max_train_samples=48, max_eval_samples=24)
    if family == "bert":
        options.update(dataset="packaged:bbc-news", max_seq_length=64)
    else:
        options.update(dataset="packaged:fashion-mnist")
    options.update(overrides)
    return DataArguments(**options)


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


# --------------------------------------------------------------------------------------------------------------------
# Bad input: a clear error before training
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def news_csv(tmp_path_factory):
    """Factory: a CSV of 24 real BBC News articles with the given column names and label column values."""
    folder = tmp_path_factory.mktemp("news_csv")
    articles = packaged.bbc_news()[:24]

    def write(name: str, columns: dict) -> str:
        import csv

        path = folder / f"{name}.csv"
        with path.open("w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(columns))
            writer.writeheader()
            for index, (text, label) in enumerate(articles):
                writer.writerow({column: make(index, text, label) for column, make in columns.items()})
        return str(path)

    return write


def text_data(dataset: str) -> DataArguments:
    return DataArguments(dataset=dataset, max_seq_length=64, eval_fraction=0.25)


def assert_fails_before_training(model_args, data_args, output_dir, match: str) -> None:
    with pytest.raises(FinetuneInputError, match=match):
        finetune(model_args, data_args, training_args(output_dir))
    assert not output_dir.exists()  # no Trainer ever ran: nothing was written


def test_missing_label_column(news_csv, minilm_dir, tmp_path):
    csv_path = news_csv("no_label", {"text": lambda i, t, label: t, "category": lambda i, t, label: label})
    assert_fails_before_training(
        tiny_model_args("bert", "dyt", minilm_dir=minilm_dir),
        text_data(csv_path),
        tmp_path / "out",
        match=r"no label column 'label'; its columns are \['text', 'category'\]\. Name the right one with --label_column",
    )


def test_missing_text_column(news_csv, minilm_dir, tmp_path):
    csv_path = news_csv("no_text", {"content": lambda i, t, label: t, "label": lambda i, t, label: label})
    assert_fails_before_training(
        tiny_model_args("bert", "dtn", minilm_dir=minilm_dir),
        text_data(csv_path),
        tmp_path / "out",
        match=r"no text column 'text'; its columns are \['content', 'label'\]\. Name the right one with --text_column",
    )


def test_labels_outside_num_labels(news_csv, minilm_dir, tmp_path):
    index_of = {name: index for index, name in enumerate(packaged.BBC_NEWS_LABELS)}
    csv_path = news_csv("int_labels", {"text": lambda i, t, label: t, "label": lambda i, t, label: index_of[label]})
    data_args = text_data(csv_path)
    data_args.num_labels = 3
    assert_fails_before_training(
        tiny_model_args("bert", "sepnorm", minilm_dir=minilm_dir),
        data_args,
        tmp_path / "out",
        match=r"label\(s\) of the (train|eval) data lie outside 0\.\.2 \(num_labels=3\)",
    )
    negative = news_csv("negative", {"text": lambda i, t, label: t, "label": lambda i, t, label: -1 if i == 5 else 0})
    assert_fails_before_training(
        tiny_model_args("bert", "sepnorm", minilm_dir=minilm_dir),
        text_data(negative),
        tmp_path / "out2",
        match=r"lie outside 0\.\.0",
    )
    data_args = tiny_data_args("vit", num_labels=3)
    assert_fails_before_training(
        tiny_model_args("vit", "dyt"),
        data_args,
        tmp_path / "out3",
        match="num_labels=3, but the label column 'label' has 10",
    )


@pytest.fixture(scope="module")
def rgb_imagefolder(tmp_path_factory):
    """An imagefolder of 24 real Fashion-MNIST images saved as RGB PNGs, one sub-folder per class."""
    folder = tmp_path_factory.mktemp("rgb_images")
    images, labels = packaged.fashion_mnist("test", 24)
    for index, (image, label) in enumerate(zip(images, labels, strict=True)):
        class_dir = folder / packaged.FASHION_MNIST_LABELS[label].replace("/", "-")
        class_dir.mkdir(exist_ok=True)
        Image.fromarray(image).convert("RGB").save(class_dir / f"{index}.png")
    return str(folder)


def test_images_with_the_wrong_channel_count(rgb_imagefolder, tmp_path):
    data_args = DataArguments(dataset=rgb_imagefolder, eval_fraction=0.25)
    assert_fails_before_training(
        tiny_model_args("vit", "dtn"),
        data_args,
        tmp_path / "out",
        match=r"has 3 channel\(s\) \(PIL mode RGB\), but the model takes 1 \(config.num_channels\): pass image_mode='L'",
    )
    data_args.image_mode = "L"  # the fix the message names
    result = finetune(tiny_model_args("vit", "dtn"), data_args, training_args(tmp_path / "fixed", max_steps=1))
    assert result.trainer.state.global_step == 1


def test_sepnorm_batchnorm_needs_two_examples_per_batch(tmp_path):
    assert_fails_before_training(
        tiny_model_args("vit", "sepnorm"),
        tiny_data_args("vit", max_train_samples=17),  # 17 = 2 x 8 + 1: a last batch of one image
        tmp_path / "out",
        match=r"the last batch has 1 example\(s\).*dataloader_drop_last=True",
    )


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def test_cli_fine_tunes_the_real_minilm_converted_to_dtn(news_csv, minilm_dir, tmp_path, capsys):
    """`hf-norms finetune` on the stock MiniLM checkpoint, converted to DTN as it loads, with a CSV of real articles."""
    csv_path = news_csv("news", {"text": lambda i, t, label: t, "label": lambda i, t, label: label})
    output = tmp_path / "out"
    with pytest.raises(SystemExit):
        cli.main(["finetune", "--help"])
    assert "--model_name_or_path" in capsys.readouterr().out
    status = cli.main(
        [
            "finetune",
            "--model_name_or_path",
            str(minilm_dir),
            "--norm_type",
            "dtn",
            "--dataset",
            csv_path,
            "--max_seq_length",
            "64",
            "--eval_fraction",
            "0.25",
            "--output_dir",
            str(output),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "4",
            "--use_cpu",
            "--disable_tqdm",
            "true",
        ]
    )
    assert status == 0
    model = AutoModelForSequenceClassification.from_pretrained(output)
    assert type(model).__name__ == "BertNormForSequenceClassification" and model.config.norm_type == "dtn"
    labels = sorted({label for _, label in packaged.bbc_news()[:24]})
    assert model.config.id2label == dict(enumerate(labels))
    assert (output / "tokenizer.json").is_file() and (output / "eval_results.json").is_file()
    # The pretrained encoder was loaded, not re-initialised: its word embeddings are MiniLM's, moved by 2 small steps.
    stock = load_file(minilm_dir / "model.safetensors")
    moved = (model.bert.embeddings.word_embeddings.weight - stock["embeddings.word_embeddings.weight"]).abs().max()
    assert moved < 0.05
    # MiniLM is a sentence-transformers model; the classifier trained from it is not (its modules would drop the head)
    assert not (output / "modules.json").exists() and not (output / "1_Pooling").exists()
    card = ModelCard.load(output / "README.md").data
    assert (card.library_name, card.pipeline_tag) == ("transformers", "text-classification")


def test_cli_reports_bad_input_in_one_line(news_csv, minilm_dir, tmp_path, capsys):
    csv_path = news_csv("no_label_cli", {"text": lambda i, t, label: t})
    status = finetune_module.main(
        [
            "--model_name_or_path",
            str(minilm_dir),
            "--dataset",
            csv_path,
            "--output_dir",
            str(tmp_path / "out"),
            "--use_cpu",
        ]
    )
    error = capsys.readouterr().err
    assert status == 2
    assert "hf-norms finetune: error: The train data has no label column 'label'" in error
    assert "Traceback" not in error
    assert finetune_module.main(["--dataset", csv_path, "--output_dir", str(tmp_path / "out")]) == 2
    assert "Give exactly one of model_name_or_path" in capsys.readouterr().err


def test_a_stock_checkpoint_keeps_its_function_or_is_calibrated_before_fine_tuning(
    news_csv, minilm_dir, tmp_path, caplog
):
    """From a LayerNorm checkpoint, DTN starts with gates at 1 (LayerNorm itself) unless told otherwise, and DyT, which
    no option can make LayerNorm, is calibrated on training examples first."""
    csv_path = news_csv("news_start", {"text": lambda i, t, label: t, "label": lambda i, t, label: label})
    training = TrainingArguments(output_dir=str(tmp_path / "dtn"), max_steps=1, per_device_train_batch_size=4,
                                 use_cpu=True, report_to="none", disable_tqdm=True)  # fmt: skip
    dtn = finetune(ModelArguments(model_name_or_path=str(minilm_dir), norm_type="dtn"), text_data(csv_path), training)
    assert dtn.trainer.model.config.dtn_gate_init == 1.0
    explicit = ModelArguments(model_name_or_path=str(minilm_dir), norm_type="dtn", config_overrides="dtn_gate_init=0.5")
    training.output_dir = str(tmp_path / "dtn-half")
    assert finetune(explicit, text_data(csv_path), training).trainer.model.config.dtn_gate_init == 0.5
    training.output_dir = str(tmp_path / "dyt")
    with caplog.at_level("WARNING"):
        dyt = finetune(
            ModelArguments(model_name_or_path=str(minilm_dir), norm_type="dyt"), text_data(csv_path), training
        )
    stages = dyt.trainer.model.conversion_report["stages"]
    assert type(dyt.trainer.model).__name__ == "BertNormForSequenceClassification"
    assert "Expect accuracy well below the LayerNorm model's" in caplog.text and "hf-norms heal" in caplog.text
    assert stages["calibrated"]["end_to_end"]["mean_cosine"] > stages["naive"]["end_to_end"]["mean_cosine"] + 0.3


def test_a_stock_checkpoint_fine_tuned_as_derf_is_calibrated_first_keeping_explicit_options(
    news_csv, minilm_dir, tmp_path
):
    csv_path = news_csv("news_derf", {"text": lambda i, t, label: t, "label": lambda i, t, label: label})
    training = TrainingArguments(output_dir=str(tmp_path / "derf"), max_steps=1, per_device_train_batch_size=4,
                                 use_cpu=True, report_to="none", disable_tqdm=True)  # fmt: skip
    arguments = ModelArguments(
        model_name_or_path=str(minilm_dir), norm_type="derf", config_overrides="derf_alpha_init=0.3"
    )
    model = finetune(arguments, text_data(csv_path), training).trainer.model
    stages = model.conversion_report["stages"]
    assert stages["calibrated"]["end_to_end"]["mean_cosine"] > stages["naive"]["end_to_end"]["mean_cosine"] + 0.3
    assert (
        model.config.derf_alpha_init == 0.3 and model.config.derf_per_channel is True
    )  # explicit kept, else convert's


def test_cli_fine_tunes_a_private_hub_checkpoint_with_token(tiny_bert_dir, news_csv, tmp_path, monkeypatch):
    """`hf-norms finetune --model-name-or-path org/name --token T` (the console script, dash spellings) loads the config,
    model and tokenizer of a private repo with that token alone, and never prints it."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest is offline; this is loopback
    token = "hf_finetune-private-token-2024"
    csv_path = news_csv("news_hub", {"text": lambda i, t, label: t, "label": lambda i, t, label: label})
    with HubServer(tmp_path / "hub", tokens=[token]) as hub:
        api = HfApi(endpoint=hub.url, token=token)
        api.create_repo("org/tiny-bert", private=True)
        api.upload_folder(folder_path=tiny_bert_dir, repo_id="org/tiny-bert")
        env = {**os.environ, **hub.client_env(), "HF_HOME": str(tmp_path / "hf-home")}  # no HF_TOKEN, no stored login
        env.pop("HF_TOKEN", None)
        command = [str(HF_NORMS_SCRIPT), "finetune", "--model-name-or-path", "org/tiny-bert", "--token", token]
        command += ["--dataset", csv_path, "--max-seq-length", "32", "--eval-fraction", "0.25", "--output-dir"]
        command += [str(tmp_path / "out"), "--max-steps", "1", "--per-device-train-batch-size", "4", "--use-cpu"]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert token not in result.stdout + result.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "tokenizer.json").is_file()


def test_a_hub_dataset_is_loaded_with_the_token(monkeypatch):
    calls = []
    monkeypatch.setattr(data_module.datasets, "load_dataset", lambda *args, **kwargs: calls.append((args, kwargs)))
    data_module.load_dataset_source("org/news", "default", token="hf_dataset-token-2024")
    assert calls == [(("org/news", "default"), {"token": "hf_dataset-token-2024"})]


def test_normalization_free_checkpoints_fine_tune_without_dropout_unless_the_user_keeps_it(
    tiny_bert_dir, news_csv, tmp_path, caplog
):
    """A LayerNorm BERT (dropout 0.1) fine-tuned as DyT is calibrated and trained without dropout; a DyT checkpoint
    that convert or heal wrote carries dropout 0 in its own config (so the plain Trainer gets it too), heals with the
    source's 0.1 and says why in its report; the user's dropout or `normalization_free_defaults=False` wins over the
    choice on a LayerNorm checkpoint; the from-scratch path is left alone."""
    from hf_norms.conversion.convert import convert
    from hf_norms.conversion.healing import heal

    csv_path = news_csv("news_dropout", {"text": lambda i, t, label: t, "label": lambda i, t, label: label})

    def dropout(output: str, **arguments) -> tuple[float, float]:
        model_args = ModelArguments(**{"model_name_or_path": str(tiny_bert_dir), "norm_type": "dyt", **arguments})
        config = finetune(
            model_args, text_data(csv_path), training_args(tmp_path / output, max_steps=1)
        ).trainer.model.config
        return config.hidden_dropout_prob, config.attention_probs_dropout_prob

    with caplog.at_level("WARNING"):
        assert dropout("calibrated") == (0.0, 0.0)
    assert "fine-tuning with hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0: these norms pass" in caplog.text
    assert "0.905 and 0.904 without dropout" in caplog.text
    assert dropout("explicit", config_overrides="hidden_dropout_prob=0.1") == (0.1, 0.0)
    assert dropout("kept", normalization_free_defaults=False) == (0.1, 0.1)
    texts = [text for text, _ in packaged.bbc_news()[:24]]
    convert(tiny_bert_dir, "dyt", tmp_path / "dyt", calibration_data=texts, calibration_samples=16, max_length=32)

    def written() -> tuple[dict, dict]:
        config = json.loads((tmp_path / "dyt" / "config.json").read_text())
        report = json.loads((tmp_path / "dyt" / "conversion_report.json").read_text())
        return {k: config[k] for k in ("hidden_dropout_prob", "attention_probs_dropout_prob")}, report

    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    config, report = written()
    assert config == no_dropout and report["fine_tuning_config"]["config"] == no_dropout
    assert report["fine_tuning_config"]["source_values"] == {
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
    }
    assert "0.856 and 0.849 with the source's 0.1" in report["fine_tuning_config"]["reason"]
    assert dropout("converted", model_name_or_path=str(tmp_path / "dyt"), norm_type=None) == (0.0, 0.0)
    heal(tmp_path / "dyt", texts[:16], evaluation_data=texts[16:], max_steps=1, batch_size=4, max_length=32,
         progress=False)  # fmt: skip
    config, report = written()
    assert config == no_dropout and report["healing"]["student_dropout"]
    assert report["fine_tuning_config"]["source_values"] == {
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
    }
    healed = dict(model_name_or_path=str(tmp_path / "dyt"), norm_type=None, normalization_free_defaults=False)
    assert dropout("healed-kept", **healed) == (0.0, 0.0)  # what the checkpoint's own config says
    assert dropout("healed-user", **healed, config_overrides="hidden_dropout_prob=0.1") == (0.1, 0.0)
    scratch = tiny_model_args("bert", "dyt", extra=",hidden_dropout_prob=0.1", minilm_dir=tiny_bert_dir)
    model = finetune(scratch, text_data(csv_path), training_args(tmp_path / "scratch", max_steps=1)).trainer.model
    assert model.config.hidden_dropout_prob == 0.1


@pytest.mark.parametrize("value", ["1", "nan", "-1", "1.5", "inf"])
def test_a_dropout_override_no_model_trains_with_is_refused_before_training(value, tiny_bert_dir, news_csv, tmp_path):
    """`--config_overrides` values get the checks a checkpoint's config gets (here: a probability in [0, 1)); dropout
    1 trained a constant model and NaN failed mid-run, leaving a folder behind."""
    csv_path = news_csv("news_override", {"text": lambda i, t, label: t, "label": lambda i, t, label: label})
    model_args = ModelArguments(
        model_name_or_path=str(tiny_bert_dir), norm_type="dyt", config_overrides=f"hidden_dropout_prob={value}"
    )
    assert_fails_before_training(
        model_args,
        text_data(csv_path),
        tmp_path / "out",
        r"--config_overrides: hidden_dropout_prob must be a probability",
    )


WRONG_VALUES = {  # option -> (a wrong value, what stderr says)
    "per_device_train_batch_size": ("0", "per_device_train_batch_size must be a positive integer, got 0."),
    "per_device_eval_batch_size": ("-2", "per_device_eval_batch_size must be a positive integer, got -2."),
    "gradient_accumulation_steps": ("0", "gradient_accumulation_steps must be a positive integer, got 0."),
    "max_seq_length": ("many", "max_seq_length must be a positive integer, got 'many'."),
    "max_steps": ("0", "max_steps must be >= 1, or -1 to train num_train_epochs epochs, got 0."),
    "mlm_probability": ("1.5", "mlm_probability must be a probability in (0, 1), got 1.5."),
}


def test_wrong_counts_and_rates_are_one_line_before_transformers_is_imported(minilm_dir, tmp_path):
    """`hf-norms finetune --per_device_train_batch_size 0` (in either spelling, or in an options file) is refused in one
    line, exit status 2, before torch, transformers or datasets are imported and before --output_dir exists: it used
    to fail in the Trainer's data loader 11 s later, with an empty output folder left behind."""
    command = ["--model_name_or_path", str(minilm_dir), "--dataset", "packaged:bbc-news", "--output_dir",
               str(tmp_path / "out"), "--use_cpu"]  # fmt: skip
    code = (
        "import json, sys\n"
        "sys.argv = ['hf-norms']\n"  # as the console script runs it: `import hf_norms` imports nothing heavy
        "from hf_norms import cli\n"
        "status = cli.main(json.loads(sys.stdin.read()))\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules)))\n"
        "sys.exit(status)\n"
    )
    (tmp_path / "options.json").write_text(json.dumps({"per_device_train_batch_size": 0, "output_dir": "o"}))
    (tmp_path / "options.yaml").write_text("output_dir: o\nmax_steps: 0\n")
    cases = [(["finetune", *command, f"--{name}", value], said) for name, (value, said) in WRONG_VALUES.items()]
    cases += [
        (["finetune", *command, "--per-device-train-batch-size=0"], WRONG_VALUES["per_device_train_batch_size"][1]),
        (["finetune", str(tmp_path / "options.json")], WRONG_VALUES["per_device_train_batch_size"][1]),
        (["finetune", str(tmp_path / "options.yaml")], WRONG_VALUES["max_steps"][1]),
    ]
    for argv, said in cases:
        result = subprocess.run(
            [sys.executable, "-c", code], input=json.dumps(argv), capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 2 and result.stderr == f"hf-norms finetune: error: {said}\n", result.stderr
        assert json.loads(result.stdout) == [] and not (tmp_path / "out").exists()


def test_a_wrong_batch_size_in_the_python_api_fails_before_the_output_folder_is_made(minilm_dir, tmp_path):
    model_args = ModelArguments(model_name_or_path=str(minilm_dir))
    for wrong in ({"per_device_train_batch_size": 0}, {"gradient_accumulation_steps": 0}):
        with pytest.raises(FinetuneInputError, match=f"{next(iter(wrong))} must be a positive integer, got 0"):
            finetune(model_args, text_data("packaged:bbc-news"), training_args(tmp_path / "out", **wrong))
        assert not (tmp_path / "out").exists()
    with pytest.raises(FinetuneInputError, match="max_eval_samples must be a positive integer, got 0"):
        finetune(model_args, DataArguments(dataset="packaged:bbc-news", max_eval_samples=0),
                 training_args(tmp_path / "out"))  # fmt: skip
    assert not (tmp_path / "out").exists()


# YAML whose aliases make 10**12 leaves from 120 of them: read (and walked for its depth) in moments.
ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 12)
)


def test_an_options_file_that_does_not_read_is_one_line(tmp_path, capsys):
    files = {
        "deep.json": ("[" * 100_000 + "]" * 100_000, "deep.json is nested too deeply"),
        "list.json": ("[1, 2]", "list.json holds a list, not a mapping of options"),
        "broken.yaml": ("output_dir: [", "broken.yaml is not valid YAML"),
        "aliases.yaml": (ALIAS_BOMB, "Give exactly one of model_name_or_path"),
    }
    for name, (text, said) in files.items():
        (tmp_path / name).write_text(text)
        started = time.perf_counter()
        assert cli.main(["finetune", str(tmp_path / name)]) == 2 and time.perf_counter() - started < 10
        err = capsys.readouterr().err
        assert err.startswith("hf-norms finetune: error: ") and said in err and err.count("\n") == 1, err
    # TrainingArguments refusing a combination is an input error too (exit status 2, it used to be 1)
    assert cli.main(["finetune", "--model_type", "vit_norm", "--output_dir", str(tmp_path / "out"),
                     "--load_best_model_at_end", "--eval_strategy", "no"]) == 2  # fmt: skip
    assert "--load_best_model_at_end requires the save and eval strategy to match" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_text_is_cut_to_what_the_tokenizer_keeps_before_it_is_tokenised(minilm_dir):
    """A row of 3 MB gives the ids of its first `max_length` tokens, and the tokenizer is handed at most
    `readers.TEXT_LIMIT` characters of it."""
    from transformers import AutoTokenizer

    from hf_norms.readers import TEXT_LIMIT

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    handed = []

    def recording(texts, pairs=None, **options):
        handed.extend(len(text) for text in [*texts, *(pairs or [])])
        return tokenizer(texts, pairs, **options)

    text = "The market rose again. " * 130_000
    transform = data_module.TextTransform(recording, "text", 64, label_column="label", text_pair_column="pair")
    encoded = transform({"text": [text, "short"], "pair": ["a pair", text], "label": [0, 1]})
    expected = tokenizer([text, "short"], ["a pair", text], truncation=True, max_length=64)
    assert encoded["input_ids"] == expected["input_ids"] and encoded["labels"] == [0, 1]
    assert len(text) > 90 * TEXT_LIMIT and max(handed) == TEXT_LIMIT
