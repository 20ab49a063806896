"""The recipes of the published checkpoints (`conversions/*.json`) and the config fields `conversions/run.py` writes."""

import hashlib
import importlib.util
import json
import re
from pathlib import Path

import pytest
from transformers import BertConfig, Dinov2Config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "conversions").glob("*.json"))
SOURCE_CONFIGS = {"packaged:minilm": BertConfig, "packaged:dinov2-small": Dinov2Config}


def load_runner():
    spec = importlib.util.spec_from_file_location("conversions_run", ROOT / "conversions" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("recipe_path", RECIPES, ids=lambda path: path.stem)
def test_a_recipe_sets_only_config_fields_its_source_has_and_its_card_says_why(recipe_path):
    recipe = json.loads(recipe_path.read_text())
    fields = recipe.get("config", {})
    defaults = SOURCE_CONFIGS[recipe["source"]]()
    notes = " ".join(recipe.get("card", {}).get("notes", []))
    for name, value in fields.items():
        assert hasattr(defaults, name), f"{recipe_path.name}: {name} is not a config field of its source"
        assert isinstance(value, type(getattr(defaults, name))), f"{recipe_path.name}: {name}={value!r}"
        assert f"`{name}`" in notes, f"{recipe_path.name}: the card's notes do not say why {name} is set"


def test_config_fields_are_written_once_and_keep_every_other_field(tmp_path):
    runner = load_runner()
    config = {"model_type": "bert", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "norm_type": "dyt"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    fields = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    runner.set_config_fields(tmp_path, fields)
    written = (tmp_path / "config.json").read_bytes()
    assert json.loads(written) == {**config, **fields}
    assert BertConfig.from_pretrained(tmp_path).hidden_dropout_prob == 0.0
    inode = (tmp_path / "config.json").stat().st_ino
    runner.set_config_fields(tmp_path, fields)  # already set: the file is not replaced
    assert (tmp_path / "config.json").stat().st_ino == inode
    assert hashlib.sha256((tmp_path / "config.json").read_bytes()).digest() == hashlib.sha256(written).digest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"no_such_field": 1}, "has no no_such_field"),
        ({"hidden_dropout_prob": "0.0"}, "has hidden_dropout_prob=0.1"),
        ({"hidden_dropout_prob": True}, "has hidden_dropout_prob=0.1"),
        ({"hidden_dropout_prob": 1.0}, "must be a probability in [0, 1)"),
        ({"hidden_dropout_prob": float("nan")}, "must be a probability in [0, 1)"),
        ({"attention_probs_dropout_prob": -1}, "must be a probability in [0, 1)"),
    ],
)
def test_config_fields_no_model_can_use_are_refused_in_one_line_and_nothing_is_written(tmp_path, fields, says):
    runner = load_runner()
    config = {"model_type": "bert", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    before = (tmp_path / "config.json").read_bytes()
    with pytest.raises(runner.ConversionError, match=re.escape(says)):
        runner.set_config_fields(tmp_path, fields)
    assert (tmp_path / "config.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_config_that_is_not_a_json_object_is_one_line_naming_the_file(tmp_path):
    runner = load_runner()
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(runner.ConversionError, match=r"config\.json holds a JSON list, not an object"):
        runner.set_config_fields(tmp_path, {"hidden_dropout_prob": 0.0})
    with pytest.raises(runner.ConversionError, match="is not valid JSON"):
        runner.set_config_fields(tmp_path / "missing", {"hidden_dropout_prob": 0.0})


def test_the_runner_lists_every_recipe(capsys):
    """`conversions/run.py --list` (and `--help`, below its options) names every recipe with its source, norm_type and
    repo; before, only running it with a wrong name listed them."""
    assert load_runner().main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == [path.stem for path in RECIPES]
    for line, path in zip(lines, RECIPES, strict=True):
        recipe = json.loads(path.read_text())
        assert f"{recipe['source']} -> {recipe['convert']['norm_type']}" in line and line.endswith(recipe["repo_id"])
