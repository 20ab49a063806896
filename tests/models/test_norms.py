"""The norm layers against their papers' equations, parameter overheads, and bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

import hf_norms
from hf_norms import DynamicTanh, DynamicTokenNorm, PositionEmbeddingNorm, SeparateNorm, TokenLayout
from hf_norms.norms.build import build_norm

torch.set_default_dtype(torch.float32)


def relative_offsets(rows: int, cols: int) -> torch.Tensor:
    """`R_ij = (dx, dy, dx^2 + dy^2)` from grid token i to grid token j (row-major): `[M, M, 3]`."""
    ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    xs, ys = xs.flatten().float(), ys.flatten().float()
    dx, dy = xs[None, :] - xs[:, None], ys[None, :] - ys[:, None]
    return torch.stack([dx, dy, dx * dx + dy * dy], dim=-1)


def dtn_reference(layer: DynamicTokenNorm, x: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """DTN as the paper writes it, token by token and head by head, in float64."""
    x = x.double()
    batch, seq_len, hidden = x.shape
    heads, prefix = layer.num_heads, layout.num_prefix_tokens
    weight, bias = layer.weight.double(), layer.bias.double()
    rows, cols = layout.grid_size
    pos_proj = layer.pos_proj  # the paper's Linear(3, H)
    logits = F.linear(
        relative_offsets(rows, cols).double(), pos_proj.weight.double(), pos_proj.bias.double()
    )  # [M, M, H]
    tokens = []  # built out of place, so that autograd can differentiate the reference too
    for b in range(batch):
        real = torch.ones(seq_len - prefix, dtype=torch.bool)
        if layout.padding_mask is not None:
            real = layout.padding_mask[b, prefix:].bool()
        for i in range(seq_len):
            mu_ln, var_ln = x[b, i].mean(), x[b, i].var(unbiased=False)
            if i < prefix:
                tokens.append((x[b, i] - mu_ln) / torch.sqrt(var_ln + layer.eps) * weight + bias)
                continue
            normalized = []
            for h in range(heads):
                channels = slice(h * hidden // heads, (h + 1) * hidden // heads)
                p = logits[i - prefix, :, h].masked_fill(~real, float("-inf")).softmax(-1)  # over source tokens j
                x_h = x[b, prefix:, channels]
                mean_inter = p @ x_h
                var_inter = p @ (x_h * x_h) - mean_inter**2
                l_mu, l_var = layer.mean_gate[h].double(), layer.var_gate[h].double()
                mu = l_mu * mu_ln + (1 - l_mu) * mean_inter
                var = l_var * var_ln + (1 - l_var) * var_inter
                normalized.append((x[b, i, channels] - mu) / torch.sqrt(var + layer.eps))
            tokens.append(torch.cat(normalized) * weight + bias)
    out = torch.stack(tokens).view(batch, seq_len, hidden)
    return out


def random_dtn(hidden=24, heads=3, fast_path=True) -> DynamicTokenNorm:
    torch.manual_seed(0)
    layer = DynamicTokenNorm(hidden, heads, eps=1e-6)
    layer.fast_path = fast_path
    with torch.no_grad():
        for param in layer.parameters():
            param.normal_()
        layer.pos_proj.bias.normal_()  # a buffer (it cancels in the softmax); random all the same
        layer.mean_gate.uniform_(0, 1)
        layer.var_gate.uniform_(0, 1)
    return layer


# (grid, padding mask): none; all ones (mixed like no mask, one matrix per head); padding (one matrix per example)
DTN_CASES = [((3, 4), None), ((1, 12), None), ((1, 12), "all real"), ((1, 12), "padded")]


def dtn_case(grid: tuple[int, int], padding: str | None) -> tuple[torch.Tensor, TokenLayout, torch.Tensor]:
    """Input `[2, 13, 24]`, its layout (one prefix token), and the `[2, 13]` bool mask of real tokens."""
    x = torch.randn(2, 1 + 12, 24) * 3 + 1
    mask = torch.ones(2, 13, dtype=torch.long)
    if padding == "padded":
        mask[1, -4:] = 0
    return x, TokenLayout(1, grid, mask if padding else None), mask.bool()


FAST_PATH = pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "plain-formula"])


@FAST_PATH
@pytest.mark.parametrize("autograd", [True, False], ids=["autograd", "inference"])
@pytest.mark.parametrize(("grid", "padding"), DTN_CASES)
def test_dtn_matches_the_paper_formula(grid, padding, autograd, fast_path):
    """Every code path (fast: with autograd LayerNorm plus a correction, without the formula in place; the plain formula
    the other runtimes trace) is the paper's."""
    layer = random_dtn(fast_path=fast_path)
    x, layout, rows = dtn_case(grid, padding)
    with torch.set_grad_enabled(autograd):
        out = layer(x, layout)
    reference = dtn_reference(layer, x, layout)
    assert (out.double() - reference)[rows].abs().max().item() < 1e-4


