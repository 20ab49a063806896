"""DeiT with a selectable normalization layer.

DeiT is ViT with a second prefix token (distillation) and zero-initialised embeddings; it runs on the shared vision
mechanism of `modeling_vit_norm` (`VisionNormModel` and friends) and reuses the stock DeiT heads' `forward`.
"""

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from torch import nn
from transformers import PreTrainedModel
from transformers.models.deit.modeling_deit import (
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    DeiTForMaskedImageModeling,
)

from .configuration_deit_norm import DeiTNormConfig
from .modeling_norm_utils import register_stock_key_renames
from .modeling_vision_norm import VisionNormModel, VisionNormPreTrainedModel, linear_head

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_deit_norm.DeiTNormConfig",
    "AutoModel": "modeling_deit_norm.DeiTNormModel",
    "AutoModelForImageClassification": "modeling_deit_norm.DeiTNormForImageClassification",
    "AutoModelForMaskedImageModeling": "modeling_deit_norm.DeiTNormForMaskedImageModeling",
}


class DeiTNormPreTrainedModel(VisionNormPreTrainedModel):
    config_class = DeiTNormConfig
    base_model_prefix = "deit"
    family_auto_map = FAMILY_AUTO_MAP
    zero_init_embeddings = True


class DeiTNormModel(DeiTNormPreTrainedModel, VisionNormModel):
    """[`DeiTModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class DeiTNormForImageClassification(DeiTNormPreTrainedModel, DeiTForImageClassification):
    """[`DeiTForImageClassification`] with `config.norm_type` norms: a linear head on the final [CLS] state."""

    _auto_class = "AutoModelForImageClassification"

    def __init__(self, config: DeiTNormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.deit = DeiTNormModel(config, add_pooling_layer=False)
        self.classifier = linear_head(config)
        self.post_init()


class DeiTNormForImageClassificationWithTeacher(DeiTNormPreTrainedModel, DeiTForImageClassificationWithTeacher):
    """[`DeiTForImageClassificationWithTeacher`] with `config.norm_type` norms: [CLS] and distillation heads, averaged."""

    _auto_class = "AutoModelForImageClassification"

    def __init__(self, config: DeiTNormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.deit = DeiTNormModel(config, add_pooling_layer=False)
        self.cls_classifier = linear_head(config)
        self.distillation_classifier = linear_head(config)
        self.post_init()


class DeiTNormForMaskedImageModeling(DeiTNormPreTrainedModel, DeiTForMaskedImageModeling):
    """[`DeiTForMaskedImageModeling`] (SimMIM decoder) with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedImageModeling"

    def __init__(self, config: DeiTNormConfig):
        PreTrainedModel.__init__(self, config)
        self.deit = DeiTNormModel(config, add_pooling_layer=False, use_mask_token=True)
        self.decoder = nn.Sequential(
            nn.Conv2d(config.hidden_size, config.encoder_stride**2 * config.num_channels, kernel_size=1),
            nn.PixelShuffle(config.encoder_stride),
        )
        self.post_init()


register_stock_key_renames("deit_norm", "ViTModel")

__all__ = [
    "DeiTNormForImageClassification",
    "DeiTNormForImageClassificationWithTeacher",
    "DeiTNormForMaskedImageModeling",
    "DeiTNormModel",
    "DeiTNormPreTrainedModel",
]
