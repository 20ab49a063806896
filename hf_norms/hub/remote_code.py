"""The code a published repo makes its users run, and the rule that it is hf-norms' own.

`from_pretrained(id, trust_remote_code=True)`, `pipeline(...)` and `SentenceTransformer(...)` with it run the `.py`
files that a repo's JSON files name: an `auto_map` in any of them (config.json, tokenizer_config.json,
preprocessor_config.json, ...), a `custom_pipelines` entry, a module `type` in modules.json; a name may point at another
repo (`org/repo--module.Class`). A push publishes code only when `custom_code` finds nothing else: every `.py` file
uploaded byte-identical to what the installed package writes for the folder's config.json (`expected_code`: the
checkpoint's two remote-code files, `models.checkpoint_code`, and the image processor's file of a one-channel vision
checkpoint), every name a `module.Class` of those files (or a `sentence_transformers.` class).
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
from ..models.checkpoint_code import checkpoint_code, code_file_names, family_modules
from ..version import VERSION

MODELS_FOLDER = Path(models.__file__).parent
CODE_REFERENCE = re.compile(r"(\w+)\.\w+")
# the image processor a one-channel vision checkpoint saves (`GrayscaleImageProcessor`), with its own remote code
PROCESSOR_MODULES = ("image_processing_norm",)


def family_code(model_type: str, model_class: type | None = None) -> tuple[dict[str, str], set[str]]:
    """(the `auto_map` a checkpoint of `model_type` holds, with `model_class` under its own Auto class; the names of
    its two remote-code files)."""
    module = importlib.import_module(f"..{family_modules(model_type)[1]}", __package__)
    auto_map = dict(module.FAMILY_AUTO_MAP)
    if model_class is not None and model_class._auto_class:
        auto_map[model_class._auto_class] = f"{module.__name__.split('.')[-1]}.{model_class.__name__}"
    return auto_map, set(code_file_names(model_type))


def processor_code(folder: Path) -> set[str]:
    """The package's `.py` files that the folder's `preprocessor_config.json` names in its `auto_map`, which a push
    must publish beside it for `trust_remote_code=True`."""
    path = folder / "preprocessor_config.json"
    references = code_references(path) if path.is_file() else []
    return {
        f"{ref.split('.')[0]}.py"
        for ref in references
        if isinstance(ref, str) and ref.split(".")[0] in PROCESSOR_MODULES
    }


def expected_code(folder: Path) -> dict[str, bytes]:
    """{name: the bytes hf-norms saves as it} for the folder: the remote code it writes for the folder's config.json
    (none for one that cannot be read) and the image processor's file."""
    try:
        config = json.loads((folder / "config.json").read_bytes())
    except (OSError, ValueError, RecursionError):
        config = {}
    files = checkpoint_code(config) if isinstance(config, dict) else {}
    expected = {name: text.encode() for name, text in files.items()}
    expected.update({f"{module}.py": (MODELS_FOLDER / f"{module}.py").read_bytes() for module in PROCESSOR_MODULES})
    return expected


def custom_code(folder: Path, files: list[str]) -> dict[str, str]:
    """{file of `files` (paths inside `folder`) that is, or names, code that is not the package's: why}."""
    expected = expected_code(folder)
    found = {}
    for name in files:
        if name.endswith(".py") and name not in expected:
            found[name] = "is not one of the remote-code files hf-norms writes for this checkpoint's config.json"
        elif name.endswith(".py") and (folder / name).read_bytes() != expected[name]:
            found[name] = (
                f"differs from the {name} the installed hf-norms {VERSION} writes for this checkpoint (edited, or saved by another one)"
            )
        elif name.endswith(".json") and (
            foreign := [ref for ref in code_references(folder / name) if not ours(ref, expected)]
        ):
            found[name] = f"names code that is not hf-norms' own ({', '.join(map(str, foreign[:3]))})"
    return found


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


def ours(reference: Any, expected: dict[str, bytes]) -> bool:
    """`module.Class` with `module.py` one of the `expected` files, or a `sentence_transformers.` class."""
    match = CODE_REFERENCE.fullmatch(reference) if isinstance(reference, str) else None
    return (match is not None and f"{match[1]}.py" in expected) or str(reference).startswith("sentence_transformers.")
