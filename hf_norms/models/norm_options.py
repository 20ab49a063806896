"""The config fields every hf-norms config shares: which norm (`norm_type`, `layer_norm_types`) and every registered
norm's options, one field per `Option` of `norms.registry.NORM_TYPES`.

Mixed into every family's config. The config is the one gate of the norm options: `validate_norm_options` runs through
the `@strict` validation of transformers configs, at construction (with the options that `from_pretrained(path,
norm_type=...)` is given: `from_dict`) and before saving; what comes after (models, conversion, training, cards) asks
the validated config for its norm (`norm_spec`, `norm_spec_at`). Part of a checkpoint's
configuration file (`checkpoint_code`), with the options of its own norms only, less what is `@package_only`.
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses
import re
import struct
from typing import ClassVar

from transformers import configuration_utils

from ..norms.registry import NORM_TYPES, STOCK, unknown_norm_type
from ..norms.spec import FLOAT_MAX, NormSpec
from ..package_only import package_only
from .held_notices import held_back, model_type_notice

OPTIONS = [option for spec in NORM_TYPES.values() for option in spec.options]
# Config choices transformers keeps out of `to_dict()` (`from_dict` takes each as a keyword)
RUNTIME_CHOICES = ("attn_implementation", "experts_implementation")
# The class names an hf-norms model saves in `architectures` (`BertNormForMaskedLM`), with its family's prefix
NORM_ARCHITECTURE = re.compile(r"(\w+?Norm)(?:Model|For\w+|PreTrainedModel)")
SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "mlp_ratio")


def _type_name(annotation) -> str:
    return getattr(annotation, "__name__", None) or str(annotation)


def _docstring() -> str:
    """The fields in transformers' config docstring style."""
    lines = [
        "Norm selection and hyperparameters.",
        "",
        f'norm_type (`str`, defaults to `"{STOCK}"`):',
        f"    One of {', '.join(f'`{name}`' for name in NORM_TYPES)} (`{STOCK}`: the stock model).",
    ]
    for option in OPTIONS:
        lines += [
            f"{option.name} (`{_type_name(option.annotation)}`, defaults to {option.default!r}):",
            f"    {option.doc}",
        ]
    lines += [
        "layer_norm_types (`list[str]`, *optional*):",
        "    One norm type per encoder layer, each `norm_type` or `layernorm`, e.g. DyT in the first layers and",
        "    LayerNorm in the last ones (DTN's official placement). The norms after the encoder (final norm, task heads)",
        "    follow the last layer, BERT's embedding norm the first. None: every layer uses `norm_type`. Not available",
        "    with norm types that add position norms (LaPE), which belong to the whole stack.",
    ]
    return "\n".join(lines)


# Annotations as text, as a module with `from __future__ import annotations` writes them: transformers' strict
# configs check the values (`validate_norm_options`), not their Python types.
NormOptionFields = dataclasses.make_dataclass(
    "NormOptionFields",
    [("norm_type", "str", dataclasses.field(default=STOCK))]
    + [(option.name, _type_name(option.annotation), dataclasses.field(default=option.default)) for option in OPTIONS]
    + [("layer_norm_types", "list[str] | None", dataclasses.field(default=None))],
    kw_only=True,
)
NormOptionFields.__module__ = __name__
# The keywords of `from_pretrained` and `from_config` that ask for an hf-norms model
NORM_OPTION_NAMES = frozenset(NormOptionFields.__dataclass_fields__)


