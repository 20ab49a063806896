"""The hf-norms model types in transformers' Auto classes, registered without importing the model classes.

`import hf_norms` registers each part as soon as transformers imports the Auto module it belongs to
(`hf_norms.AUTO_REGISTRATIONS`): the configs with `AutoConfig` (`register_configs`), the model classes with every
`AutoModel*` class (`register_model_classes`), the image processor of one-channel models with `AutoImageProcessor`
(`register_image_processors`). `register_auto_classes()` registers all three at once.

Importing an hf-norms model class imports transformers' modeling code (`transformers.modeling_utils`, seconds), which
neither `import transformers` nor `from transformers import AutoModel` does. So the Auto mappings hold, for each model
class, a stand-in with its name, module and config class (`DeferredClass`), which imports the class when first used:
`AutoModel.from_pretrained` calls the class's own `from_pretrained`, and every other attribute, `isinstance` and
`issubclass` are the class's own. Which classes a family has, and under which Auto class, is read from its modeling
module's source (`declared_heads`: each class's `_auto_class`), not imported.

Besides each hf-norms config and its heads, every Auto class that has an hf-norms head takes norm options for the
family's stock checkpoints: `AutoModel.from_pretrained("path/to/bert", norm_type="dtn")` gives the `BertNormModel` that
`BertNormModel.from_pretrained("path/to/bert", norm_type="dtn")` gives. transformers reads such a checkpoint's config as
the stock config (`BertConfig`) and asks its Auto mapping for the stock class, whose `__init__` would refuse the option;
no hook of transformers sees the option before that. So, through the Auto classes' public `register(..., exist_ok=True)`,
the stock config maps to a stand-in for each stock head (`stock_router`) which, without a norm option, hands every call
to the stock class unchanged (the model built is the stock class's own), and with one, to the hf-norms head.

Not part of the remote-code set (no model file imports it).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from typing import Any

import transformers

from .configuration_bert_norm import BertNormConfig
from .configuration_deit_norm import DeiTNormConfig
from .configuration_dinov2_norm import Dinov2NormConfig
from .configuration_vit_norm import ViTNormConfig
from .norm_options import NORM_OPTION_NAMES

FAMILY_CONFIGS = (ViTNormConfig, DeiTNormConfig, BertNormConfig, Dinov2NormConfig)


def modeling_module_name(config_class: type) -> str:
    """The module of `config_class`'s model classes, by transformers' convention: `hf_norms.models.modeling_vit_norm`
    for `ViTNormConfig`, `transformers.models.bert.modeling_bert` for `BertConfig`."""
    return config_class.__module__.replace(".configuration_", ".modeling_", 1)


def declared_heads(module_name: str) -> dict[str, tuple[str, ...]]:
    """{Auto class name: the names of the classes under it} that the module `module_name` declares, each by the
    `_auto_class = "..."` in its class body, the one its `FAMILY_AUTO_MAP` names first; read from the module's source
    without executing it (hf-norms ships its sources: they are the remote code it copies next to checkpoints)."""
    tree = ast.parse(importlib.util.find_spec(module_name).loader.get_source(module_name))
    heads: dict[str, list[str]] = {}
    primary: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "FAMILY_AUTO_MAP":
            primary = {name: reference.split(".")[1] for name, reference in ast.literal_eval(node.value).items()}
        for statement in node.body if isinstance(node, ast.ClassDef) else ():
            if isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0]) == "_auto_class":
                heads.setdefault(ast.literal_eval(statement.value), []).append(node.name)
    return {name: tuple(sorted(classes, key=lambda cls: cls != primary.get(name))) for name, classes in heads.items()}


class DeferredClass(type):
    """The type of a stand-in for a class that is imported on first use (`resolve()`): the stand-in has the class's
    name, module and whatever attributes it was made with; every other attribute (dunder names aside), `isinstance`
    and `issubclass` are the class's own."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(cls.resolve(), name)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls.resolve())

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls.resolve())


def deferred_class(module_name: str, class_name: str, config_class: type, **attributes: Any) -> DeferredClass:
    """A stand-in for the class `class_name` of module `module_name`, whose `config_class` is `config_class`."""

    def resolve(cls) -> type:
        return getattr(importlib.import_module(module_name), class_name)

    namespace = {"__module__": module_name, "__qualname__": class_name, "config_class": config_class}
    return DeferredClass(class_name, (), {**namespace, "resolve": classmethod(resolve), **attributes})


