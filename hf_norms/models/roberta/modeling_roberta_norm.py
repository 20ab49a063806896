"""RoBERTa with a selectable normalization layer: the stock RoBERTa classes with their LayerNorms replaced.

RoBERTa is BERT's post-LN encoder (`x = norm(x + attn(x)); x = norm(x + ffn(x))`, a norm on the embedding sum and one
in the MLM head) with position ids that start after the padding index. Each class here is the stock class of its task
with `NormPreTrainedMixin` in front: the stock `__init__` builds the model, `post_init` replaces its norms
(`norm_placement`), and the stock `forward` runs. Text is laid out for DTN as `<s>` then one row of tokens, with the
attention mask keeping padding out of DTN's inter-token statistics. LaPE takes the position embeddings (a lookup table,
read where the stock embeddings compute them) out of the embedding sum and adds each layer's normalised copy to that
layer's attention input (`attention.self`). Cross-attention and head norms see no token layout.

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers import GenerationMixin
from transformers.models.roberta.modeling_roberta import (
    RobertaForCausalLM,
    RobertaForMaskedLM,
    RobertaForMultipleChoice,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaModel,
    RobertaPreTrainedModel,
)

from ..modeling_norm_utils import NormPreTrainedMixin
from ..norm_placement import FamilyLayout
from .configuration_roberta_norm import RobertaNormConfig

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_roberta_norm.RobertaNormConfig",
    "AutoModel": "modeling_roberta_norm.RobertaNormModel",
    "AutoModelForCausalLM": "modeling_roberta_norm.RobertaNormForCausalLM",
    "AutoModelForMaskedLM": "modeling_roberta_norm.RobertaNormForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_roberta_norm.RobertaNormForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_roberta_norm.RobertaNormForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_roberta_norm.RobertaNormForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_roberta_norm.RobertaNormForQuestionAnswering",
}


class RobertaNormPreTrainedModel(NormPreTrainedMixin, RobertaPreTrainedModel):
    config_class = RobertaNormConfig
    family_auto_map = FAMILY_AUTO_MAP
    family_layout = FamilyLayout(
        layers="encoder.layer", attention_input="attention.self", text=True, per_token_parts=("crossattention",)
    )


class RobertaNormModel(RobertaNormPreTrainedModel, RobertaModel):
    """[`RobertaModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"


class RobertaNormForCausalLM(RobertaNormPreTrainedModel, RobertaForCausalLM, GenerationMixin):
    """[`RobertaForCausalLM`] (causal LM with `is_decoder=True`) with `config.norm_type` norms."""

    _auto_class = "AutoModelForCausalLM"


class RobertaNormForMaskedLM(RobertaNormPreTrainedModel, RobertaForMaskedLM):
    """[`RobertaForMaskedLM`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedLM"


class RobertaNormForSequenceClassification(RobertaNormPreTrainedModel, RobertaForSequenceClassification):
    """[`RobertaForSequenceClassification`] with `config.norm_type` norms: a two-layer head on the final `<s>` state."""

    _auto_class = "AutoModelForSequenceClassification"


class RobertaNormForMultipleChoice(RobertaNormPreTrainedModel, RobertaForMultipleChoice):
    """[`RobertaForMultipleChoice`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMultipleChoice"


class RobertaNormForTokenClassification(RobertaNormPreTrainedModel, RobertaForTokenClassification):
    """[`RobertaForTokenClassification`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForTokenClassification"


class RobertaNormForQuestionAnswering(RobertaNormPreTrainedModel, RobertaForQuestionAnswering):
    """[`RobertaForQuestionAnswering`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForQuestionAnswering"


__all__ = [
    "RobertaNormForCausalLM",
    "RobertaNormForMaskedLM",
    "RobertaNormForMultipleChoice",
    "RobertaNormForQuestionAnswering",
    "RobertaNormForSequenceClassification",
    "RobertaNormForTokenClassification",
    "RobertaNormModel",
    "RobertaNormPreTrainedModel",
]