class NormOptions(NormOptionFields):
    __doc__ = _docstring()

    num_prefix_tokens: ClassVar[int] = 1

    def __post_init__(self, **kwargs):
        # A stock checkpoint's config.json says e.g. `"model_type": "vit"`; this config's type is its class's.
        kwargs.pop("model_type", None)
        super().__post_init__(**kwargs)

    @classmethod
    @package_only
    def stock_config_class(cls) -> type:
        """The stock config this config extends (`BertNormConfig` -> `BertConfig`)."""
        return next(base for base in cls.__mro__[1:] if getattr(base, "model_type", ""))

    @classmethod
    @package_only
    def from_stock_config(cls, config, **options):
        """This family's config holding everything `config` (a stock config, or one of this family) holds, with the
        norm `options` set: its serialized fields, and the choices transformers keeps on a config without saving them
        (`attn_implementation`, `experts_implementation`), which `from_pretrained(..., attn_implementation="eager")`
        and `from_config(config)` read from it."""
        runtime = {name: getattr(config, f"_{name}", None) for name in RUNTIME_CHOICES}
        return cls.from_dict({**config.to_dict(), **options}, **{k: v for k, v in runtime.items() if v is not None})

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """`PreTrainedConfig.from_dict`, with the norm options among `kwargs` (`from_pretrained(path, norm_type="dyt")`)
        given to the constructor, which validates them with the rest, instead of set on the config after its
        validation (transformers' way with other keywords)."""
        options = {name: kwargs.pop(name) for name in list(kwargs) if name in NORM_OPTION_NAMES}
        return super().from_dict({**config_dict, **options}, **kwargs)

    @property
    def norm_spec(self) -> NormSpec:
        """The registry entry of `norm_type`, which validating this config checked: what conversion, training and the
        cards ask of a config, instead of the registry. (Remote code builds layers from its modeling file's own
        registry, by `norm_type_at`: a config class loaded as remote code may sit in a module folder of its own.)"""
        return NORM_TYPES[self.norm_type]

    def norm_type_at(self, layer_index: int) -> str:
        """The norm_type of encoder layer `layer_index` (negative indices count from the last layer), validated:
        `layer_norm_types[layer_index]` where the config chooses a norm per layer, else `norm_type`."""
        return self.layer_norm_types[layer_index] if self.layer_norm_types else self.norm_type

    @classmethod
    @package_only
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """`PreTrainedConfig.from_pretrained`, without transformers' notice that a checkpoint of the stock model type
        (`bert` for `bert_norm`) "can yield errors": reading the family's stock checkpoints is what this config is for."""
        notice = model_type_notice(cls.stock_config_class().model_type, cls.model_type)
        with held_back(configuration_utils.logger, notice):
            return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def validate_norm_options(self) -> None:
        """Every size positive, eps positive, `norm_type` registered and the options of the norms in use passing their
        checks; runs before any tensor is allocated. What the stock config accepts (a hidden size the heads do not divide, which the stock
        attention refuses when built; any positive eps) is accepted here too."""
        for name in SIZES:
            if getattr(self, name, 1) is not None and not getattr(self, name, 1) > 0:  # DINOv2 has mlp_ratio instead
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}.")
        if self.norm_type not in NORM_TYPES:
            raise ValueError(unknown_norm_type(self.norm_type))
        in_use = {self.norm_type, *(self.layer_norm_types if isinstance(self.layer_norm_types, list) else ())}
        for kind, spec in NORM_TYPES.items():
            for option in spec.options if kind in in_use else ():  # another norm's options are unused, as in stock
                problem = option.check(option.name, getattr(self, option.name), self) if option.check else None
                problem = problem or (self.float_problem(option) if option.annotation is float else None)
                if problem:
                    raise ValueError(problem)
        chunked = [kind for kind in sorted(in_use) if kind in NORM_TYPES and NORM_TYPES[kind].whole_sequence]
        if chunked and getattr(self, "chunk_size_feed_forward", 0):
            raise ValueError(
                f"chunk_size_feed_forward runs the norm after the feed-forward on chunks of tokens, but "
                f"norm_type={chunked[0]!r} needs the whole sequence at once: leave chunk_size_feed_forward at 0."
            )
        if not self.norm_spec.per_token and getattr(self, "is_decoder", False):
            raise ValueError(
                f"norm_type={self.norm_type!r} mixes statistics across all tokens, so a causal decoder "
                "(is_decoder=True) would see future tokens; use is_decoder=False or another norm_type."
            )
        self.check_layer_norm_types()
        self.check_architectures()

    def float_problem(self, option) -> str | None:
        """Why float `option`'s value does not fit a weight of this config's dtype (float32 unless it names a 16-bit
        one), or None: beyond its range (`dyt_alpha_init=1e308` is finite, but infinite in float32, which torch refuses
        only when the model is built), or failing the option's check once rounded to it (1e-320 is 0 in float32)."""
        dtype = str(getattr(self, "dtype", None) or "float32").removeprefix("torch.")
        dtype = dtype if dtype in FLOAT_MAX else "float32"
        value = getattr(self, option.name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        if abs(value) > FLOAT_MAX[dtype]:
            return f"{option.name}={value!r} does not fit a {dtype} weight (magnitude at most {FLOAT_MAX[dtype]!r})."
        unit = "e" if dtype == "float16" else "f"  # bfloat16 has float32's range of exponents
        stored = struct.unpack(unit, struct.pack(unit, value))[0]
        problem = option.check(option.name, stored, self) if option.check else None
        return f"{option.name}={value!r} does not fit a {dtype} weight: {problem}" if problem else None

    def check_architectures(self) -> None:
        """`architectures`, the classes that saved the weights, are not another hf-norms family's: BERT weights whose
        config.json was edited to say `roberta_norm` load without a missing weight but compute something else
        (RoBERTa's positions start after the padding index)."""
        own = {kind.__name__.removesuffix("Config") for kind in type(self).__mro__}
        others = [
            name
            for name in self.architectures or ()
            if (found := NORM_ARCHITECTURE.fullmatch(str(name))) and found[1] not in own
        ]
        if others:
            raise ValueError(
                f"config.json says model_type {self.model_type!r}, but its weights were saved by {others[0]}, a "
                "class of another hf-norms family: set model_type back to that family's to load them."
            )

    def check_layer_norm_types(self) -> None:
        """`layer_norm_types`: None, or one entry per encoder layer, each `norm_type` or `layernorm` (not with norm
        types that add position norms)."""
        if self.layer_norm_types is None:
            return
        if not isinstance(self.layer_norm_types, list) or len(self.layer_norm_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_norm_types must list one norm type per encoder layer ({self.num_hidden_layers}), "
                f"got {self.layer_norm_types!r}."
            )
        if self.norm_spec.position_norms:
            raise ValueError(
                f"layer_norm_types cannot be used with norm_type={self.norm_type!r}: "
                f"{self.norm_spec.short_name}'s position norms span all layers."
            )
        allowed = {self.norm_type, STOCK}
        wrong = sorted({str(kind) for kind in self.layer_norm_types} - allowed)
        if wrong:
            raise ValueError(
                f"layer_norm_types may hold only norm_type ({self.norm_type!r}) and 'layernorm', got {wrong}."
            )
