"""The package layout: the model set stands alone (a checkpoint's remote code is generated from it), no module imports in a cycle, checkpoints saved before the move
load and compute what they computed, and the old module paths still import.

`fixtures/checkpoints_before_the_package_layout.json` was recorded with the flat layout (hf-norms before the
`models/`, `conversion/`, `training/`, `hub/` folders): for each case, the `config.json` that `save_pretrained` wrote,
the names, shapes and dtypes of the saved tensors, and the model's output on fixed inputs with the weights that
`fill_weight` gives. The test writes such a checkpoint itself and compares.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModel, AutoModelForImageClassification

import hf_norms

PACKAGE = Path(hf_norms.__file__).parent
FIXTURE = Path(__file__).parent.parent / "fixtures" / "checkpoints_before_the_package_layout.json"
CASES = json.loads(FIXTURE.read_text())


def fill_weight(name: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Deterministic weights in each parameter's valid range (DTN gates in (0, 1), DyT alpha > 0, variances > 0)."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    if name.endswith(("mean_gate", "var_gate")):
        return torch.sigmoid(x)
    if name.endswith("alpha"):
        return 0.4 + 0.2 * torch.sigmoid(x)
    if name.endswith("running_var"):
        return 1 + 0.1 * x.abs()
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape)
    if "norm" in name.lower() and name.endswith("weight") and len(shape) == 1:
        return 1 + 0.1 * x
    return 0.2 * x


def fixed_inputs(family: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    if family == "bert":
        input_ids = torch.randint(3, 50, (2, 9), generator=generator)
        attention_mask = torch.ones(2, 9, dtype=torch.long)
        attention_mask[1, -3:] = 0
        return {"input_ids": input_ids, "attention_mask": attention_mask}
    return {"pixel_values": torch.randn(2, 3, 16, 16, generator=generator)}


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case['architecture']}-{case['norm_type']}")
def test_a_checkpoint_saved_before_the_move_loads_and_computes_the_same(case, tmp_path):
    generator = torch.Generator().manual_seed(1234)
    weights = {
        name: fill_weight(name, tuple(shape), generator).to(getattr(torch, dtype))
        for name, (shape, dtype) in sorted(case["weights"].items())
    }
    (tmp_path / "config.json").write_text(json.dumps(case["config"]))
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    auto_class = AutoModel if case["architecture"].endswith("Model") else AutoModelForImageClassification
    model, info = auto_class.from_pretrained(tmp_path, output_loading_info=True)
    assert type(model).__name__ == case["architecture"] and model.config.norm_type == case["norm_type"]
    assert not any(info.values()), info  # every saved tensor is a parameter now, and the reverse
    with torch.no_grad():
        outputs = model.eval()(**fixed_inputs(case["family"]))
    output = outputs.logits if getattr(outputs, "logits", None) is not None else outputs.last_hidden_state
    expected = torch.tensor(case["output"]).reshape(case["output_shape"])
    assert (output - expected).abs().max().item() <= 1e-5  # recorded to 7 decimals


def test_the_norms_and_the_models_import_nothing_outside_them():
    """The norms and the model families (what a checkpoint's remote code is generated from) import no other subsystem,
    and hf_norms only by relative imports; the norms import nothing of the models."""
    code = (
        "import sys, hf_norms.norms.build, hf_norms.models.bert.modeling_bert_norm, "
        "hf_norms.models.deit.modeling_deit_norm\n"
        "print(sorted(m for m in sys.modules if m.startswith('hf_norms')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout.strip().replace("'", '"'))
    assert not [m for m in loaded if m.startswith(("hf_norms.conversion", "hf_norms.training", "hf_norms.hub"))]
    for path in [*(PACKAGE / "norms").rglob("*.py"), *(PACKAGE / "models").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and not node.level):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
                assert not any(name.split(".")[0] == "hf_norms" for name in names), path.name
    for module, targets in GRAPH.items():
        if module.startswith("hf_norms.norms"):
            assert not [target for target in targets if target.startswith("hf_norms.models")], module


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(["hf_norms", *parts]).removesuffix(".__init__")


def module_imports(path: Path) -> set[str]:
    """The hf_norms modules a module imports anywhere: at its top, inside functions, and under `TYPE_CHECKING`
    (`from .. import packaged` imports the module `packaged`, not the package)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)

    def is_module(name: str) -> bool:
        path = PACKAGE.parent / name.replace(".", "/")
        return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()

    return {name for name in found if name.startswith("hf_norms.") and is_module(name)} - {module}


