"""hf-norms: DyT, DTN, SepNorm and LaPE normalization for Hugging Face ViT, DeiT and BERT models.

Importing the package registers the `vit_norm`, `deit_norm` and `bert_norm` model types with `AutoConfig` and every
matching `AutoModel*` class, so `AutoModel.from_pretrained("org/vit-dyt")` works, and, when peft is installed, their
default PEFT target modules. The names below are the public API;
each is imported from its subsystem (`models`, `conversion`, `training`, `hub`) when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .moved_modules import install_moved_module_finder
from .version import VERSION

__version__ = VERSION

# module (relative to this package) -> the public names it defines
PUBLIC_MODULES = {
    "models.norms": [
        "NORM_TYPES", "DynamicTanh", "DynamicTokenNorm", "LayerNorm", "PositionEmbeddingNorm", "SeparateNorm",
        "TokenLayout",
    ],
    "models.configuration_bert_norm": ["BertNormConfig"],
    "models.configuration_deit_norm": ["DeiTNormConfig"],
    "models.configuration_vit_norm": ["ViTNormConfig"],
    "models.modeling_bert_norm": [
        "BertNormForMaskedLM", "BertNormForMultipleChoice", "BertNormForNextSentencePrediction",
        "BertNormForPreTraining", "BertNormForQuestionAnswering", "BertNormForSequenceClassification",
        "BertNormForTokenClassification", "BertNormLMHeadModel", "BertNormModel",
    ],
    "models.modeling_deit_norm": [
        "DeiTNormForImageClassification", "DeiTNormForImageClassificationWithTeacher",
        "DeiTNormForMaskedImageModeling", "DeiTNormModel",
    ],
    "models.modeling_vit_norm": ["ViTNormForImageClassification", "ViTNormForMaskedImageModeling", "ViTNormModel"],
    "models.auto_registration": ["register_auto_classes"],
    "models.peft_registration": ["register_peft_defaults"],
    "conversion.convert": ["convert"],
    "hub.publish": ["push_to_hub"],
}  # fmt: skip
PUBLIC_NAMES = {name: module for module, names in PUBLIC_MODULES.items() for name in names}
__all__ = sorted(PUBLIC_NAMES)


def __getattr__(name: str) -> Any:
    module = PUBLIC_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'hf_norms' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC_NAMES})


install_moved_module_finder()
__getattr__("register_auto_classes")()
__getattr__("register_peft_defaults")()
