"""BERT with a selectable normalization layer: the stock BERT classes with their LayerNorms replaced.

BERT is post-LN: `x = norm(x + attn(x)); x = norm(x + ffn(x))`, with a norm on the embedding sum and one in the MLM
head's transform. Each class here is the stock class of its task with `NormPreTrainedMixin` in front: the stock
`__init__` builds the model, `post_init` replaces its norms (`norm_placement`), and the stock `forward` runs. Text is
laid out for DTN as [CLS] then one row of tokens, with the attention mask keeping padding out of DTN's inter-token
statistics. LaPE takes the position embeddings out of the embedding sum and adds each layer's normalised copy to that
layer's attention input (`attention.self`). Cross-attention and head norms see no token layout (DTN stays LayerNorm
there).

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers import GenerationMixin
from transformers.models.bert.modeling_bert import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
    BertModel,
    BertPreTrainedModel,
)

from ..modeling_norm_utils import NormPreTrainedMixin
from ..norm_placement import FamilyLayout
from .configuration_bert_norm import BertNormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_bert_norm.BertNormConfig",
    "AutoModel": "modeling_bert_norm.BertNormModel",
    "AutoModelForPreTraining": "modeling_bert_norm.BertNormForPreTraining",
    "AutoModelForCausalLM": "modeling_bert_norm.BertNormLMHeadModel",
    "AutoModelForMaskedLM": "modeling_bert_norm.BertNormForMaskedLM",
    "AutoModelForNextSentencePrediction": "modeling_bert_norm.BertNormForNextSentencePrediction",
    "AutoModelForSequenceClassification": "modeling_bert_norm.BertNormForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_bert_norm.BertNormForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_bert_norm.BertNormForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_bert_norm.BertNormForQuestionAnswering",
}


class BertNormPreTrainedModel(NormPreTrainedMixin, BertPreTrainedModel):
    config_class = BertNormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = FamilyLayout(
        layers="encoder.layer", attention_input="attention.self", text=True, per_token_parts=("crossattention",)
    )


class BertNormModel(BertNormPreTrainedModel, BertModel):
    """[`BertModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class BertNormForPreTraining(BertNormPreTrainedModel, BertForPreTraining):
    """[`BertForPreTraining`] (MLM + NSP heads) with `config.norm_type` norms."""

    _auto_class = "AutoModelForPreTraining"


class BertNormLMHeadModel(BertNormPreTrainedModel, BertLMHeadModel, GenerationMixin):
    """[`BertLMHeadModel`] (causal LM with `is_decoder=True`) with `config.norm_type` norms."""

    _auto_class = "AutoModelForCausalLM"


class BertNormForMaskedLM(BertNormPreTrainedModel, BertForMaskedLM):
    """[`BertForMaskedLM`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedLM"


class BertNormForNextSentencePrediction(BertNormPreTrainedModel, BertForNextSentencePrediction):
    """[`BertForNextSentencePrediction`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForNextSentencePrediction"


class BertNormForSequenceClassification(BertNormPreTrainedModel, BertForSequenceClassification):
    """[`BertForSequenceClassification`] with `config.norm_type` norms: a linear head on the pooled [CLS] state."""

    _auto_class = "AutoModelForSequenceClassification"


class BertNormForMultipleChoice(BertNormPreTrainedModel, BertForMultipleChoice):
    """[`BertForMultipleChoice`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMultipleChoice"


class BertNormForTokenClassification(BertNormPreTrainedModel, BertForTokenClassification):
    """[`BertForTokenClassification`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForTokenClassification"


class BertNormForQuestionAnswering(BertNormPreTrainedModel, BertForQuestionAnswering):
    """[`BertForQuestionAnswering`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForQuestionAnswering"


__all__ = [
    "BertNormForMaskedLM",
    "BertNormForMultipleChoice",
    "BertNormForNextSentencePrediction",
    "BertNormForPreTraining",
    "BertNormForQuestionAnswering",
    "BertNormForSequenceClassification",
    "BertNormForTokenClassification",
    "BertNormLMHeadModel",
    "BertNormModel",
    "BertNormPreTrainedModel",
]
