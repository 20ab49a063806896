"""Downstream proof beside cosine: the packaged out-of-domain sets, the linear probe, and the report and card blocks
of a tiny conversion (`hf_norms.conversion.downstream`)."""

from __future__ import annotations

import json

import pytest
import torch

from hf_norms import packaged
from hf_norms.conversion import healing
from hf_norms.conversion.convert import convert
from hf_norms.conversion.data import PROBE_SENTENCES, Examples
from hf_norms.conversion.downstream import accuracy, dataset_name, fit_probe, probe_scores, probe_set, short_texts
from hf_norms.conversion.report import REPORT_JSON, REPORT_MD
from hf_norms.hub.model_card import model_card_for_folder

pytestmark = pytest.mark.usefixtures("one_thread")


def test_python_docs_paragraphs_are_deterministic_prose():
    paragraphs = packaged.python_docs_paragraphs(20)
    assert paragraphs == packaged.python_docs_paragraphs(20) and len(paragraphs) == 20
    assert packaged.python_docs_paragraphs(5) == paragraphs[:5]  # a prefix of one fixed order
    assert len(packaged.python_docs_paragraphs()) > 300
    low, high = packaged.PYTHON_DOCS_CHARS
    assert all(low <= len(text) <= high and "\n" not in text for text in paragraphs)
    assert len(set(paragraphs)) == 20


def test_digits_images_are_rgb_upscaled_digits():
    images = packaged.digits_images(6)
    assert len(images) == 6 and all(image.mode == "RGB" and image.size == (32, 32) for image in images)
    raw, labels = packaged.digits(6)
    assert (
        raw.shape == (6, 8, 8) and raw.dtype.name == "uint8" and raw.max() == 255 and labels.tolist() == list(range(6))
    )
    assert [image.tobytes() for image in images] == [image.tobytes() for image in packaged.digits_images(6)]
    assert dataset_name("packaged:digits") == "scikit-learn digits"
    assert dataset_name("/tmp/x/python_docs-64.txt") == "Python documentation paragraphs"
    assert dataset_name("other.txt") == "other.txt"


def test_probe_on_separable_features_and_on_exact_features():
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 3
    centres = torch.tensor([[4.0, 0.0, 0.0, 0.0], [0.0, 4.0, 0.0, 0.0], [0.0, 0.0, 4.0, 0.0]])
    features = centres[labels] + 0.3 * torch.randn(60, 4, generator=generator)
    probe = fit_probe(features[:40], labels[:40], 3)
    assert accuracy(probe, features[40:], labels[40:]) == 1.0
    assert (probe.predict(centres) == torch.arange(3)).all()
    probes = probe_set({"train": ([""] * 40, labels[:40]), "test": ([""] * 20, labels[40:])}, "text", 40)
    assert probes.num_classes == 3 and probes.test_labels.tolist() == labels[40:].tolist()
    same = probe_scores((features[:40], features[40:]), (features[:40].clone(), features[40:].clone()), probes)
    assert same["teacher_accuracy"] == same["student_accuracy"] == same["student_retrained_accuracy"] == 1.0
    assert same["points_kept"] == 0.0 == same["points_kept_retrained"]
    # features that lost the class information: the teacher's probe falls to chance or below
    noise = torch.randn(60, 4, generator=generator)
    lost = probe_scores((features[:40], features[40:]), (noise[:40], noise[40:]), probes)
    assert lost["student_accuracy"] < 0.7 and lost["points_kept"] < -30


