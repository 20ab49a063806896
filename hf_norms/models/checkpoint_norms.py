"""Which of hf-norms' layer files a checkpoint's norms need, and the `norm_layers.py` that makes `trust_remote_code`
fetch them: a checkpoint carries its family's code (what its modeling file reaches by relative imports) and the files
of its own norms, never every norm's.

Imports neither torch nor transformers. Copied next to a saved checkpoint for `trust_remote_code` (its
`save_pretrained` runs `write_norm_code`).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .norm_registry import NORM_TYPES, STOCK
from .norm_spec import NormSpec

NORM_LAYERS_FILE = "norm_layers.py"
# transformers' own rule for the files remote code reaches (`dynamic_module_utils.get_relative_imports`)
RELATIVE_IMPORT = re.compile(r"^\s*from\s+\.(\w+)\s+import", re.MULTILINE)
HERE = Path(__file__).parent


def layer_specs(config: Mapping[str, Any]) -> list[NormSpec]:
    """The registry entries of the layers a model of `config` (a config dict) builds, one per layer file: its
    `norm_type` and `layer_norm_types`, and LayerNorm where one of them mixes tokens (its task heads keep LayerNorms).
    Names that are no norm_type are left out: the config refuses them itself."""
    per_layer = config.get("layer_norm_types")
    kinds = [config.get("norm_type", STOCK), *(per_layer if isinstance(per_layer, list) else [])]
    specs = [NORM_TYPES[kind] for kind in kinds if isinstance(kind, str) and kind in NORM_TYPES]
    if not all(spec.per_token for spec in specs):
        specs.append(NORM_TYPES[STOCK])
    by_module = {spec.layer_module: spec for spec in specs}
    return [by_module[module] for module in sorted(by_module)]


def norm_layers_source(config: Mapping[str, Any]) -> str:
    """The text of the `norm_layers.py` a checkpoint of `config` carries: it imports the layer files of its norms."""
    specs = layer_specs(config)
    imports = "".join(f"from .{spec.layer_module} import {spec.layer_class}  # noqa: F401\n" for spec in specs)
    modules = tuple(spec.layer_module for spec in specs)
    return (
        '"""The layer files of this checkpoint\'s norms, written by hf-norms\' `save_pretrained`: imported here so that\n'
        '`trust_remote_code` fetches them with the model\'s code."""\n\n'
        f"{imports}\nLAYER_MODULES = {modules!r}\n"
    )


def code_closure(modules: Iterable[str], folder: Path = HERE) -> set[str]:
    """The `.py` files of `modules` (names of files in `folder`) and every file they reach by relative imports."""
    pending, seen = set(modules), set()
    while pending:
        name = pending.pop()
        seen.add(name)
        pending |= set(RELATIVE_IMPORT.findall((folder / f"{name}.py").read_text(encoding="utf-8"))) - seen
    return {f"{name}.py" for name in seen}


def norm_code(config: Mapping[str, Any]) -> set[str]:
    """The files of `config`'s norms a checkpoint carries beside its family's code: their layer files, what those
    import, and `norm_layers.py`."""
    return code_closure(spec.layer_module for spec in layer_specs(config)) | {NORM_LAYERS_FILE}


def write_norm_code(folder: str | Path, config: Mapping[str, Any]) -> None:
    """Write `norm_layers.py` for `config` into `folder` and copy its norms' files there, from beside this file (the
    package, or the remote code this runs as)."""
    folder = Path(folder)
    (folder / NORM_LAYERS_FILE).write_text(norm_layers_source(config), encoding="utf-8")
    for name in sorted(norm_code(config) - {NORM_LAYERS_FILE}):
        shutil.copyfile(HERE / name, folder / name)