def routed_from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
    """The stock class's `from_pretrained`, or with a norm option the hf-norms head's `from_layernorm_checkpoint`."""
    if NORM_OPTION_NAMES.isdisjoint(kwargs):
        return cls.resolve().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
    return cls.norm_class.from_layernorm_checkpoint(pretrained_model_name_or_path, *model_args, **kwargs)


def routed_from_config(cls, config, **kwargs):
    """The stock class's `_from_config`, or with a norm option the hf-norms head's, on the stock config with the
    options set."""
    options = {name: kwargs.pop(name) for name in NORM_OPTION_NAMES & kwargs.keys()}
    if not options:
        return cls.resolve()._from_config(config, **kwargs)
    return cls.norm_class._from_config(cls.norm_class.config_class.from_stock_config(config, **options), **kwargs)


def stock_router(stock_config: type, stock_name: str, norm_class: DeferredClass) -> DeferredClass:
    """The stock head `stock_name` as the Auto classes see it, taking norm options: `from_pretrained` and `from_config`
    (through `_from_config`) hand every call to the stock class unless a norm option (`norm_type`, `dtn_gate_init`,
    ...) is given; then `norm_class` loads the checkpoint with `from_layernorm_checkpoint` (as its
    `from_pretrained(path, norm_type=...)` does) or builds the model from the stock config with the options set.

    It has the stock head's name (the Auto classes choose between the heads of one task, e.g. DeiT's classifier with
    and without teacher, by `config.architectures`) and module (a checkpoint's own remote code, trusted, wins only over
    classes from transformers' modules).
    """
    return deferred_class(
        modeling_module_name(stock_config),
        stock_name,
        stock_config,
        __doc__=f"`{stock_name}` for the Auto classes; with norm options, `{norm_class.__name__}`.",
        from_pretrained=classmethod(routed_from_pretrained),
        _from_config=classmethod(routed_from_config),
        norm_class=norm_class,
    )


def register_stock_routers(auto_class, config_class: type, heads: tuple[DeferredClass, ...]) -> None:
    """Map `config_class`'s stock config, in `auto_class`, to a `stock_router` for the stock head of each hf-norms
    head under it (several where the task has several: DeiT's classifier with and without teacher), of the same name
    without "Norm" (`DeiTNormForImageClassification` -> `DeiTForImageClassification`)."""
    stock_config = config_class.stock_config_class()
    routers = tuple(stock_router(stock_config, head.__name__.replace("Norm", "", 1), head) for head in heads)
    auto_class.register(stock_config, routers[0] if len(routers) == 1 else routers, exist_ok=True)


def register_configs() -> None:
    """Each family's config under its model type in `AutoConfig`."""
    for config_class in FAMILY_CONFIGS:
        transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)


def register_model_classes() -> None:
    """Every model class under its Auto class, and in each of those Auto classes a `stock_router` for the family's
    stock config, as stand-ins (`deferred_class`).

    Where two heads share an Auto class (DeiT's classifier with and without teacher), both are registered and
    transformers picks the one named in the checkpoint's `architectures`, as it does for the stock DeiT.
    """
    for config_class in FAMILY_CONFIGS:
        module_name = modeling_module_name(config_class)
        for auto_class_name, names in declared_heads(module_name).items():
            heads = tuple(deferred_class(module_name, name, config_class) for name in names)
            auto_class = getattr(transformers, auto_class_name)
            auto_class.register(config_class, heads[0] if len(heads) == 1 else heads, exist_ok=True)
            register_stock_routers(auto_class, config_class, heads)


def register_image_processors() -> None:
    """`GrayscaleImageProcessor` under `AutoImageProcessor` for the vision families (which registers its class name: a
    saved one loads with hf-norms' code, not the checkpoint's copy)."""
    from .image_processing_norm import GrayscaleImageProcessor  # imports transformers' image processing code

    for config_class in FAMILY_CONFIGS:
        if config_class is not BertNormConfig:
            transformers.AutoImageProcessor.register(
                config_class, image_processor_classes={"pil": GrayscaleImageProcessor}, exist_ok=True
            )


def register_auto_classes() -> None:
    """The configs, the model classes and the image processor, registered now."""
    register_configs()
    register_model_classes()
    register_image_processors()
