"""The hf-norms model classes by name, and their registration with transformers' Auto classes.

Not part of the remote-code set (no model file imports it): `import hf_norms` calls `register_auto_classes()`.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import transformers
from transformers import AutoConfig

from . import modeling_bert_norm, modeling_deit_norm, modeling_dinov2_norm, modeling_vit_norm
from .configuration_bert_norm import BertNormConfig
from .configuration_deit_norm import DeiTNormConfig
from .configuration_dinov2_norm import Dinov2NormConfig
from .configuration_vit_norm import ViTNormConfig

FAMILIES = (
    (ViTNormConfig, modeling_vit_norm),
    (DeiTNormConfig, modeling_deit_norm),
    (BertNormConfig, modeling_bert_norm),
    (Dinov2NormConfig, modeling_dinov2_norm),
)


def family_model_classes(module: ModuleType, config_class: type) -> list[type]:
    """The model classes of `config_class` defined in `module` that sit under an Auto class (every head)."""
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and getattr(cls, "config_class", None) is config_class and cls._auto_class
    ]


# Every hf-norms model class by name, e.g. MODEL_CLASSES["ViTNormForImageClassification"].
MODEL_CLASSES: dict[str, type] = {
    cls.__name__: cls for config_class, module in FAMILIES for cls in family_model_classes(module, config_class)
}


def model_classes_by_auto_class(module: ModuleType, config_class: type) -> dict[str, tuple[type, ...]]:
    """The model classes of `config_class` in `module`, grouped by their `_auto_class` (the `auto_map` entry first)."""
    grouped: dict[str, list[type]] = {}
    for cls in family_model_classes(module, config_class):
        grouped.setdefault(cls._auto_class, []).append(cls)
    primary = {name: reference.split(".")[1] for name, reference in module.FAMILY_AUTO_MAP.items()}
    return {
        name: tuple(sorted(classes, key=lambda cls: cls.__name__ != primary[name])) for name, classes in grouped.items()
    }


def register_auto_classes() -> None:
    """`AutoConfig` for each model type, and every model class under its Auto class.

    Where two heads share an Auto class (DeiT's classifier with and without teacher), both are registered and
    transformers picks the one named in the checkpoint's `architectures`, as it does for the stock DeiT.
    """
    for config_class, module in FAMILIES:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        for auto_class_name, classes in model_classes_by_auto_class(module, config_class).items():
            model_class = classes[0] if len(classes) == 1 else classes
            getattr(transformers, auto_class_name).register(config_class, model_class, exist_ok=True)
