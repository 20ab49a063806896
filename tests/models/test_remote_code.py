"""Saved checkpoints load through the Auto classes with `import hf_norms`, and with `trust_remote_code=True` in a fresh
process where hf_norms cannot be imported; `pipeline()` works on them both ways."""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import HEAD_CASES, head_config, primary_output, run_without_hf_norms, tiny_config
from transformers import AutoTokenizer, ViTImageProcessor, pipeline

import hf_norms

REMOTE_CASES = [
    case
    for case in HEAD_CASES
    if case.class_name
    in {
        "ViTNormForImageClassification",
        "DeiTNormForImageClassificationWithTeacher",
        "BertNormForMaskedLM",
        "BertNormModel",
        "Dinov2NormForImageClassification",
    }
]


@pytest.fixture(scope="module")
def saved_checkpoints(tmp_path_factory):
    """Every REMOTE_CASES head in every norm_type, saved, with the inputs and outputs to compare against."""
    root = tmp_path_factory.mktemp("remote")
    entries = []
    for case in REMOTE_CASES:
        for norm_type in sorted(hf_norms.NORM_TYPES):
            torch.manual_seed(0)
            model = case.model_class(head_config(case, norm_type)).eval()
            folder = root / f"{case.class_name}-{norm_type}"
            model.save_pretrained(folder)
            inputs = case.inputs(model.config, with_labels=False)
            with torch.no_grad():
                expected = primary_output(model(**inputs))
            torch.save({"inputs": inputs, "expected": expected}, folder / "reference.pt")
            entries.append({"folder": str(folder), "auto_class": model._auto_class, "class": case.class_name})
    return root, entries


def test_checkpoint_folder_holds_the_full_auto_map_and_flat_code(saved_checkpoints):
    _, entries = saved_checkpoints
    folder = next(e["folder"] for e in entries if e["class"] == "DeiTNormForImageClassificationWithTeacher")
    config = json.load(open(f"{folder}/config.json"))
    assert config["model_type"] == "deit_norm"
    assert config["auto_map"]["AutoModelForImageClassification"] == (
        "modeling_deit_norm.DeiTNormForImageClassificationWithTeacher"
    )
    assert config["auto_map"]["AutoModel"] == "modeling_deit_norm.DeiTNormModel"
    assert config["auto_map"]["AutoConfig"] == "configuration_deit_norm.DeiTNormConfig"
    code_files = {name for name in os.listdir(folder) if name.endswith(".py")}
    # the DeiT files, the ViT file whose layout DeiT shares, the placement of norms and the norm registry, and the files
    # of its own norm (Derf); nothing of conversion, training or hub, and no other norm's file
    assert code_files == DEIT_FILES | {"norm_derf.py", "runtime.py"}


# What every DeiT checkpoint carries, whatever its norm: its family's configuration and modeling code, the registry
# (which imports a norm's layer file by name), and `norm_layers.py`, written for the checkpoint's own norms
DEIT_FILES = {
    "configuration_deit_norm.py", "modeling_deit_norm.py", "modeling_vit_norm.py", "configuration_vit_norm.py",
    "modeling_norm_utils.py", "norm_placement.py", "transformers_internals.py", "norm_options.py", "version_guard.py",
    "norms.py", "token_layout.py", "norm_lape.py", "layernorm_loading.py", "held_notices.py", "norm_registry.py",
    "norm_spec.py", "norm_layers.py", "checkpoint_norms.py",
}  # fmt: skip
VIT_FILES = DEIT_FILES - {"configuration_deit_norm.py", "modeling_deit_norm.py"}
BERT_FILES = VIT_FILES - {"configuration_vit_norm.py", "modeling_vit_norm.py"} | {
    "configuration_bert_norm.py",
    "modeling_bert_norm.py",
}
DTN_FILES = {"norm_dtn.py", "norm_dtn_fast.py", "norm_dtn_formula.py", "norm_dtn_export.py", "runtime.py"}
OWN_NORM_FILES = {  # (class, norm_type): the files of its norm; a DTN model's task heads keep LayerNorms
    ("ViTNormForImageClassification", "dyt"): VIT_FILES | {"norm_dyt.py", "runtime.py"},
    ("ViTNormForImageClassification", "layernorm"): VIT_FILES | {"norm_layernorm.py"},
    ("ViTNormForImageClassification", "lape"): VIT_FILES | {"norm_layernorm.py"},
    ("ViTNormForImageClassification", "rmsnorm"): VIT_FILES | {"norm_rmsnorm.py"},
    ("BertNormModel", "dtn"): BERT_FILES | DTN_FILES | {"norm_layernorm.py"},
    ("BertNormModel", "sepnorm"): BERT_FILES | {"norm_sepnorm.py", "runtime.py"},
}


