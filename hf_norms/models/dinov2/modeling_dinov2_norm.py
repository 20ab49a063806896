"""DINOv2 with a selectable normalization layer: the stock DINOv2 classes with their LayerNorms replaced.

The layers keep DINOv2's names and LayerScale, `x = x + ls1(attn(norm1(x))); x = x + ls2(mlp(norm2(x)))`, then a
final `layernorm`; the position grid is interpolated to every input size, as in `Dinov2Model`. Each class is the stock
class of its task with `NormPreTrainedMixin` in front (see `modeling_vit_norm`).

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers.models.dinov2.modeling_dinov2 import (
    Dinov2ForImageClassification,
    Dinov2Model,
    Dinov2PreTrainedModel,
)

from ..modeling_norm_utils import NormPreTrainedMixin, register_stock_key_renames
from ..norm_placement import FamilyLayout
from .configuration_dinov2_norm import Dinov2NormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_dinov2_norm.Dinov2NormConfig",
    "AutoModel": "modeling_dinov2_norm.Dinov2NormModel",
    "AutoModelForImageClassification": "modeling_dinov2_norm.Dinov2NormForImageClassification",
}


class Dinov2NormPreTrainedModel(NormPreTrainedMixin, Dinov2PreTrainedModel):
    config_class = Dinov2NormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = FamilyLayout(layers="encoder.layer", attention_input="attention", text=False)


class Dinov2NormModel(Dinov2NormPreTrainedModel, Dinov2Model):
    """[`Dinov2Model`] with `config.norm_type` norms; the pooler output is the final [CLS] state."""

    _auto_class = "AutoModel"


class Dinov2NormForImageClassification(Dinov2NormPreTrainedModel, Dinov2ForImageClassification):
    """[`Dinov2ForImageClassification`] with `config.norm_type` norms: a linear head on the final [CLS] state and the
    mean of the patch states."""

    _auto_class = "AutoModelForImageClassification"


register_stock_key_renames("dinov2_norm", "Dinov2Model")

__all__ = [
    "Dinov2NormForImageClassification",
    "Dinov2NormModel",
    "Dinov2NormPreTrainedModel",
]
