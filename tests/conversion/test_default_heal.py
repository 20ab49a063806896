"""A calibrated conversion (DyT, Derf, RMSNorm on a post-LN model) is healed by default, the same from Python and from
the command line (issue 56 item 1): `convert_model` returned a calibrated-only model that fine-tuned far below the CLI's
healed one, and nothing said so. The budget is in optimizer steps with a fixed seed, so a busy machine gives the same
weights; `heal_steps=0` is the explicit opt-out, which the report and the card state."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoTokenizer

import hf_norms
from hf_norms import cli, packaged
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.hub.model_card import model_card_for_folder

STEPS = 12  # a budget the tests can afford; the default is 300
BURN = "import time\nend = time.time() + 120\nwhile time.time() < end: pass\n"


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("texts") / "news.txt"
    path.write_text("\n".join(text.split("\n")[0] for text, _ in packaged.bbc_news()[:120]) + "\n")
    return path


def converted_in_memory(tiny_bert_dir, data, **options):
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    return hf_norms.convert_model(model, "dyt", data, processor=tokenizer, calibration_samples=16,
                                  evaluation_samples=8, max_length=32, **options)  # fmt: skip


def test_convert_model_heals_by_default_and_says_what_it_ran(tiny_bert_dir, texts_file):
    """The default is 300 steps on the calibration data less the evaluation examples; the report states the steps,
    their budget and the seed, and the healed stage is closer to the source than the calibrated one."""
    texts = texts_file.read_text().splitlines()
    converted = converted_in_memory(tiny_bert_dir, texts)
    report = converted.conversion_report
    assert list(report["stages"]) == ["naive", "calibrated", "healed"] and report["heal_steps"] == 300
    healing = report["healing"]
    assert (healing["steps"], healing["max_steps"], healing["seed"]) == (300, 300, 0)
    assert healing["samples"] == len(texts) - 8  # the evaluation examples are not trained on
    calibrated, healed = (report["stages"][stage]["end_to_end"]["mean_cosine"] for stage in ("calibrated", "healed"))
    assert healed > calibrated, (calibrated, healed)
    assert report["source"] == str(tiny_bert_dir) and not converted.training


def test_a_step_budget_gives_the_same_weights_on_a_busy_machine(tiny_bert_dir, texts_file):
    """The same call twice, the second while two processes keep every core busy: identical weights, bit for bit (a
    time budget healed a different number of steps when the machine was busy)."""
    idle = converted_in_memory(tiny_bert_dir, texts_file, heal_steps=STEPS).state_dict()
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    try:
        busy = converted_in_memory(tiny_bert_dir, texts_file, heal_steps=STEPS)
    finally:
        for burner in burners:
            burner.kill()
    assert busy.conversion_report["healing"]["steps"] == STEPS
    assert all(torch.equal(tensor, idle[name]) for name, tensor in busy.state_dict().items())


def test_python_and_the_command_line_heal_to_the_same_weights(tiny_bert_dir, texts_file, tmp_path, capsys):
    """`hf-norms convert` and `convert_model` run the one default path: for the same data and budget, the same
    weights and the same healed fidelity."""
    in_memory = converted_in_memory(tiny_bert_dir, texts_file, heal_steps=STEPS)
    argv = ["convert", str(tiny_bert_dir), "--norm-type", "dyt", "--calibration-data", str(texts_file),
            "--calibration-samples", "16", "--eval-samples", "8", "--max-length", "32", "--heal-steps", str(STEPS),
            "--output", str(tmp_path / "out")]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    saved = load_file(str(tmp_path / "out" / "model.safetensors"))
    weights = in_memory.state_dict()
    assert max((saved[name] - weights[name]).abs().max().item() for name in saved) == 0.0
    report = json.loads((tmp_path / "out" / "conversion_report.json").read_text())
    assert report["healing"]["steps"] == STEPS and report["source"] == str(tiny_bert_dir)
    healed = report["stages"]["healed"]["end_to_end"]["mean_cosine"]
    assert healed == in_memory.conversion_report["stages"]["healed"]["end_to_end"]["mean_cosine"]


def test_calibrated_only_is_an_explicit_opt_out_that_the_report_and_card_state(tiny_bert_dir, texts_file, tmp_path):
    report = hf_norms.convert(tiny_bert_dir, "dyt", tmp_path / "out", calibration_data=texts_file,
                              calibration_samples=16, evaluation_samples=8, max_length=32, heal_steps=0)  # fmt: skip
    assert list(report["stages"]) == ["naive", "calibrated"] and report["healing"] is None and report["heal_steps"] == 0
    assert "Healing: none (`heal_steps=0`: calibrated only" in (tmp_path / "out" / "conversion_report.md").read_text()
    card = str(model_card_for_folder(tmp_path / "out", "org/calibrated-only"))
    assert "Not healed: the conversion was asked to stop after calibration (`heal_steps=0`)" in card


@pytest.mark.parametrize("steps", [-1, 2.5, True])
def test_a_heal_budget_that_is_no_count_is_one_line(tiny_bert_dir, steps):
    model = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
    with pytest.raises(ConversionError, match=r"^--heal-steps \(heal_steps\) must be an integer >= 0, got"):
        hf_norms.convert_model(model, "dyt", ["a text"], heal_steps=steps)
