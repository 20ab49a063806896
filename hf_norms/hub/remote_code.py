"""The code a published repo makes its users run, and the rule that it is hf-norms' own.

`from_pretrained(id, trust_remote_code=True)`, `pipeline(...)` and `SentenceTransformer(...)` with it run the `.py`
files that a repo's JSON files name: an `auto_map` in any of them (config.json, tokenizer_config.json,
preprocessor_config.json, ...), a `custom_pipelines` entry, a module `type` in modules.json; a name may point at another
repo (`org/repo--module.Class`). A push publishes code only when `custom_code` finds nothing else: every `.py` file
uploaded byte-identical to the installed package's model file of its name (`PACKAGE_CODE`: what `save_pretrained`
copies from `hf_norms/models/`), `norm_layers.py` to the one it writes for the checkpoint's config (it names the files
of the checkpoint's own norms: a push publishes those and its family's code, no other norm's), every name a
`module.Class` of those files (or a `sentence_transformers.` class).
Anything else is refused in one line naming the file, unless `allow_custom_code`; the card then names the files and
says to load the repo with `trust_remote_code=False` (hf-norms' own code), never with `True`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
from pathlib import Path
from typing import Any

from .. import models
from ..models.checkpoint_norms import NORM_LAYERS_FILE, code_closure, norm_layers_source
from ..models.family_registry import FAMILIES
from ..models.norm_registry import NORM_TYPES
from ..version import VERSION

MODELS_FOLDER = Path(models.__file__).parent
CODE_REFERENCE = re.compile(r"(\w+)\.\w+")


def family_code(model_type: str, model_class: type | None = None) -> tuple[dict[str, str], set[str]]:
    """(the `auto_map` a checkpoint of `model_type` holds, with `model_class` under its own Auto class; the names of
    the package's `.py` files it reaches by relative imports: those `save_pretrained` copies)."""
    module = importlib.import_module(f"hf_norms.models.modeling_{model_type}")
    auto_map = dict(module.FAMILY_AUTO_MAP)
    if model_class is not None:
        auto_map[model_class._auto_class] = f"{module.__name__.split('.')[-1]}.{model_class.__name__}"
    return auto_map, code_closure(target.split(".")[0] for target in auto_map.values())


# the image processor a one-channel vision checkpoint saves (`GrayscaleImageProcessor`), with its own remote code
PROCESSOR_MODULES = ("image_processing_norm",)
PACKAGE_CODE = frozenset().union(
    *(family_code(family.model_type)[1] for family in FAMILIES.values()),
    code_closure(PROCESSOR_MODULES),
    code_closure(spec.layer_module for spec in NORM_TYPES.values()),  # each checkpoint carries its own norms' files
)


def processor_code(folder: Path) -> set[str]:
    """The package's `.py` files that the folder's `preprocessor_config.json` names in its `auto_map` (and what they
    import), which a push must publish beside it for `trust_remote_code=True`."""
    path = folder / "preprocessor_config.json"
    references = code_references(path) if path.is_file() else []
    modules = [
        ref.split(".")[0] for ref in references if isinstance(ref, str) and ref.split(".")[0] in PROCESSOR_MODULES
    ]
    return code_closure(modules) if modules else set()


def custom_code(folder: Path, files: list[str]) -> dict[str, str]:
    """{file of `files` (paths inside `folder`) that is, or names, code that is not the package's: why}."""
    found = {}
    for name in files:
        if name.endswith(".py") and name not in PACKAGE_CODE:
            found[name] = "is not one of hf-norms' model files"
        elif name.endswith(".py") and (folder / name).read_bytes() != expected_code(folder, name):
            found[name] = f"differs from {name} of the installed hf-norms {VERSION} (edited, or saved by another one)"
        elif name.endswith(".json") and (foreign := [ref for ref in code_references(folder / name) if not ours(ref)]):
            found[name] = f"names code that is not hf-norms' own ({', '.join(map(str, foreign[:3]))})"
    return found


def expected_code(folder: Path, name: str) -> bytes:
    """The bytes hf-norms saves as `name`: the package's file, or for `norm_layers.py` the one `save_pretrained` writes
    for the config in `folder` (that of a config.json that cannot be read is the stock model's)."""
    if name != NORM_LAYERS_FILE:
        return (MODELS_FOLDER / name).read_bytes()
    try:
        config = json.loads((folder / "config.json").read_bytes())
    except (OSError, ValueError, RecursionError):
        config = {}
    return norm_layers_source(config if isinstance(config, dict) else {}).encode()


def code_references(path: Path) -> list[Any]:
    """Every value of an `auto_map` (at any depth), and every module `type` of a modules.json, in the JSON file at
    `path`; a `custom_pipelines` entry stands for itself (nothing for a file that is not JSON: no loader reads it)."""
    found = []

    def collect(entry: dict) -> dict:
        auto_map = entry.get("auto_map") if isinstance(entry.get("auto_map"), dict) else {}
        for refs in auto_map.values():  # a reference, a list of them, or {backend: reference}
            found.extend(refs if isinstance(refs, list) else refs.values() if isinstance(refs, dict) else [refs])
        found.extend(["custom_pipelines"] if "custom_pipelines" in entry else [])
        found.extend([entry.get("type")] if path.name == "modules.json" else [])
        return entry

    with contextlib.suppress(ValueError, RecursionError):
        json.loads(path.read_bytes(), object_hook=collect)
    return [reference for reference in found if reference is not None]


def ours(reference: Any) -> bool:
    """`module.Class` with `module.py` one of the package's model files, or a `sentence_transformers.` class."""
    match = CODE_REFERENCE.fullmatch(reference) if isinstance(reference, str) else None
    return (match is not None and f"{match[1]}.py" in PACKAGE_CODE) or str(reference).startswith(
        "sentence_transformers."
    )