@pytest.mark.parametrize(("class_name", "norm_type"), OWN_NORM_FILES)
def test_a_checkpoint_carries_its_familys_code_and_its_own_norms_files_only(saved_checkpoints, class_name, norm_type):
    """A DyT checkpoint carries no other norm's file (before: every norm's, 26 files in all)."""
    _, entries = saved_checkpoints
    folder = next(e["folder"] for e in entries if e["class"] == class_name and e["folder"].endswith(f"-{norm_type}"))
    assert {name for name in os.listdir(folder) if name.endswith(".py")} == OWN_NORM_FILES[class_name, norm_type]


def test_a_checkpoint_mixing_norms_carries_each_of_them(tmp_path):
    """`layer_norm_types` mixing DyT and LayerNorm layers: both layer files, and the model loads from its folder with
    `trust_remote_code=True` where hf_norms cannot be imported."""
    config = tiny_config("vit", "dyt", layer_norm_types=["dyt", "layernorm"])
    hf_norms.ViTNormModel(config).save_pretrained(tmp_path / "mixed")
    code_files = {name for name in os.listdir(tmp_path / "mixed") if name.endswith(".py")}
    assert code_files == VIT_FILES | {"norm_dyt.py", "runtime.py", "norm_layernorm.py"}
    code = f"""
        import transformers
        model = transformers.AutoModel.from_pretrained({str(tmp_path / "mixed")!r}, trust_remote_code=True)
        print([type(layer.layernorm_before).__name__ for layer in model.encoder_layers])
    """
    assert run_without_hf_norms(code, tmp_path).strip().splitlines()[-1] == "['DynamicTanh', 'LayerNorm']"


def test_trust_remote_code_without_hf_norms_gives_identical_outputs(saved_checkpoints):
    root, entries = saved_checkpoints
    code = f"""
        import json, torch, transformers
        try:
            import hf_norms
            raise SystemExit("hf_norms was importable")
        except ModuleNotFoundError:
            pass
        results = {{}}
        for entry in json.loads({json.dumps(json.dumps(entries))}):
            for name in (entry["auto_class"], "AutoModel"):
                model = getattr(transformers, name).from_pretrained(entry["folder"], trust_remote_code=True).eval()
                assert "hf_norms" not in type(model).__module__, type(model).__module__
                reference = torch.load(entry["folder"] + "/reference.pt")
                if name == entry["auto_class"]:
                    for p in [*model.parameters(), *model.buffers()]:
                        p.data = p.data.clone()  # out of the memory map, aligned as in the saving process
                    with torch.no_grad():  # as the reference was computed: the same code path (DTN has two)
                        out = model(**reference["inputs"])
                    tensor = next(getattr(out, k) for k in ("logits", "reconstruction", "last_hidden_state")
                                  if getattr(out, k, None) is not None)
                    results[entry["folder"]] = [type(model).__name__, (tensor - reference["expected"]).abs().max().item()]
        print(json.dumps(results))
    """
    results = json.loads(run_without_hf_norms(code, root).strip().splitlines()[-1])
    assert len(results) == len(entries)
    for entry in entries:
        class_name, diff = results[entry["folder"]]
        assert class_name == entry["class"]
        assert diff == 0, f"{entry['folder']}: {diff}"


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
    """A DyT checkpoint's remote code carries no DTN file: asking it for `norm_type="dtn"` says what to do."""
    root, entries = saved_checkpoints
    folder = next(e["folder"] for e in entries if e["folder"].endswith("ViTNormForImageClassification-dyt"))
    code = f"""
        import transformers
        try:
            transformers.AutoModel.from_pretrained({folder!r}, trust_remote_code=True, norm_type="dtn")
        except ModuleNotFoundError as error:
            print(str(error))
    """
    assert run_without_hf_norms(code, root).strip().splitlines()[-1] == (
        "norm_type='dtn' needs norm_dtn.py, which this checkpoint's remote code does not carry: load it with hf_norms "
        "installed (`import hf_norms`, without trust_remote_code)."
    )
