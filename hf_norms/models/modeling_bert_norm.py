"""BERT with a selectable normalization layer.

BERT is post-LN: `x = norm(x + attn(x)); x = norm(x + ffn(x))`, with a norm on the embedding sum and one in the MLM
head's transform. `config.norm_type` builds each of them (`norms.build_norm`); module and parameter names stay those of
`BertModel`, so stock checkpoints load. Text is laid out for DTN as [CLS] then one row of tokens, and the attention mask
keeps padding out of DTN's inter-token statistics. LaPE takes the position embeddings out of the embedding sum and adds
each layer's normalised copy to that layer's attention input. The heads reuse the stock heads' `forward`.
"""

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    BaseModelOutputWithPoolingAndCrossAttentions,
)
from transformers.models.bert.modeling_bert import (
    BertAttention,
    BertCrossAttention,
    BertEmbeddings,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertIntermediate,
    BertLMHeadModel,
    BertModel,
    BertOnlyMLMHead,
    BertOnlyNSPHead,
    BertOutput,
    BertPooler,
    BertPreTrainedModel,
    BertPreTrainingHeads,
    BertSelfAttention,
)
from transformers.processing_utils import Unpack
from transformers.pytorch_utils import apply_chunking_to_forward
from transformers.utils import TransformersKwargs
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_bert_norm import BertNormConfig
from .modeling_norm_utils import NormPreTrainedMixin
from .norms import (
    FIRST_LAYER,
    LAST_LAYER,
    TokenLayout,
    adds_input_position_embeddings,
    build_norm,
    build_position_norm,
    lape_position_embeddings,
)

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


def sequence_norm(config: BertNormConfig, layer_index: int) -> nn.Module:
    """The norm at an encoder position (embeddings, attention output, FFN output): text is one row after [CLS]."""
    return build_norm(config, config.num_prefix_tokens, layer_index=layer_index, one_dimensional=True)


def head_norm(config: BertNormConfig, layer_index: int = LAST_LAYER) -> nn.Module:
    """The norm inside a task head (or a cross-attention), which sees no token layout: token-mixing norms (DTN) stay
    LayerNorm there."""
    return build_norm(config, config.num_prefix_tokens, layer_index=layer_index, one_dimensional=True, per_token=True)


class BertNormEmbeddings(BertEmbeddings):
    """Word + token type (+ position) embeddings, then the norm and dropout.

    `forward` returns the embeddings `[batch, seq_len, hidden]` and the position embeddings `[1 or batch, seq_len,
    hidden]`. LaPE without `lape_keep_input_pe` leaves the position embeddings out of the sum.
    """

    def __init__(self, config: BertNormConfig):
        super().__init__(config)
        self.LayerNorm = sequence_norm(config, FIRST_LAYER)
        self.add_position_embeddings = adds_input_position_embeddings(config)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_key_values_length: int = 0,
        token_layout: TokenLayout | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        input_shape = input_ids.size() if input_ids is not None else inputs_embeds.size()[:-1]
        batch_size, seq_length = input_shape
        if position_ids is None:
            position_ids = self.position_ids[:, past_key_values_length : seq_length + past_key_values_length]
        if token_type_ids is None:
            buffered_token_type_ids = self.token_type_ids.expand(position_ids.shape[0], -1)
            buffered_token_type_ids = torch.gather(buffered_token_type_ids, dim=1, index=position_ids)
            token_type_ids = buffered_token_type_ids.expand(batch_size, seq_length)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)

        position_embeddings = self.position_embeddings(position_ids)
        if self.add_position_embeddings:
            embeddings = embeddings + position_embeddings
        embeddings = self.LayerNorm(embeddings, token_layout)
        return self.dropout(embeddings), position_embeddings


def residual_norm(output: BertOutput, sublayer_output: torch.Tensor, residual: torch.Tensor, layout) -> torch.Tensor:
    """Stock `BertSelfOutput`/`BertOutput` (dense, dropout, norm of the residual sum), passing the token layout on."""
    return output.LayerNorm(output.dropout(output.dense(sublayer_output)) + residual, layout)


