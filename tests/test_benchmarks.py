"""The benchmarks run in smoke mode (tiny sizes, few rounds), so they do not rot; their timings are not tested."""

from __future__ import annotations

import pytest
import torch

from benchmarks import conversion, first_hour_timings, large_checkpoints, norm_layers, whole_models


def test_norm_layer_benchmark_runs(capsys):
    norm_layers.main(["--smoke"])
    printed = capsys.readouterr().out
    for name in (
        "layernorm",
        "dyt",
        "derf",
        "dtn",
        "sepnorm (BatchNorm prefix)",
        "dyt, naive tanh formula",
        "derf, plain erf formula",
    ):
        assert f"| {name} |" in printed
    assert printed.count("ratio to layernorm") == 4  # fp32 and bf16, forward and forward+backward


def test_first_hour_benchmark_runs(capsys):
    """Its candidates are real processes that must exit as expected (0 for --version, 2 for an option typo)."""
    first_hour_timings.main(["--smoke"])
    printed = capsys.readouterr().out
    for name in ("hf-norms --version", "convert, option typo", "import hf_norms"):
        assert f"| {name} |" in printed


@pytest.mark.slow
def test_whole_model_benchmark_runs_eager_and_compiled(capsys):
    whole_models.main(["--smoke"])
    printed = capsys.readouterr().out
    assert printed.count("torch.compile") == 1 and printed.count("eager") == 6
    for norm_type in whole_models.NORM_VARIANTS:
        assert f"| {norm_type} |" in printed


@pytest.mark.slow
def test_conversion_benchmark_runs(capsys):
    conversion.main(["--smoke"])
    printed = capsys.readouterr().out
    for job in ("load+save", "convert sepnorm", "convert dtn", "convert lape"):
        assert f"| tiny ViT: {job} |" in printed
    assert "| 1.00x | " in printed.split("| tiny ViT: load+save |")[1].splitlines()[0]


@pytest.mark.slow
def test_large_checkpoint_benchmark_runs(capsys):
    large_checkpoints.main(["--smoke", "--norm-types", "sepnorm"])
    printed = capsys.readouterr().out
    assert "in 3 files" in printed
    assert printed.split("| load+save |")[1].splitlines()[0].endswith("| 1 |")  # transformers writes one file
    assert printed.split("| convert sepnorm |")[1].splitlines()[0].endswith("| 3 |")  # like the source


def test_whole_model_benchmark_has_the_folded_and_floor_rows(capsys):
    models, inputs = whole_models.vit_models(smoke=True)
    with torch.no_grad():
        models["dyt"].vit.layers[0].layernorm_before.weight.uniform_(0.5, 1.5)
    variants = whole_models.inference_variants(models)
    assert {"dyt, folded", "no norm"} <= set(variants)
    assert not any(isinstance(m, whole_models.LayerNorm) for m in variants["no norm"].modules())
    folded_norm = variants["dyt, folded"].vit.layers[0].layernorm_before
    assert torch.equal(folded_norm.weight, torch.ones_like(folded_norm.weight))
    pixels = inputs["pixel_values"]
    with torch.no_grad():
        expected, folded = (variants[name].eval()(pixel_values=pixels).logits for name in ("dyt", "dyt, folded"))
    assert (expected - folded).abs().max() < 1e-5