GRAPH = {
    module_name(path): module_imports(path) for path in PACKAGE.rglob("*.py") if "metric_modules" not in path.parts
}


def test_no_module_imports_in_a_cycle():
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in GRAPH.get(node, ()):
            assert state.get(target) != "open", " -> ".join([*path, node, target])
            if target not in state:
                visit(target, [*path, node])
        state[node] = "done"

    for node in GRAPH:
        if node not in state:
            visit(node, [])


# The subsystems, lowest first: a module imports only its own subsystem's modules and those of lower ones (`hub.server`
# only its own and the base's).
LAYERS = [
    {
        "errors",
        "version",
        "version_guard",
        "package_only",
        "readers",
        "redaction",
        "cli_parsing",
        "output_folders",
        "packaged",
    },
    {"norms"},
    {"models"},
    {"conversion"},
    {"hub"},
    {"training"},
    {"demo", "environment"},
    {"cli", "__init__"},
]


def layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    return next(index for index, names in enumerate(LAYERS) if part in names)


def test_dependencies_run_one_way():
    """norms <- models <- conversion <- hub <- training <- demo <- cli; the loopback Hub server imports nothing of conversion,
    training or the rest of hub."""
    for module, targets in GRAPH.items():
        for target in targets:
            assert layer(target) <= layer(module), f"{module} imports {target}"
            if module.startswith("hf_norms.hub.server"):
                assert target.startswith("hf_norms.hub.server") or layer(target) == 0, f"{module} imports {target}"


def test_the_public_names_are_their_subsystems_objects():
    from hf_norms.conversion import convert
    from hf_norms.norms import build, rmsnorm

    assert hf_norms.convert is convert.convert and hf_norms.NORM_TYPES is build.NORM_TYPES
    assert hf_norms.RMSNorm is rmsnorm.RMSNorm  # a registered norm's layer class, by its name
    with pytest.raises(AttributeError, match="has no attribute 'RMSNorn'"):
        hf_norms.RMSNorn  # noqa: B018
    assert "importlib" not in dir(hf_norms) and "ViTNormModel" in dir(hf_norms)


# Strings that equal a norm name without naming a norm_type: a module attribute and an option value called
# `layernorm`, and the norms the demo chooses to show.
NOT_NORM_TYPES = {
    ("conversion/folding.py", "layernorm"): "the final norm's attribute name",
    ("norms/sepnorm.py", "layernorm"): "a value of `sepnorm_prefix_norm`",
    ("demo.py", "sepnorm"): "the demo's choice",
    ("models/family_registry.py", "layernorm"): "the name of ViT's final norm module",
    ("demo.py", "dyt"): "the demo's choice",
    ("demo.py", "dtn"): "the demo's choice",
    ("demo.py", "lape"): "the demo's choice",
}


def family_files() -> set[str]:
    """The family registry and each family's own configuration and modeling files (`models/...`)."""
    from hf_norms.models.family_registry import FAMILIES

    own = {
        module.removeprefix("hf_norms.").replace(".", "/") + ".py"
        for family in FAMILIES.values()
        for module in (family.config_class.__module__, family.modeling_module.__name__)
    }
    return own | {"models/family_registry.py"}


def test_no_family_name_is_written_outside_the_registry():
    """A family's name and model types (`bert`, `bert_norm`) are written only in the family registry and the family's
    own configuration and modeling files (docstrings aside): everything else reads its `FamilySpec`, so a family is
    added by its model files and one entry."""
    from hf_norms.models.family_registry import FAMILIES

    names = {name for family in FAMILIES.values() for name in (family.name, family.model_type, family.stock_model_type)}
    assert literals_outside(names, family_files()) == []


def literals_outside(names: set[str], allowed_files: set[str], allowed: dict | None = None) -> list[str]:
    """`file:line 'name'` of every string constant in `names` in the package outside `allowed_files` (paths below the
    package) and docstrings, except the (file, name) pairs of `allowed`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in allowed_files:
            continue
        tree = ast.parse(path.read_text())
        holders = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, holders) and ast.get_docstring(node, clean=False)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings:
                if (relative, node.value) not in (allowed or {}):
                    found.append(f"{relative}:{node.lineno} {node.value!r}")
    return found


def test_no_norm_name_is_written_outside_the_registry():
    """A norm_type is named only in `norms/registry.py` (docstrings aside): everything else reads the registry,
    so a norm is added by its layer file and one entry."""
    from hf_norms.norms.registry import NORM_NAMES

    assert literals_outside(set(NORM_NAMES), {"norms/registry.py"}, NOT_NORM_TYPES) == []
