"""The vision transformer mechanism that ViT and DeiT share, with a selectable normalization layer.

The pre-LN vision transformer of transformers 5.x (`ViTModel`), with every LayerNorm (`layernorm_before`,
`layernorm_after` of each layer, the final `layernorm`) built by `norms.build_norm` from `config.norm_type`, and LaPE's
per-layer position norms. Module and parameter names are those of `ViTModel`, so stock checkpoints load. The families
differ only in their prefix tokens ([CLS] vs [CLS] + distillation), their initialisation and their heads, which subclass
`VisionNormPreTrainedModel` and `VisionNormModel` in their own files.

Copied next to a saved checkpoint for `trust_remote_code`, so it imports nothing from `hf_norms`.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from collections.abc import Iterable
from typing import ClassVar

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.models.vit.modeling_vit import (
    ViTAttention,
    ViTMLP,
    ViTPatchEmbeddings,
    ViTPooler,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, torch_int
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .modeling_norm_utils import NormPreTrainedMixin
from .norms import (
    LAST_LAYER,
    TokenLayout,
    adds_input_position_embeddings,
    build_norm,
    build_position_norm,
    lape_position_embeddings,
)

PREFIX_TOKEN_NAMES = ("cls_token", "distillation_token")


class VisionNormEmbeddings(nn.Module):
    """Prefix tokens, patch embeddings and position embeddings of ViT (1 prefix token), DeiT (2) and DINOv2 (1).

    `forward` returns the embeddings `[batch, num_prefix + num_patches, hidden]` and the position embeddings
    `[1, num_prefix + num_patches, hidden]` (interpolated to the image's grid if asked, or always with
    `always_interpolate`, as DINOv2). The position embeddings are added to the embeddings, as in the stock models,
    unless LaPE moves them into the layers (`lape` without `lape_keep_input_pe`). The mask token has the stock shape
    of each family: `[1, 1, hidden]` (ViT, DeiT) or `[1, hidden]` (DINOv2).
    """

    always_interpolate: ClassVar[bool] = False
    mask_token_shape: ClassVar[tuple[int, ...]] = (1, 1)

    def __init__(self, config, use_mask_token: bool = False):
        super().__init__()
        self.num_prefix_tokens = config.num_prefix_tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        mask_shape = (*self.mask_token_shape, config.hidden_size)
        self.mask_token = nn.Parameter(torch.zeros(mask_shape)) if use_mask_token else None
        self.patch_embeddings = ViTPatchEmbeddings(config)
        num_positions = self.patch_embeddings.num_patches + self.num_prefix_tokens
        self.position_embeddings = nn.Parameter(torch.zeros(1, num_positions, config.hidden_size))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.patch_size = config.patch_size
        self.image_size = self.patch_embeddings.image_size
        if self.num_prefix_tokens == 2:
            self.distillation_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.add_position_embeddings = adds_input_position_embeddings(config)

    def prefix_tokens(self) -> list[nn.Parameter]:
        return [getattr(self, name) for name in PREFIX_TOKEN_NAMES[: self.num_prefix_tokens]]

    def interpolate_pos_encoding(self, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Resample the patch position embeddings bicubically to the grid of a `height x width` image (as ViT/DeiT).

        The resampling runs in `promote_types(dtype, float32)`: float32 for 16-bit tables (bicubic resampling in half
        precision shifts them; as stock DINOv2), float64 for float64 ones (as stock ViT and DeiT), then rounds once.
        """
        prefix = self.num_prefix_tokens
        num_patches = embeddings.shape[1] - prefix
        num_positions = self.position_embeddings.shape[1] - prefix
        if not torch.jit.is_tracing() and num_patches == num_positions and height == width:
            return self.position_embeddings

        prefix_pos_embed = self.position_embeddings[:, :prefix]
        patch_pos_embed = self.position_embeddings[:, prefix:]
        dim = embeddings.shape[-1]
        new_height = height // self.patch_size
        new_width = width // self.patch_size
        sqrt_num_positions = torch_int(num_positions**0.5)
        patch_pos_embed = patch_pos_embed.reshape(1, sqrt_num_positions, sqrt_num_positions, dim).permute(0, 3, 1, 2)
        patch_pos_embed = nn.functional.interpolate(
            patch_pos_embed.to(torch.promote_types(patch_pos_embed.dtype, torch.float32)),
            size=(new_height, new_width),
            mode="bicubic",
            align_corners=False,
        ).to(patch_pos_embed.dtype)
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((prefix_pos_embed, patch_pos_embed), dim=1)

    def forward(
        self,
        pixel_values: torch.Tensor,
        bool_masked_pos: torch.BoolTensor | None = None,
        interpolate_pos_encoding: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch_size, _, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values)

        if bool_masked_pos is not None:
            mask_tokens = self.mask_token.expand(batch_size, embeddings.shape[1], -1)
            mask = bool_masked_pos.unsqueeze(-1).type_as(mask_tokens)
            embeddings = embeddings * (1.0 - mask) + mask_tokens * mask

        prefix = [token.expand(batch_size, -1, -1) for token in self.prefix_tokens()]
        embeddings = torch.cat((*prefix, embeddings), dim=1)

        if interpolate_pos_encoding or self.always_interpolate:
            position_embeddings = self.interpolate_pos_encoding(embeddings, height, width)
        else:
            if height != self.image_size[0] or width != self.image_size[1]:
                raise ValueError(
                    f"Input image size ({height}*{width}) doesn't match model"
                    f" ({self.image_size[0]}*{self.image_size[1]})."
                )
            position_embeddings = self.position_embeddings
        if self.add_position_embeddings:
            embeddings = embeddings + position_embeddings
        return self.dropout(embeddings), position_embeddings


