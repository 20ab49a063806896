"""The hf-norms model types in transformers' Auto classes: configs at once, model classes when first looked up.

`register_auto_classes()` (which `import hf_norms` calls) registers each family's config with `AutoConfig` and, in
every Auto model class where transformers maps the family's stock model type, the family's hf-norms classes of the
same names (`BertForMaskedLM` -> `BertNormForMaskedLM`). Those entries are imported when an Auto class first looks them
up (`OnLookup` in an `ImportedOnLookup` mapping, as transformers' own `_LazyAutoMapping` imports its classes by
name), so `import hf_norms` imports no modeling code. `AutoImageProcessor` maps each vision family's config to the
image processor of one-channel models, registered once transformers' `image_processing_auto` is imported
(`after_import`, an import hook on that one module: importing it costs 3.2 s of CPU, and its mapping lives there).

Besides each hf-norms config and its heads, every Auto class that has an hf-norms head takes norm options for the
family's stock checkpoints: `AutoModel.from_pretrained("path/to/bert", norm_type="dtn")` gives the `BertNormModel` that
`BertNormModel.from_pretrained("path/to/bert", norm_type="dtn")` gives. transformers reads such a checkpoint's config as
the stock config (`BertConfig`) and asks its Auto mapping for the stock class, whose `__init__` would refuse the option;
no hook of transformers sees the option before that. So, through `register(..., exist_ok=True)`, the stock config maps
to a subclass of each stock head (`stock_router`) whose `from_pretrained` and `_from_config`, without a norm option, are
the stock class's own (the model built is the stock class itself), and with one, the hf-norms head's.
A config that holds a family's stock config as a part (`CLIPConfig` and its `vision_config`) maps in `AutoModel` to a
`refusing_router`: the stock class, which with a norm option says in one line which hf-norms class loads that part; so
do the stock heads of the decoders users load beside them (`UNCOVERED_MODEL_TYPES`), naming the families that take
norm options.

The one name used from transformers outside its public API is each Auto mapping's `_extra_content` (what `register`
fills) and its table of class names by model type (`_model_mapping`), read and replaced here only.
Not part of the remote-code set (no model file imports it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import transformers
from transformers.models.auto import configuration_auto, modeling_auto

from ..norms.registry import STOCK, looks_like_a_norm_keyword
from .family_registry import FAMILIES
from .family_spec import FamilySpec

# Model types users load beside hf-norms' families that take no norm options yet: with one, their Auto classes answer in
# one line naming the families that do (`register_uncovered_routers`)
UNCOVERED_MODEL_TYPES = ("gpt2", "llama")


@dataclass(frozen=True)
class OnLookup:
    """An Auto mapping's entry that `load()` imports: the class (or classes) it maps to."""

    load: Callable[[], Any]


def qualified_name(key: Any) -> str:
    """`transformers.models.llama.configuration_llama.LlamaConfig` for that class."""
    return f"{getattr(key, '__module__', '')}.{getattr(key, '__qualname__', '')}"


class ImportedOnLookup(dict):
    """The registered entries of one Auto mapping (its `_extra_content`, config class -> model class or classes),
    where an `OnLookup` entry is replaced by what it loads when it is first read. Entries may also be registered by a
    config class's qualified name (`by_name`), for classes whose module nobody has imported yet: such an entry counts as
    registered under the class once the Auto class is asked about it (importing Llama's config costs 1.6 s of CPU)."""

    def __init__(self, entries: Any = ()) -> None:
        super().__init__(entries)
        self.by_name: dict[str, OnLookup] = {}

    def __contains__(self, key: Any) -> bool:
        return super().__contains__(key) or qualified_name(key) in self.by_name

    def __getitem__(self, key: Any) -> Any:
        if not super().__contains__(key) and qualified_name(key) in self.by_name:
            super().__setitem__(key, self.by_name.pop(qualified_name(key)))
        value = super().__getitem__(key)
        if isinstance(value, OnLookup):
            value = value.load()
            super().__setitem__(key, value)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self[key] for key in self]

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        return [(key, self[key]) for key in self]


