"""Module paths of hf-norms 0.1 that moved into the subsystem folders, kept importable.

`from hf_norms.norms import DynamicTanh`, `from hf_norms.finetune import finetune`, `python -m hf_norms.finetune` and the
like keep working: each old path is the new module itself (the same module object, so `isinstance` checks and
monkeypatches agree), with a `FutureWarning` that names the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

MOVED_MODULES = {
    "hf_norms.auto_registration": "hf_norms.models.auto_registration",
    "hf_norms.calibration": "hf_norms.conversion.calibration",
    "hf_norms.checkpoint_io": "hf_norms.conversion.checkpoint_io",
    "hf_norms.configuration_bert_norm": "hf_norms.models.configuration_bert_norm",
    "hf_norms.configuration_deit_norm": "hf_norms.models.configuration_deit_norm",
    "hf_norms.configuration_vit_norm": "hf_norms.models.configuration_vit_norm",
    "hf_norms.fidelity": "hf_norms.conversion.fidelity",
    "hf_norms.finetune": "hf_norms.training.finetune",
    "hf_norms.folding": "hf_norms.conversion.folding",
    "hf_norms.healing": "hf_norms.conversion.healing",
    "hf_norms.hub_server": "hf_norms.hub.server",
    "hf_norms.model_card": "hf_norms.hub.model_card",
    "hf_norms.modeling_bert_norm": "hf_norms.models.modeling_bert_norm",
    "hf_norms.modeling_deit_norm": "hf_norms.models.modeling_deit_norm",
    "hf_norms.modeling_norm_utils": "hf_norms.models.modeling_norm_utils",
    "hf_norms.modeling_vit_norm": "hf_norms.models.modeling_vit_norm",
    "hf_norms.norm_options": "hf_norms.models.norm_options",
    "hf_norms.norms": "hf_norms.models.norms",
    "hf_norms.publish": "hf_norms.hub.publish",
    "hf_norms.training_data": "hf_norms.training.data",
    "hf_norms.training_metrics": "hf_norms.training.metrics",
    "hf_norms.training_sync_batchnorm": "hf_norms.training.sync_batchnorm",
    "hf_norms.version_guard": "hf_norms.models.version_guard",
}
# `hf_norms.convert` stays the function: an alias module of that name would replace it as the package attribute.


class MovedModuleLoader(importlib.abc.Loader):
    """Loads an old path as the module at its new path; `get_code` lets `python -m <old path>` run the new module."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new_name}; import it from there.", FutureWarning, stacklevel=3)
        module = importlib.import_module(self.new_name)
        self.new_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The new module ran when it was imported; only its own `__spec__`, which the import system has just
        replaced by the old path's, is put back."""
        module.__spec__ = self.new_spec

    def get_code(self, name: str) -> CodeType | None:
        spec = importlib.util.find_spec(self.new_name)
        return spec.loader.get_code(self.new_name)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of `MOVED_MODULES`, and nothing else."""

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        new_name = MOVED_MODULES.get(name)
        if new_name is None:
            return None
        return importlib.machinery.ModuleSpec(name, MovedModuleLoader(new_name))


def install_moved_module_finder() -> None:
    """Put the finder on `sys.meta_path` once per interpreter."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