class VisionNormLayer(GradientCheckpointingLayer):
    """Pre-LN transformer layer of ViT/DeiT with configurable norms.

    `x = x + attn(norm_before(x) [+ pos]); x = x + mlp(norm_after(x))`, where `pos` is LaPE's normalised position
    embedding of this layer (`[1, seq_len, hidden]`, computed by the model with this layer's `pe_norm`).
    """

    def __init__(self, config, layer_index: int):
        super().__init__()
        self.attention = ViTAttention(config)
        self.layernorm_before = build_norm(config, config.num_prefix_tokens, layer_index=layer_index)
        self.layernorm_after = build_norm(config, config.num_prefix_tokens, layer_index=layer_index)
        self.mlp = ViTMLP(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
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
        hidden_states = self.layernorm_before(hidden_states, token_layout)
        if position_embeddings is not None:
            hidden_states = hidden_states + position_embeddings
        hidden_states, _ = self.attention(hidden_states, attention_mask, **kwargs)
        hidden_states = self.dropout(hidden_states)
        hidden_states = hidden_states + residual

        residual = hidden_states
        hidden_states = self.layernorm_after(hidden_states, token_layout)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states + residual


def linear_head(config) -> nn.Module:
    """The stock classifier of ViT and DeiT: a Linear on one token's final state, or Identity with no labels."""
    return nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()


class VisionNormPreTrainedModel(NormPreTrainedMixin, PreTrainedModel):
    """Base of the ViT and DeiT norm models; families set `config`, `base_model_prefix` and `family_auto_map`."""

    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["VisionNormEmbeddings", "VisionNormLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {"hidden_states": VisionNormLayer, "attentions": ViTAttention}
    _input_embed_layer = "patch_embeddings"
    zero_init_embeddings: ClassVar[bool] = False  # DeiT starts its tokens and position embeddings at 0

    @torch.no_grad()
    def _init_weights(self, module) -> None:
        super()._init_weights(module)
        if isinstance(module, VisionNormEmbeddings):
            for tensor in [module.position_embeddings, *module.prefix_tokens()]:
                if self.zero_init_embeddings:
                    init.zeros_(tensor)
                else:
                    init.trunc_normal_(tensor, mean=0.0, std=self.config.initializer_range)
            if module.mask_token is not None:
                init.zeros_(module.mask_token)


class VisionNormModel(VisionNormPreTrainedModel):
    """The bare ViT/DeiT encoder: embeddings, layers, final norm and optional pooler (stock names)."""

    def __init__(self, config, add_pooling_layer: bool = True, use_mask_token: bool = False):
        super().__init__(config)
        self.embeddings = VisionNormEmbeddings(config, use_mask_token=use_mask_token)
        self.layers = nn.ModuleList([VisionNormLayer(config, index) for index in range(config.num_hidden_layers)])
        self.layernorm = build_norm(config, config.num_prefix_tokens, layer_index=LAST_LAYER)
        self.pooler = ViTPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> ViTPatchEmbeddings:
        return self.embeddings.patch_embeddings

    @property
    def encoder_layers(self) -> nn.ModuleList:
        """The transformer layers, where the family's stock model keeps them (`layers`; DINOv2: `encoder.layer`)."""
        return self.layers

    def pool(self, sequence_output: torch.Tensor) -> torch.Tensor | None:
        """The pooler output: the pooler of ViT/DeiT on the final [CLS] state, or None without one."""
        return self.pooler(sequence_output) if self.pooler is not None else None

    def token_layout(self, pixel_values: torch.Tensor) -> TokenLayout:
        """Prefix tokens, then the patch grid of this image size (row-major)."""
        patch_size = self.config.patch_size
        patch_h, patch_w = patch_size if isinstance(patch_size, Iterable) else (patch_size, patch_size)
        height, width = pixel_values.shape[-2:]
        return TokenLayout(self.config.num_prefix_tokens, (height // patch_h, width // patch_w))

    @merge_with_config_defaults
    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        bool_masked_pos: torch.BoolTensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            Images, as prepared by the image processor.
        bool_masked_pos (`torch.BoolTensor` of shape `(batch_size, num_patches)`, *optional*):
            Masked patches (1) for masked image modeling.
        """
        if pixel_values is None:
            raise ValueError("You have to specify pixel_values")
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        if pixel_values.dtype != expected_dtype:
            pixel_values = pixel_values.to(expected_dtype)

        embedding_output, position_embeddings = self.embeddings(
            pixel_values,
            bool_masked_pos=bool_masked_pos,
            interpolate_pos_encoding=interpolate_pos_encoding,
        )
        attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=embedding_output,
            attention_mask=attention_mask,
        )
        layout = self.token_layout(pixel_values)
        layers = self.encoder_layers
        pe_norms = [layer.pe_norm for layer in layers if layer.pe_norm is not None]
        if pe_norms:
            cascade = self.config.lape_mode == "cascade"
            per_layer = lape_position_embeddings(pe_norms, position_embeddings, cascade)
        else:
            per_layer = [None] * len(layers)

        hidden_states = embedding_output
        for layer, layer_position_embeddings in zip(layers, per_layer, strict=True):
            hidden_states = layer(
                hidden_states, attention_mask, layer_position_embeddings, token_layout=layout, **kwargs
            )

        sequence_output = self.layernorm(hidden_states, layout)
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=self.pool(sequence_output))


__all__ = [
    "PREFIX_TOKEN_NAMES",
    "VisionNormEmbeddings",
    "VisionNormLayer",
    "VisionNormModel",
    "VisionNormPreTrainedModel",
    "linear_head",
]
