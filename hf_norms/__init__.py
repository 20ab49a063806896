"""hf-norms: DyT, Derf, DTN, SepNorm, LaPE and RMSNorm normalization for Hugging Face transformers models.

Importing the package registers the model type of every family in `models.family_registry` (`vit_norm`, `bert_norm`,
...) with `AutoConfig`, and every family's model classes with the `AutoModel*` classes that map its stock model type
(`models.auto_registration`), so `AutoModel.from_pretrained("org/vit-dyt")` works, and, when peft is installed, their
default PEFT target modules. The configs are imported at once (transformers' config code imports torch); the model
classes, and transformers' modeling code with them, when first used: an Auto class's first lookup, or a name below.
If registering fails, the import fails with one line saying why.

The `hf-norms` console script (`hf_norms_cli`) reads its arguments before it registers anything, so that `--help` and
every usage error are answered without importing torch: while it parses, this import registers nothing, and the
command registers (`register_models`) when it runs.

The names below are the public API, each imported when first used: every family's config and model classes
(`hf_norms.BertNormConfig`, `hf_norms.ViTNormForImageClassification`, ..., also those without an Auto class:
`hf_norms.CLIPVisionNormModelWithProjection`; all of them in `FAMILY_CLASSES`), those of the conversion and hub
subsystems (`convert`, `push_to_hub`), and every registered norm's layer class (`hf_norms.RMSNorm`).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager as _contextmanager
from importlib import import_module as _import_module
from importlib import metadata as _metadata

# Refuses (ImportError, one line) a transformers release older than the supported range, before transformers is
# imported; warns once on a newer one.
from . import version_guard as _version_guard  # noqa: F401  # isort: split
from .norms.registry import layer_class_named as _layer_class_named
from .version import VERSION

__version__ = VERSION

# module (relative to this package) -> the public names it defines
PUBLIC_MODULES = {
    "norms.build": [
        "NORM_TYPES", "DynamicErf", "DynamicTanh", "DynamicTokenNorm", "LayerNorm", "PositionEmbeddingNorm", "SeparateNorm",
        "TokenLayout",
    ],
    "models.auto_registration": ["register_auto_classes"],
    "models.peft_registration": ["register_peft_defaults"],
    "conversion.convert": ["convert", "convert_model"],
    "hub.publish": ["push_to_hub"],
    "packaged": ["packaged"],
}  # fmt: skip
PUBLIC_NAMES = {name: module for module, names in PUBLIC_MODULES.items() for name in names}


def __getattr__(name: str):
    """A public name, imported from its module on first use: `FAMILY_CLASSES` and a family's class by its name, a name
    of `PUBLIC_MODULES`, else a registered norm's layer class by its name."""
    module = PUBLIC_NAMES.get(name)
    family = None if name.startswith("__") or module else _family_of_class(name)
    if name in ("FAMILY_CLASSES", "__all__"):
        value = _family_classes() if name == "FAMILY_CLASSES" else sorted({*PUBLIC_NAMES, *_family_classes()})
    elif family is not None and name in _family_classes(family):
        value = _family_classes(family)[name]
    elif module is None:
        value = _layer_class_named(name)
    elif name == module:  # a subpackage or module of its own name (`hf_norms.packaged`)
        value = _import_module(f".{module}", __name__)
    else:
        value = getattr(_import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*PUBLIC_NAMES, *_family_classes(), "FAMILY_CLASSES", "VERSION", "__version__"})


def _families() -> dict:
    """The family registry (`models.family_registry.FAMILIES`: importing it imports the configs, hence torch)."""
    from .models.family_registry import FAMILIES

    return FAMILIES


def _family_of_class(name: str):
    """The family whose classes are named `name` (`BertNorm...`: its stock prefix, then `Norm`), or None."""
    return next((spec for spec in _families().values() if name.startswith(f"{spec.class_prefix}Norm")), None)


def _family_classes(*families) -> dict[str, type]:
    """{name: class} of the families' config and model classes (every family's when none is named), from the family
    registry, so that a family added there is public too."""
    _prepare_model_classes()
    return {cls.__name__: cls for spec in families or _families().values()
            for cls in (spec.config_class, *spec.public_classes)}  # fmt: skip


def _prepare_model_classes() -> None:
    """What runs before model classes are first imported (an Auto class's first lookup, or a name above): the hf-norms
    card publisher for `model.push_to_hub`, and, when peft is installed, the families' default PEFT target modules
    (peft's tables import transformers' modeling code)."""
    from .models.modeling_norm_utils import NormPreTrainedMixin
    from .models.peft_registration import register_peft_defaults

    NormPreTrainedMixin.hub_publisher = _push_model
    with _one_line_errors():
        register_peft_defaults()


def _push_model(model, repo_id: str, **options):
    """`model.push_to_hub(repo_id, **options)` of an hf-norms model: published as `hf-norms push` does, with the
    hf-norms card (`hf_norms.hub.model_push.push_model`, imported when first used)."""
    return _import_module(".hub.model_push", __name__).push_model(model, repo_id, **options)


@_contextmanager
def _one_line_errors():
    """A failure to register as an ImportError of one line saying why, not a later TypeError about `norm_type`."""
    try:
        yield
    except Exception as error:
        raise ImportError(
            f"hf-norms could not register its models with transformers {_metadata.version('transformers')}: "
            f"{type(error).__name__}: {error}"
        ) from error


def register_models() -> None:
    """Register the families with transformers' Auto classes (`import hf_norms` does, unless the console script is
    parsing); once registered, it does nothing."""
    global _registered
    with _one_line_errors():
        from .models.auto_registration import register_auto_classes

        if not _registered:
            register_auto_classes(on_import=_prepare_model_classes)
    _registered = True


_registered = False


if not getattr(sys.modules.get("hf_norms_cli"), "parsing", False):
    register_models()
