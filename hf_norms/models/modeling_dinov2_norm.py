"""DINOv2 with a selectable normalization layer, on the shared vision mechanism (`modeling_vision_norm`).

The layers keep DINOv2's names and LayerScale, `x = x + ls1(attn(norm1(x) [+ pos])); x = x + ls2(mlp(norm2(x)))`, so
stock `Dinov2Model` checkpoints load in both key layouts (the 4.x `attention.attention.query` names of the Hub, renamed
at load, and the 5.x runtime names). The position grid is interpolated to every input size, as in `Dinov2Model`.
Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.models.dinov2.modeling_dinov2 import (
    Dinov2Attention,
    Dinov2DropPath,
    Dinov2ForImageClassification,
    Dinov2LayerScale,
    Dinov2MLP,
    Dinov2SwiGLUFFN,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .configuration_dinov2_norm import Dinov2NormConfig
from .modeling_norm_utils import register_stock_key_renames
from .modeling_vision_norm import VisionNormEmbeddings, VisionNormModel, VisionNormPreTrainedModel
from .norms import LAST_LAYER, TokenLayout, build_norm, build_position_norm

FAMILY_AUTO_MAP = {
    "AutoConfig": "configuration_dinov2_norm.Dinov2NormConfig",
    "AutoModel": "modeling_dinov2_norm.Dinov2NormModel",
    "AutoModelForImageClassification": "modeling_dinov2_norm.Dinov2NormForImageClassification",
}


class Dinov2NormEmbeddings(VisionNormEmbeddings):
    """DINOv2's [CLS], patch and position embeddings: a `[1, hidden]` mask token, positions always interpolated."""

    always_interpolate = True
    mask_token_shape = (1,)


class Dinov2NormLayer(GradientCheckpointingLayer):
    """DINOv2's pre-LN layer with configurable norms and LayerScale: `x = x + drop_path(ls1(attn(norm1(x) [+ pos])))`,
    `x = x + drop_path(ls2(mlp(norm2(x))))`, with `pos` LaPE's normalised position embedding of this layer
    (`[1, seq_len, hidden]`)."""

    def __init__(self, config: Dinov2NormConfig, layer_index: int):
        super().__init__()
        self.norm1 = build_norm(config, config.num_prefix_tokens, layer_index=layer_index)
        self.attention = Dinov2Attention(config)
        self.layer_scale1 = Dinov2LayerScale(config)
        self.drop_path = Dinov2DropPath(config.drop_path_rate) if config.drop_path_rate > 0.0 else nn.Identity()
        self.norm2 = build_norm(config, config.num_prefix_tokens, layer_index=layer_index)
        self.mlp = Dinov2SwiGLUFFN(config) if config.use_swiglu_ffn else Dinov2MLP(config)
        self.layer_scale2 = Dinov2LayerScale(config)
        self.pe_norm = build_position_norm(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: torch.Tensor | None = None,
        token_layout: TokenLayout | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.norm1(hidden_states, token_layout)
        if position_embeddings is not None:
            hidden_states = hidden_states + position_embeddings
        hidden_states, _ = self.attention(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = self.drop_path(self.layer_scale1(hidden_states)) + residual

        residual = hidden_states
        hidden_states = self.mlp(self.norm2(hidden_states, token_layout))
        return self.drop_path(self.layer_scale2(hidden_states)) + residual


class Dinov2NormEncoder(nn.Module):
    """The layer stack, under DINOv2's name for it (`encoder.layer`)."""

    def __init__(self, config: Dinov2NormConfig):
        super().__init__()
        self.layer = nn.ModuleList([Dinov2NormLayer(config, index) for index in range(config.num_hidden_layers)])


class Dinov2NormPreTrainedModel(VisionNormPreTrainedModel):
    config_class = Dinov2NormConfig
    base_model_prefix = "dinov2"
    family_auto_map = FAMILY_AUTO_MAP
    _no_split_modules = ["Dinov2NormEmbeddings", "Dinov2NormLayer"]
    _can_record_outputs = {"hidden_states": Dinov2NormLayer, "attentions": Dinov2Attention}

    @torch.no_grad()
    def _init_weights(self, module) -> None:
        super()._init_weights(module)
        if isinstance(module, Dinov2LayerScale):
            init.constant_(module.lambda1, self.config.layerscale_value)
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            init.trunc_normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                init.zeros_(module.bias)


class Dinov2NormModel(Dinov2NormPreTrainedModel, VisionNormModel):
    """[`Dinov2Model`] with `config.norm_type` norms: embeddings, `encoder.layer`, final `layernorm`; the pooler output
    is the final [CLS] state (DINOv2 has no pooler)."""

    _auto_class = "AutoModel"

    def __init__(self, config: Dinov2NormConfig):
        Dinov2NormPreTrainedModel.__init__(self, config)
        self.embeddings = Dinov2NormEmbeddings(config, use_mask_token=config.use_mask_token)
        self.encoder = Dinov2NormEncoder(config)
        self.layernorm = build_norm(config, config.num_prefix_tokens, layer_index=LAST_LAYER)
        self.post_init()

    @property
    def encoder_layers(self) -> nn.ModuleList:
        return self.encoder.layer

    def pool(self, sequence_output: torch.Tensor) -> torch.Tensor:
        return sequence_output[:, 0]


class Dinov2NormForImageClassification(Dinov2NormPreTrainedModel, Dinov2ForImageClassification):
    """[`Dinov2ForImageClassification`] with `config.norm_type` norms: a linear head on the final [CLS] state and the
    mean of the patch states."""

    _auto_class = "AutoModelForImageClassification"

    def __init__(self, config: Dinov2NormConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.dinov2 = Dinov2NormModel(config)
        self.classifier = (
            nn.Linear(config.hidden_size * 2, config.num_labels) if config.num_labels > 0 else nn.Identity()
        )
        self.post_init()


register_stock_key_renames("dinov2_norm", "Dinov2Model")

__all__ = [
    "Dinov2NormForImageClassification",
    "Dinov2NormModel",
    "Dinov2NormPreTrainedModel",
]