def auto_model_classes() -> dict[str, type]:
    """transformers' Auto model classes by name (`AutoModel`, `AutoModelForMaskedLM`, ...), each mapping once."""
    classes: dict[str, type] = {}
    for name, value in vars(modeling_auto).items():
        mapping = getattr(value, "_model_mapping", None)
        if name.startswith("AutoModel") and isinstance(value, type) and mapping is not None:
            if all(other._model_mapping is not mapping for other in classes.values()):
                classes[name] = value
    return classes


def lazy_entries(mapping: Any) -> ImportedOnLookup:
    """The registered entries of an Auto `mapping` (a `_LazyAutoMapping`), made to import `OnLookup` entries when first
    read."""
    if not isinstance(mapping._extra_content, ImportedOnLookup):
        mapping._extra_content = ImportedOnLookup(mapping._extra_content)
    return mapping._extra_content


def stock_names(auto_class: type, model_type: str) -> tuple[str, ...]:
    """The names of the stock classes `auto_class` maps `model_type` to (none where it maps no such model)."""
    names = auto_class._model_mapping._model_mapping.get(model_type, ())
    return (names,) if isinstance(names, str) else tuple(names)


def norm_classes(family: FamilySpec, names: tuple[str, ...], on_import: Callable[[], None]) -> tuple[type, ...]:
    """The family's hf-norms classes of the stock class `names` (`BertModel` -> `BertNormModel`), imported, after
    `on_import()`."""
    on_import()
    prefix = family.class_prefix
    return tuple(getattr(family.modeling_module, name.replace(prefix, f"{prefix}Norm", 1)) for name in names)


def grayscale_processors() -> dict[str, type]:
    """What `AutoImageProcessor` maps a vision family's config to, by backend: `GrayscaleImageProcessor`."""
    from .image_processing_norm import GrayscaleImageProcessor

    return {"pil": GrayscaleImageProcessor}


def register_image_processors(image_processing_auto: Any) -> None:
    """`GrayscaleImageProcessor` under `AutoImageProcessor` for each vision family's config, imported when first looked
    up (as `AutoImageProcessor.register(config, image_processor_classes=...)` maps it)."""
    mapping = image_processing_auto.IMAGE_PROCESSOR_MAPPING
    lazy_entries(mapping)
    for family in FAMILIES.values():
        if family.modality == "image":
            mapping.register(family.config_class, OnLookup(grayscale_processors), exist_ok=True)


class AfterImport(importlib.abc.MetaPathFinder):
    """An import hook: `then(module)` runs once the module `name` is imported, right after its own code."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the other finders find the module itself
        spec = importlib.util.find_spec(fullname)
        run_module = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            self.then(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, then: Callable[[Any], None]) -> None:
    """`then(module)` on the module `name`: at once if it is imported, else when it is (`AfterImport`)."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, AfterImport(name, then))


def stock_head(norm_class: type) -> type:
    """The stock transformers class an hf-norms head extends (`BertNormModel` -> `BertModel`)."""
    return next(base for base in norm_class.__bases__ if base.__module__.startswith("transformers."))


def routed_from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
    """The stock class's `from_pretrained`, or with a norm keyword (`looks_like_a_norm_keyword`, a misspelt one too) the
    hf-norms head's `from_layernorm_checkpoint`, which checks the keywords. An hf-norms checkpoint whose config.json
    gives the stock model_type is refused in one line: the stock class would drop its norms' weights."""
    refuse_norms_under_the_stock_type(cls.norm_class, pretrained_model_name_or_path, kwargs.get("config"))
    if not any(map(looks_like_a_norm_keyword, kwargs)):
        return cls.stock_class.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
    return cls.norm_class.from_layernorm_checkpoint(pretrained_model_name_or_path, *model_args, **kwargs)