@FAST_PATH
@pytest.mark.parametrize(("grid", "padding"), DTN_CASES)
def test_dtn_gradients_match_the_paper_formula(grid, padding, fast_path):
    layer = random_dtn(fast_path=fast_path)
    x, layout, rows = dtn_case(grid, padding)
    x_fast, x_reference = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(x.shape) * rows[..., None]
    (layer(x_fast, layout) * upstream).sum().backward()
    fast = {name: param.grad.clone() for name, param in layer.named_parameters() if param.grad is not None}
    layer.zero_grad()
    (dtn_reference(layer, x_reference, layout) * upstream.double()).sum().backward()
    torch.testing.assert_close(x_fast.grad, x_reference.grad, rtol=1e-4, atol=1e-4)
    for name, grad in fast.items():
        reference_grad = layer.get_parameter(name).grad
        torch.testing.assert_close(grad.double(), reference_grad.double(), rtol=1e-4, atol=1e-4, msg=name)
    assert {"mean_gate", "var_gate", "pos_proj.weight", "weight", "bias"} <= set(fast)


@pytest.mark.parametrize(("grid", "padding"), DTN_CASES)
def test_dtn_written_out_backward_passes_gradcheck(grid, padding):
    """`TokenNormFunction`'s backward against finite differences in float64, for the input and every parameter."""
    layer = random_dtn().double().eval()  # eval: no in-place projection of the gates, which gradcheck would see
    x, layout, _ = dtn_case(grid, padding)
    names = [name for name, _ in layer.named_parameters()]

    def run(x, *params):
        return torch.func.functional_call(layer, dict(zip(names, params, strict=True)), (x, layout))

    params = [param.detach().clone().requires_grad_() for param in layer.parameters()]
    assert torch.autograd.gradcheck(run, (x.double().requires_grad_(), *params), eps=1e-6, atol=1e-5)


def test_frozen_dtn_with_autograd_on_computes_the_inference_output():
    """Grad mode on, but nothing requires grad (a frozen layer on a plain input): the autograd path still runs."""
    layer = random_dtn().requires_grad_(False)
    x, layout, _ = dtn_case((3, 4), None)
    with torch.no_grad():
        expected = layer(x, layout)
    out = layer(x, layout)
    assert not out.requires_grad
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_dtn_in_bfloat16_is_close_to_float32():
    layer = random_dtn()
    x, layout, _ = dtn_case((3, 4), None)
    with torch.no_grad():
        expected = layer(x, layout)
        out = layer.to(torch.bfloat16)(x.to(torch.bfloat16), layout)
    assert out.dtype == torch.bfloat16
    assert (out.float() - expected).abs().max() < 0.1 * expected.abs().max()


@pytest.mark.parametrize("autograd", [True, False], ids=["autograd", "inference"])
def test_dtn_with_gates_at_one_is_layernorm_bit_for_bit(autograd):
    layer = random_dtn()
    with torch.no_grad():
        layer.mean_gate.fill_(1.0)
        layer.var_gate.fill_(1.0)
    x = torch.randn(3, 1 + 16, 24) * 7
    expected = F.layer_norm(x, (24,), layer.weight, layer.bias, layer.eps)
    with torch.set_grad_enabled(autograd):
        assert torch.equal(layer(x, TokenLayout(1, (4, 4))), expected)


