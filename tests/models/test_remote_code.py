"""A saved checkpoint's remote code is two files, generated for its family and norms (`checkpoint_code`): they stand
alone, name no other norm's layer and none of transformers' private modules, and compute what the package computes in
a process where hf_norms cannot be imported; `pipeline()` works on the checkpoints both ways."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import HEAD_CASES, head_config, primary_output, run_without_hf_norms, tiny_config
from transformers import AutoTokenizer, ViTImageProcessor, pipeline

import hf_norms
from hf_norms.models.checkpoint_code import checkpoint_code, checkpoint_norm_types, code_file_names
from hf_norms.models.family_registry import FAMILIES

NORM_TYPES = sorted(hf_norms.NORM_TYPES)
# transformers' modules outside its public API that the package uses (`transformers_internals`)
PRIVATE_MODULES = ("transformers.utils.loading_report", "transformers.modeling_utils")
# Heads beyond the bare models, each under its own Auto class
HEADS = {
    "ViTNormForImageClassification",
    "DeiTNormForImageClassificationWithTeacher",
    "BertNormForMaskedLM",
    "Dinov2NormForImageClassification",
}


def bare_model_class(family):
    return next(cls for cls in family.heads if cls._auto_class == "AutoModel")


def family_inputs(family, config) -> dict:
    case = next(case for case in HEAD_CASES if case.model_class is bare_model_class(family))
    return case.inputs(config, with_labels=False)


@pytest.fixture(scope="module")
def saved_checkpoints(tmp_path_factory):
    """The bare model of every family in every norm_type, and a few heads, saved with their inputs and outputs."""
    root = tmp_path_factory.mktemp("remote")
    entries = []
    for family in FAMILIES.values():
        for norm_type in NORM_TYPES:
            torch.manual_seed(0)
            model = bare_model_class(family)(tiny_config(family.name, norm_type)).eval()
            entries.append(save_with_reference(model, family_inputs(family, model.config), root, family.name))
    for case in (case for case in HEAD_CASES if case.class_name in HEADS):
        for norm_type in ("dtn", "dyt"):
            torch.manual_seed(0)
            model = case.model_class(head_config(case, norm_type)).eval()
            entries.append(
                save_with_reference(model, case.inputs(model.config, with_labels=False), root, case.class_name)
            )
    return root, entries


def save_with_reference(model, inputs: dict, root, name: str) -> dict:
    folder = root / f"{name}-{model.config.norm_type}"
    model.save_pretrained(folder)
    with torch.no_grad():
        expected = primary_output(model(**inputs))
    torch.save({"inputs": inputs, "expected": expected}, folder / "reference.pt")
    return {"folder": str(folder), "auto_class": model._auto_class, "class": type(model).__name__}


def test_a_checkpoint_of_every_family_and_norm_type_carries_two_code_files(saved_checkpoints):
    """Its configuration and modeling files, which its `auto_map` names, and no other `.py` file (before: 18 files,
    2,143 lines, for a DyT BERT)."""
    _, entries = saved_checkpoints
    for entry in entries:
        config = json.load(open(f"{entry['folder']}/config.json"))
        configuration, modeling = code_file_names(config["model_type"])
        assert {name for name in os.listdir(entry["folder"]) if name.endswith(".py")} == {configuration, modeling}
        assert config["auto_map"]["AutoConfig"].split(".")[0] + ".py" == configuration
        assert {target.split(".")[0] + ".py" for target in config["auto_map"].values()} == {configuration, modeling}
        assert config["auto_map"][entry["auto_class"]] == f"{modeling[:-3]}.{entry['class']}"


def other_layer_classes(norm_types: list[str]) -> set[str]:
    """The layer classes of the registry's norms other than `norm_types`' (LaPE's position norm among them)."""
    own = {name for kind in norm_types for name in layer_class_names(kind)}
    return {name for kind in NORM_TYPES for name in layer_class_names(kind)} - own


def layer_class_names(kind: str) -> set[str]:
    spec = hf_norms.NORM_TYPES[kind]
    return {spec.layer_class, *([spec.position_norm_class] if spec.position_norm_class else [])}


CODE_CASES = [(family, {"norm_type": kind}) for family in FAMILIES for kind in NORM_TYPES] + [
    ("vit", {"norm_type": "dyt", "layer_norm_types": ["dyt", "layernorm"]}),
    ("bert", {"norm_type": "dtn", "layer_norm_types": ["layernorm", "dtn"]}),
]


@pytest.mark.parametrize(("family", "options"), CODE_CASES, ids=lambda value: str(value))
def test_the_generated_files_stand_alone_and_hold_only_the_checkpoints_norms(family, options, tmp_path):
    """Each file compiles; the configuration file imports nothing relative, the modeling file only the configuration
    file; neither imports transformers' private modules, leaves a name undefined or defines one twice (ruff), and
    neither names another norm's layer class nor holds the card's text."""
    config = {"model_type": FAMILIES[family].model_type, **options}
    files = checkpoint_code(config)
    configuration, modeling = code_file_names(config["model_type"])
    assert sorted(files) == sorted([configuration, modeling])
    others = other_layer_classes(checkpoint_norm_types(config))
    for name, text in files.items():
        tree = ast.parse(text)
        compile(text, name, "exec")
        relative = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
        assert relative == ([] if name == configuration else [configuration[:-3]]), name
        absolute = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level]
        absolute += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        assert not [module for module in absolute if module.startswith(PRIVATE_MODULES) or "._" in module], name
        identifiers = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        identifiers |= {node.name for node in ast.walk(tree) if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        assert not identifiers & others, (name, identifiers & others)
        assert "hf_norms" not in absolute and "CardText(" not in text and "Paper(" not in text
        for spec in hf_norms.NORM_TYPES.values():
            assert spec.text.description not in text and spec.text.placement not in text
            assert not spec.fine_tuning_reason or spec.fine_tuning_reason not in text
        (tmp_path / name).write_text(text)
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout


REMOTE_LOAD = """
    import json, sys, torch, transformers
    try:
        import hf_norms
        raise SystemExit("hf_norms was importable")
    except ModuleNotFoundError:
        pass
    results = {}
    for entry in json.loads(sys.argv[1]):
        model = getattr(transformers, entry["auto_class"]).from_pretrained(entry["folder"], trust_remote_code=True)
        assert "hf_norms" not in type(model).__module__, type(model).__module__
        for p in [*model.parameters(), *model.buffers()]:
            p.data = p.data.clone()  # out of the memory map, aligned as in the saving process
        reference = torch.load(entry["folder"] + "/reference.pt")
        with torch.no_grad():  # as the reference was computed: the same code path (DTN has two)
            out = model.eval()(**reference["inputs"])
        tensor = next(getattr(out, k) for k in ("logits", "reconstruction", "last_hidden_state")
                      if getattr(out, k, None) is not None)
        results[entry["folder"]] = [type(model).__name__, (tensor - reference["expected"]).abs().max().item()]
    print(json.dumps(results))
"""


def test_remote_code_computes_what_the_package_computes_without_hf_norms(saved_checkpoints):
    """Every family x norm_type, and the heads, in one process where hf_norms cannot be imported."""
    root, entries = saved_checkpoints
    code = REMOTE_LOAD.replace("sys.argv[1]", repr(json.dumps(entries)))
    results = json.loads(run_without_hf_norms(code, root).strip().splitlines()[-1])
    assert len(results) == len(entries)
    for entry in entries:
        class_name, diff = results[entry["folder"]]
        assert class_name == entry["class"]
        assert diff <= 1e-6, f"{entry['folder']}: {diff}"


def test_a_remote_code_model_saved_again_writes_the_same_two_files(saved_checkpoints, tmp_path):
    """Without hf_norms, transformers' own `save_pretrained` copies the generated files unchanged, and the copy loads."""
    root, entries = saved_checkpoints
    folder = next(e["folder"] for e in entries if e["class"] == "BertNormForMaskedLM")
    code = f"""
        import os, transformers
        model = transformers.AutoModelForMaskedLM.from_pretrained({folder!r}, trust_remote_code=True)
        model.save_pretrained({str(tmp_path / "again")!r})
        again = transformers.AutoModelForMaskedLM.from_pretrained({str(tmp_path / "again")!r}, trust_remote_code=True)
        print(type(again).__name__, sorted(name for name in os.listdir({str(tmp_path / "again")!r}) if name.endswith(".py")))
    """
    assert run_without_hf_norms(code, root).strip().splitlines()[-1] == (
        "BertNormForMaskedLM ['configuration_bert_norm.py', 'modeling_bert_norm.py']"
    )
    for name in ("configuration_bert_norm.py", "modeling_bert_norm.py"):
        assert (tmp_path / "again" / name).read_bytes() == open(f"{folder}/{name}", "rb").read()


def test_the_generated_files_are_the_same_bytes_in_every_process():
    """Push compares a folder's code with what its own process generates: the bytes must not depend on the string
    hashing of the process (`PYTHONHASHSEED`), which orders sets (the import header once differed between processes)."""
    code = (
        "import hashlib, hf_norms; from conftest import tiny_config; "
        "from hf_norms.models.checkpoint_code import checkpoint_code; "
        f"configs = [tiny_config(f, n).to_dict() for f in {sorted(FAMILIES)!r} for n in {NORM_TYPES!r}]; "
        "print(hashlib.sha256(repr([sorted(checkpoint_code(c).items()) for c in configs]).encode()).hexdigest())"
    )
    tests_folder = os.path.dirname(os.path.abspath(__file__ + "/.."))
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": tests_folder},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(digests) == 1, digests


def test_a_checkpoint_mixing_norms_carries_each_of_them(tmp_path):
    """`layer_norm_types` mixing DyT and LayerNorm layers: both layers, and the model loads from its folder with
    `trust_remote_code=True` where hf_norms cannot be imported."""
    config = tiny_config("vit", "dyt", layer_norm_types=["dyt", "layernorm"])
    hf_norms.ViTNormModel(config).save_pretrained(tmp_path / "mixed")
    code = f"""
        import transformers
        model = transformers.AutoModel.from_pretrained({str(tmp_path / "mixed")!r}, trust_remote_code=True)
        print([type(layer.layernorm_before).__name__ for layer in model.encoder_layers])
    """
    assert run_without_hf_norms(code, tmp_path).strip().splitlines()[-1] == "['DynamicTanh', 'LayerNorm']"


@pytest.fixture(scope="module")
def pipeline_checkpoints(tmp_path_factory, minilm_dir):
    """A DeiT image classifier with its image processor, and the real MiniLM as a DyT masked LM with its tokenizer."""
    root = tmp_path_factory.mktemp("pipelines")
    case = next(c for c in HEAD_CASES if c.class_name == "DeiTNormForImageClassification")
    torch.manual_seed(0)
    image_model = case.model_class(head_config(case, "dtn"))
    image_model.save_pretrained(root / "image")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(root / "image")
    text_model = hf_norms.BertNormForMaskedLM.from_pretrained(minilm_dir, norm_type="dyt")
    text_model.save_pretrained(root / "text")
    AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(root / "text")
    return root


def test_pipelines_with_hf_norms(pipeline_checkpoints):
    from hf_norms import packaged

    classify = pipeline("image-classification", model=str(pipeline_checkpoints / "image"))
    predictions = classify(packaged.photos()["astronaut"], top_k=3)
    assert len(predictions) == 3 and abs(sum(p["score"] for p in predictions) - 1) < 1e-5
    fill = pipeline("fill-mask", model=str(pipeline_checkpoints / "text"))
    filled = fill("The bank raised interest [MASK] today.", top_k=2)
    assert len(filled) == 2 and all("[MASK]" not in f["sequence"] for f in filled)


def test_pipelines_with_trust_remote_code_without_hf_norms(pipeline_checkpoints):
    code = f"""
        import json
        import numpy as np
        from PIL import Image
        from transformers import pipeline
        root = {str(pipeline_checkpoints)!r}
        classify = pipeline("image-classification", model=root + "/image", trust_remote_code=True)
        image = Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255).astype("uint8"))
        predictions = classify(image, top_k=3)
        fill = pipeline("fill-mask", model=root + "/text", trust_remote_code=True)
        filled = fill("The bank raised interest [MASK] today.", top_k=2)
        print(json.dumps({{"image": [type(classify.model).__name__, len(predictions)],
                          "text": [type(fill.model).__name__, [f["sequence"] for f in filled]]}}))
    """
    result = json.loads(run_without_hf_norms(code, pipeline_checkpoints).strip().splitlines()[-1])
    assert result["image"] == ["DeiTNormForImageClassification", 3]
    assert result["text"][0] == "BertNormForMaskedLM" and len(result["text"][1]) == 2


def test_another_norm_type_asked_of_remote_code_is_one_line(saved_checkpoints):
    """A DyT checkpoint's remote code carries no DTN: asking it for `norm_type="dtn"` says what to do."""
    root, entries = saved_checkpoints
    folder = next(e["folder"] for e in entries if e["folder"].endswith("vit-dyt"))
    code = f"""
        import transformers
        try:
            transformers.AutoModel.from_pretrained({folder!r}, trust_remote_code=True, norm_type="dtn")
        except Exception as error:  # the config's validation error, as transformers' strict configs wrap it
            print(str(error).splitlines()[-1].strip().removeprefix("ValueError: "))
    """
    assert run_without_hf_norms(code, root).strip().splitlines()[-1] == (
        "norm_type='dtn' is not in this checkpoint's remote code, which carries ['dyt'] only: load it with hf_norms "
        "installed (`import hf_norms`, without trust_remote_code) for another norm_type."
    )