def refuse_norms_under_the_stock_type(norm_class: type, source, config) -> None:
    """Refuses, in one line naming the fix, a stock config (as the Auto class read it) that holds an hf-norms
    `norm_type` other than LayerNorm: a checkpoint hf-norms saved whose `model_type` was set to the stock one. The Auto
    class would load the stock class without the norms' weights, and its config takes a `norm_type=` keyword itself."""
    norm_type = getattr(config, "norm_type", None)
    if norm_type in (None, STOCK) or isinstance(config, norm_class.config_class):
        return
    raise ValueError(
        f"{source}: its config.json holds norm_type={norm_type!r} under the stock model_type {config.model_type!r}: "
        f"it is an hf-norms checkpoint; set its model_type to {norm_class.config_class.model_type!r} to load it."
    )


def routed_from_config(cls, config, **kwargs):
    """The stock class's `_from_config`, or with a norm option the hf-norms head's, on the stock config with the
    options set."""
    from .modeling_norm_utils import refuse_wrong_norm_keywords

    options = {name: kwargs.pop(name) for name in list(kwargs) if looks_like_a_norm_keyword(name)}
    if not options:
        return cls.stock_class._from_config(config, **kwargs)
    refuse_wrong_norm_keywords(options, {**config.to_dict(), **options})
    return cls.norm_class._from_config(cls.norm_class.config_class.from_stock_config(config, **options), **kwargs)


def stock_router(norm_class: type) -> type:
    """The stock head of `norm_class` as the Auto classes see it, taking norm options: a subclass of the stock head
    whose `from_pretrained` and `_from_config` hand every call to the stock class unless a norm option (`norm_type`,
    `dtn_gate_init`, ...) is given; then `norm_class` loads the checkpoint with `from_layernorm_checkpoint` (as its
    `from_pretrained(path, norm_type=...)` does) or builds the model from the stock config with the options set.

    It has the stock head's name (the Auto classes choose between the heads of one task, e.g. DeiT's classifier with
    and without teacher, by `config.architectures`) and module (a checkpoint's own remote code, trusted, wins only over
    classes from transformers' modules).
    """
    stock_class = stock_head(norm_class)
    namespace = {
        "__module__": stock_class.__module__,
        "__qualname__": stock_class.__qualname__,
        "__doc__": f"`{stock_class.__name__}` for the Auto classes; with norm options, `{norm_class.__name__}`.",
        "stock_class": stock_class,
        "norm_class": norm_class,
        "from_pretrained": classmethod(routed_from_pretrained),
        "_from_config": classmethod(routed_from_config),
    }
    return type(stock_class.__name__, (stock_class,), namespace)


def composite_configs(family: FamilySpec) -> list[type]:
    """The configs in transformers' module of the family's stock config that hold it as a part (`CLIPConfig`, whose
    `vision_config` is a `CLIPVisionConfig`)."""
    stock = family.stock_config_class
    module = sys.modules[stock.__module__]
    return [value for value in vars(module).values() if stock in getattr(value, "sub_configs", {}).values()]


def refused_from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
    """The stock class's `from_pretrained`; with a norm keyword, one line: its model type takes no norm options, and
    the class's `advice` says what does."""
    if not any(map(looks_like_a_norm_keyword, kwargs)):
        return cls.stock_class.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
    raise ValueError(
        f"{pretrained_model_name_or_path}: model_type {cls.config_class.model_type!r} is not a family hf-norms loads "
        f"with norm options{cls.advice}"
    )


def stock_from_config(cls, config, **kwargs):
    """The stock class's `_from_config`: `AutoModel.from_config` builds transformers' own class."""
    return cls.stock_class._from_config(config, **kwargs)


def refusing_router(stock_class: type, advice: str) -> type:
    """`stock_class` (`CLIPModel`, `GPT2LMHeadModel`) for the Auto classes, its `from_pretrained` refusing norm
    options in one line ending in `advice`, where transformers' own class refuses them with a TypeError from its
    `__init__`; without them, and in `from_config`, the stock class itself."""
    namespace = {
        "__module__": stock_class.__module__,
        "__qualname__": stock_class.__qualname__,
        "__doc__": f"`{stock_class.__name__}` for the Auto classes, refusing norm options in one line.",
        "stock_class": stock_class,
        "advice": advice,
        "from_pretrained": classmethod(refused_from_pretrained),
        "_from_config": classmethod(stock_from_config),
    }
    return type(stock_class.__name__, (stock_class,), namespace)


