"""What every hf-norms model class shares: norm initialisation, loading a LayerNorm checkpoint into another norm_type,
and saving a checkpoint that loads anywhere.

Part of the modeling file of a checkpoint's remote code (`checkpoint_code`), less what is `@package_only`: there the
classes are transformers' remote-code classes, which load the checkpoint as saved, and save as remote code does
(copying their two files).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import os
from collections.abc import Callable
from typing import Any, ClassVar

from transformers import PreTrainedModel, modeling_utils
from transformers.conversion_mapping import (
    get_checkpoint_conversion_mapping,
    register_checkpoint_conversion_mapping,
)

from ..norms.build import build_position_norm, init_norm_parameters
from ..norms.registry import STOCK, looks_like_a_norm_keyword, norm_keyword_problem
from ..package_only import package_only
from .checkpoint_code import write_checkpoint_code
from .held_notices import held_back, load_report_of
from .layernorm_loading import layernorm_loading_options, replace_load_notices
from .norm_options import NORM_OPTION_NAMES
from .norm_placement import FamilyLayout, place_norms

# `from_pretrained` keywords that say where and how to read the checkpoint's config
HUB_OPTIONS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")
# `save_pretrained(..., push_to_hub=True)` keywords that say where and how to publish
PUSH_OPTIONS = ("repo_id", "commit_message", "create_pr", "private", "token")


def register_stock_key_renames(model_type: str, stock_class_name: str) -> None:
    """Let checkpoints in the stock 4.x key layout (`vit.encoder.layer.N...`) load into `model_type`'s classes.

    transformers renames those keys only for its own classes; without this, a stock checkpoint loads nothing into a
    subclass defined outside transformers, silently.
    """
    register_checkpoint_conversion_mapping(
        model_type, get_checkpoint_conversion_mapping(stock_class_name), overwrite=True
    )


@package_only
def refuse_wrong_norm_keywords(keywords: dict[str, Any], config: dict[str, Any]) -> None:
    """A ValueError in one line when `keywords` (of `from_pretrained` or `from_config`) hold a norm keyword that the
    model of `config` (a config dict, the keywords applied) would ignore or refuse late (`norm_keyword_problem`)."""
    problem = norm_keyword_problem(
        filter(looks_like_a_norm_keyword, keywords), config.get("norm_type", STOCK), config.get("layer_norm_types")
    )
    if problem:
        raise ValueError(problem)


class NormPreTrainedMixin:
    """Shared behaviour of hf-norms models; mixed in front of a stock transformers model class (`BertModel`,
    `ViTForImageClassification`, ...), whose `__init__` and `forward` run as they are.

    - `post_init`, which every stock `__init__` calls last, first replaces the stock LayerNorms with the config's norms
      (`norm_placement.place_norms`, with the family's `family_layout`).

    - `initialize_weights` also initialises the norms of `norms/` (DyT alpha, DTN gates and position projection, SepNorm's
      prefix norm, LaPE's `pe_norm`), so parameters a stock checkpoint lacks get their documented values.
    - `from_pretrained(path, norm_type=...)` of a LayerNorm checkpoint goes through `from_layernorm_checkpoint`, which
      keeps its function wherever the mathematics allows (the Auto classes call it for stock checkpoints).
    - `save_pretrained` writes the runtime key layout (which the Trainer's best-model reload and resume load fully,
      unlike transformers' default 4.x layout), the full `auto_map` of the family and the checkpoint's two remote-code
      files (`checkpoint_code`); `is_remote_code()` is False, so transformers copies none of the package's files.
    - `push_to_hub(repo_id, ...)` publishes as `hf-norms push` does, with the hf-norms card, once `import hf_norms` has
      set `hub_publisher`; transformers' push, with its stock card, otherwise.
    - `accepts_loss_kwargs = False`: every head's loss is the mean over its own batch. A `forward` taking `**kwargs`
      would otherwise make the Trainer pass `num_items_in_batch` and multiply the returned loss by the world size,
      which only undoes a loss divided by the global item count (BERT's heads, the MIM heads and the regression and
      multi-label losses ignore it): on 2 processes the logged and saved losses, and the gradients, doubled.
      The Trainer then lets DDP average the gradients and divides by the accumulation steps, as for any model.
    """

    family_auto_map: ClassVar[dict[str, str]] = {}
    family_layout: ClassVar[FamilyLayout]
    accepts_loss_kwargs: ClassVar[bool] = False
    # `publisher(model, repo_id, **options)`, set by `import hf_norms` (`hf_norms.hub.model_push.push_model`): how
    # `push_to_hub` publishes. None where this file runs as remote code without hf-norms: transformers' push.
    hub_publisher: ClassVar[Callable[..., Any] | None] = None

    @classmethod
    @package_only
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`PreTrainedModel.from_pretrained`; a LayerNorm checkpoint loaded into another `norm_type` (given as a keyword,
        without a `config`) is loaded by `from_layernorm_checkpoint`, which keeps its function wherever the mathematics
        allows. A norm keyword the model would ignore or refuse late (`norm_keyword_problem`) is one ValueError."""
        if (
            any(map(looks_like_a_norm_keyword, kwargs))
            and kwargs.get("config") is None
            and pretrained_model_name_or_path
        ):
            hub_options = {key: kwargs[key] for key in HUB_OPTIONS if key in kwargs}
            stored, _ = cls.config_class.get_config_dict(pretrained_model_name_or_path, **hub_options)
            if stored.get("norm_type", STOCK) == STOCK:
                return cls.from_layernorm_checkpoint(pretrained_model_name_or_path, *model_args, **kwargs)
            refuse_wrong_norm_keywords(kwargs, {**stored, **kwargs})
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    @classmethod
    @package_only
    def from_layernorm_checkpoint(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """Load a LayerNorm checkpoint (stock, or hf-norms with `norm_type="layernorm"`) with the norm options given as
        keywords (`norm_type="dtn"`, ...), keeping its function wherever the mathematics allows.

        For DTN, SepNorm and LaPE, the options of `norms.function_preserving_options` are used unless given (DTN gates
        at 1; SepNorm's prefix norm a LayerNorm copied from the checkpoint's; LaPE keeping the input position
        embedding with every `pe_norm` at zero), and the parameters these norms add, set to keep the function, are
        named in one INFO line instead of in transformers' load report. A SepNorm prefix norm asked to be a BatchNorm
        starts from the LayerNorm's gamma and beta with fresh running statistics: it normalises over the batch, so it
        never reproduces LayerNorm. DyT and Derf cannot preserve the function; a warning names `hf_norms.convert_model`,
        which calibrates them.

        `config` is the checkpoint's own config as already read, with the caller's other keywords applied (the Auto
        classes pass the stock config they read); the norm options are set on a copy of it in this family's config.
        """
        refuse_wrong_norm_keywords(kwargs, kwargs)
        norm_type = kwargs.get("norm_type", STOCK)
        kwargs.update(layernorm_loading_options(norm_type, explicit=kwargs))
        if config is not None:
            options = {name: kwargs.pop(name) for name in NORM_OPTION_NAMES & kwargs.keys()}
            config = cls.config_class.from_stock_config(config, **options)
        output_loading_info = kwargs.pop("output_loading_info", False)
        with held_back(modeling_utils.logger, load_report_of(cls)) as reports:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *model_args, config=config, output_loading_info=True, **kwargs
            )
        replace_load_notices(model, pretrained_model_name_or_path, info, reports)
        return (model, info) if output_loading_info else model

    @property
    def encoder_layers(self):
        """The transformer layers, where the family's stock model keeps them (`family_layout.layers`)."""
        return self.base_model.get_submodule(self.family_layout.layers)

    def post_init(self) -> None:
        """Ask the config to validate itself again (a field set by hand after it was made, `config.norm_type = ...`,
        is checked by nothing else), put the norms in place, then the stock `post_init` (weight initialisation,
        tying, ...)."""
        self.config.validate()
        place_norms(self, self.family_layout)
        super().post_init()

    def initialize_weights(self) -> None:
        """The stock initialisation, then each hf-norms norm's documented initial values (`init_norm_parameters`, which
        write through `transformers.initialization` and so skip loaded tensors). A pass of its own, since the stock
        pass initialises sub-models (DINOv2's encoder is one) with their own stock `_init_weights`."""
        super().initialize_weights()
        for module in self.modules():
            init_norm_parameters(module)

    def refuse_reentrant_checkpointing(self, options: dict | None) -> None:
        """Refuse in one line what would silently stop training LaPE's position norms: reentrant checkpointing
        differentiates only a layer's inputs, and each layer's normalised position embedding reaches its attention
        from outside them."""
        if (options or {}).get("use_reentrant") and build_position_norm(self.config) is not None:
            raise ValueError(
                f"norm_type={self.config.norm_type!r} trains its position norms only with non-reentrant activation "
                "checkpointing: pass {'use_reentrant': False} as its kwargs (or leave them unset)."
            )

    # transformers 5.25 renamed `gradient_checkpointing_enable` (now a deprecated alias that calls the new name) to
    # `activation_checkpointing_enable`: the check sits on whichever this release's models call first.
    if hasattr(PreTrainedModel, "activation_checkpointing_enable"):

        def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, *args, **kwargs):
            self.refuse_reentrant_checkpointing(activation_checkpointing_kwargs)
            return super().activation_checkpointing_enable(activation_checkpointing_kwargs, *args, **kwargs)

    else:

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None, *args, **kwargs):
            self.refuse_reentrant_checkpointing(gradient_checkpointing_kwargs)
            return super().gradient_checkpointing_enable(gradient_checkpointing_kwargs, *args, **kwargs)

    @classmethod
    @package_only
    def is_remote_code(cls) -> bool:
        """False: the package's classes are not remote code, so transformers' `save_pretrained` copies none of the
        package's files (`save_pretrained` writes the checkpoint's generated ones)."""
        return False

    @package_only
    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        *args,
        save_original_format: bool = False,
        push_to_hub: bool = False,
        **kwargs,
    ):
        """transformers' `save_pretrained` with the family's full `auto_map` (this class under its own Auto class), then the checkpoint's two remote-code
        files, generated for its family and norms (`checkpoint_code`). With `push_to_hub=True` the folder is published
        once it is whole, by `push_to_hub` (to `repo_id`, else the folder's name): transformers' own upload would run
        before the remote code is written."""
        own = {self._auto_class: f"{type(self).__module__.split('.')[-1]}.{type(self).__name__}"}
        self.config.auto_map = {**self.family_auto_map, **(own if self._auto_class else {})}
        hub_options = {key: kwargs.pop(key) for key in PUSH_OPTIONS if push_to_hub and key in kwargs}
        saved = super().save_pretrained(save_directory, *args, save_original_format=save_original_format, **kwargs)
        if kwargs.get("is_main_process", True) and os.path.isdir(save_directory):  # transformers refuses a file
            write_checkpoint_code(save_directory, self.config.to_dict())
            if push_to_hub:
                repo_id = hub_options.pop("repo_id", os.path.basename(os.path.normpath(save_directory)))
                self.push_to_hub(repo_id, **hub_options)
        return saved

    @package_only
    def push_to_hub(self, repo_id: str, **options: Any) -> Any:
        """Publish the model with the hf-norms card (`hub_publisher`), else as transformers does; `options` are
        transformers' `push_to_hub` keywords."""
        publisher = NormPreTrainedMixin.hub_publisher
        if publisher is None:
            return super().push_to_hub(repo_id, **options)
        return publisher(self, repo_id, **options)