def test_dtn_gates_at_one_still_learn_and_stay_in_range():
    """Converted models start at gates 1 (LayerNorm): a step past 1 is projected back, and the gradient keeps flowing."""
    layer = random_dtn().train()
    with torch.no_grad():
        layer.mean_gate.fill_(1.0)
        layer.var_gate.fill_(1.0)
    x, layout = torch.randn(2, 13, 24) * 3, TokenLayout(1, (3, 4))
    target = torch.randn(2, 13, 24)
    optimizer = torch.optim.SGD([layer.mean_gate, layer.var_gate], lr=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        F.mse_loss(layer(x, layout), target).backward()
        assert layer.mean_gate.grad.abs().sum() > 0 and layer.var_gate.grad.abs().sum() > 0
        optimizer.step()
    layer(x, layout)
    for gate in (layer.mean_gate, layer.var_gate):
        assert gate.min() >= 0 and gate.max() <= 1
    assert (layer.mean_gate < 1).any() or (layer.var_gate < 1).any()  # the loss pulled some gate away from LayerNorm


def test_dtn_mixing_rows_sum_to_one_and_ignore_padding():
    from hf_norms.norms.dtn import mixing_matrices

    layer = random_dtn()
    mask = torch.tensor([[True] * 7 + [False] * 3])
    mixing, _ = mixing_matrices(layer.pos_proj.weight, (1, 10), mask)
    torch.testing.assert_close(mixing.sum(-1), torch.ones(1, 3, 10))
    assert mixing[..., 7:].abs().max() == 0
    with pytest.raises(ValueError, match="padding mask only for one-row layouts"):
        layer(torch.randn(1, 13, 24), TokenLayout(1, (3, 4), torch.ones(1, 13)))


def test_dyt_is_the_papers_equation():
    layer = DynamicTanh(8, alpha_init=0.7)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(layer(x), layer.weight * torch.tanh(0.7 * x) + layer.bias)
    assert DynamicTanh(8, per_channel=True).alpha.shape == (8,)


@pytest.mark.parametrize("prefix_norm", ["layernorm", "batchnorm"])
def test_sepnorm_normalises_prefix_and_tokens_separately(prefix_norm):
    layer = SeparateNorm(8, num_prefix_tokens=2, eps=1e-5, prefix_norm=prefix_norm).train()
    x = torch.randn(4, 6, 8)
    out = layer(x)
    torch.testing.assert_close(out[:, 2:], F.layer_norm(x[:, 2:], (8,), eps=1e-5))
    if prefix_norm == "layernorm":
        torch.testing.assert_close(out[:, :2], F.layer_norm(x[:, :2], (8,), eps=1e-5))
    else:  # batch statistics per channel over the batch and the prefix tokens
        prefix = x[:, :2].reshape(-1, 8)
        expected = (prefix - prefix.mean(0)) / torch.sqrt(prefix.var(0, unbiased=False) + 1e-5)
        torch.testing.assert_close(out[:, :2].reshape(-1, 8), expected, rtol=1e-4, atol=1e-5)
        assert layer.prefix_norm.num_batches_tracked == 1


def test_lape_position_norm_zero_init_adds_nothing():
    pe = torch.randn(1, 5, 8)
    assert PositionEmbeddingNorm(8, zero_init=True)(pe).abs().max() == 0
    torch.testing.assert_close(PositionEmbeddingNorm(8)(pe), F.layer_norm(pe, (8,), eps=1e-6))


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", ["vit", "deit", "bert"])
def test_parameter_overheads_match_the_papers(family):
    base = count_parameters(hf_norms_model(family, "layernorm"))
    config = tiny_config(family, "layernorm")
    hidden, heads, layers = config.hidden_size, config.num_attention_heads, config.num_hidden_layers
    norms_replaced = 2 * layers + 1  # 2 per layer, plus the final norm (vision) or the embedding norm (BERT)
    # DTN: pos_proj's weight (3H) and the two gates (2H) train; pos_proj's bias (H) cancels in the softmax, a buffer
    assert count_parameters(hf_norms_model(family, "dtn")) - base == 5 * heads * norms_replaced
    assert count_parameters(hf_norms_model(family, "lape")) - base == 2 * hidden * layers
    assert count_parameters(hf_norms_model(family, "dyt")) - base == norms_replaced
    assert count_parameters(hf_norms_model(family, "derf")) - base == 2 * norms_replaced  # alpha and shift
    assert count_parameters(hf_norms_model(family, "derf", derf_per_channel=True)) - base == 2 * hidden * norms_replaced
    assert count_parameters(hf_norms_model(family, "sepnorm", sepnorm_prefix_norm="layernorm")) - base == (
        2 * hidden * norms_replaced
    )


def hf_norms_model(family: str, norm_type: str, **options):
    config = tiny_config(family, norm_type, **options)
    return {"vit": hf_norms.ViTNormModel, "deit": hf_norms.DeiTNormModel, "bert": hf_norms.BertNormModel}[family](
        config, add_pooling_layer=False
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"norm_type": "bogus"},
            r"norm_type='bogus' is not supported; choose one of \['derf', 'dtn', 'dyt', 'lape', 'layernorm'",
        ),
        ({"norm_type": "dyt", "dyt_alpha_init": 0.0}, "dyt_alpha_init must be a finite number > 0, got 0.0"),
        ({"norm_type": "dyt", "dyt_alpha_init": -1.0}, "dyt_alpha_init must be a finite number > 0"),
        ({"norm_type": "dyt", "dyt_alpha_init": float("inf")}, "dyt_alpha_init must be a finite number > 0, got inf"),
        ({"norm_type": "derf", "derf_alpha_init": 0.0}, "derf_alpha_init must be a finite number > 0, got 0.0"),
        ({"norm_type": "derf", "derf_alpha_init": float("inf")}, "derf_alpha_init must be a finite number > 0"),
        ({"norm_type": "derf", "derf_shift_init": float("nan")}, "derf_shift_init must be a finite number, got nan"),
        ({"norm_type": "dtn", "dtn_num_heads": 5}, r"DTN heads \(5\) must be a positive divisor of hidden_size \(48\)"),
        ({"norm_type": "dtn", "dtn_gate_init": 1.5}, r"dtn_gate_init must be in \[0, 1\]"),
        ({"norm_type": "sepnorm", "sepnorm_prefix_norm": "groupnorm"}, "sepnorm_prefix_norm='groupnorm'"),
        ({"norm_type": "lape", "lape_mode": "sideways"}, "lape_mode='sideways'"),
        ({"norm_type": 3}, "norm_type=3 is not supported"),
    ],
)
@pytest.mark.parametrize("family", ["vit", "deit", "bert"])
def test_bad_config_values_are_refused_with_the_allowed_ones(family, options, message):
    with pytest.raises(Exception, match=message):
        tiny_config(family, **options)