def register_composite_routers(family: FamilySpec, on_import: Callable[[], None]) -> None:
    """A `refusing_router` in `AutoModel` for each config that holds the family's stock config as a part, made when
    `AutoModel` first looks it up."""
    lazy_entries(transformers.AutoModel._model_mapping)
    for composite in composite_configs(family):
        names = stock_names(transformers.AutoModel, composite.model_type)
        if names:
            part = next(key for key, value in composite.sub_configs.items() if value is family.stock_config_class)
            stock_model_names = stock_names(transformers.AutoModel, family.stock_model_type)

            def load(names=names, part=part, bare=stock_model_names) -> type:
                bare_model = norm_classes(family, bare, on_import)[0]
                advice = (
                    f", but its {part} is {family.display_name}'s: load that part with "
                    f"hf_norms.{bare_model.__name__}.from_pretrained(path, norm_type=...)."
                )
                return refusing_router(getattr(transformers, names[0]), advice)

            transformers.AutoModel.register(composite, OnLookup(load), exist_ok=True)


def register_uncovered_routers(auto_classes: dict[str, type]) -> None:
    """A `refusing_router` for each stock head of `UNCOVERED_MODEL_TYPES` in every Auto class that maps it, registered
    by the name of its config class (`ImportedOnLookup.by_name`: nothing of that model type is imported until it is
    loaded) and made when first looked up: its line names the model types that take norm options."""
    *others, last = [repr(family.stock_model_type) for family in FAMILIES.values()]
    advice = (
        f": those are {', '.join(others)} and {last} checkpoints (decoders such as GPT-2 and Llama are not covered "
        "yet); load it without norm options."
    )
    for model_type in UNCOVERED_MODEL_TYPES:
        module = configuration_auto.model_type_to_module_name(model_type)
        config_name = (
            f"transformers.models.{module}.configuration_{module}.{configuration_auto.CONFIG_MAPPING_NAMES[model_type]}"
        )
        for auto_class in auto_classes.values():
            names = stock_names(auto_class, model_type)
            if names:
                lazy_entries(auto_class._model_mapping).by_name[config_name] = OnLookup(
                    lambda names=names: one_or_several(
                        tuple(refusing_router(getattr(transformers, name), advice) for name in names)
                    )
                )


def one_or_several(classes: tuple[type, ...]) -> type | tuple[type, ...]:
    """What `register` takes: a class, or a tuple of the classes transformers chooses from by `architectures`."""
    return classes[0] if len(classes) == 1 else classes


def register_auto_classes(on_import: Callable[[], None] = lambda: None) -> None:
    """Each family's config, and in every Auto class that maps its stock model type, its heads under its config and,
    under the stock config, a `stock_router` per head, each imported when first looked up (`OnLookup`), after
    `on_import()` (`import hf_norms` installs the hf-norms card publisher then)."""
    auto_classes = auto_model_classes()
    for family in FAMILIES.values():
        config_class = family.config_class
        transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        for auto_class in auto_classes.values():
            names = stock_names(auto_class, family.stock_model_type)
            if not names:
                continue
            lazy_entries(auto_class._model_mapping)
            heads = OnLookup(lambda family=family, names=names: one_or_several(norm_classes(family, names, on_import)))
            routers = OnLookup(
                lambda family=family, names=names: one_or_several(
                    tuple(map(stock_router, norm_classes(family, names, on_import)))
                )
            )
            auto_class.register(config_class, heads, exist_ok=True)
            auto_class.register(family.stock_config_class, routers, exist_ok=True)
        register_composite_routers(family, on_import)
    register_uncovered_routers(auto_classes)
    after_import("transformers.models.auto.image_processing_auto", register_image_processors)
