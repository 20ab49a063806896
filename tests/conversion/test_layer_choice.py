"""Conversions that keep LayerNorm in some encoder layers: `--keep-layernorm LAYERS` and the `--target-cosine` sweep."""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import HF_NORMS_SCRIPT
from transformers import AutoTokenizer, BertConfig, BertModel

import hf_norms
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.conversion.layer_choice import parse_layer_selection
from hf_norms.conversion.report import REPORT_MD, REPORT_PNG
from hf_norms.hub.model_card import model_card_for_folder

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    ("selection", "expected"),
    [("4,5", [4, 5]), ("4-5", [4, 5]), ("-1", [5]), ("0, -1", [0, 5]), ([5, 4, 4], [4, 5]), ("2-2", [2]), (-1, [5])],
)
def test_layer_selections_name_encoder_layers(selection, expected):
    assert parse_layer_selection(selection, 6) == expected


@pytest.mark.parametrize("selection", ["6", "-7", "a", "", "3-1", "0,3-1", []])
def test_a_wrong_layer_selection_says_how_many_layers_there_are(selection):
    with pytest.raises(ConversionError, match="--keep-layernorm"):
        parse_layer_selection(selection, 6)


@pytest.mark.parametrize("selection", [[1.7], [True], True, 2.0, {"a": 1}])
def test_a_layer_selection_of_other_types_is_refused(selection):
    with pytest.raises(ConversionError, match="keep_layernorm"):
        parse_layer_selection(selection, 6)


@pytest.fixture(scope="module")
def three_layer_bert(minilm_dir):
    """A stock 3-layer BERT (random weights, 32 wide) with MiniLM's tokenizer, and some texts."""
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    texts = [f"sentence number {i} talks about {word} and more" for i, word in enumerate("abcdefghijklmnop" * 2)]
    return BertModel(config).eval(), tokenizer, texts


def test_kept_layers_are_the_original_layernorms_and_the_others_are_calibrated(three_layer_bert):
    model, tokenizer, texts = three_layer_bert
    converted = hf_norms.convert_model(model, "dyt", texts, processor=tokenizer, calibration_samples=16,
                                       evaluation_samples=8, max_length=16, keep_layernorm="-1",
                                       heal_steps=0)  # fmt: skip
    assert converted.config.layer_norm_types == ["dyt", "dyt", "layernorm"]
    kept = converted.encoder.layer[2].output.LayerNorm
    assert type(kept).__name__ == "LayerNorm"
    assert torch.equal(kept.weight, model.encoder.layer[2].output.LayerNorm.weight)
    assert type(converted.encoder.layer[1].output.LayerNorm).__name__ == "DynamicTanh"
    stages = converted.conversion_report["stages"]
    replaced = [name for name in stages["naive"]["per_norm"] if ".2." not in name]  # layer 2 kept its LayerNorm
    assert len(replaced) == 5  # the embedding norm and both norms of layers 0 and 1
    for name in replaced:  # calibration fits each replaced norm to the LayerNorm's outputs
        assert stages["calibrated"]["per_norm"][name] < stages["naive"]["per_norm"][name], name
    assert converted.conversion_report["options"]["layer_norm_types"] == ["dyt", "dyt", "layernorm"]


def test_exact_conversions_stay_exact_with_layernorm_kept(three_layer_bert):
    model, _, _ = three_layer_bert
    converted = hf_norms.convert_model(model, "dtn", keep_layernorm="0-1")
    assert converted.config.layer_norm_types == ["layernorm", "layernorm", "dtn"]
    assert converted.conversion_report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= 1e-5


def test_the_target_cosine_keeps_the_fewest_last_layers_that_reach_it(three_layer_bert, tmp_path):
    model, tokenizer, texts = three_layer_bert
    torch.manual_seed(2)  # weights where keeping the last LayerNorms raises the cosine (with seed 0 it does not)
    model = BertModel(model.config).eval()
    kwargs = dict(processor=tokenizer, calibration_samples=16, evaluation_samples=8, max_length=16)
    probe = hf_norms.convert_model(model, "dyt", texts, target_cosine=1e-6, **kwargs)
    rows = probe.conversion_report["layer_sweep"]["rows"]
    assert [row["norm_free_layers"] for row in rows] == [3, 2, 1, 0]
    assert [row["layernorm_layers"] for row in rows] == [[], [2], [1, 2], [0, 1, 2]]
    assert rows[-1]["evaluation"]["mean_cosine"] == pytest.approx(1.0, abs=1e-6)  # every LayerNorm back: the original
    assert probe.config.layer_norm_types is None  # the lowest target is reached with no LayerNorm kept

    cosines = [row["calibration"]["mean_cosine"] for row in rows]
    # above the all-DyT model's cosine: at least one layer must stay, and one DyT layer at least is left
    target = (cosines[0] + max(cosines[1:-1])) / 2
    assert max(cosines[1:-1]) > cosines[0]
    converted = hf_norms.convert_model(model, "dyt", texts, target_cosine=target, **kwargs)
    sweep = converted.conversion_report["layer_sweep"]
    chosen = next(row for row in sweep["rows"] if row["calibration"]["mean_cosine"] >= target)
    assert sweep["reached"] and sweep["chosen_layernorm_layers"] == chosen["layernorm_layers"] != []
    assert converted.config.layer_norm_types == ["layernorm" if i in chosen["layernorm_layers"] else "dyt"
                                                  for i in range(3)]  # fmt: skip
    final = converted.conversion_report["stages"]["calibrated"]["end_to_end"]
    assert final["mean_cosine"] == pytest.approx(chosen["evaluation"]["mean_cosine"], abs=1e-6)

    from hf_norms.conversion.report import write_report

    write_report(tmp_path, converted.conversion_report)
    markdown = (tmp_path / REPORT_MD).read_text()
    assert "## LayerNorm layers kept" in markdown and markdown.count("\n| ") >= 4 + len(rows)
    assert (tmp_path / REPORT_PNG).stat().st_size > 10_000