class BertNormLayer(GradientCheckpointingLayer):
    """Post-LN BERT layer with configurable norms.

    `x = norm(x + attn(x [+ pos])); x = norm(x + ffn(x))`, where `pos` is LaPE's normalised position embedding of this
    layer (`[1 or batch, seq_len, hidden]`), added to the attention input only, never to the residual.
    """

    def __init__(self, config: BertNormConfig, layer_idx: int):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.seq_len_dim = 1
        self.attention = BertAttention(config, is_causal=config.is_decoder, layer_idx=layer_idx)
        self.attention.output.LayerNorm = sequence_norm(config, layer_idx)
        self.is_decoder = config.is_decoder
        self.add_cross_attention = config.add_cross_attention
        if self.add_cross_attention:
            if not self.is_decoder:
                raise ValueError(f"{self} should be used as a decoder model if cross attention is added")
            self.crossattention = BertAttention(config, is_causal=False, layer_idx=layer_idx, is_cross_attention=True)
            self.crossattention.output.LayerNorm = head_norm(config, layer_idx)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)
        self.output.LayerNorm = sequence_norm(config, layer_idx)
        self.pe_norm = build_position_norm(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        position_embeddings: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        token_layout: TokenLayout | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attention_input = hidden_states if position_embeddings is None else hidden_states + position_embeddings
        self_attention_output, _ = self.attention.self(
            attention_input, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs
        )
        attention_output = residual_norm(self.attention.output, self_attention_output, hidden_states, token_layout)

        if self.is_decoder and encoder_hidden_states is not None:
            if not hasattr(self, "crossattention"):
                raise ValueError(
                    f"If `encoder_hidden_states` are passed, {self} has to be instantiated with cross-attention layers"
                    " by setting `config.add_cross_attention=True`"
                )
            attention_output, _ = self.crossattention(
                attention_output,
                None,
                encoder_hidden_states,
                encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )

        ffn_output = apply_chunking_to_forward(
            self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output
        )
        return self.output.LayerNorm(ffn_output + attention_output, token_layout)

    def feed_forward_chunk(self, attention_output: torch.Tensor) -> torch.Tensor:
        """`dropout(dense(intermediate(x)))`: per token, so it may run in chunks; the norm then sees the whole sequence."""
        return self.output.dropout(self.output.dense(self.intermediate(attention_output)))


class BertNormEncoder(nn.Module):
    """The stack of `BertNormLayer`s; computes LaPE's per-layer position embeddings on the way."""

    def __init__(self, config: BertNormConfig):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([BertNormLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        token_layout: TokenLayout | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        pe_norms = [layer.pe_norm for layer in self.layer if layer.pe_norm is not None]
        if pe_norms:
            cascade = self.config.lape_mode == "cascade"
            per_layer = lape_position_embeddings(pe_norms, position_embeddings, cascade)
        else:
            per_layer = [None] * len(self.layer)
        for layer_module, layer_position_embeddings in zip(self.layer, per_layer, strict=True):
            hidden_states = layer_module(
                hidden_states,
                attention_mask,
                encoder_hidden_states,
                layer_position_embeddings,
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                token_layout=token_layout,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, past_key_values=past_key_values if use_cache else None
        )


class BertNormPreTrainedModel(NormPreTrainedMixin, BertPreTrainedModel):
    config_class = BertNormConfig
    base_model_prefix = "bert"
    family_auto_map = FAMILY_AUTO_MAP
    _can_record_outputs = {
        "hidden_states": BertNormLayer,
        "attentions": BertSelfAttention,
        "cross_attentions": BertCrossAttention,
    }


class BertNormModel(BertNormPreTrainedModel, BertModel):
    """[`BertModel`] with `config.norm_type` norms."""

    _auto_class = "AutoModel"
    _no_split_modules = ["BertNormEmbeddings", "BertNormLayer"]

    def __init__(self, config: BertNormConfig, add_pooling_layer: bool = True):
        PreTrainedModel.__init__(self, config)
        self.gradient_checkpointing = False
        self.embeddings = BertNormEmbeddings(config)
        self.encoder = BertNormEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def token_layout(self, attention_mask: torch.Tensor | None, seq_length: int, past_length: int) -> TokenLayout:
        """[CLS] then one row of tokens; while decoding with a cache, the new tokens have no [CLS] among them."""
        num_prefix_tokens = self.config.num_prefix_tokens if past_length == 0 else 0
        padding_mask = attention_mask if attention_mask is not None and attention_mask.dim() == 2 else None
        if padding_mask is not None and padding_mask.shape[1] != seq_length:
            padding_mask = padding_mask[:, -seq_length:]
        return TokenLayout(num_prefix_tokens, (1, seq_length - num_prefix_tokens), padding_mask)

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        r"""Inputs as [`BertModel`]: `input_ids` (or `inputs_embeds`) of shape `(batch_size, seq_len)` and an optional
        `attention_mask` (1 for real tokens, 0 for padding)."""
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        use_cache = (use_cache if use_cache is not None else self.config.use_cache) if self.config.is_decoder else False
        if use_cache and past_key_values is None:
            past_key_values = (
                EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
                if encoder_hidden_states is not None or self.config.is_encoder_decoder
                else DynamicCache(config=self.config)
            )
        past_key_values_length = past_key_values.get_seq_length() if past_key_values is not None else 0

        seq_length = input_ids.shape[1] if input_ids is not None else inputs_embeds.shape[1]
        layout = self.token_layout(attention_mask, seq_length, past_key_values_length)
        embedding_output, position_embeddings = self.embeddings(
            input_ids=input_ids,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            past_key_values_length=past_key_values_length,
            token_layout=layout,
        )
        attention_mask, encoder_attention_mask = self._create_attention_masks(
            attention_mask=attention_mask,
            encoder_attention_mask=encoder_attention_mask,
            embedding_output=embedding_output,
            encoder_hidden_states=encoder_hidden_states,
            past_key_values=past_key_values,
        )
        encoder_outputs = self.encoder(
            embedding_output,
            position_embeddings,
            attention_mask=attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            use_cache=use_cache,
            token_layout=layout,
            position_ids=position_ids,
            **kwargs,
        )
        sequence_output = encoder_outputs.last_hidden_state
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            past_key_values=encoder_outputs.past_key_values,
        )


# --------------------------------------------------------------------------------------------------------------------
# Heads: the stock heads' forward, with an hf-norms encoder and head norms.
# --------------------------------------------------------------------------------------------------------------------


def mlm_head(config: BertNormConfig) -> BertOnlyMLMHead:
    head = BertOnlyMLMHead(config)
    head.predictions.transform.LayerNorm = head_norm(config)
    return head


def classifier_dropout(config: BertNormConfig) -> nn.Dropout:
    return nn.Dropout(
        config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    )


class BertNormForPreTraining(BertNormPreTrainedModel, BertForPreTraining):
    """[`BertForPreTraining`] (MLM + NSP heads) with `config.norm_type` norms."""

    _auto_class = "AutoModelForPreTraining"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.bert = BertNormModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.cls.predictions.transform.LayerNorm = head_norm(config)
        self.post_init()


class BertNormLMHeadModel(BertNormPreTrainedModel, BertLMHeadModel):
    """[`BertLMHeadModel`] (causal LM with `is_decoder=True`) with `config.norm_type` norms."""

    _auto_class = "AutoModelForCausalLM"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.bert = BertNormModel(config, add_pooling_layer=False)
        self.cls = mlm_head(config)
        self.post_init()


class BertNormForMaskedLM(BertNormPreTrainedModel, BertForMaskedLM):
    """[`BertForMaskedLM`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMaskedLM"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.bert = BertNormModel(config, add_pooling_layer=False)
        self.cls = mlm_head(config)
        self.post_init()


class BertNormForNextSentencePrediction(BertNormPreTrainedModel, BertForNextSentencePrediction):
    """[`BertForNextSentencePrediction`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForNextSentencePrediction"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.bert = BertNormModel(config)
        self.cls = BertOnlyNSPHead(config)
        self.post_init()


class BertNormForSequenceClassification(BertNormPreTrainedModel, BertForSequenceClassification):
    """[`BertForSequenceClassification`] with `config.norm_type` norms: a linear head on the pooled [CLS] state."""

    _auto_class = "AutoModelForSequenceClassification"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = BertNormModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class BertNormForMultipleChoice(BertNormPreTrainedModel, BertForMultipleChoice):
    """[`BertForMultipleChoice`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForMultipleChoice"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.bert = BertNormModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()


class BertNormForTokenClassification(BertNormPreTrainedModel, BertForTokenClassification):
    """[`BertForTokenClassification`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForTokenClassification"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = BertNormModel(config, add_pooling_layer=False)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class BertNormForQuestionAnswering(BertNormPreTrainedModel, BertForQuestionAnswering):
    """[`BertForQuestionAnswering`] with `config.norm_type` norms."""

    _auto_class = "AutoModelForQuestionAnswering"

    def __init__(self, config: BertNormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = BertNormModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


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
