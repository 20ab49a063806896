"""Every hf-norms model class, imported: the family configs (`FAMILY_CONFIGS`), the families with their modeling
modules (`FAMILIES`) and the classes by name (`MODEL_CLASSES`), for the code that registers, builds, converts and
publishes models.

Importing it imports transformers' modeling code. Not part of the remote-code set (no model file imports it).
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

from .configuration_bert_norm import BertNormConfig
from .configuration_deit_norm import DeiTNormConfig
from .configuration_dinov2_norm import Dinov2NormConfig
from .configuration_vit_norm import ViTNormConfig

FAMILY_CONFIGS = (ViTNormConfig, DeiTNormConfig, BertNormConfig, Dinov2NormConfig)


def modeling_module_name(config_class: type) -> str:
    """The module of `config_class`'s model classes, by transformers' convention: `hf_norms.models.modeling_vit_norm`
    for `ViTNormConfig`, `transformers.models.bert.modeling_bert` for `BertConfig`."""
    return config_class.__module__.replace(".configuration_", ".modeling_", 1)


# (config class, modeling module) of each family: ViT, DeiT, BERT, DINOv2
FAMILIES: tuple[tuple[type, ModuleType], ...] = tuple(
    (config_class, importlib.import_module(modeling_module_name(config_class))) for config_class in FAMILY_CONFIGS
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