@pytest.mark.parametrize(
    ("norm_type", "kwargs", "message"),
    [
        ("dyt", {"keep_layernorm": "1", "target_cosine": 0.99}, "not both"),
        ("lape", {"keep_layernorm": "1"}, "LaPE"),
        ("dtn", {"target_cosine": 0.99}, "exact"),
        ("dyt", {"target_cosine": 1.5}, r"\(0, 1\]"),
        ("dyt", {"keep_layernorm": "3"}, "3 encoder layers"),
        ("dyt", {"keep_layernorm": "0-2"}, "Every encoder layer would keep"),
        ("sepnorm", {"keep_layernorm": "0,1,2"}, "Every encoder layer would keep"),
        ("dyt", {"layer_norm_types": ["layernorm"] * 3}, "Every encoder layer would keep"),
        ("dyt", {"keep_layernorm": "2", "layer_norm_types": ["layernorm", "dyt", "dyt"]}, "not both"),
        ("dyt", {"target_cosine": 0.9, "layer_norm_types": ["layernorm", "dyt", "dyt"]}, "not both"),
    ],
)
def test_wrong_layer_choices_are_refused(three_layer_bert, norm_type, kwargs, message):
    model, tokenizer, texts = three_layer_bert
    with pytest.raises(ConversionError, match=message):
        hf_norms.convert_model(model, norm_type, texts, processor=tokenizer, **kwargs)


def test_a_target_cosine_on_an_uncalibrated_conversion_keeps_its_stage_name(three_layer_bert):
    model, tokenizer, texts = three_layer_bert
    converted = hf_norms.convert_model(model, "dtn", texts, processor=tokenizer, calibration_samples=16,
                                       evaluation_samples=8, max_length=16, dtn_gate_init=0.5, target_cosine=1e-6)  # fmt: skip
    report = converted.conversion_report
    assert list(report["stages"]) == ["naive"] and report["calibration"] is None  # nothing was calibrated


def test_the_command_line_keeps_the_named_layers(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"line {i} of the calibration text" for i in range(24)) + "\n")
    command = [str(HF_NORMS_SCRIPT), "convert", str(tiny_bert_dir), "--norm-type", "dyt", "--output", str(out),
               "--calibration-data", str(texts), "--calibration-samples", "16", "--max-length", "16",
               "--heal-steps", "0", "--keep-layernorm=-1"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    reloaded = hf_norms.BertNormForMaskedLM.from_pretrained(out)
    assert reloaded.config.layer_norm_types == ["dyt", "layernorm"]
    card = str(model_card_for_folder(out, "org/tiny-bert-dyt"))
    assert "in encoder layers 0, with the source's LayerNorm kept in layers 1, approximately" in card

    wrong = subprocess.run([*command[:-1], "--keep-layernorm", "7", "--overwrite"], capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert wrong.returncode != 0 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    assert "2 encoder layers" in wrong.stderr


def test_the_card_names_the_layers_that_keep_layernorm(tiny_bert_dir, tmp_path):
    from hf_norms.hub.model_card import model_card_for_folder

    texts = [f"line {i} of the calibration text" for i in range(24)]
    hf_norms.convert(tiny_bert_dir, "dyt", tmp_path / "out", calibration_data=texts, calibration_samples=16,
                     max_length=16, keep_layernorm="-1", heal_steps=0)  # fmt: skip
    card = str(model_card_for_folder(tmp_path / "out", "org/mixed"))
    assert "Every LayerNorm of the model is replaced" not in card
    assert "in encoder layer 0 (layer 1 keeping LayerNorm)" in card
    assert "encoder layer 1 keeps LayerNorm (config `layer_norm_types`), layer 0 uses `dyt`" in card


def test_heal_refuses_a_checkpoint_whose_layer_norm_types_were_edited(tiny_bert_dir, tmp_path):
    import json

    from hf_norms.conversion.healing import heal

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"line {i} of the calibration text" for i in range(24)) + "\n")
    out = tmp_path / "out"
    hf_norms.convert(tiny_bert_dir, "dyt", out, calibration_data=texts, calibration_samples=16, max_length=16,
                     keep_layernorm="-1", heal_steps=0)  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    config["layer_norm_types"] = None  # by hand: layer 1's LayerNorms would get fresh DyT alphas
    (out / "config.json").write_text(json.dumps(config))
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(ConversionError, match="does not describe the norms its weights hold"):
        heal(out, texts, max_steps=1, batch_size=4, max_length=16, progress=False)
    assert (out / "model.safetensors").read_bytes() == before


def test_a_target_only_layernorm_everywhere_reaches_is_refused(three_layer_bert):
    model, tokenizer, texts = three_layer_bert
    with pytest.raises(ConversionError, match="no choice that leaves a dyt layer reaches it"):
        hf_norms.convert_model(model, "dyt", texts, processor=tokenizer, calibration_samples=16, evaluation_samples=8,
                               max_length=16, target_cosine=1.0)  # fmt: skip
