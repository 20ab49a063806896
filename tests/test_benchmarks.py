"""The benchmarks run in smoke mode (tiny sizes, few rounds), so they do not rot; their timings are not tested."""

from __future__ import annotations

import pytest

from benchmarks import norm_layers, whole_models


def test_norm_layer_benchmark_runs(capsys):
    norm_layers.main(["--smoke"])
    printed = capsys.readouterr().out
    for name in ("layernorm", "dyt", "dtn", "sepnorm (BatchNorm prefix)", "dyt, naive tanh formula"):
        assert f"| {name} |" in printed
    assert printed.count("ratio to layernorm") == 4  # fp32 and bf16, forward and forward+backward


@pytest.mark.slow
def test_whole_model_benchmark_runs_eager_and_compiled(capsys):
    whole_models.main(["--smoke"])
    printed = capsys.readouterr().out
    assert printed.count("torch.compile") == 1 and printed.count("eager") == 4
    for norm_type in whole_models.NORM_VARIANTS:
        assert f"| {norm_type} |" in printed
