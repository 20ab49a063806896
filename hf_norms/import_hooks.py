"""What `import hf_norms` hooks into Python's import system: registering hf-norms with transformers and peft when they
are imported (`when_imported`), and the module paths of hf-norms 0.1 that moved, kept importable
(`install_moved_module_finder`).

- `when_imported(name, callback)` calls `callback()` now when module `name` is imported already, else as soon as it
  is (after its own code ran): `import hf_norms` registers its Auto classes and PEFT defaults without importing
  transformers, torch or peft itself, so it costs nothing until they are used, and the command line can answer
  `--help` and argument errors before any of them is imported.
- `from hf_norms.norms import DynamicTanh`, `from hf_norms.finetune import finetune`, `python -m hf_norms.finetune` and
  the like keep working: each old path is the new module itself (the same module object, so `isinstance` checks and
  monkeypatches agree), with a `FutureWarning` that names the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
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


class WatchedLoader(importlib.abc.Loader):
    """Executes a module with the wrapped `loader`, counting the watched modules being executed, and tells the
    `watcher` when the module has run its own code."""

    def __init__(self, loader: importlib.abc.Loader, watcher: ImportWatcher) -> None:
        self.loader, self.watcher = loader, watcher

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.watcher.executing += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.watcher.executing -= 1
        self.watcher.executed(module.__name__)

    def __getattr__(self, name: str):  # what else the import system or the module asks of its loader
        return getattr(self.loader, name)


class ImportWatcher(importlib.abc.MetaPathFinder):
    """Runs callbacks once given modules are imported (`when_imported`), never while a module of `package` or of a
    watched module's package is half executed. A watched module is often imported in the middle of another import: by
    an hf-norms module (`from hf_norms import ViTNormModel` runs `modeling_vit_norm`, which imports transformers
    first), or by a transformers module (`configuration_auto` while another is half executed); a callback that ran
    then and imported that half-executed module would fail. So callbacks wait until the outermost such module being
    executed has finished.

    It finds the modules of those packages (the `package` itself aside: it is what installs the watcher) as the other
    finders would, with their loaders wrapped (`WatchedLoader`); it stays first on `sys.meta_path`, since a mere
    `importlib.util.find_spec(name)` (transformers' `is_peft_available()`) asks it too, without importing.
    """

    def __init__(self, package: str) -> None:
        self.package, self.executing = package, 0
        self.callbacks: dict[str, list[Callable[[], None]]] = {}
        self.ready: list[tuple[str, Callable[[], None]]] = []
        self.packages = {package}

    def watches(self, name: str) -> bool:
        """Whether module `name` is a module of a watched package (`package`'s submodules, and the watched modules'
        packages with their top level)."""
        top = name.partition(".")[0]
        return top in self.packages and name != self.package

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if not self.watches(name):
            return None
        for finder in sys.meta_path:
            found = None if finder is self else getattr(finder, "find_spec", None)
            spec = found(name, path, target) if found else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = WatchedLoader(spec.loader, self)
                return spec
        return None

    def executed(self, name: str) -> None:
        """Module `name` has run: its callbacks are ready, and run now unless a watched module is half executed."""
        self.ready += [(name, callback) for callback in self.callbacks.pop(name, [])]
        while self.ready and not self.executing:
            module, callback = self.ready.pop(0)
            try:
                callback()
            except Exception as error:  # the module itself imported fine: say what did not, and let it be used
                warnings.warn(f"hf-norms could not register itself with {module}: {error}", stacklevel=3)


def watcher() -> ImportWatcher:
    """The interpreter's `ImportWatcher` for hf-norms, first on `sys.meta_path`."""
    found = next((finder for finder in sys.meta_path if isinstance(finder, ImportWatcher)), None)
    if found is None:
        found = ImportWatcher(__name__.split(".")[0])
        sys.meta_path.insert(0, found)
    return found


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call `callback()` once module `name` is imported (now, if it is), when no module of hf-norms or of `name`'s
    package is half executed."""
    hooks = watcher()
    hooks.packages.add(name.partition(".")[0])
    if name in sys.modules:
        hooks.ready.append((name, callback))
        hooks.executed(name)
    else:  # not looked up: finding a submodule would import its package, maybe in the middle of another import
        hooks.callbacks.setdefault(name, []).append(callback)
