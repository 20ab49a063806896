"""ViT with a selectable normalization layer: the stock ViT classes with their LayerNorms replaced.

ViT is pre-LN: `x = x + attn(norm_before(x)); x = x + mlp(norm_after(x))`, then a final norm. Each class here is the
stock class of its task with `NormPreTrainedMixin` in front: the stock `__init__` builds the model, `post_init`
replaces its norms (`norm_placement`), and the stock `forward` runs. Tokens are laid out for DTN as [CLS] then the
patch grid of the image; LaPE adds each layer's normalised position embedding to its attention input.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers.models.vit.modeling_vit import (
    ViTForImageClassification,
    ViTForMaskedImageModeling,
    ViTModel,
    ViTPreTrainedModel,
)

from ..modeling_norm_utils import NormPreTrainedMixin, register_stock_key_renames
from ..norm_placement import FamilyLayout
from .configuration_vit_norm import ViTNormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_vit_norm.ViTNormConfig",
    "AutoModel": "modeling_vit_norm.ViTNormModel",
    "AutoModelForImageClassification": "modeling_vit_norm.ViTNormForImageClassification",
    "AutoModelForMaskedImageModeling": "modeling_vit_norm.ViTNormForMaskedImageModeling",
}
# where the stock ViT and DeiT keep their layers and what each layer's attention reads
VISION_LAYOUT = FamilyLayout(layers="layers", attention_input="attention", text=False)


class ViTNormPreTrainedModel(NormPreTrainedMixin, ViTPreTrainedModel):
    config_class = ViTNormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = VISION_LAYOUT


class ViTNormModel(ViTNormPreTrainedModel, ViTModel):
    """[`ViTModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class ViTNormForImageClassification(ViTNormPreTrainedModel, ViTForImageClassification):
    """[`ViTForImageClassification`] with `config.norm_type` norms: a linear head on the final [CLS] state."""

    _auto_class = "AutoModelForImageClassification"


class ViTNormForMaskedImageModeling(ViTNormPreTrainedModel, ViTForMaskedImageModeling):
    """[`ViTForMaskedImageModeling`] (SimMIM decoder) with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedImageModeling"


register_stock_key_renames("vit_norm", "ViTModel")

__all__ = [
    "VISION_LAYOUT",
    "ViTNormForImageClassification",
    "ViTNormForMaskedImageModeling",
    "ViTNormModel",
    "ViTNormPreTrainedModel",
]
