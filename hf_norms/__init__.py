"""hf-norms: DyT, Derf, DTN, SepNorm, LaPE and RMSNorm normalization for Hugging Face ViT, DeiT, DINOv2 and BERT.

Importing the package registers the `vit_norm`, `deit_norm`, `dinov2_norm` and `bert_norm` model types with `AutoConfig`
and every matching `AutoModel*` class, so `AutoModel.from_pretrained("org/vit-dyt")` works, and, when peft is installed,
their default PEFT target modules: as soon as transformers imports its Auto modules (peft is imported), or at once
where it already has. The names below are the public API; each is imported from its subsystem (`models`, `conversion`,
`training`, `hub`) when first used, and so is every registered norm's layer class (`hf_norms.RMSNorm`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .import_hooks import install_moved_module_finder, when_imported

# Refuses (ImportError, one line) a transformers release older than the supported range, here rather than at the first
# model built; warns once on a newer one.
from .models import version_guard  # noqa: F401
from .version import VERSION

__version__ = VERSION

# module (relative to this package) -> the public names it defines
PUBLIC_MODULES = {
    "models.norms": [
        "NORM_TYPES", "DynamicErf", "DynamicTanh", "DynamicTokenNorm", "LayerNorm", "PositionEmbeddingNorm", "SeparateNorm",
        "TokenLayout",
    ],
    "models.configuration_bert_norm": ["BertNormConfig"],
    "models.configuration_deit_norm": ["DeiTNormConfig"],
    "models.configuration_dinov2_norm": ["Dinov2NormConfig"],
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
    "models.modeling_dinov2_norm": ["Dinov2NormForImageClassification", "Dinov2NormModel"],
    "models.modeling_vit_norm": ["ViTNormForImageClassification", "ViTNormForMaskedImageModeling", "ViTNormModel"],
    "models.auto_registration": ["register_auto_classes"],
    "models.peft_registration": ["register_peft_defaults"],
    "conversion.convert": ["convert", "convert_model"],
    "hub.publish": ["push_to_hub"],
}  # fmt: skip
PUBLIC_NAMES = {name: module for module, names in PUBLIC_MODULES.items() for name in names}
__all__ = sorted(PUBLIC_NAMES)


def __getattr__(name: str) -> Any:
    module = PUBLIC_NAMES.get(name)
    if module is None:
        return registered_layer_class(name)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def registered_layer_class(name: str) -> type:
    """The layer class called `name` of a norm in the registry (`hf_norms.RMSNorm`, ...)."""
    if name[:1].isupper():
        from .models.norm_registry import NORM_TYPES

        for spec in NORM_TYPES.values():
            if spec.layer().__name__ == name:
                globals()[name] = spec.layer()
                return spec.layer()
    raise AttributeError(f"module 'hf_norms' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC_NAMES})


# transformers' Auto modules, each with the function of `models.auto_registration` that registers hf-norms' classes in it
AUTO_REGISTRATIONS = {
    "transformers.models.auto.configuration_auto": "register_configs",
    "transformers.models.auto.modeling_auto": "register_model_classes",
    "transformers.models.auto.image_processing_auto": "register_image_processors",
}


def registration(function: str) -> Callable[[], None]:
    """Calls `models.auto_registration.<function>()`."""
    return lambda: getattr(importlib.import_module(".models.auto_registration", __name__), function)()


def install_hub_publisher() -> None:
    """Have every hf-norms model's `push_to_hub` publish as `hf-norms push` does, with the hf-norms card
    (`NormPreTrainedMixin.hub_publisher`), once the module that defines them has run."""
    module = importlib.import_module(".models.modeling_norm_utils", __name__)
    module.NormPreTrainedMixin.hub_publisher = _push_model


def _push_model(model: Any, repo_id: str, **options: Any) -> Any:
    """`model.push_to_hub(repo_id, **options)` of an hf-norms model (`hf_norms.hub.model_push.push_model`)."""
    from .hub.model_push import push_model

    return push_model(model, repo_id, **options)


def register_with_peft() -> None:
    """Register the hf-norms model types' default PEFT target modules."""
    __getattr__("register_peft_defaults")()


install_moved_module_finder()
# The Auto classes and PEFT's defaults are registered as soon as transformers imports each Auto module and peft is
# imported (now, where they are): `import hf_norms` imports none of them, so the command line answers at once, and
# `import torch, transformers` costs what it costs without hf-norms (a user pays for what they use).
for auto_module, function in AUTO_REGISTRATIONS.items():
    when_imported(auto_module, registration(function))
when_imported("peft", register_with_peft)
when_imported(f"{__name__}.models.modeling_norm_utils", install_hub_publisher)
