"""Putting hf-norms' norms into a stock transformers model, as peft puts its adapters: build the stock model as it is,
then replace its LayerNorm modules in place.

The stock `forward`, attention implementations, masks, output recording, caches, gradient checkpointing and weight
loading all stay transformers' own; only the norm modules change (same attribute names, same parameter names, so
checkpoints load either way). What a norm needs beyond its input tensor is handed to it here, once:

- the token layout of the forward pass running now (prefix tokens, patch grid or text row, padding mask), through a
  `NormContext` that a forward pre-hook on the base model fills from the model's own inputs (DTN, SepNorm);
- LaPE's position embeddings: each encoder layer gets a `pe_norm`; the stock position embeddings are read where the
  stock embeddings compute them, and each layer's normalised copy is added to that layer's attention input by a
  forward pre-hook on the module that reads it (BERT: `attention.self`; ViT, DeiT, DINOv2: `attention`).

A checkpoint's remote code is generated from this file (`models/checkpoint_code.py`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

from ..norms.build import FIRST_LAYER, LAST_LAYER, adds_input_position_embeddings, build_norm, build_position_norm
from ..norms.lape import lape_position_embeddings
from ..norms.runtime import is_traced
from ..norms.token_layout import TokenLayout, sequence_prefix_mask


@dataclass(frozen=True)
class FamilyLayout:
    """Where a family's stock model keeps what placing the norms needs (paths below the base model).

    `layers`: the `ModuleList` of encoder layers; `attention_input`: the module of each layer whose input is the
    attention input (LaPE adds its position embedding there); `text`: tokens form one row after the prefix (else a
    patch grid of the image); `per_token_parts`: path parts of norms that see no token layout (cross-attention);
    `first_layer_norms`: norms outside the embeddings that run before the encoder and so count as the first layer's
    (CLIP's `pre_layrnorm`), as the embeddings' norm does; `pooled_norms`: norms the stock model calls on one token
    per example, `[batch, hidden]` (CLIP's `post_layernorm` on the pooled [CLS]), which hf-norms' norms see as a
    sequence of that one prefix token.
    """

    layers: str
    attention_input: str
    text: bool
    per_token_parts: tuple[str, ...] = field(default=())
    first_layer_norms: tuple[str, ...] = field(default=())
    pooled_norms: tuple[str, ...] = field(default=())


@dataclass
class NormContext:
    """What the norms of one model read during a forward pass: its token layout and LaPE's per-layer embeddings.

    Filled by the model's forward pre-hooks at each call; a norm called outside a model call (or on a sequence of
    another length) falls back to `default_layout`.
    """

    num_prefix_tokens: int
    text: bool
    layout: TokenLayout | None = None
    per_layer_positions: list[torch.Tensor] | None = None

    def __deepcopy__(self, memo: dict) -> NormContext:
        """Copies share the context: a norm copied alone (peft's `modules_to_save`) still reads its model's calls,
        and a copied model's hooks fill it at each of its own calls before its norms read it."""
        return self

    def layout_for(self, hidden_states: torch.Tensor) -> TokenLayout:
        """The layout of the running call when it fits `hidden_states` `[batch, seq_len, hidden]`; for text states
        shorter than the call's sequence, that of its last tokens (a head that keeps only the last logits,
        `logits_to_keep`), whose prefix is what of the call's prefix they still hold; else the default."""
        layout = self.layout
        if layout is not None and layout.fits(hidden_states):
            return layout
        length = hidden_states.shape[1]
        if layout is not None and self.text and length < layout.num_prefix_tokens + layout.grid_size[1]:
            dropped = layout.num_prefix_tokens + layout.grid_size[1] - length
            prefix = max(layout.num_prefix_tokens - dropped, 0)
            mask = layout.padding_mask[:, -length:] if layout.padding_mask is not None else None
            prefix_mask = layout.prefix_mask[:, -length:] if layout.prefix_mask is not None else None
            return TokenLayout(prefix, (1, length - prefix), mask, prefix_mask, layout.packed)
        return self.default_layout(length)

    def default_layout(self, seq_len: int) -> TokenLayout:
        """The prefix tokens, then one row (text) or a square grid (images) of the remaining tokens."""
        rest = max(seq_len - self.num_prefix_tokens, 0)
        if self.text:
            return TokenLayout(self.num_prefix_tokens, (1, rest))
        side = round(rest**0.5)
        return TokenLayout(self.num_prefix_tokens, (side, side))


def norm_position(name: str, family: FamilyLayout) -> tuple[int, bool]:
    """(encoder layer index for `build_norm`, whether the norm must work per token) of the norm at `name`, a path
    below the base model: `family.layers.N....` is layer N, the embeddings' norm and `family.first_layer_norms` the
    first, any other the last."""
    parts = name.split(".")
    per_token = any(part in parts for part in family.per_token_parts)
    if name.startswith(family.layers + "."):
        return int(name[len(family.layers) + 1 :].split(".")[0]), per_token
    first = parts[0] == "embeddings" or name in family.first_layer_norms
    return (FIRST_LAYER if first else LAST_LAYER), per_token


def stock_layer_norms(model: nn.Module, hidden_size: int) -> list[tuple[str, nn.LayerNorm]]:
    """The stock `nn.LayerNorm`s of size `hidden_size` in `model` (exactly that class: hf-norms' own are left)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.LayerNorm and tuple(module.normalized_shape) == (hidden_size,)
    ]


def place_norms(model: nn.Module, family: FamilyLayout) -> NormContext:
    """Replace every stock LayerNorm of `model` (a stock model or head, built from an hf-norms config) with the norm
    its config chooses, hand the norms their context, and add LaPE's position norms. Returns the context."""
    config = model.config
    base = getattr(model, "base_model", model)
    context = NormContext(config.num_prefix_tokens, family.text)
    base_names = {id(module): name for name, module in base.named_modules()}
    for name, stock in stock_layer_norms(model, config.hidden_size):
        base_name = base_names.get(id(stock))
        if base_name is None:  # a task head's norm sees no token layout
            index, per_token = LAST_LAYER, True
        else:
            index, per_token = norm_position(base_name, family)
        norm = build_norm(
            config, config.num_prefix_tokens, layer_index=index, one_dimensional=family.text, per_token=per_token
        )
        norm.norm_context = context
        if base_name in family.pooled_norms:
            norm.register_forward_pre_hook(one_token_input)
            norm.register_forward_hook(pooled_output)
        model.set_submodule(name, norm)
    base.register_forward_pre_hook(LayoutHook(base, context, getattr(config, "patch_size", None)), with_kwargs=True)
    if build_position_norm(config) is not None:
        place_position_norms(base, family, context)
    return context


def one_token_input(module: nn.Module, args: tuple) -> tuple | None:
    """Forward pre-hook of a pooled norm: its `[batch, hidden]` input as a sequence of one token."""
    return (args[0].unsqueeze(1), *args[1:]) if args and args[0].dim() == 2 else None


def pooled_output(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """Forward hook of a pooled norm: the one-token sequence back to `[batch, hidden]`."""
    return output.squeeze(1) if output.dim() == 3 and output.shape[1] == 1 else output


def parameter_names(module: nn.Module) -> list[str]:
    """The names of `module.forward`'s parameters, in order (to name the positional arguments of a call)."""
    return [name for name in inspect.signature(module.forward).parameters if name not in ("args", "kwargs")]


class LayoutHook:
    """Forward pre-hook of the base model: sets `context.layout` from the call's inputs. An object rather than a
    closure, so that `copy.deepcopy(model)` gives the copy hooks that fill the copy's context."""

    def __init__(self, base: nn.Module, context: NormContext, patch_size):
        self.context = context
        self.patch_size = patch_size
        self.names = parameter_names(base)

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        call = {**dict(zip(self.names, args, strict=False)), **kwargs}
        context = self.context
        context.layout = (
            text_layout(call, context.num_prefix_tokens)
            if context.text
            else image_layout(call, context.num_prefix_tokens, self.patch_size)
        )


def text_layout(call: dict, num_prefix_tokens: int) -> TokenLayout | None:
    """[CLS] then one row of tokens, each sequence's [CLS] found from the attention mask and the position ids
    (`prefix_positions`); while decoding with a cache, the new tokens have no [CLS] among them."""
    tokens = call.get("input_ids")
    tokens = tokens if tokens is not None else call.get("inputs_embeds")
    if tokens is None:
        return None
    seq_length = tokens.shape[1]
    cache = call.get("cache", call.get("past_key_values"))
    past_length = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
    prefix = num_prefix_tokens if past_length == 0 else 0
    mask = call.get("attention_mask")
    padding_mask = mask[:, -seq_length:] if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
    # rows are packed (several sequences each) when position ids come without a mask, as transformers finds them
    position_ids = call.get("position_ids")
    packed = isinstance(position_ids, torch.Tensor) and padding_mask is None and prefix > 0
    prefix_mask = prefix_positions(prefix, padding_mask, position_ids if packed else None, tokens.shape[:2])
    return TokenLayout(prefix, (1, seq_length - prefix), padding_mask, prefix_mask, packed)


def prefix_positions(
    prefix: int, padding_mask: torch.Tensor | None, packed_positions: torch.Tensor | None, shape: torch.Size
) -> torch.Tensor | None:
    """Where each sequence's `prefix` first tokens are (`token_layout.sequence_prefix_mask`: each row's first real
    tokens, or each packed sequence's first tokens), or None when they are the first `prefix` tokens of every row.
    Eagerly, the usual layout gives None, so that norms keep their fast slices."""
    if prefix == 0 or (padding_mask is None and packed_positions is None):
        return None
    prefix_mask = sequence_prefix_mask(prefix, padding_mask, packed_positions, shape)
    if is_traced():
        return prefix_mask
    first = torch.arange(shape[1], device=prefix_mask.device) < prefix
    return None if torch.equal(prefix_mask, first.expand(shape)) else prefix_mask


def image_layout(call: dict, num_prefix_tokens: int, patch_size) -> TokenLayout | None:
    """Prefix tokens, then the patch grid of this image size (row-major)."""
    pixel_values = call.get("pixel_values")
    if pixel_values is None:
        return None
    patch_h, patch_w = patch_size if isinstance(patch_size, (tuple, list)) else (patch_size, patch_size)
    height, width = pixel_values.shape[-2:]
    return TokenLayout(num_prefix_tokens, (height // patch_h, width // patch_w))


def place_position_norms(base: nn.Module, family: FamilyLayout, context: NormContext) -> None:
    """LaPE: a `pe_norm` in each encoder layer, the stock position embeddings read as they are computed (and left out
    of the input sum unless `lape_keep_input_pe`), each layer's normalised copy added to its attention input."""
    config = base.config
    layers = base.get_submodule(family.layers)
    for index, layer in enumerate(layers):
        layer.pe_norm = build_position_norm(config)
        attention = layer.get_submodule(family.attention_input)
        attention.register_forward_pre_hook(PositionAddingHook(context, index), with_kwargs=True)
    recorder = PositionRecorder(context, layers, config.lape_mode == "cascade", adds_input_position_embeddings(config))
    embeddings = base.embeddings
    if isinstance(getattr(embeddings, "position_embeddings", None), nn.Embedding):  # text: a lookup table
        embeddings.position_embeddings.register_forward_hook(recorder.forward_hook)
    else:  # images: a table the stock forward adds as it is, or through `interpolate_pos_encoding` when asked
        reader = ImagePositionReader(embeddings, recorder)
        embeddings.interpolate_pos_encoding = reader
        embeddings.register_forward_pre_hook(ReadPositionsOnEveryCall(embeddings, reader), with_kwargs=True)


class PositionRecorder:
    """Stores each layer's normalised position embedding (`lape_position_embeddings`) in the context when the stock
    embeddings compute the position embeddings, and gives back what they add to the input: the embeddings themselves
    (`lape_keep_input_pe`) or zeros."""

    def __init__(self, context: NormContext, layers: nn.ModuleList, cascade: bool, keep_input: bool):
        self.context, self.layers, self.cascade, self.keep_input = context, layers, cascade, keep_input

    def __call__(self, position_embeddings: torch.Tensor) -> torch.Tensor:
        pe_norms = [layer.pe_norm for layer in self.layers]
        self.context.per_layer_positions = lape_position_embeddings(pe_norms, position_embeddings, self.cascade)
        return position_embeddings if self.keep_input else torch.zeros_like(position_embeddings)

    def forward_hook(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        return self(output)


class ImagePositionReader:
    """Stands for the image embeddings' `interpolate_pos_encoding`, which `ReadPositionsOnEveryCall` has the stock
    forward call on every call: the position embeddings the stock forward would add, through the recorder.

    When the call asked to interpolate (DINOv2 always does), they are the stock method's result; otherwise the stock
    forward adds its table unchanged, and so does this: the table itself (ViT, DeiT: a parameter, of any grid, square
    or not), or, where the table is a lookup (CLIP's `nn.Embedding`, of a square grid), the stock method's lookup at
    the trained size."""

    def __init__(self, embeddings: nn.Module, recorder: PositionRecorder):
        self.embeddings, self.recorder = embeddings, recorder
        self.interpolating = True  # set by `ReadPositionsOnEveryCall` before each call

    def __call__(self, inputs: torch.Tensor, height: int, width: int) -> torch.Tensor:
        table = getattr(self.embeddings, "position_embeddings", None)
        if self.interpolating or not isinstance(table, torch.Tensor):
            table = type(self.embeddings).interpolate_pos_encoding(self.embeddings, inputs, height, width)
        return self.recorder(table)


class ReadPositionsOnEveryCall:
    """Forward pre-hook of image embeddings whose `forward` adds the table directly unless asked to interpolate (ViT,
    DeiT, CLIP): checks the image size as the stock forward does, tells the reader whether the call asked to
    interpolate, and asks the stock forward to, so that it reads its position embeddings through the reader."""

    def __init__(self, embeddings: nn.Module, reader: ImagePositionReader):
        self.names = parameter_names(embeddings)
        self.reader = reader

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        call = {**dict(zip(self.names, args, strict=False)), **kwargs}
        asked = "interpolate_pos_encoding" not in self.names or bool(call.get("interpolate_pos_encoding"))
        self.reader.interpolating = asked
        if asked:
            return None
        height, width = call["pixel_values"].shape[-2:]
        expected = getattr(module, "patch_embeddings", module).image_size  # CLIP keeps an int on the embeddings
        expected = tuple(expected) if isinstance(expected, (tuple, list)) else (expected, expected)
        if (height, width) != expected:
            raise ValueError(f"Input image size ({height}*{width}) doesn't match model ({expected[0]}*{expected[1]}).")
        return args, {**kwargs, "interpolate_pos_encoding": True}


class PositionAddingHook:
    """Forward pre-hook of a layer's attention-input module: adds layer `index`'s normalised position embedding."""

    def __init__(self, context: NormContext, index: int):
        self.context, self.index = context, index

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict):
        positions = self.context.per_layer_positions
        if positions is None:
            return None
        if args:
            return (args[0] + positions[self.index], *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + positions[self.index]}
