"""Stock checkpoints through the Auto classes with a norm option (`AutoModel.from_pretrained(stock, norm_type="dtn")`),
and what transformers and hf-norms log when a LayerNorm checkpoint is loaded into another norm_type."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from conftest import HEAD_CASES, head_config, in_fresh_memory, primary_output, tiny_config
from huggingface_hub.errors import StrictDataclassClassValidationError
from test_stock_compat import stock_class, stock_config

import hf_norms

PRESERVING = ("dtn", "lape", "sepnorm")


def saved_stock(case, tmp_path):
    torch.manual_seed(0)
    stock = stock_class(case)(stock_config(head_config(case, "layernorm"))).eval()
    stock.save_pretrained(tmp_path)
    return in_fresh_memory(stock)


@pytest.mark.parametrize("case", HEAD_CASES, ids=str)
def test_auto_classes_load_a_stock_checkpoint_into_the_hf_norms_head_keeping_its_function(case, tmp_path):
    stock = saved_stock(case, tmp_path)
    auto_class = getattr(transformers, case.model_class._auto_class)
    model = in_fresh_memory(auto_class.from_pretrained(tmp_path, norm_type="sepnorm").eval())
    assert type(model) is case.model_class
    assert (model.config.norm_type, model.config.sepnorm_prefix_norm) == ("sepnorm", "layernorm")
    inputs = case.inputs(model.config, with_labels=False)
    with torch.no_grad():
        diff = (primary_output(model(**inputs)) - primary_output(stock(**inputs))).abs().max().item()
    assert diff <= 1e-5, diff
    # Without a norm option the Auto class gives what transformers gives: the stock class itself.
    assert type(auto_class.from_pretrained(tmp_path)) is stock_class(case)


@pytest.mark.parametrize("norm_type", PRESERVING)
def test_auto_model_on_the_real_minilm_is_the_direct_class_load(minilm_dir, news_sentences, norm_type):
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    batch = tokenizer(news_sentences, padding=True, return_tensors="pt")
    auto = transformers.AutoModel.from_pretrained(minilm_dir, norm_type=norm_type).eval()
    direct = hf_norms.BertNormModel.from_pretrained(minilm_dir, norm_type=norm_type).eval()
    stock = transformers.BertModel.from_pretrained(minilm_dir).eval()
    assert type(auto) is hf_norms.BertNormModel and auto.config.to_dict() == direct.config.to_dict()
    with torch.no_grad():
        outputs = [model(**batch).last_hidden_state for model in (auto, direct, stock)]
    real = batch["attention_mask"].bool()
    assert torch.equal(outputs[0], outputs[1])
    assert (outputs[0] - outputs[2])[real].abs().max().item() <= 1e-5


@pytest.mark.parametrize("norm_type", ["dyt", "derf"])
def test_auto_classes_warn_as_the_direct_classes_where_the_function_is_lost(norm_type, tmp_path, caplog):
    case = HEAD_CASES[[str(c) for c in HEAD_CASES].index("ViTNormForImageClassification")]
    saved_stock(case, tmp_path)
    with caplog.at_level(logging.WARNING):
        model = transformers.AutoModelForImageClassification.from_pretrained(tmp_path, norm_type=norm_type)
        direct = hf_norms.ViTNormForImageClassification.from_pretrained(tmp_path, norm_type=norm_type)
    assert type(model) is type(direct) and model.config.norm_type == norm_type
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("hf_norms")]
    assert len(warnings) == 2 and warnings[0] == warnings[1]
    assert f"norm_type='{norm_type}' does not compute what it computed" in warnings[0]
    assert "hf_norms.convert_model" in warnings[0]


def test_auto_from_config_takes_norm_options():
    config = transformers.BertConfig(**tiny_config("bert", "layernorm").to_dict())
    model = transformers.AutoModelForMaskedLM.from_config(config, norm_type="dtn", dtn_gate_init=0.25)
    assert type(model) is hf_norms.BertNormForMaskedLM
    assert (model.config.norm_type, model.config.dtn_gate_init, model.config.hidden_size) == ("dtn", 0.25, 48)
    assert type(transformers.AutoModelForMaskedLM.from_config(config)) is transformers.BertForMaskedLM


WRONG_NORM_KEYWORDS = [
    ({"dtn_gate_init": 0.5}, "dtn_gate_init is an option of norm_type='dtn', but the model's norm_type is 'layernorm'"),
    ({"norm_type": "dyt", "dtn_gate_init": 0.5}, "but the model's norm_type is 'dyt', which would ignore it"),
    (
        {"norm_type": "dyt", "dyt_alpha_int": 0.5},
        "'dyt_alpha_int' is not a norm option; did you mean 'dyt_alpha_init'?",
    ),
    ({"norm_typ": "dyt"}, "'norm_typ' is not a norm option; did you mean 'norm_type'?"),
]


@pytest.mark.parametrize(("keywords", "message"), WRONG_NORM_KEYWORDS, ids=lambda value: str(value)[:30])
def test_a_norm_keyword_the_model_would_ignore_or_refuse_late_is_one_line(keywords, message, tmp_path):
    """Before, `dtn_gate_init` without `norm_type` gave a LayerNorm model silently, and a misspelt option a TypeError of
    BertModel.__init__ naming no fix: every loading path now answers with the same one line."""
    case = HEAD_CASES[[str(c) for c in HEAD_CASES].index("BertNormModel")]
    saved_stock(case, tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    loaders = [
        lambda: transformers.AutoModel.from_pretrained(tmp_path, **keywords),
        lambda: hf_norms.BertNormModel.from_pretrained(tmp_path, **keywords),
        lambda: transformers.AutoModel.from_config(config, **keywords),
    ]
    for load in loaders:
        with pytest.raises(ValueError) as raised:
            load()
        assert message in str(raised.value) and "\n" not in str(raised.value)
    # a stock config field close to a norm option's name is not taken for one
    assert transformers.AutoModel.from_pretrained(tmp_path, layer_norm_eps=1e-5).config.layer_norm_eps == 1e-5


def test_a_checkpoints_own_remote_code_still_wins_over_the_stock_class(tmp_path):
    """transformers loads a stock-type checkpoint's remote code (an `auto_map` without its own config class) when
    trusted; hf-norms' registration for the stock config changes nothing there."""
    case = HEAD_CASES[[str(c) for c in HEAD_CASES].index("BertNormModel")]
    saved_stock(case, tmp_path)
    (tmp_path / "custom_bert.py").write_text(
        "from transformers import BertModel\n\n\nclass CustomBertModel(BertModel):\n    pass\n"
    )
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps({**config, "auto_map": {"AutoModel": "custom_bert.CustomBertModel"}})
    )
    assert type(transformers.AutoModel.from_pretrained(tmp_path, trust_remote_code=True)).__name__ == "CustomBertModel"
    assert type(transformers.AutoModel.from_pretrained(tmp_path, trust_remote_code=False)) is transformers.BertModel