def test_dtn_refuses_to_be_a_causal_decoder():
    with pytest.raises(Exception, match="causal decoder"):
        tiny_config("bert", "dtn", is_decoder=True)


def test_sepnorm_refuses_more_prefix_tokens_than_the_sequence():
    with pytest.raises(ValueError, match=r"separates 2 prefix token\(s\).*only 1 token"):
        SeparateNorm(8, num_prefix_tokens=2)(torch.randn(2, 1, 8))


def test_dtn_refuses_a_sequence_that_is_not_the_patch_grid():
    model = hf_norms_model("vit", "dtn")
    with pytest.raises(ValueError, match=r"The sequence has 17 tokens.*1 prefix tokens followed by a 4x5 grid"):
        model.layers[0].layernorm_before(torch.randn(1, 17, 48), TokenLayout(1, (4, 5)))
    outside_a_model = build_norm(model.config, 1, layer_index=0)
    with pytest.raises(ValueError, match="needs a TokenLayout"):
        outside_a_model(torch.randn(1, 17, 48))


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_every_dtn_parameter_gets_a_gradient(family):
    """DDP with `find_unused_parameters=False` and transformers' gradient checks need a gradient for every parameter:
    pos_proj's bias, which cancels in the softmax, is a buffer."""
    model = hf_norms_model(family, "dtn").train()
    config = model.config
    if family == "bert":
        inputs = {"input_ids": torch.randint(5, config.vocab_size, (2, 7))}
    else:
        inputs = {"pixel_values": torch.randn(2, 3, config.image_size, config.image_size)}
    model(**inputs).last_hidden_state.pow(2).mean().backward()
    without = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert without == [], without
