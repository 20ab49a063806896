"""ViT with a selectable normalization layer: the ViT classes on the shared vision mechanism (`modeling_vision_norm`).

The heads reuse the stock heads' `forward`. Copied next to a saved checkpoint for `trust_remote_code`, so it imports
nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from torch import nn
from transformers import PreTrainedModel
from transformers.models.vit.modeling_vit import ViTForImageClassification, ViTForMaskedImageModeling

from .configuration_vit_norm import ViTNormConfig
from .modeling_norm_utils import register_stock_key_renames
from .modeling_vision_norm import VisionNormModel, VisionNormPreTrainedModel, linear_head

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_vit_norm.ViTNormConfig",
    "AutoModel": "modeling_vit_norm.ViTNormModel",
    "AutoModelForImageClassification": "modeling_vit_norm.ViTNormForImageClassification",
    "AutoModelForMaskedImageModeling": "modeling_vit_norm.ViTNormForMaskedImageModeling",
}


class ViTNormPreTrainedModel(VisionNormPreTrainedModel):
    config_class = ViTNormConfig
    base_model_prefix = "vit"
    family_auto_map = FAMILY_AUTO_MAP


class ViTNormModel(ViTNormPreTrainedModel, VisionNormModel):
    """[`ViTModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class ViTNormForImageClassification(ViTNormPreTrainedModel, ViTForImageClassification):
    """[`ViTForImageClassification`] with `config.norm_type` norms: a linear head on the final [CLS] state."""

    _auto_class = "AutoModelForImageClassification"

    def __init__(self, config: ViTNormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.vit = ViTNormModel(config, add_pooling_layer=False)
        self.classifier = linear_head(config)
        self.post_init()


class ViTNormForMaskedImageModeling(ViTNormPreTrainedModel, ViTForMaskedImageModeling):
    """[`ViTForMaskedImageModeling`] (SimMIM decoder) with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedImageModeling"

    def __init__(self, config: ViTNormConfig):
        PreTrainedModel.__init__(self, config)
        self.vit = ViTNormModel(config, add_pooling_layer=False, use_mask_token=True)
        self.decoder = nn.Sequential(
            nn.Conv2d(
                config.hidden_size,
                config.encoder_stride**2 * config.num_channels,
                kernel_size=1,
            ),
            nn.PixelShuffle(config.encoder_stride),
        )
        self.post_init()


register_stock_key_renames("vit_norm", "ViTModel")

__all__ = [
    "ViTNormForImageClassification",
    "ViTNormForMaskedImageModeling",
    "ViTNormModel",
    "ViTNormPreTrainedModel",
]