LOAD_SCRIPT = """
    import logging, sys
    import transformers
    import hf_norms

    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s: %(message)s")
    transformers.logging.set_verbosity_warning()
    transformers.logging.disable_progress_bar()
    path = sys.argv[1]
    for label, load in [
        ("dtn", lambda: hf_norms.BertNormModel.from_pretrained(path, norm_type="dtn")),
        ("lape", lambda: hf_norms.BertNormModel.from_pretrained(path, norm_type="lape")),
        ("sepnorm", lambda: hf_norms.BertNormModel.from_pretrained(path, norm_type="sepnorm")),
        ("auto sepnorm", lambda: transformers.AutoModel.from_pretrained(path, norm_type="sepnorm")),
        ("head sepnorm", lambda: hf_norms.BertNormForSequenceClassification.from_pretrained(path, norm_type="sepnorm")),
        ("layernorm", lambda: hf_norms.BertNormModel.from_pretrained(path)),
        ("dyt", lambda: hf_norms.BertNormModel.from_pretrained(path, norm_type="dyt")),
        ("auto derf head", lambda: transformers.AutoModelForSequenceClassification.from_pretrained(
            path, norm_type="derf")),
        ("sepnorm batchnorm", lambda: hf_norms.BertNormModel.from_pretrained(
            path, norm_type="sepnorm", sepnorm_prefix_norm="batchnorm")),
    ]:
        print(f"=== {label}", file=sys.stderr, flush=True)
        load()
        print("=== end", file=sys.stderr, flush=True)
"""


