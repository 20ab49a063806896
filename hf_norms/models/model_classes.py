"""The hf-norms model classes by name, and their registration with transformers' Auto classes.

Not part of the remote-code set (no model file imports it). Importing it registers (`register_auto_classes()`, at its
end): `import hf_norms` imports it as soon as transformers is imported, and a module that imports it before
transformers (the first import of transformers then happens inside it) registers all the same.

Besides each hf-norms config and its heads, every Auto class that has an hf-norms head takes norm options for the
family's stock checkpoints: `AutoModel.from_pretrained("path/to/bert", norm_type="dtn")` gives the `BertNormModel` that
`BertNormModel.from_pretrained("path/to/bert", norm_type="dtn")` gives. transformers reads such a checkpoint's config as
the stock config (`BertConfig`) and asks its Auto mapping for the stock class, whose `__init__` would refuse the option;
no hook of transformers sees the option before that. So, through the Auto classes' public `register(..., exist_ok=True)`,
the stock config maps to a stand-in for each stock head (`stock_router`) which, without a norm option, hands every call
to the stock class unchanged (the model built is the stock class's own), and with one, to the hf-norms head.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType

import transformers
from transformers import AutoConfig, AutoImageProcessor

from . import modeling_bert_norm, modeling_deit_norm, modeling_dinov2_norm, modeling_vit_norm
from .configuration_bert_norm import BertNormConfig
from .configuration_deit_norm import DeiTNormConfig
from .configuration_dinov2_norm import Dinov2NormConfig
from .configuration_vit_norm import ViTNormConfig
from .image_processing_norm import GrayscaleImageProcessor
from .modeling_norm_utils import NORM_OPTION_NAMES

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


@functools.cache
def stock_router(stock_class: type, norm_class: type) -> type:
    """`stock_class` as the Auto classes see it, taking norm options: `from_pretrained` and `from_config` (through
    `_from_config`) hand every call to `stock_class` unless a norm option (`norm_type`, `dtn_gate_init`, ...) is given;
    then `norm_class` loads the checkpoint with `from_layernorm_checkpoint` (as its `from_pretrained(path,
    norm_type=...)` does) or builds the model from the stock config with the options set.

    A subclass of `stock_class` that is never instantiated, with its name (the Auto classes choose between the heads
    of one task, e.g. DeiT's classifier with and without teacher, by `config.architectures`) and its module (a
    checkpoint's own remote code, trusted, wins only over classes from transformers' modules).
    """

    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        if NORM_OPTION_NAMES.isdisjoint(kwargs):
            return stock_class.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        return norm_class.from_layernorm_checkpoint(pretrained_model_name_or_path, *model_args, **kwargs)

    def _from_config(cls, config, **kwargs):
        options = {name: kwargs.pop(name) for name in NORM_OPTION_NAMES & kwargs.keys()}
        if not options:
            return stock_class._from_config(config, **kwargs)
        return norm_class._from_config(norm_class.config_class.from_stock_config(config, **options), **kwargs)

    attributes = {
        "__module__": stock_class.__module__,
        "__qualname__": stock_class.__qualname__,
        "__doc__": f"`{stock_class.__name__}` for the Auto classes; with norm options, `{norm_class.__name__}`.",
        "from_pretrained": classmethod(from_pretrained),
        "_from_config": classmethod(_from_config),
        "stock_class": stock_class,
    }
    return type(stock_class.__name__, (stock_class,), attributes)


def register_stock_routers(auto_class, config_class: type, heads: tuple[type, ...]) -> None:
    """Map `config_class`'s stock config, in `auto_class`, to a `stock_router` for each stock head transformers maps
    it to (several where the task has several: DeiT's classifier with and without teacher), paired with the hf-norms
    head of the same name (`DeiTForImageClassification` -> `DeiTNormForImageClassification`)."""
    stock_config = config_class.stock_config_class()
    registered = auto_class._model_mapping[stock_config]  # the stock head(s), or the routers of an earlier call
    stock_heads = [
        getattr(head, "stock_class", head) for head in (registered if isinstance(registered, tuple) else (registered,))
    ]
    by_stock_name = {head.__name__.replace("Norm", "", 1): head for head in heads}
    routers = tuple(stock_router(head, by_stock_name[head.__name__]) for head in stock_heads)
    auto_class.register(stock_config, routers[0] if len(routers) == 1 else routers, exist_ok=True)


def register_auto_classes() -> None:
    """`AutoConfig` for each model type, every model class under its Auto class, and in each of those Auto classes a
    `stock_router` for the family's stock config; `GrayscaleImageProcessor` under `AutoImageProcessor` for the vision
    families (which registers its class name: a saved one loads with hf-norms' code, not the checkpoint's copy).

    Where two heads share an Auto class (DeiT's classifier with and without teacher), both are registered and
    transformers picks the one named in the checkpoint's `architectures`, as it does for the stock DeiT.
    """
    for config_class, module in FAMILIES:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        if config_class is not BertNormConfig:  # a saved GrayscaleImageProcessor then loads without remote code
            AutoImageProcessor.register(config_class, image_processor_classes={"pil": GrayscaleImageProcessor},
                                        exist_ok=True)  # fmt: skip
        for auto_class_name, classes in model_classes_by_auto_class(module, config_class).items():
            auto_class = getattr(transformers, auto_class_name)
            auto_class.register(config_class, classes[0] if len(classes) == 1 else classes, exist_ok=True)
            register_stock_routers(auto_class, config_class, classes)


register_auto_classes()
