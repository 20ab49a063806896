"""Fine-tuning's inputs and command line: every bad input (columns, labels, images, counts, rates, YAML) fails before
training in one line that names the fix; the CLI fine-tunes real and Hub checkpoints, and normalization-free ones
without dropout unless the user keeps it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import HF_NORMS_SCRIPT
from finetune_setup import tiny_data_args, tiny_model_args, training_args
from huggingface_hub import HfApi, ModelCard
from PIL import Image
from safetensors.torch import load_file
from transformers import (
    AutoModelForSequenceClassification,
    TrainingArguments,
)

from hf_norms import cli, packaged
from hf_norms.hub.server import HubServer
from hf_norms.training import data as data_module
from hf_norms.training import finetune as finetune_module
from hf_norms.training.data import FinetuneInputError
from hf_norms.training.finetune import DataArguments, ModelArguments, finetune

pytestmark = pytest.mark.usefixtures("one_thread")

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
    assert "Expect accuracy well below the LayerNorm model's" in caplog.text and "it heals by default" in caplog.text
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
    convert(
        tiny_bert_dir,
        "dyt",
        tmp_path / "dyt",
        calibration_data=texts,
        calibration_samples=16,
        max_length=32,
        heal_steps=0,
    )

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
    # was refused 21 s later with exit 1, after the model loaded, as convert refuses it at once with exit 2
    "norm_type": (
        "dyn",
        "norm_type='dyn' is not supported (did you mean 'dyt'?); choose one of ['derf', 'dtn', "
        "'dyt', 'lape', 'layernorm', 'rmsnorm', 'sepnorm'].",
    ),
}


def test_wrong_counts_and_rates_are_one_line_before_the_training_code_is_imported(minilm_dir, tmp_path):
    """`hf-norms finetune --per_device_train_batch_size 0` (in either spelling, or in an options file) is refused in one
    line, exit status 2, before datasets and the training code are imported and before --output_dir exists: it used
    to fail in the Trainer's data loader 11 s later, with an empty output folder left behind."""
    command = ["--model_name_or_path", str(minilm_dir), "--dataset", "packaged:bbc-news", "--output_dir",
               str(tmp_path / "out"), "--use_cpu"]  # fmt: skip
    code = (
        "import json, sys\n"
        "sys.argv = ['hf-norms']\n"  # as the console script runs it
        "from hf_norms import cli\n"
        "status = cli.main(json.loads(sys.stdin.read()))\n"
        "print(json.dumps(sorted(m for m in ('datasets', 'hf_norms.training.finetune') if m in sys.modules)))\n"
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
        "aliases.yaml": (ALIAS_BOMB, "aliases.yaml is not an option of hf-norms finetune"),
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


@pytest.mark.parametrize("case", ["deep-line-3", "wide-csv", "fifo"])
def test_data_the_bounded_reader_refuses_stops_finetune_before_training(case, minilm_dir, tmp_path):
    """A JSON Lines row nested 20,000 deep after the first was a segmentation fault inside pyarrow; a CSV of 200,000
    columns took 91 s and 1.5 GB; a FIFO would block the read. Each is one line naming the file and its line."""
    path = tmp_path / ("data.csv" if case == "wide-csv" else "data.jsonl")
    if case == "deep-line-3":
        path.write_text('{"text": "a text", "label": 0}\n' * 2 + '{"text": ' + "[" * 20_000 + "]" * 20_000 + "}\n")
        expected = f"{path}, line 3 is nested too deeply (more than 64 levels)"
    elif case == "wide-csv":
        path.write_text(",".join(f"c{i}" for i in range(200_000)) + "\n")
        expected = f"{path}, line 1 has 200000 columns, more than the 4096"
    else:
        os.mkfifo(path)
        expected = f"{path} is not a regular file"
    started = time.perf_counter()
    model = tiny_model_args("bert", "dyt", minilm_dir=minilm_dir)
    assert_fails_before_training(model, text_data(str(path)), tmp_path / "out", match=re.escape(expected))
    assert time.perf_counter() - started < 60