@pytest.fixture(scope="module")
def load_logs(minilm_dir, tmp_path_factory) -> dict[str, str]:
    """What a user sees on stderr for each load of the real MiniLM (transformers at its WARNING verbosity, Python
    logging at INFO), by load."""
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "warning"}
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOAD_SCRIPT), str(minilm_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path_factory.mktemp("logs"),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    sections = completed.stderr.split("=== ")[1:]
    return {section.split("\n", 1)[0]: section.split("\n", 1)[1] for section in sections if section != "end\n"}


def hf_norms_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("hf_norms")]


NOTE = {
    "dtn": "mean and variance gates at 1 (LayerNorm's statistics) in 13 DTN norms",
    "lape": "the input position embedding kept and pe_norm at zero in 6 layers",
    "sepnorm": "prefix_norm copied from the LayerNorm in 13 SepNorm norms",
    "auto sepnorm": "prefix_norm copied from the LayerNorm in 13 SepNorm norms",
    "head sepnorm": "prefix_norm copied from the LayerNorm in 13 SepNorm norms",
}


@pytest.mark.parametrize("load", sorted(NOTE))
def test_a_function_preserving_load_logs_one_line_instead_of_transformers_notices(load_logs, load):
    log = load_logs[load]
    assert "to instantiate a model of type" not in log
    lines = hf_norms_lines(log)
    assert len(lines) == 1 and " INFO: " in lines[0] and NOTE[load] in lines[0], log
    assert "computing what it computed" in lines[0]
    for name in ("prefix_norm", "mean_gate", "var_gate", "pos_proj", "pe_norm"):
        assert name not in log.replace(lines[0], "")
    if load == "head sepnorm":  # the classifier is new: the load report lists it, and only it
        assert "LOAD REPORT" in log and "classifier.weight" in log and "classifier.bias" in log
    else:
        assert "LOAD REPORT" not in log


def test_other_loads_keep_transformers_load_report(load_logs):
    assert "to instantiate a model of type" not in load_logs["layernorm"]
    assert not hf_norms_lines(load_logs["layernorm"]) and "LOAD REPORT" not in load_logs["layernorm"]
    dyt = load_logs["dyt"]  # DyT: hf-norms' warning, and one line for the alpha parameters it initialised
    assert "to instantiate a model of type" not in dyt
    assert [" WARNING: " in line for line in hf_norms_lines(dyt)] == [True, False]
    assert "alpha at their initial values in 13 norms" in hf_norms_lines(dyt)[1]
    assert "LOAD REPORT" not in dyt and "MISSING" not in dyt and "LayerNorm.alpha" not in dyt
    batchnorm = load_logs["sepnorm batchnorm"]  # a BatchNorm prefix norm does not keep the function: reported
    assert not hf_norms_lines(batchnorm) and "LOAD REPORT" in batchnorm and "prefix_norm.running_mean" in batchnorm


LOAD_KEYWORDS = [
    {"attn_implementation": "eager"},
    {"attn_implementation": "eager", "output_attentions": True, "output_hidden_states": True},
    {"dtype": torch.float64, "hidden_dropout_prob": 0.0},
]