def test_a_constant_feature_with_rounding_noise_cannot_swing_the_probe():
    """MiniLM's pooled features have channels that are constant up to rounding (std 5e-10 against a median of 0.09):
    a student off by 1e-5 there kept 66 % through the teacher's probe when the floor was 1e-8, with cosine 0.965."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(80) % 4
    centres = 3.0 * torch.eye(4, 6)
    features = centres[labels] + 0.5 * torch.randn(80, 6, generator=generator)
    features[:, 5] = -1e-7 + 5e-10 * torch.randn(80, generator=generator)  # a zeroed channel, rounding noise
    student = features.clone()
    student[:, 5] = -6e-7 + 2e-5 * torch.randn(80, generator=generator)
    probes = probe_set({"train": ([""] * 60, labels[:60]), "test": ([""] * 20, labels[60:])}, "text", 60)
    scores = probe_scores((features[:60], features[60:]), (student[:60], student[60:]), probes)
    assert scores["teacher_accuracy"] == 1.0
    assert scores["student_accuracy"] == scores["teacher_accuracy"] and scores["points_kept"] == 0.0


@pytest.fixture(scope="module")
def tiny_bert_proof(tiny_bert_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("proof") / "bert-dtn"
    report = convert(
        tiny_bert_dir, "dtn", folder, options={"dtn_gate_init": 0.5}, evaluation_data=list(PROBE_SENTENCES),
        evaluation_samples=2, ood_evaluation_data="packaged", ood_evaluation_samples=4, probe_data="packaged",
        probe_samples=10, max_length=32,
    )  # fmt: skip
    return folder, report


def test_report_has_out_of_domain_and_probe_blocks(tiny_bert_proof):
    folder, report = tiny_bert_proof
    saved = json.loads((folder / REPORT_JSON).read_text())
    assert saved == json.loads(json.dumps(report))
    assert saved["out_of_domain_evaluation"]["data"] == "packaged:python_docs"
    assert saved["out_of_domain_evaluation"]["name"] == "Python documentation paragraphs"
    assert saved["out_of_domain_evaluation"]["samples"] == 4
    assert saved["probe_evaluation"]["train_samples"] == 10 and saved["probe_evaluation"]["test_samples"] == 5
    stage = saved["stages"]["naive"]
    assert set(stage["out_of_domain"]) == {"max_abs_diff", "mean_cosine", "top1_agreement", "kl_divergence"}
    assert -1.0 <= stage["out_of_domain"]["mean_cosine"] <= 1.0 and stage["out_of_domain"]["max_abs_diff"] > 0
    probe = stage["probe"]
    assert 0 <= probe["teacher_accuracy"] <= 1 and 0 <= probe["student_accuracy"] <= 1
    assert probe["points_kept"] == pytest.approx(100 * (probe["student_accuracy"] - probe["teacher_accuracy"]))
    markdown = (folder / REPORT_MD).read_text()
    assert "## In domain, out of domain and on short inputs" in markdown and "## Linear probe" in markdown
    assert (
        f"| naive | {stage['end_to_end']['mean_cosine']:.4f} | {stage['out_of_domain']['mean_cosine']:.4f} | "
        f"{stage['short_inputs']['mean_cosine']:.4f} |" in markdown
    )


def test_fidelity_is_reported_per_token_type(tiny_bert_proof, tiny_vit_dir, tmp_path):
    folder, report = tiny_bert_proof
    tokens = report["stages"]["naive"]["token_cosine"]
    assert list(tokens) == ["prefix", "special", "ordinary"]
    # DTN normalises the [CLS] token with LayerNorm's statistics, the other tokens with statistics mixed across tokens
    assert tokens["prefix"] > 0.9999 and -1 <= tokens["special"] < 0.9 and -1 <= tokens["ordinary"] < 0.9
    row = " | ".join(f"{tokens[kind]:.4f}" for kind in ("prefix", "special", "ordinary"))
    assert f"| {row} |" in (folder / REPORT_MD).read_text()
    card = str(model_card_for_folder(folder, "hf-norms/tiny-bert-dtn"))
    assert f"| {row} |" in card and "[CLS]/prefix cosine | special-token cosine | ordinary-token cosine" in card
    assert "(the mean over real tokens, as a sentence embedding pools, texts truncated to 32 tokens)" in card
    exact = convert(tiny_vit_dir, "sepnorm", tmp_path / "vit-sepnorm")["stages"]["exact"]["token_cosine"]
    assert exact["special"] is None  # images have no special tokens
    assert exact["prefix"] == pytest.approx(1, abs=1e-6) and exact["ordinary"] == pytest.approx(1, abs=1e-6)
    assert "| n/a |" in (tmp_path / "vit-sepnorm" / REPORT_MD).read_text()


def test_card_carries_in_domain_out_of_domain_and_probe_results(tiny_bert_proof):
    folder, report = tiny_bert_proof
    card = model_card_for_folder(folder, "hf-norms/tiny-bert-dtn")
    entries = {(result.dataset_name, result.metric_name): result.metric_value for result in card.data.eval_results}
    stage = report["stages"]["naive"]
    # Python documentation paragraphs have no Hub dataset id, so their figures are in the card's table only
    assert not [name for _, name in entries if "out of domain" in name]
    probe_name = "BBC News topics (5 classes)"
    assert (
        entries[(probe_name, "accuracy of this checkpoint through the source's linear probe (naive)")]
        == (stage["probe"]["student_accuracy"])
    )
    assert (
        entries[(probe_name, "accuracy of the source checkpoint, linear probe fitted on its features (naive)")]
        == (stage["probe"]["teacher_accuracy"])
    )
    text = str(card)
    assert "| stage | in-domain cosine | out-of-domain cosine | short-input cosine | probe accuracy, source |" in text
    cosines = [stage[key]["mean_cosine"] for key in ("end_to_end", "out_of_domain", "short_inputs")]
    assert "| naive | " + " | ".join(f"{cosine:.4f}" for cosine in cosines) + " |" in text
    assert "on short inputs, the first 3-8 words of each of the 2 evaluation texts" in text
    assert "Python documentation paragraphs" in text and probe_name in text


def test_short_texts_keep_their_first_3_to_8_words():
    texts = [" ".join(f"w{index}x{word}" for word in range(12)) for index in range(14)] + ["two words"]
    short = short_texts(Examples(texts, "held-out texts", "text"))
    assert [len(text.split()) for text in short.items] == [3, 4, 5, 6, 7, 8, 3, 4, 5, 6, 7, 8, 3, 4, 2]
    assert short.items[1] == "w1x0 w1x1 w1x2 w1x3" and short.items[-1] == "two words"
    assert short.description == "held-out texts" and short_texts(Examples(texts, "", "text")).items == short.items


def test_an_exact_conversion_is_exact_on_short_inputs_and_shows_no_other_check(tiny_bert_dir, tmp_path):
    folder = tmp_path / "bert-sepnorm"
    report = convert(tiny_bert_dir, "sepnorm", folder, max_length=16)
    assert report["out_of_domain_evaluation"] is None and report["probe_evaluation"] is None
    assert report["short_input_evaluation"] == {"data": "built-in probe sentences", "samples": 8, "words": "3-8"}
    exact = report["stages"]["exact"]
    assert "out_of_domain" not in exact and "probe" not in exact
    assert exact["short_inputs"]["max_abs_diff"] < 1e-5 and exact["short_inputs"]["mean_cosine"] == pytest.approx(1)
    card = model_card_for_folder(folder, "hf-norms/tiny-bert-sepnorm")
    assert all("out of domain" not in result.metric_name for result in card.data.eval_results or [])
    assert "out-of-domain cosine" not in str(card) and "probe accuracy" not in str(card)
    assert "| stage | in-domain cosine | short-input cosine |\n|---|---|---|\n| exact | 1.0000 | 1.0000 |" in str(card)
    markdown = (folder / REPORT_MD).read_text()
    assert "## Linear probe" not in markdown and "## In domain and on short inputs" in markdown
    assert "| stage | in-domain cosine | short-input cosine | in-domain max abs diff | short-input max abs diff |" in (
        markdown
    )


def test_text_stages_and_healing_report_short_inputs(tiny_bert_dir, tmp_path):
    articles = [text for text, _ in packaged.bbc_news()[:20]]
    folder = tmp_path / "bert-dyt"
    report = convert(
        tiny_bert_dir, "dyt", folder, calibration_data=articles, calibration_samples=16, max_length=32, heal_steps=0
    )
    assert report["short_input_evaluation"] == {"data": "in-memory list of 20 texts", "samples": 4, "words": "3-8"}
    naive, calibrated = report["stages"]["naive"], report["stages"]["calibrated"]
    # calibrated on 32-token windows of articles: a few words' worth of tokens is measured apart, and fits less well
    assert abs(calibrated["short_inputs"]["mean_cosine"] - calibrated["end_to_end"]["mean_cosine"]) > 1e-3
    assert naive["short_inputs"]["mean_cosine"] != calibrated["short_inputs"]["mean_cosine"]
    healed = healing.heal(folder, articles[:16], max_steps=1, warmup_steps=0, batch_size=4, max_length=32,
                          evaluation_data=articles[16:], progress=False)  # fmt: skip
    assert set(healed["stages"]["healed"]) >= {"end_to_end", "short_inputs"}
    assert healed["short_input_evaluation"] == {"data": "in-memory list of 4 texts", "samples": 4, "words": "3-8"}
    assert "| healed |" in (folder / REPORT_MD).read_text().split("## In domain and on short inputs")[1]


def test_dyt_stages_and_healing_keep_the_downstream_checks(tiny_vit_dir, tmp_path):
    images = packaged.digits_images(12)  # calibration data; the out-of-domain data is the packaged digits as well
    folder = tmp_path / "vit-dyt"
    report = convert(
        tiny_vit_dir, "dyt", folder, calibration_data=images[:8], calibration_samples=8, evaluation_data=images[8:],
        evaluation_samples=4, ood_evaluation_data="packaged", ood_evaluation_samples=3, probe_data="packaged",
        probe_samples=8, heal_steps=0,
    )  # fmt: skip
    assert report["out_of_domain_evaluation"]["name"] == "scikit-learn digits"
    assert report["probe_evaluation"]["name"] == "Fashion-MNIST (10 classes)"
    assert {"out_of_domain", "probe"} <= set(report["stages"]["naive"]) & set(report["stages"]["calibrated"])
    healed = healing.heal(folder, images[:8], max_steps=1, warmup_steps=0, batch_size=4, progress=False,
                          evaluation_data=images[8:])  # fmt: skip
    assert {"out_of_domain", "probe"} <= set(healed["stages"]["healed"])
    assert healed["short_input_evaluation"] is None and "short_inputs" not in healed["stages"]["healed"]  # images
    teacher_accuracy = {stage["probe"]["teacher_accuracy"] for stage in healed["stages"].values()}
    assert len(teacher_accuracy) == 1  # the same probe data and teacher at every stage


def test_long_packaged_texts_fit_a_model_with_fewer_positions_than_max_length(tiny_bert_dir, tmp_path):
    # tiny_bert_dir has 64 position embeddings; BBC News and the Python docs paragraphs run past 128 tokens
    report = convert(tiny_bert_dir, "sepnorm", tmp_path / "out", max_length=128, ood_evaluation_data="packaged",
                     ood_evaluation_samples=4, probe_data="packaged", probe_samples=10)  # fmt: skip
    assert report["evaluation"]["max_length"] == report["out_of_domain_evaluation"]["max_length"] == 64
    assert report["stages"]["exact"]["out_of_domain"]["max_abs_diff"] <= 1e-5


def test_a_probe_with_one_training_class_is_refused():
    from hf_norms.conversion.checkpoint_io import ConversionError

    with pytest.raises(ConversionError, match="only one class"):
        probe_set("packaged", "text", 1)  # --probe-samples 1 scored 0.000 -> 0.000 (+0.0 points)
    with pytest.raises(ConversionError, match="only one class"):
        probe_set({"train": (["a", "b"], [3, 3]), "test": (["c"], [1])}, "text", 2)


def test_out_of_domain_data_that_is_the_calibration_data_is_refused(tiny_bert_dir, tmp_path):
    from hf_norms.conversion.checkpoint_io import ConversionError

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"line {i} of the calibration text" for i in range(24)) + "\n")
    with pytest.raises(ConversionError, match="is the calibration data"):
        convert(tiny_bert_dir, "dyt", tmp_path / "out", calibration_data=texts, calibration_samples=16,
                max_length=16, ood_evaluation_data=str(texts))  # fmt: skip
    assert not (tmp_path / "out").exists()
    convert(
        tiny_bert_dir,
        "dyt",
        tmp_path / "out",
        calibration_data=texts,
        calibration_samples=16,
        max_length=16,
        heal_steps=0,
    )
    with pytest.raises(ConversionError, match="is the healing data"):
        healing.heal(tmp_path / "out", texts, max_steps=1, max_length=16, ood_evaluation_data=texts, progress=False)


def test_fine_tuning_beside_the_source_is_recorded_in_the_report_and_the_card(tiny_bert_dir, tmp_path):
    from benchmarks.finetune_from_stock import record_into_folders, summary_tables

    folder = tmp_path / "bert-sepnorm"
    convert(tiny_bert_dir, "sepnorm", folder, max_length=16)
    runs = [("layernorm", "short", 0, 0.90), ("layernorm", "short", 1, 0.92), (str(folder), "short", 0, 0.85),
            (str(folder), "short", 1, 0.89), ("layernorm", "converged", 0, 0.97), (str(folder), "converged", 0, 0.96),
            (str(folder), "converged", 1, 0.95)]  # fmt: skip
    results = [{"norm_type": name, "start": "s", "protocol": protocol, "seed": seed, "accuracy": accuracy,
                "train_seconds": 1.0} for name, protocol, seed, accuracy in runs]  # fmt: skip
    table = summary_tables(results)
    assert "| bert-sepnorm | s | 0 1 | 0.870 | 0.028 | 0.850-0.890 | +4.0 | 1 |" in table
    assert "| bert-sepnorm | s | 0 1 | 0.955 | 0.007 | 0.950-0.960 | +1.5 | 1 |" in table  # LayerNorm ran seed 0 only
    assert record_into_folders(results, "Fine-tuned on tiny data", "python -m x") == [str(folder)]
    record = json.loads((folder / REPORT_JSON).read_text())["fine_tuning"]
    assert [(p["name"], p["seeds"], p["accuracy"], p["source_accuracy"]) for p in record["protocols"]] == [
        ("short", [0, 1], [0.85, 0.89], [0.90, 0.92]), ("converged", [0], [0.96], [0.97])]  # fmt: skip
    row = "| short | 2 epochs, learning rate 5e-05 | 0, 1 | 0.870 ± 0.028 | 0.910 ± 0.014 | +4.0 |"
    assert row in (folder / REPORT_MD).read_text()
    card = str(model_card_for_folder(folder, "hf-norms/tiny-bert-sepnorm"))
    assert row in card and "Fine-tuned beside the source: Fine-tuned on tiny data (`python -m x`)" in card
