"""hf-norms: DyT, Derf, DTN, SepNorm, LaPE and RMSNorm normalization for Hugging Face transformers models.

Importing the package registers the model type of every family in `models.family_registry` (`vit_norm`, `bert_norm`,
...) with `AutoConfig` and every matching `AutoModel*` class, through their public `register` calls (`models.auto_registration`), so
`AutoModel.from_pretrained("org/vit-dyt")` works, and, when peft is installed, their default PEFT target modules. This
imports torch and transformers' modeling code. If registering fails, the import fails with one line saying why.

The names below are the public API, with every family's config and model classes (`FAMILY_CLASSES`). The models' are
imported with the package; those of the conversion and hub
subsystems (`convert`, `push_to_hub`) when first used, and so is every registered norm's layer class
(`hf_norms.RMSNorm`).
"""

from __future__ import annotations

from importlib import import_module as _import_module
from importlib import metadata as _metadata

# Refuses (ImportError, one line) a transformers release older than the supported range, before transformers is
# imported; warns once on a newer one.
from .models import version_guard as _version_guard  # noqa: F401  # isort: split
from .version import VERSION

__version__ = VERSION

# module (relative to this package) -> the public names it defines
PUBLIC_MODULES = {
    "models.norms": [
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
    """A public name, imported from its module on first use; else a registered norm's layer class by its name."""
    module = PUBLIC_NAMES.get(name)
    if module is None:
        value = _layer_class_named(name)
    elif name == module:  # a subpackage or module of its own name (`hf_norms.packaged`)
        value = _import_module(f".{module}", __name__)
    else:
        value = getattr(_import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, "VERSION", "__version__"})


def _push_model(model, repo_id: str, **options):
    """`model.push_to_hub(repo_id, **options)` of an hf-norms model: published as `hf-norms push` does, with the
    hf-norms card (`hf_norms.hub.model_push.push_model`, imported when first used)."""
    return _import_module(".hub.model_push", __name__).push_model(model, repo_id, **options)


try:
    from .models.auto_registration import register_auto_classes as _register_auto_classes
    from .models.family_registry import FAMILIES as _FAMILIES
    from .models.modeling_norm_utils import NormPreTrainedMixin as _NormPreTrainedMixin
    from .models.norm_registry import layer_class_named as _layer_class_named
    from .models.peft_registration import register_peft_defaults as _register_peft_defaults

    _register_auto_classes()
    _register_peft_defaults()
except Exception as error:  # one line that says why, not a later TypeError about `norm_type`
    raise ImportError(
        f"hf-norms could not register its models with transformers {_metadata.version('transformers')}: "
        f"{type(error).__name__}: {error}"
    ) from error
_NormPreTrainedMixin.hub_publisher = _push_model

# Every family's config and model classes (`hf_norms.BertNormConfig`, `hf_norms.ViTNormForImageClassification`, ...,
# also those without an Auto class: `hf_norms.CLIPVisionNormModelWithProjection`),
# from the family registry, so that a family added there is public too.
FAMILY_CLASSES = {cls.__name__: cls for spec in _FAMILIES.values() for cls in (spec.config_class, *spec.public_classes)}
globals().update(FAMILY_CLASSES)
__all__ = sorted({*PUBLIC_NAMES, *FAMILY_CLASSES})
