"""What every hf-norms model class shares: norm initialisation, and saving a checkpoint that loads anywhere.

Copied next to saved checkpoints for `trust_remote_code`, so it imports nothing from `hf_norms` except by single-dot
relative imports of flat files.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import os
from typing import ClassVar

from transformers.conversion_mapping import (
    get_checkpoint_conversion_mapping,
    register_checkpoint_conversion_mapping,
)
from transformers.utils import logging

from .norms import function_preserving_options, init_norm_parameters

logger = logging.get_logger(__name__)

# `from_pretrained` keywords that say where and how to read the checkpoint's config
HUB_OPTIONS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")
NOT_PRESERVING_WARNING = (
    "A LayerNorm checkpoint loaded into norm_type={norm_type!r} does not compute what it computed (no option can make "
    "it), and fine-tuning may not learn from this start: calibrate it first with "
    "hf_norms.convert_model(model, {norm_type!r}, calibration_data=...) or `hf-norms convert`."
)


def register_stock_key_renames(model_type: str, stock_class_name: str) -> None:
    """Let checkpoints in the stock 4.x key layout (`vit.encoder.layer.N...`) load into `model_type`'s classes.

    transformers renames those keys only for its own classes; without this, a stock checkpoint loads nothing into a
    subclass defined outside transformers, silently.
    """
    register_checkpoint_conversion_mapping(
        model_type, get_checkpoint_conversion_mapping(stock_class_name), overwrite=True
    )


class NormPreTrainedMixin:
    """Shared behaviour of hf-norms models; mixed in front of a `PreTrainedModel` subclass.

    - `_init_weights` also initialises the norms of `norms.py` (DyT alpha, DTN gates and position projection, SepNorm's
      prefix norm, LaPE's `pe_norm`), so parameters a stock checkpoint lacks get their documented values.
    - `save_pretrained` writes the runtime key layout (which the Trainer's best-model reload and resume load fully,
      unlike transformers' default 4.x layout), the full `auto_map` of the family and the flat remote-code files.
    - `accepts_loss_kwargs = False`: every head's loss is the mean over its own batch. A `forward` taking `**kwargs`
      would otherwise make the Trainer pass `num_items_in_batch` and multiply the returned loss by the world size,
      which only undoes a loss divided by the global item count (BERT's heads, the MIM heads and the regression and
      multi-label losses ignore it): on 2 processes the logged and saved losses, and the gradients, doubled.
      The Trainer then lets DDP average the gradients and divides by the accumulation steps, as for any model.
    """

    family_auto_map: ClassVar[dict[str, str]] = {}
    accepts_loss_kwargs: ClassVar[bool] = False

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`PreTrainedModel.from_pretrained`; a LayerNorm checkpoint loaded into another `norm_type` (given as a keyword,
        without a `config`) keeps its function wherever the mathematics allows.

        For DTN, SepNorm and LaPE, the options of `norms.function_preserving_options` are used unless given (DTN gates
        at 1; SepNorm's prefix norm a LayerNorm copied from the checkpoint's; LaPE keeping the input position
        embedding with every `pe_norm` at zero). A SepNorm prefix norm asked to be a BatchNorm starts from the
        LayerNorm's gamma and beta with fresh running statistics: it normalises over the batch, so it never reproduces
        LayerNorm. DyT cannot preserve the function; a warning names `hf_norms.convert_model`, which calibrates it.
        """
        norm_type = kwargs.get("norm_type")
        if norm_type is not None and kwargs.get("config") is None and pretrained_model_name_or_path is not None:
            hub_options = {key: kwargs[key] for key in HUB_OPTIONS if key in kwargs}
            stored, _ = cls.config_class.get_config_dict(pretrained_model_name_or_path, **hub_options)
            if stored.get("norm_type", "layernorm") == "layernorm" and norm_type != "layernorm":
                preserving = function_preserving_options(norm_type, explicit=kwargs)
                if preserving is None:
                    logger.warning(NOT_PRESERVING_WARNING.format(norm_type=norm_type))
                kwargs.update(preserving or {})
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    def post_init(self) -> None:
        """Validate the config before anything else: options given to `from_pretrained(path, option=value)` are set
        on a config that was already validated, so a value out of range would otherwise go unnoticed."""
        self.config.validate()
        super().post_init()

    def _init_weights(self, module) -> None:
        super()._init_weights(module)
        init_norm_parameters(module)

    def _initialize_weights(self, module, is_custom_code: bool = False) -> None:
        # `_init_weights` here writes only through `transformers.initialization`, which skips loaded tensors, so the
        # shortcut transformers takes for remote code (skip a module whose own tensors are all loaded) is not needed;
        # it would skip SepNorm, whose missing prefix norm starts as a copy of the loaded affine.
        super()._initialize_weights(module, is_custom_code=False)

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        *args,
        save_original_format: bool = False,
        **kwargs,
    ):
        self.config.auto_map = dict(self.family_auto_map)
        return super().save_pretrained(save_directory, *args, save_original_format=save_original_format, **kwargs)
