"""hf-norms: DyT, DTN, SepNorm and LaPE normalization for Hugging Face ViT, DeiT and BERT models.

Importing the package registers the `vit_norm`, `deit_norm` and `bert_norm` model types with `AutoConfig` and every
matching `AutoModel*` class, so `AutoModel.from_pretrained("org/vit-dyt")` works.
"""

from .auto_registration import register_auto_classes
from .configuration_bert_norm import BertNormConfig
from .configuration_deit_norm import DeiTNormConfig
from .configuration_vit_norm import ViTNormConfig
from .convert import convert
from .modeling_bert_norm import (
    BertNormForMaskedLM,
    BertNormForMultipleChoice,
    BertNormForNextSentencePrediction,
    BertNormForPreTraining,
    BertNormForQuestionAnswering,
    BertNormForSequenceClassification,
    BertNormForTokenClassification,
    BertNormLMHeadModel,
    BertNormModel,
)
from .modeling_deit_norm import (
    DeiTNormForImageClassification,
    DeiTNormForImageClassificationWithTeacher,
    DeiTNormForMaskedImageModeling,
    DeiTNormModel,
)
from .modeling_vit_norm import ViTNormForImageClassification, ViTNormForMaskedImageModeling, ViTNormModel
from .norms import (
    NORM_TYPES,
    DynamicTanh,
    DynamicTokenNorm,
    LayerNorm,
    PositionEmbeddingNorm,
    SeparateNorm,
    TokenLayout,
)
from .publish import push_to_hub

__version__ = "0.1.0"

register_auto_classes()

__all__ = [
    "NORM_TYPES",
    "BertNormConfig",
    "BertNormForMaskedLM",
    "BertNormForMultipleChoice",
    "BertNormForNextSentencePrediction",
    "BertNormForPreTraining",
    "BertNormForQuestionAnswering",
    "BertNormForSequenceClassification",
    "BertNormForTokenClassification",
    "BertNormLMHeadModel",
    "BertNormModel",
    "DeiTNormConfig",
    "DeiTNormForImageClassification",
    "DeiTNormForImageClassificationWithTeacher",
    "DeiTNormForMaskedImageModeling",
    "DeiTNormModel",
    "DynamicTanh",
    "DynamicTokenNorm",
    "LayerNorm",
    "PositionEmbeddingNorm",
    "SeparateNorm",
    "TokenLayout",
    "ViTNormConfig",
    "ViTNormForImageClassification",
    "ViTNormForMaskedImageModeling",
    "ViTNormModel",
    "convert",
    "push_to_hub",
]
