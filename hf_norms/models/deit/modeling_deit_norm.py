"""DeiT with a selectable normalization layer: the stock DeiT classes with their LayerNorms replaced.

DeiT is ViT with a second prefix token (distillation), laid out for DTN and SepNorm as two prefix tokens then the patch
grid. Each class is the stock class of its task with `NormPreTrainedMixin` in front (see `modeling_vit_norm`).

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers.models.deit.modeling_deit import (
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    DeiTForMaskedImageModeling,
    DeiTModel,
    DeiTPreTrainedModel,
)

from ..modeling_norm_utils import NormPreTrainedMixin, register_stock_key_renames
from ..norm_placement import FamilyLayout
from .configuration_deit_norm import DeiTNormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_deit_norm.DeiTNormConfig",
    "AutoModel": "modeling_deit_norm.DeiTNormModel",
    "AutoModelForImageClassification": "modeling_deit_norm.DeiTNormForImageClassification",
    "AutoModelForMaskedImageModeling": "modeling_deit_norm.DeiTNormForMaskedImageModeling",
}


class DeiTNormPreTrainedModel(NormPreTrainedMixin, DeiTPreTrainedModel):
    config_class = DeiTNormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = FamilyLayout(layers="layers", attention_input="attention", text=False)  # as the stock ViT's


class DeiTNormModel(DeiTNormPreTrainedModel, DeiTModel):
    """[`DeiTModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class DeiTNormForImageClassification(DeiTNormPreTrainedModel, DeiTForImageClassification):
    """[`DeiTForImageClassification`] with `config.norm_type` norms: a linear head on the final [CLS] state."""

    _auto_class = "AutoModelForImageClassification"


class DeiTNormForImageClassificationWithTeacher(DeiTNormPreTrainedModel, DeiTForImageClassificationWithTeacher):
    """[`DeiTForImageClassificationWithTeacher`] with `config.norm_type` norms: [CLS] and distillation heads, averaged."""

    _auto_class = "AutoModelForImageClassification"


class DeiTNormForMaskedImageModeling(DeiTNormPreTrainedModel, DeiTForMaskedImageModeling):
    """[`DeiTForMaskedImageModeling`] (SimMIM decoder) with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedImageModeling"


register_stock_key_renames("deit_norm", "ViTModel")

__all__ = [
    "DeiTNormForImageClassification",
    "DeiTNormForImageClassificationWithTeacher",
    "DeiTNormForMaskedImageModeling",
    "DeiTNormModel",
    "DeiTNormPreTrainedModel",
]
