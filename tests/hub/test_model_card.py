"""Model cards rendered from real conversions of the packaged MiniLM: metadata, body, and the Trainer's card.

The conversion reports here are written by the tests from numbers they measure on real BBC News sentences (an exact
SepNorm conversion, a naive DyT swap healed by a few real distillation steps), in the schema `hf_norms.convert` writes.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import HEAD_CASES, tiny_config
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, BertModel, Trainer, TrainingArguments

import hf_norms
from hf_norms import packaged
from hf_norms.hub.card_facts import REPORT_NAME, head_of
from hf_norms.hub.model_card import model_card_for_folder
from hf_norms.training.trainer import NormCardTrainerMixin
from hf_norms.version_guard import OVERRIDE_VARIABLE, SUPPORTED_TRANSFORMERS, check_transformers_version

PAPERS = {name: spec.paper for name, spec in hf_norms.NORM_TYPES.items() if spec.paper}

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


def bbc_texts(count: int, split: str = "test") -> tuple[list[str], list[int]]:
    """`count` real BBC News articles (first 300 characters) and their class indices, from the held-out split."""
    train, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
    items = (test if split == "test" else train)[:count]
    return [text[:300] for text, _ in items], [packaged.BBC_NEWS_LABELS.index(label) for _, label in items]


def text_batch(tokenizer, count: int = 8) -> dict[str, torch.Tensor]:
    texts, _ = bbc_texts(count)
    return dict(tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt"))


def mean_pooled(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sentence embeddings as all-MiniLM-L6-v2 makes them: the mean of the real tokens' states, `[batch, hidden]`."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1)


@torch.no_grad()
def text_fidelity(converted, source, batch) -> dict:
    """End-to-end fidelity of a converted BERT to its source: max abs diff of the last hidden states, mean cosine of
    the mean-pooled embeddings (no logits, so no top-1 agreement or KL)."""
    mine, theirs = converted(**batch).last_hidden_state, source(**batch).last_hidden_state
    cosine = torch.nn.functional.cosine_similarity(
        mean_pooled(mine, batch["attention_mask"]), mean_pooled(theirs, batch["attention_mask"])
    )
    return {
        "max_abs_diff": (mine - theirs).abs().max().item(),
        "mean_cosine": cosine.mean().item(),
        "top1_agreement": None,
        "kl_divergence": None,
    }


def heal(converted, source, batch, steps: int) -> dict:
    """Real distillation steps (AdamW, MSE of the last hidden states to the source's); returns the report's healing."""
    start = time.perf_counter()
    optimizer = torch.optim.AdamW(converted.parameters(), lr=1e-3)
    with torch.no_grad():
        target = source(**batch).last_hidden_state
    converted.train()
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(converted(**batch).last_hidden_state, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    converted.eval()
    return {
        "data": "bbc_news",
        "samples": batch["input_ids"].shape[0],
        "steps": steps,
        "seconds": time.perf_counter() - start,
        "loss": "mse of the last hidden states",
    }


def write_report(folder: Path, source: str, model, stages: dict, *, exact: bool, samples: int, healing=None) -> dict:
    """A conversion report in `hf_norms.convert`'s schema, beside the checkpoint."""
    config = model.config
    report = {
        "hf_norms_version": hf_norms.__version__,
        "source": source,
        "source_revision": None,
        "family": "bert",
        "architecture": type(model).__name__,
        "norm_type": config.norm_type,
        "exact": exact,
        "options": {"sepnorm_prefix_norm": config.sepnorm_prefix_norm} if config.norm_type == "sepnorm" else {},
        "folded": False,
        "calibration": None,
        "healing": healing,
        "evaluation": {"data": "bbc_news", "samples": samples},
        "stages": {name: {"end_to_end": values, "per_norm": {}} for name, values in stages.items()},
    }
    (folder / REPORT_NAME).write_text(json.dumps(report, indent=1))
    return report


def convert_minilm(minilm_dir: Path, folder: Path, heal_steps: int = 0, **norm_options) -> dict:
    """Convert the real MiniLM, measure it on held-out BBC News sentences, save it with its tokenizer and report."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    source = BertModel.from_pretrained(minilm_dir).eval()
    converted = hf_norms.BertNormModel.from_pretrained(minilm_dir, **norm_options).eval()
    batch = text_batch(tokenizer)
    exact = heal_steps == 0 and norm_options["norm_type"] != "dyt"
    stages = {"exact" if exact else "naive": text_fidelity(converted, source, batch)}
    healing = None
    if heal_steps:
        torch.manual_seed(0)
        healing = heal(converted, source, batch, heal_steps)
        stages["healed"] = text_fidelity(converted, source, batch)
    converted.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    samples = batch["input_ids"].shape[0]
    return write_report(folder, str(minilm_dir), converted, stages, exact=exact, samples=samples, healing=healing)


@pytest.fixture(scope="module")
def sepnorm_exact(minilm_dir, tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("card") / "minilm-sepnorm"
    return folder, convert_minilm(minilm_dir, folder, norm_type="sepnorm", sepnorm_prefix_norm="layernorm")


@pytest.fixture(scope="module")
def dyt_healed(minilm_dir, tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("card") / "minilm-dyt"
    return folder, convert_minilm(minilm_dir, folder, heal_steps=2, norm_type="dyt")


def eval_values(card: ModelCard) -> dict[str, float]:
    return {result.metric_type: result.metric_value for result in card.data.eval_results or []}


def test_exact_conversion_card(sepnorm_exact, minilm_dir, tmp_path):
    folder, report = sepnorm_exact
    measured = report["stages"]["exact"]["end_to_end"]
    assert measured["max_abs_diff"] <= 1e-5 and measured["mean_cosine"] > 0.99999  # really exact
    card = model_card_for_folder(folder, "hf-norms/all-MiniLM-L6-v2-sepnorm", base_model=MINILM_ID)
    data = card.data.to_dict()
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "feature-extraction"
    assert data["base_model"] == MINILM_ID and "base_model_relation" not in data  # a pure conversion
    assert data["license"] == "apache-2.0" and data["language"] == "en"  # carried from the packaged source's card
    assert {"hf-norms", "bert", "sepnorm", "custom_code", "arxiv:2309.12931"} <= set(data["tags"])
    assert "datasets" not in data  # nothing was fitted on data
    assert eval_values(card) == {"cosine_similarity": measured["mean_cosine"], "max_abs_diff": measured["max_abs_diff"]}
    text = str(card)
    assert r"\mathrm{Norm}_{\mathrm{prefix}}" in text and "@inproceedings{chen2023sepnorm," in text
    assert f"| exact | {measured['max_abs_diff']:.3g} | {measured['mean_cosine']:.4f} | — | — |" in text
    assert 'AutoModel.from_pretrained("hf-norms/all-MiniLM-L6-v2-sepnorm", trust_remote_code=True)' in text
    assert "import hf_norms" in text and SUPPORTED_TRANSFORMERS in text
    assert "not the BatchNorm of the paper's default" in text
    assert str(minilm_dir) not in text  # no local paths
    card.save(tmp_path / "README.md")
    assert ModelCard.load(tmp_path / "README.md").data.to_dict() == data


def test_the_base_model_of_a_packaged_source_is_its_hub_id_and_never_the_repo_itself(sepnorm_exact):
    """Before, a conversion of the packaged MiniLM named no base model unless --base-model was given."""
    folder, _ = sepnorm_exact
    assert model_card_for_folder(folder, "org/minilm-sepnorm").data.base_model == MINILM_ID
    assert model_card_for_folder(folder, MINILM_ID).data.base_model is None
    assert hf_norms.packaged.hub_id_of(hf_norms.packaged.dinov2_small_path()) == "facebook/dinov2-small"
    assert hf_norms.packaged.hub_id_of(folder) is None


def test_healed_dyt_card_is_a_finetune_with_the_post_ln_caveat(dyt_healed):
    folder, report = dyt_healed
    naive, healed = (report["stages"][stage]["end_to_end"] for stage in ("naive", "healed"))
    assert healed["mean_cosine"] != naive["mean_cosine"]  # the distillation steps changed the weights
    card = model_card_for_folder(folder, "hf-norms/all-MiniLM-L6-v2-dyt", base_model=MINILM_ID)
    data = card.data.to_dict()
    assert data["base_model_relation"] == "finetune"
    assert data["datasets"] == ["SetFit/bbc-news"]  # the healing data
    assert "arxiv:2503.10622" in data["tags"]
    assert eval_values(card) == {"cosine_similarity": healed["mean_cosine"], "max_abs_diff": healed["max_abs_diff"]}
    text = str(card)
    assert f"| naive | {naive['max_abs_diff']:.3g} | {naive['mean_cosine']:.4f} |" in text
    assert f"| healed | {healed['max_abs_diff']:.3g} | {healed['mean_cosine']:.4f} |" in text
    assert "Healed by distillation" in text and "2 steps" in text
    assert "post-LN" in text and r"\tanh(\alpha x)" in text and "@inproceedings{zhu2025dyt," in text


def test_the_card_says_why_the_config_holds_other_values_than_the_sources(dyt_healed, tmp_path):
    """A report's `fine_tuning_config` (what convert and heal write into a DyT config) is a step of the provenance:
    the values, the source's, the registry's measurement, and how to fine-tune with the source's values."""
    from hf_norms.conversion.convert import set_fine_tuning_config

    folder, report = dyt_healed
    model = hf_norms.BertNormModel.from_pretrained(folder)
    report = json.loads(json.dumps(report))
    set_fine_tuning_config(model, report)  # the fixture's model has MiniLM's dropout 0.1
    assert model.config.hidden_dropout_prob == 0.0 and model.config.attention_probs_dropout_prob == 0.0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    (tmp_path / REPORT_NAME).write_text(json.dumps(report))
    text = str(model_card_for_folder(tmp_path, "hf-norms/all-MiniLM-L6-v2-dyt", base_model=MINILM_ID))
    assert (
        "The config sets `hidden_dropout_prob` and `attention_probs_dropout_prob` to what this checkpoint fine-tunes "
        "best with (hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0; the source's: hidden_dropout_prob=0.1, "
        "attention_probs_dropout_prob=0.1)"
    ) in text
    assert "0.905 and 0.904 without dropout against 0.856 and 0.849 with the source's 0.1" in text
    assert "pass hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1 to `from_pretrained`" in text
    assert "The config sets" not in str(model_card_for_folder(folder, "hf-norms/x", base_model=MINILM_ID))


class CardTrainer(NormCardTrainerMixin, Trainer):
    pass


def test_trainer_card_equals_the_folder_card(sepnorm_exact, tmp_path):
    """A real (short) fine-tuning run: the Trainer's card is the folder's card, with its evaluation in model-index."""
    folder, _ = sepnorm_exact
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = hf_norms.BertNormForSequenceClassification.from_pretrained(folder, num_labels=5)
    examples = []
    for split, count in (("train", 8), ("test", 8)):
        texts, labels = bbc_texts(count, split)
        encoded = tokenizer(texts, truncation=True, max_length=32, padding="max_length")
        examples.append([{**{k: v[i] for k, v in encoded.items()}, "labels": labels[i]} for i in range(count)])
    output_dir = tmp_path / "finetuned"
    args = TrainingArguments(
        output_dir=str(output_dir), use_cpu=True, max_steps=2, per_device_train_batch_size=4, report_to="none"
    )
    trainer = CardTrainer(
        model=model,
        args=args,
        train_dataset=examples[0],
        eval_dataset=examples[1],
        processing_class=tokenizer,
        compute_metrics=lambda p: {"accuracy": float(np.mean(p.predictions.argmax(-1) == p.label_ids))},
    )
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model()
    trainer.create_model_card(
        model_name="org/minilm-sepnorm-bbc",
        finetuned_from=MINILM_ID,
        dataset="bbc_news",
        dataset_tags="SetFit/bbc-news",
    )

    assert (output_dir / REPORT_NAME).is_file()  # copied from the checkpoint the model was loaded from
    written = ModelCard.load(output_dir / "README.md")
    again = model_card_for_folder(
        output_dir,
        "org/minilm-sepnorm-bbc",
        base_model=MINILM_ID,
        training_dataset="bbc_news",
        datasets=["SetFit/bbc-news"],
    )
    assert written.data.to_dict() == again.data.to_dict()
    data = written.data.to_dict()
    assert data["pipeline_tag"] == "text-classification" and data["base_model_relation"] == "finetune"
    assert data["base_model"] == MINILM_ID
    assert eval_values(written) == {"accuracy": metrics["eval_accuracy"], "loss": metrics["eval_loss"]}
    assert "before the fine-tuning" in str(written) and "Fine-tuned with the transformers Trainer on bbc_news" in str(
        written
    )


def test_card_without_report_claims_nothing(tmp_path):
    model = hf_norms.ViTNormForImageClassification(tiny_config("vit", "dtn"))
    model.save_pretrained(tmp_path)
    card = model_card_for_folder(tmp_path, "org/vit-dtn")
    data = card.data.to_dict()
    assert data["pipeline_tag"] == "image-classification" and "vit" in data["tags"]
    assert "model-index" not in data and "base_model" not in data and "base_model_relation" not in data
    assert "not recorded here" in str(card) and "Fidelity" not in str(card)


def test_derf_card_cites_the_paper_and_gives_the_statistics_free_caveats(tmp_path):
    model = hf_norms.BertNormForMaskedLM(tiny_config("bert", "derf"))
    model.save_pretrained(tmp_path)
    text = str(model_card_for_folder(tmp_path, "org/bert-derf"))
    assert "Dynamic erf (Derf)" in text and r"\mathrm{erf}(\alpha x + s)" in text
    assert "Chen, Mingzhi and Lu, Taiming and Zhu, Jiachen and Sun, Mingjie and Liu, Zhuang" in text
    assert "Derf has no statistics" in text and "Derf on BERT is outside what it tested" in text


def test_refuses_a_stock_checkpoint(minilm_dir):
    with pytest.raises(ValueError, match="model_type 'bert'"):
        model_card_for_folder(minilm_dir, "org/stock")


def test_every_head_has_its_auto_class():
    for case in HEAD_CASES:
        assert head_of(case.class_name)[0] == case.model_class._auto_class, case.class_name


def test_the_registrys_papers_render_as_bibtex():
    assert set(PAPERS) == {"dyt", "derf", "dtn", "sepnorm", "lape", "rmsnorm"}
    for paper in PAPERS.values():
        entry = paper.bibtex()
        assert entry.startswith(f"@inproceedings{{{paper.key},") and entry.count("{") == entry.count("}")
    assert "Zhu, Jiachen and Chen, Xinlei and He, Kaiming and LeCun, Yann and Liu, Zhuang" in PAPERS["dyt"].bibtex()
    assert PAPERS["lape"].venue == "ICCV 2023" and "pages = {5886--5896}" in PAPERS["lape"].bibtex()


def test_version_guard(monkeypatch):
    """The tested range runs quietly, a newer release runs with one warning, an older one is refused in one line."""
    check_transformers_version()  # the installed release is supported
    for installed in ("5.20.0", "5.20.0.dev0", "5.23.2.dev0", "5.25.0", "5.25.3"):
        check_transformers_version(installed)
    for installed in ("5.19.0", "5.19.9.dev0", "4.57.1"):
        with pytest.raises(ImportError) as excinfo:
            check_transformers_version(installed)
        message = str(excinfo.value)
        assert installed in message and SUPPORTED_TRANSFORMERS in message and "\n" not in message
    hf_norms_logger = logging.getLogger("hf_norms")
    warnings = []
    monkeypatch.setattr(hf_norms_logger, "warning", warnings.append)
    monkeypatch.setattr(hf_norms_logger, "newer_transformers_warned", set(), raising=False)
    check_transformers_version("5.26.0")
    check_transformers_version("5.26.0")
    check_transformers_version("6.0.0")
    assert len(warnings) == 2 and "transformers 5.26.0 is newer" in warnings[0]  # once per release
    monkeypatch.setenv(OVERRIDE_VARIABLE, "1")
    check_transformers_version("5.19.0")


# --------------------------------------------------------------------------------------------------------------------
# What the metadata may say: Hub dataset ids, identical outputs, the base model, license and language, no local paths
# --------------------------------------------------------------------------------------------------------------------


def tiny_folder_with_report(folder: Path, report_overrides: dict, norm_type: str = "dtn") -> Path:
    """A tiny saved BERT with a conversion report in `hf_norms.convert`'s schema (the figures as given)."""
    model = hf_norms.BertNormModel(tiny_config("bert", norm_type))
    model.save_pretrained(folder)
    report = {
        "hf_norms_version": hf_norms.__version__,
        "source": "/home/alice/models/all-MiniLM-L6-v2",
        "source_revision": None,
        "family": "bert",
        "architecture": "BertNormModel",
        "norm_type": norm_type,
        "exact": True,
        "options": {},
        "folded": False,
        "calibration": None,
        "healing": None,
        "evaluation": {"data": "/home/alice/data/bbc_news-test-128.txt", "samples": 128},
        "stages": {"exact": {"end_to_end": {"max_abs_diff": 0.0, "mean_cosine": 0.9999999883584678,
                                            "top1_agreement": None, "kl_divergence": None}}},
        **report_overrides,
    }  # fmt: skip
    (folder / REPORT_NAME).write_text(json.dumps(report))
    return folder


OUT_OF_DOMAIN = {
    "out_of_domain_evaluation": {
        "data": "/home/alice/data/python_docs-128.txt",
        "samples": 128,
        "name": "Python documentation paragraphs",
    },
}


def model_index_datasets(card: ModelCard) -> list[dict]:
    return [result["dataset"] for result in card.data.to_dict().get("model-index", [{}])[0].get("results", [])]


def test_model_index_names_only_hub_datasets(tmp_path):
    """Results on data without a Hub id (a local text file, scikit-learn digits, a CSV) stay in the card's tables and
    are left out of model-index, whose dataset `type` must be a Hub dataset id; `unspecified` is never written."""
    stage = {"max_abs_diff": 0.0, "mean_cosine": 1.0, "top1_agreement": None, "kl_divergence": None}
    stages = {"exact": {"end_to_end": stage, "out_of_domain": dict(stage)}}
    folder = tiny_folder_with_report(tmp_path / "ood", {**OUT_OF_DOMAIN, "stages": stages})
    card = model_card_for_folder(folder, "org/bert-dtn")
    assert [dataset["type"] for dataset in model_index_datasets(card)] == ["SetFit/bbc-news"]
    assert "Python documentation paragraphs" in str(card)  # the out-of-domain figures are still in the body
    digits = {"out_of_domain_evaluation": {"data": "packaged:digits", "samples": 128, "name": "digits"}}
    folder = tiny_folder_with_report(
        tmp_path / "digits", {"evaluation": {"data": "digits-128", "samples": 8}, **digits}
    )
    assert model_index_datasets(model_card_for_folder(folder, "org/bert-dtn")) == []

    trained = tmp_path / "trained"
    hf_norms.BertNormForSequenceClassification(tiny_config("bert", "dtn")).save_pretrained(trained)
    (trained / "trainer_state.json").write_text(json.dumps({"global_step": 3, "epoch": 1.0, "log_history": []}))
    (trained / "eval_results.json").write_text(json.dumps({"eval_accuracy": 0.5, "eval_loss": 1.2}))
    for dataset, expected in (("/home/alice/news.csv", []), (None, []), ("packaged:bbc-news", ["SetFit/bbc-news"])):
        card = model_card_for_folder(trained, "org/bert-dtn-news", training_dataset=dataset)
        assert [d["type"] for d in model_index_datasets(card)] == expected, dataset
        assert "unspecified" not in str(card) and "/home/alice" not in str(card)
        assert "| accuracy | 0.5 |" in str(card)


def test_identical_outputs_show_cosine_one(tmp_path):
    """An exact conversion whose outputs are identical (max abs diff 0) has cosine 1, not float32's 0.99999998836."""
    stage = {"max_abs_diff": 0.0, "mean_cosine": 0.9999999883584678, "top1_agreement": 1.0, "kl_divergence": 1e-9}
    stages = {"exact": {"end_to_end": stage, "out_of_domain": {**stage, "mean_cosine": 0.999999993480742}}}
    folder = tiny_folder_with_report(tmp_path / "exact", {**OUT_OF_DOMAIN, "stages": stages})
    card = model_card_for_folder(folder, "org/bert-dtn")
    assert eval_values(card) == {"cosine_similarity": 1.0, "max_abs_diff": 0.0, "top1_agreement": 1.0,
                                 "kl_divergence": 0.0}  # fmt: skip
    assert "| exact | 0 | 1.0000 | — | — | — | 1.000 | 0 |" in str(card) and "0.99999" not in str(card)
    assert "| exact | 1.0000 | 1.0000 |" in str(card)
    close = {"max_abs_diff": 3e-7, "mean_cosine": 0.9999999, "top1_agreement": None, "kl_divergence": None}
    folder = tiny_folder_with_report(tmp_path / "close", {"stages": {"exact": {"end_to_end": close}}})
    assert eval_values(model_card_for_folder(folder, "org/bert-dtn"))["cosine_similarity"] == 0.9999999  # as measured


@pytest.mark.parametrize(("epochs", "steps", "text"), [(1.0, 1, "1 step, 1 epoch"), (2.0, 6, "6 steps, 2 epochs"),
                                                       (0.5, 2, "2 steps, 0.5 epochs")])  # fmt: skip
def test_steps_and_epochs_are_counted_in_english(epochs, steps, text, tmp_path):
    hf_norms.BertNormForSequenceClassification(tiny_config("bert", "dtn")).save_pretrained(tmp_path)
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": steps, "epoch": epochs, "log_history": []}))
    assert f"Fine-tuned with the transformers Trainer ({text})." in str(model_card_for_folder(tmp_path, "org/x"))


def test_a_fine_tuned_card_takes_base_model_license_and_language_from_its_source(tmp_path):
    """Fine-tuned from a snapshot of a Hub repo in the cache: that repo is the base model, and license and language
    come from its card; from a local folder without a card, the card asserts no license or language. A folder whose
    own README.md (the card written at the end of training) names them keeps them when pushed."""
    snapshot = tmp_path / "hub" / "models--org--src" / "snapshots" / "0123abcd"
    model = hf_norms.BertNormForSequenceClassification(tiny_config("bert", "dtn"))
    model.save_pretrained(snapshot)
    (snapshot / "README.md").write_text("---\nlicense: mit\nlanguage: fr\n---\n# src\n")
    bare = tmp_path / "bare"
    model.save_pretrained(bare)
    cards = {}
    for name, source in (("snapshot", snapshot), ("bare", bare)):
        trainer = CardTrainer(
            model=hf_norms.BertNormForSequenceClassification.from_pretrained(source),
            args=TrainingArguments(output_dir=str(tmp_path / f"out-{name}"), use_cpu=True, report_to="none"),
        )
        trainer.save_model()
        trainer.state.global_step, trainer.state.epoch = 1, 1.0  # as after one step of training
        cards[name] = trainer.create_model_card(model_name=f"org/{name}-ft") or ModelCard.load(
            tmp_path / f"out-{name}" / "README.md"
        )
    snapshot_card = cards["snapshot"].data.to_dict()
    assert snapshot_card["base_model"] == "org/src" and snapshot_card["base_model_relation"] == "finetune"
    assert (snapshot_card["license"], snapshot_card["language"]) == ("mit", "fr")
    assert not {"base_model", "license", "language"} & set(cards["bare"].data.to_dict())
    pushed = model_card_for_folder(tmp_path / "out-snapshot", "org/snapshot-ft").data.to_dict()  # `hf-norms push`
    assert (pushed["base_model"], pushed["license"], pushed["language"]) == ("org/src", "mit", "fr")


def test_a_norm_trainer_pushes_nothing_before_push_to_hub(sepnorm_exact, tmp_path, caplog):
    """With push_to_hub set, making the Trainer and saving the model send nothing (the suite runs offline, so any
    request would fail): the repo is only named, and hub_strategy=checkpoint is refused with a warning."""
    folder, _ = sepnorm_exact
    args = TrainingArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none", push_to_hub=True,
                             hub_strategy="checkpoint")  # fmt: skip
    trainer = CardTrainer(model=hf_norms.BertNormModel.from_pretrained(folder), args=args)
    assert trainer.hub_model_id == "run" and "hub_strategy=checkpoint is ignored" in caplog.text
    trainer.save_model()
    trainer._push_from_checkpoint(str(tmp_path / "run"))
    assert (tmp_path / "run" / "model.safetensors").is_file()
