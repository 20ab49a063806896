"""What hf-norms knows about a model family, beside `NormSpec` for norms: the types of `family_registry.py`.

A family is a stock transformers architecture (BERT, ViT, ...) whose heads hf-norms extends with `NormPreTrainedMixin`.
Generic code (conversion, folding, residual-stream centring, fine-tuning, cards, the command line) reads a family's
`FamilySpec` instead of comparing its name; where its stock modules sit for norm placement is the modeling file's
`FamilyLayout` (remote code, so not here).

Not part of the remote-code set (no model file imports it).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Literal


@dataclass(frozen=True)
class FoldLayout:
    """Where a pre-LN family's norms feed only Linear layers, so their affine folds into them (`conversion.folding`).

    Paths are below each encoder layer (`attention_norm`, `mlp_norm`, their readers), below the base model
    (`final_norm`) or below the head model (`head_linears`). `mlp_readers` lists every MLP input projection the
    family's MLP variants have (`fc1`; DINOv2's SwiGLU `gate_proj` and `up_proj`): a layer's readers are those it has.
    `final_norm` is None where the final norm's output is not read by the head's Linears alone.
    """

    attention_norm: str
    mlp_norm: str
    attention_readers: tuple[str, ...]
    mlp_readers: tuple[str, ...]
    final_norm: str | None = None
    head_linears: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResidualWrites:
    """Every write into a pre-LN family's residual stream (`conversion.residual_stream`); paths below the base model,
    except `output_projections` and `layer_scales`, which are below each encoder layer.

    `tables`: token tables added to the stream (`embeddings.cls_token`, ...); `position_table`: the position
    embeddings (a tensor or an `nn.Embedding`), a write unless LaPE takes them out of the input; `input_projection`:
    the patch projection; `layer_scales`: (LayerScale, the projection it scales) pairs, folded into it first.
    """

    tables: tuple[str, ...]
    position_table: str
    input_projection: str
    output_projections: tuple[str, ...]
    layer_scales: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FamilySpec:
    """One model family: everything generic code needs to know about it.

    - `name`: its tag (`bert`), the stock `model_type` it extends without separators; `display_name`: as the card
      writes it (`BERT`).
    - `config_class`: its hf-norms config (`BertNormConfig`); the stock config class, the model types and the
      modeling module (by transformers' file naming) follow from it.
    - `modality`: what its inputs are (`text`: tokens in one row after the prefix; `image`: a patch grid).
    - `pre_ln`: each layer normalises its input (`x + f(norm(x))`), else its output (post-LN: `norm(x + f(x))`, where
      each norm's output is the residual stream, so nothing folds or centres).
    - `task_heads`: `{fine-tuning task: head class name}` for `hf-norms finetune`, the first the default task (none
      where transformers has no head of a task `finetune` runs for the family).
    - `pooler_option`: its bare model takes `add_pooling_layer`.
    - `folding`, `residual`: where norms fold and what writes the residual stream (pre-LN families; None otherwise).
    - `any_image_size`: it interpolates its position grid to every input size (a multiple of the patch size).
    """

    name: str
    display_name: str
    config_class: type
    modality: Literal["text", "image"]
    pre_ln: bool
    task_heads: Mapping[str, str]
    pooler_option: bool = False
    folding: FoldLayout | None = None
    residual: ResidualWrites | None = None
    any_image_size: bool = False

    @property
    def model_type(self) -> str:
        """The hf-norms model type (`bert_norm`)."""
        return self.config_class.model_type

    @property
    def stock_config_class(self) -> type:
        return self.config_class.stock_config_class()

    @property
    def stock_model_type(self) -> str:
        """The stock model type (`bert`, `xlm-roberta`, `clip_vision_model`)."""
        return self.stock_config_class.model_type

    @property
    def class_prefix(self) -> str:
        """The prefix of its stock class names (`Bert` of `BertForMaskedLM`); the hf-norms ones add `Norm`."""
        return self.stock_config_class.__name__.removesuffix("Config")

    @property
    def default_task(self) -> str | None:
        """The task `hf-norms finetune` runs unless told otherwise; None for a family it fine-tunes on no task."""
        return next(iter(self.task_heads), None)

    @property
    def modeling_module(self) -> ModuleType:
        """The module of its model classes, by transformers' convention (`configuration_x` -> `modeling_x`)."""
        return importlib.import_module(self.config_class.__module__.replace(".configuration_", ".modeling_", 1))

    @property
    def public_classes(self) -> list[type]:
        """Every class its modeling module exports (`__all__`): its heads, its base class and the heads no Auto class
        maps (CLIP's `CLIPVisionNormModelWithProjection`), which `import hf_norms` makes public."""
        exported = [getattr(self.modeling_module, name) for name in self.modeling_module.__all__]
        return [value for value in exported if isinstance(value, type)]

    @property
    def heads(self) -> list[type]:
        """Its model classes that sit under an Auto class (every head), in the modeling module's order of names."""
        module = self.modeling_module
        return [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__ and getattr(cls, "config_class", None) is self.config_class
            and cls._auto_class
        ]  # fmt: skip

    @property
    def auto_map(self) -> dict[str, str]:
        """The `auto_map` its checkpoints hold (`FAMILY_AUTO_MAP` of the modeling module)."""
        return dict(self.modeling_module.FAMILY_AUTO_MAP)
