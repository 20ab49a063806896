"""RMSNorm, the seventh norm_type, added as its layer file and one registry entry: exact on the real pre-LN DINOv2-S
and ViT-S once their residual stream is centred, calibrated (then healed) on post-LN BERT, and a layer that is the
paper's formula."""

from __future__ import annotations

import copy

import pytest
import torch
from test_convert import save_images
from transformers import AutoModel

import hf_norms
from hf_norms import cli
from hf_norms.conversion.convert import convert_model
from hf_norms.hub.card_facts import EXACT_TOLERANCE
from hf_norms.norms.rmsnorm import RMSNorm


def test_the_layer_is_the_papers_formula_and_layernorm_on_mean_free_input():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=generator) * 3 + 1
    norm = RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16, generator=generator) + 0.5)
        norm.bias.copy_(torch.randn(16, generator=generator))
        expected = norm.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) + norm.bias
        assert (norm(x) - expected).abs().max().item() <= 1e-6
        centred = x - x.mean(-1, keepdim=True)
        layer_norm = torch.nn.functional.layer_norm(centred, (16,), norm.weight, norm.bias, 1e-6)
        assert (norm(centred) - layer_norm).abs().max().item() <= 1e-5
        assert norm(x.bfloat16()).dtype == torch.bfloat16
    assert "bias" not in dict(RMSNorm(16, bias=False).named_parameters())
    assert hf_norms.RMSNorm is RMSNorm  # a registered layer is public without being listed anywhere else


@pytest.mark.parametrize("fixture", ["dinov2_dir", "dinov2_vit_dir"])
def test_the_real_dinov2_and_vit_convert_exactly(fixture, photo_pixels, request):
    """Exact in the mathematics: in float64 the conversion differs only by its float32 weights' rounding; in float32
    it is as close to the float64 source as the source itself is."""
    teacher = AutoModel.from_pretrained(request.getfixturevalue(fixture)).eval()
    student = convert_model(teacher, "rmsnorm").eval()
    assert student.conversion_report["exact"] and "exact" in student.conversion_report["stages"]
    with torch.no_grad():
        outputs = {
            (name, dtype): copy.deepcopy(model)
            .to(dtype)(pixel_values=photo_pixels.to(dtype))
            .last_hidden_state.double()
            for name, model in (("teacher", teacher), ("student", student))
            for dtype in (torch.float32, torch.float64)
        }
    truth = outputs["teacher", torch.float64]
    assert (outputs["student", torch.float64] - truth).abs().max().item() <= 5e-6
    teacher_error = (outputs["teacher", torch.float32] - truth).abs().max().item()
    assert (outputs["student", torch.float32] - truth).abs().max().item() <= 2 * teacher_error
    assert (
        student.conversion_report["stages"]["exact"]["end_to_end"]["max_abs_diff"] <= EXACT_TOLERANCE
    )  # a card says so


def test_bert_is_calibrated_and_the_command_line_converts_it(tiny_bert_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"sentence {i} about the market and the match" for i in range(40)))
    output = tmp_path / "bert-rmsnorm"
    status = cli.main(["convert", str(tiny_bert_dir), "--norm-type", "rmsnorm", "--calibration-data", str(texts),
                       "--calibration-samples", "24", "--eval-samples", "8", "--heal-steps", "0", "--output", str(output)])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 0, err
    # every stage is announced, numbered k/N, before the calibration's bar and after it (a DyT convert of MiniLM was
    # silent from 23 s to 170 s)
    stages = [line.split(": ", 2)[1:] for line in err.splitlines() if line.startswith("hf-norms convert: stage ")]
    assert [stage for stage, _ in stages] == [f"stage {k}/7" for k in range(1, 8)], err
    checked = " and the downstream checks"  # the default probe
    assert [what.rsplit(" (at ", 1)[0] for _, what in stages[:-1]] == [
        "loading the source checkpoint (BertForMaskedLM)",
        "reading and encoding the evaluation and calibration data",
        "building the rmsnorm model",
        f"measuring the naive conversion on 8 examples{checked}",
        "calibrating 6 norms on 24 examples",
        f"measuring the calibrated conversion on 8 examples{checked}",
    ]
    assert stages[-1][1].startswith(f"writing the checkpoint and its report to .{output.name}.hf-norms-staging.")
    assert err.index("stage 5/7") < err.index("calibrating:") < err.index("stage 6/7")
    assert "measuring:" in err[err.index("stage 4/7") : err.index("stage 5/7")]  # a bar within the measurement too
    report = __import__("json").loads((output / "conversion_report.json").read_text())
    stages = {stage: values["end_to_end"]["mean_cosine"] for stage, values in report["stages"].items()}
    assert not report["exact"] and set(stages) == {"naive", "calibrated"}
    assert stages["calibrated"] > max(stages["naive"], 0.99), stages
    assert "L-BFGS" in report["calibration"]["method"]
    model = AutoModel.from_pretrained(output)
    assert type(model).__name__ == "BertNormModel" and isinstance(model.encoder.layer[0].output.LayerNorm, RMSNorm)


def test_vit_converts_exactly_from_the_command_line(tiny_vit_dir, tmp_path, capsys):
    images = save_images(tmp_path / "images", 4)
    output = tmp_path / "vit-rmsnorm"
    assert cli.main(["convert", str(tiny_vit_dir), "--norm-type", "rmsnorm", "--eval-data", str(images),
                     "--output", str(output)]) == 0  # fmt: skip
    assert "exact: max abs diff" in capsys.readouterr().out
