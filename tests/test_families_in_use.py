"""RoBERTa, XLM-RoBERTa and CLIP's vision tower used as their users would (issue 46, "try it as its users would"):
what a careless user's checkpoint does, each refused in one line naming what to do."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
import transformers
from text_families import ROBERTA, XLM_ROBERTA
from transformers import (
    CLIPConfig,
    CLIPModel,
    CLIPVisionConfig,
    CLIPVisionModelWithProjection,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
    LlamaConfig,
    LlamaForCausalLM,
)

import hf_norms
from hf_norms import cli
from hf_norms.models.clip_vision import modeling_clip_vision_norm
from hf_norms.models.family_registry import FAMILIES

CLIP_VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=30,
                   patch_size=2, projection_dim=16)  # fmt: skip
CLIP_TEXT = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, vocab_size=99,
                 bos_token_id=0, eos_token_id=2, pad_token_id=1)  # fmt: skip


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def test_the_clip_projection_head_is_public_as_the_docs_name_it():
    """docs/models.md names `CLIPVisionNormModelWithProjection` among the model classes; it has no Auto class, and
    `from hf_norms import CLIPVisionNormModelWithProjection` failed with AttributeError."""
    assert hf_norms.CLIPVisionNormModelWithProjection is modeling_clip_vision_norm.CLIPVisionNormModelWithProjection
    assert "CLIPVisionNormModelWithProjection" in hf_norms.__all__


def test_an_hf_norms_checkpoint_under_the_stock_model_type_is_refused_in_one_line(tmp_path):
    """An XLM-R DTN checkpoint whose config.json says `model_type: "xlm-roberta"` (the stock type) instead of
    `xlm_roberta_norm`: the Auto class loaded the stock XLMRobertaForSequenceClassification, dropping DTN's weights,
    even when asked for norm_type="dtn" (the config took the keyword). It is refused in one line naming the fix."""
    folder = tmp_path / "xlmr-dtn"
    torch.manual_seed(0)
    config = hf_norms.XLMRobertaNormConfig.from_stock_config(XLM_ROBERTA.stock_config(), norm_type="dtn")
    hf_norms.XLMRobertaNormForSequenceClassification(config).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, "model_type": "xlm-roberta"}))
    before = tree_digest(folder)
    expected = (
        f"{folder}: its config.json holds norm_type='dtn' under the stock model_type 'xlm-roberta': it is an "
        "hf-norms checkpoint; set its model_type to 'xlm_roberta_norm' to load it."
    )
    for options in ({}, {"norm_type": "dtn"}):
        with pytest.raises(ValueError) as error:
            transformers.AutoModelForSequenceClassification.from_pretrained(folder, **options)
        assert str(error.value) == expected
    assert tree_digest(folder) == before


def test_a_checkpoint_whose_model_type_was_edited_to_another_family_is_refused_in_one_line(tmp_path):
    """A RoBERTa DyT checkpoint whose config.json was edited to say `xlm_roberta_norm` loaded every weight into
    XLMRobertaNormModel and gave other outputs, silently; its `architectures` name the family that saved the weights,
    so it is refused in one line, and loads again once the model_type is set back."""
    folder = tmp_path / "roberta-dyt"
    torch.manual_seed(0)
    config = hf_norms.RobertaNormConfig.from_stock_config(ROBERTA.stock_config(), norm_type="dyt")
    hf_norms.RobertaNormModel(config).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, "model_type": "xlm_roberta_norm"}))
    with pytest.raises(Exception) as error:
        transformers.AutoModel.from_pretrained(folder)
    assert str(error.value).splitlines()[-1].strip() == (
        "ValueError: config.json says model_type 'xlm_roberta_norm', but its weights were saved by RobertaNormModel, "
        "a class of another hf-norms family: set model_type back to that family's to load them."
    )
    (folder / "config.json").write_text(json.dumps(saved))
    assert type(transformers.AutoModel.from_pretrained(folder)) is hf_norms.RobertaNormModel


@pytest.mark.parametrize(
    ("stock_class", "config"),
    [
        (GPT2LMHeadModel, GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, bos_token_id=0, eos_token_id=0)),
        (LlamaForCausalLM, LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                       num_key_value_heads=2, intermediate_size=64, vocab_size=64)),
    ],
)  # fmt: skip
def test_a_decoder_checkpoint_with_a_norm_option_names_the_families_that_take_one(stock_class, config, tmp_path):
    """`AutoModelForCausalLM.from_pretrained(<GPT-2 or Llama>, norm_type="dyt")` with hf_norms imported ended in
    `TypeError: GPT2LMHeadModel.__init__() got an unexpected keyword argument 'norm_type'`; it is one line naming the
    model types that take norm options. Without one, the Auto classes give transformers' own class, which generates
    as it does without hf_norms."""
    torch.manual_seed(0)
    stock_class(config).save_pretrained(tmp_path / "decoder")
    source = tmp_path / "decoder"
    for auto_class in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        with pytest.raises(ValueError) as error:
            auto_class.from_pretrained(source, norm_type="dyt")
        assert str(error.value) == (
            f"{source}: model_type {config.model_type!r} is not a family hf-norms loads with norm options: those are "
            "'vit', 'deit', 'bert', 'roberta', 'xlm-roberta', 'dinov2' and 'clip_vision_model' checkpoints (decoders "
            "such as GPT-2 and Llama are not covered yet); load it without norm options."
        )
    model = transformers.AutoModelForCausalLM.from_pretrained(source).eval()
    assert type(model) is stock_class
    reference = stock_class.from_pretrained(source).eval()
    prompt = torch.tensor([[1, 2, 3]])
    generated = model.generate(prompt, max_new_tokens=4, do_sample=False)
    assert torch.equal(generated, reference.generate(prompt, max_new_tokens=4, do_sample=False))
    assert type(transformers.AutoModel.from_config(config)) is (GPT2Model if stock_class is GPT2LMHeadModel else
                                                                  transformers.LlamaModel)  # fmt: skip


def test_convert_of_a_full_clip_checkpoint_names_its_vision_tower(tmp_path, capsys):
    """A whole CLIPModel (model_type `clip`) is no family; convert says, exit 2, to save its vision tower with the
    stock class and convert that, writing nothing."""
    torch.manual_seed(0)
    config = CLIPConfig(text_config=CLIP_TEXT, vision_config=CLIP_VISION, projection_dim=16)
    CLIPModel(config).save_pretrained(tmp_path / "clip")
    before = tree_digest(tmp_path / "clip")
    source = tmp_path / "clip"
    assert cli.main(["convert", str(source), "--norm-type", "sepnorm", "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hf-norms convert: error: {source}: model_type 'clip' is not a family hf-norms converts, but its "
        "vision_config is CLIP vision's: load it with transformers' CLIPVisionModel.from_pretrained, save that with "
        "save_pretrained and convert the saved folder."
    )
    assert not (tmp_path / "out").exists() and tree_digest(source) == before


@pytest.mark.parametrize("name", ["convert", "heal", "push", "finetune"])  # the commands any family goes through
def test_a_commands_description_names_every_family_or_none(name):
    """`hf-norms convert --help` began 'Convert a LayerNorm ViT, DeiT, DINOv2 or BERT checkpoint': a RoBERTa or CLIP
    vision user read that theirs does not convert. The help and description of a command that takes any family name
    every family or none."""
    texts = {name: f"{command.help} {command.description}" for name, command in cli.COMMANDS.items()}
    texts["finetune"] = f"{cli.FINETUNE_HELP} {cli.FINETUNE_DESCRIPTION}"
    words = set(re.findall(r"[\w-]+", texts[name].replace("CLIP vision", "CLIP-vision")))
    displayed = [family.display_name for family in FAMILIES.values()]
    named = [display for display in displayed if display.replace(" ", "-") in words]
    assert named in ([], displayed), named


def test_convert_of_a_head_it_does_not_convert_names_the_head_to_load_it_with(tmp_path, capsys):
    """A CLIPVisionModelWithProjection checkpoint: the line named the registry's key ('clipvision') and no way on; it
    now names the family and says to load the checkpoint with a head it converts, exit 2, writing nothing."""
    torch.manual_seed(0)
    source = tmp_path / "projection"
    CLIPVisionModelWithProjection(CLIPVisionConfig(**CLIP_VISION)).save_pretrained(source)
    before = tree_digest(source)
    assert cli.main(["convert", str(source), "--norm-type", "sepnorm", "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hf-norms convert: error: {source}: architecture 'CLIPVisionModelWithProjection' is not a CLIP vision head "
        "hf-norms converts (those are ['CLIPVisionModel']): load it with transformers' "
        "CLIPVisionModel.from_pretrained, save that with save_pretrained and convert the saved folder."
    )
    assert not (tmp_path / "out").exists() and tree_digest(source) == before


def test_convert_of_a_mistyped_model_type_names_the_nearest_one(tmp_path, capsys):
    """A stock XLM-R checkpoint whose config.json says `xlm_roberta` (transformers' type is `xlm-roberta`, hf-norms'
    `xlm_roberta_norm`): the line names the nearest model type, exit 2, writing nothing."""
    source = XLM_ROBERTA.save_stock(tmp_path / "xlmr")
    saved = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**saved, "model_type": "xlm_roberta"}))
    before = tree_digest(source)
    assert cli.main(["convert", str(source), "--norm-type", "dtn", "--output", str(tmp_path / "out")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(
        f"hf-norms convert: error: {source}: model_type 'xlm_roberta' is not supported (did you mean "
        "'xlm-roberta'?); hf-norms converts ViT, "
    ), line
    assert not (tmp_path / "out").exists() and tree_digest(source) == before


def test_auto_model_with_a_norm_option_on_a_full_clip_checkpoint_names_the_vision_tower_class(tmp_path):
    """`AutoModel.from_pretrained(clip, norm_type="dtn")` on a whole CLIPModel failed in CLIPModel.__init__ ('got an
    unexpected keyword argument'); it is one line naming the class that loads its vision tower, which does (within
    1e-5 of the stock tower). Without a norm option AutoModel gives the stock CLIPModel, as transformers does."""
    torch.manual_seed(0)
    source = tmp_path / "clip"
    CLIPModel(CLIPConfig(text_config=CLIP_TEXT, vision_config=CLIP_VISION, projection_dim=16)).save_pretrained(source)
    with pytest.raises(ValueError) as error:
        transformers.AutoModel.from_pretrained(source, norm_type="dtn")
    assert str(error.value) == (
        f"{source}: model_type 'clip' is not a family hf-norms loads with norm options, but its vision_config is "
        "CLIP vision's: load that part with hf_norms.CLIPVisionNormModel.from_pretrained(path, norm_type=...)."
    )
    stock = transformers.AutoModel.from_pretrained(source).eval()
    assert type(stock) is CLIPModel and type(transformers.AutoModel.from_config(stock.config)) is CLIPModel
    tower = hf_norms.CLIPVisionNormModel.from_pretrained(source, norm_type="dtn").eval()
    pixels = torch.randn(2, 3, 30, 30, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (tower(pixel_values=pixels).pooler_output - stock.vision_model(pixel_values=pixels).pooler_output).abs()
    assert diff.max().item() <= 1e-5


def test_a_mistyped_norm_option_on_the_command_line_names_the_nearest_one(tmp_path, capsys):
    """`--options dtn_gate_int=0.5` listed every option without the one meant, where `from_pretrained(path,
    dtn_gate=0.3)` says "did you mean 'dtn_gate_init'?"; exit 2, nothing written."""
    source = XLM_ROBERTA.save_stock(tmp_path / "xlmr")
    output = tmp_path / "out"
    argv = ["convert", str(source), "--norm-type", "dtn", "--options", "dtn_gate_int=0.5", "--output", str(output)]
    assert cli.main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("hf-norms convert: error: --option 'dtn_gate_int=0.5': expected KEY=VALUE with KEY one of [")
    assert line.endswith("]; did you mean dtn_gate_init?") and not output.exists()


def test_finetune_of_an_unknown_model_type_lists_the_families_it_fine_tunes(tmp_path, capsys):
    """finetune named the registry's keys, 'clipvision' among the families it fine-tunes (it fine-tunes no task on
    CLIP vision), and no near miss for 'xlm_roberta'; exit 2, no output folder."""
    source = XLM_ROBERTA.save_stock(tmp_path / "xlmr")
    saved = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**saved, "model_type": "xlm_roberta"}))
    output = tmp_path / "out"
    argv = ["finetune", "--model_name_or_path", str(source), "--dataset", "packaged:bbc-news", "--output_dir",
            str(output), "--max_steps", "1", "--use_cpu"]  # fmt: skip
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "hf-norms finetune: error: Model type 'xlm_roberta' is not supported (did you mean 'xlm-roberta'?): hf-norms "
        "fine-tunes ViT, DeiT, BERT, RoBERTa, XLM-RoBERTa and DINOv2 models (model_type one of ['bert', 'bert_norm', "
        "'deit', 'deit_norm', 'dinov2', 'dinov2_norm', 'roberta', 'roberta_norm', 'vit', 'vit_norm', 'xlm-roberta', "
        "'xlm_roberta_norm'])."
    )
    assert not output.exists()


def test_convert_with_data_of_a_checkpoint_without_a_tokenizer_says_what_the_cli_user_can_do(tmp_path, capsys):
    """`convert --calibration-data` of a checkpoint saved without its tokenizer said "give one (processor=...)", a
    Python keyword the command line does not have; the line says how to put the tokenizer in the folder. Exit 2,
    nothing written."""
    torch.manual_seed(0)
    source = tmp_path / "roberta"
    ROBERTA.stock_class("ForMaskedLM")(ROBERTA.stock_config()).save_pretrained(source)
    (tmp_path / "calibration.txt").write_text("one sentence\nanother sentence\n")
    before = tree_digest(source)
    status = cli.main(["convert", str(source), "--norm-type", "dyt", "--calibration-data",
                       str(tmp_path / "calibration.txt"), "--output", str(tmp_path / "out")])  # fmt: skip
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and line == (
        "hf-norms convert: error: The data needs the model's tokenizer to encode it, and the checkpoint has none: save "
        "the one it was trained with into the checkpoint folder (`AutoTokenizer.from_pretrained(ID).save_pretrained("
        "FOLDER)` writes tokenizer.json) and convert again (in Python: convert_model(..., processor=...))."
    ), line
    assert not (tmp_path / "out").exists() and tree_digest(source) == before