@pytest.mark.parametrize("keywords", LOAD_KEYWORDS, ids=lambda keywords: ",".join(keywords))
@pytest.mark.parametrize("family", ["bert", "dinov2"])
def test_auto_model_with_a_norm_option_honours_every_from_pretrained_keyword(family, keywords, request):
    """`AutoModel.from_pretrained(stock, norm_type=..., **keywords)` builds the model the hf-norms class builds from
    the same call, and the stock class from the same keywords: attention implementation, dtype, config overrides."""
    path = request.getfixturevalue("minilm_dir" if family == "bert" else "dinov2_dir")
    norm_class = hf_norms.BertNormModel if family == "bert" else hf_norms.Dinov2NormModel
    stock = transformers.AutoModel.from_pretrained(path, **keywords)
    auto = transformers.AutoModel.from_pretrained(path, norm_type="dtn", **keywords)
    direct = norm_class.from_pretrained(path, norm_type="dtn", **keywords)
    assert type(auto) is norm_class
    assert auto.config._attn_implementation == direct.config._attn_implementation == stock.config._attn_implementation
    assert auto.config.to_dict() == direct.config.to_dict()
    assert auto.dtype == direct.dtype == stock.dtype
    for name in ("output_attentions", "output_hidden_states", "hidden_dropout_prob"):
        assert getattr(auto.config, name, None) == getattr(stock.config, name, None), name
    if keywords.get("output_attentions"):
        inputs = (
            {"input_ids": torch.tensor([[101, 7592, 102]])}
            if family == "bert"
            else {"pixel_values": torch.zeros(1, 3, 224, 224)}
        )
        with torch.no_grad():
            attentions = auto(**inputs).attentions
        assert len(attentions) == auto.config.num_hidden_layers and attentions[0].shape[1] == 12 // (
            2 if family == "dinov2" else 1
        )


def test_auto_from_config_with_a_norm_option_keeps_the_configs_attention_implementation():
    config = transformers.BertConfig(**tiny_config("bert", "layernorm").to_dict(), attn_implementation="eager")
    model = transformers.AutoModel.from_config(config, norm_type="dtn")
    assert type(model) is hf_norms.BertNormModel
    assert model.config._attn_implementation == transformers.AutoModel.from_config(config).config._attn_implementation
    assert model.config._attn_implementation == "eager"


TYPO_LOADS = {
    "AutoModel": lambda path, typo: transformers.AutoModel.from_pretrained(path, norm_type=typo),
    "AutoModelForSequenceClassification": lambda path, typo: (
        transformers.AutoModelForSequenceClassification.from_pretrained(path, norm_type=typo, num_labels=3)
    ),
    "BertNormModel": lambda path, typo: hf_norms.BertNormModel.from_pretrained(path, norm_type=typo),
    "AutoModel.from_config": lambda path, typo: transformers.AutoModel.from_config(
        transformers.AutoConfig.from_pretrained(path), norm_type=typo
    ),
    "BertNormConfig": lambda path, typo: hf_norms.BertNormConfig(norm_type=typo),
}


@pytest.mark.parametrize("typo", ["dyn", "DyT"])
@pytest.mark.parametrize("load", sorted(TYPO_LOADS))
def test_a_mistyped_norm_type_is_one_line_naming_the_nearest_choice(minilm_dir, load, typo):
    # a config refuses it as transformers' strict configs refuse any value: its validator's name, then the line
    with pytest.raises((ValueError, StrictDataclassClassValidationError)) as raised:
        TYPO_LOADS[load](minilm_dir, typo)
    last_line = str(raised.value).strip().splitlines()[-1].strip().removeprefix("ValueError: ")
    choices = sorted(hf_norms.NORM_TYPES)
    assert last_line == f"norm_type={typo!r} is not supported (did you mean 'dyt'?); choose one of {choices}."


def test_a_derf_head_load_reports_only_the_new_head(load_logs):
    """Derf's alpha and shift, initialised on purpose, leave the load report; the new classifier stays in it."""
    log = load_logs["auto derf head"]
    lines = hf_norms_lines(log)
    assert len(lines) == 2 and "alpha, shift at their initial values in 13 norms" in lines[1]
    assert "LOAD REPORT" in log and "classifier.weight" in log and "classifier.bias" in log
    assert ".alpha" not in log.replace(lines[1], "") and ".shift" not in log
