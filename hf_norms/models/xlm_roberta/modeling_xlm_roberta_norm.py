"""XLM-RoBERTa with a selectable normalization layer: the stock XLM-RoBERTa classes with their LayerNorms replaced.

XLM-RoBERTa is RoBERTa's post-LN encoder with a multilingual vocabulary: `x = norm(x + attn(x)); x = norm(x + ffn(x))`,
a norm on the embedding sum and one in the MLM head, position ids that start after the padding index, and its base
model under the prefix `roberta`. Each class here is the stock class of its task with `NormPreTrainedMixin` in front:
the stock `__init__` builds the model, `post_init` replaces its norms (`norm_placement`), and the stock `forward` runs.
Text is laid out for DTN as `<s>` then one row of tokens, with the attention mask keeping padding out of DTN's
inter-token statistics. LaPE takes the position embeddings (a lookup table, read where the stock embeddings compute
them) out of the embedding sum and adds each layer's normalised copy to that layer's attention input
(`attention.self`). Cross-attention and head norms see no token layout.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers import GenerationMixin
from transformers.models.xlm_roberta.modeling_xlm_roberta import (
    XLMRobertaForCausalLM,
    XLMRobertaForMaskedLM,
    XLMRobertaForMultipleChoice,
    XLMRobertaForQuestionAnswering,
    XLMRobertaForSequenceClassification,
    XLMRobertaForTokenClassification,
    XLMRobertaModel,
    XLMRobertaPreTrainedModel,
)

from ..modeling_norm_utils import NormPreTrainedMixin
from ..norm_placement import FamilyLayout
from .configuration_xlm_roberta_norm import XLMRobertaNormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_xlm_roberta_norm.XLMRobertaNormConfig",
    "AutoModel": "modeling_xlm_roberta_norm.XLMRobertaNormModel",
    "AutoModelForCausalLM": "modeling_xlm_roberta_norm.XLMRobertaNormForCausalLM",
    "AutoModelForMaskedLM": "modeling_xlm_roberta_norm.XLMRobertaNormForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_xlm_roberta_norm.XLMRobertaNormForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_xlm_roberta_norm.XLMRobertaNormForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_xlm_roberta_norm.XLMRobertaNormForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_xlm_roberta_norm.XLMRobertaNormForQuestionAnswering",
}


class XLMRobertaNormPreTrainedModel(NormPreTrainedMixin, XLMRobertaPreTrainedModel):
    config_class = XLMRobertaNormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = FamilyLayout(
        layers="encoder.layer", attention_input="attention.self", text=True, per_token_parts=("crossattention",)
    )


class XLMRobertaNormModel(XLMRobertaNormPreTrainedModel, XLMRobertaModel):
    """[`XLMRobertaModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class XLMRobertaNormForCausalLM(XLMRobertaNormPreTrainedModel, XLMRobertaForCausalLM, GenerationMixin):
    """[`XLMRobertaForCausalLM`] (causal LM with `is_decoder=True`) with `config.norm_type` norms."""

    _auto_class = "AutoModelForCausalLM"


class XLMRobertaNormForMaskedLM(XLMRobertaNormPreTrainedModel, XLMRobertaForMaskedLM):
    """[`XLMRobertaForMaskedLM`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedLM"


class XLMRobertaNormForSequenceClassification(XLMRobertaNormPreTrainedModel, XLMRobertaForSequenceClassification):
    """[`XLMRobertaForSequenceClassification`] with `config.norm_type` norms: a head on the final `<s>` state."""

    _auto_class = "AutoModelForSequenceClassification"


class XLMRobertaNormForMultipleChoice(XLMRobertaNormPreTrainedModel, XLMRobertaForMultipleChoice):
    """[`XLMRobertaForMultipleChoice`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMultipleChoice"


class XLMRobertaNormForTokenClassification(XLMRobertaNormPreTrainedModel, XLMRobertaForTokenClassification):
    """[`XLMRobertaForTokenClassification`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForTokenClassification"


class XLMRobertaNormForQuestionAnswering(XLMRobertaNormPreTrainedModel, XLMRobertaForQuestionAnswering):
    """[`XLMRobertaForQuestionAnswering`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForQuestionAnswering"


__all__ = [
    "XLMRobertaNormForCausalLM",
    "XLMRobertaNormForMaskedLM",
    "XLMRobertaNormForMultipleChoice",
    "XLMRobertaNormForQuestionAnswering",
    "XLMRobertaNormForSequenceClassification",
    "XLMRobertaNormForTokenClassification",
    "XLMRobertaNormModel",
    "XLMRobertaNormPreTrainedModel",
]
