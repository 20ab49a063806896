"""How a model card explains each norm_type: a title, what it does to the model, a paragraph, an equation, where it
sits."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class NormText:
    """How a card explains one norm_type: a title, what it does to the model, a paragraph, a LaTeX equation, where it
    sits."""

    title: str
    headline: str
    description: str
    equation: str
    placement: str


# norm types with no statistics (element-wise functions), by the name their papers give them: their outputs follow the
# scale of their inputs, and their papers tested pre-LN transformers only
STATISTICS_FREE = {"dyt": "DyT", "derf": "Derf"}

NORM_TEXTS = {
    "layernorm": NormText(
        title="LayerNorm",
        headline="with its stock LayerNorms",
        description="The stock LayerNorm: statistics over the channels of each token, then a per-channel affine map.",
        equation=r"y = \gamma \odot \frac{x - \mu(x)}{\sqrt{\sigma^2(x) + \epsilon}} + \beta",
        placement="Every norm of the stock model is a LayerNorm; the model is the stock architecture.",
    ),
    "dyt": NormText(
        title="Dynamic Tanh (DyT)",
        headline="with **Dynamic Tanh (DyT)** in place of its LayerNorms",
        description=(
            "DyT replaces normalization by an element-wise squashing function with a learnable input scale. It "
            "computes no statistics: each channel of each token is mapped on its own."
        ),
        equation=r"y = \gamma \odot \tanh(\alpha x) + \beta",
        placement=(
            "`alpha` is one learnable scalar per norm (or one per channel with `dyt_per_channel_alpha`); `gamma` and "
            "`beta` are the per-channel `weight` and `bias`. Every LayerNorm of the model is replaced."
        ),
    ),
    "derf": NormText(
        title="Dynamic erf (Derf)",
        headline="with **Dynamic erf (Derf)** in place of its LayerNorms",
        description=(
            "Derf, DyT's successor, replaces normalization by the error function of a learnably scaled and shifted "
            "input. It computes no statistics: each channel of each token is mapped on its own."
        ),
        equation=r"y = \gamma \odot \mathrm{erf}(\alpha x + s) + \beta",
        placement=(
            "`alpha` and the shift `s` are one learnable scalar each per norm (or one per channel with "
            "`derf_per_channel`); `gamma` and `beta` are the per-channel `weight` and `bias`. Every LayerNorm of the "
            "model is replaced."
        ),
    ),
    "dtn": NormText(
        title="Dynamic Token Normalization (DTN)",
        headline="with **Dynamic Token Normalization (DTN)** in place of its LayerNorms",
        description=(
            "DTN mixes, per head group of channels, the LayerNorm statistics of each token with statistics gathered "
            "across tokens, weighted by learned functions of the relative position of the tokens."
        ),
        equation=(
            r"\mu_h = \lambda_\mu \mu^{LN} + (1 - \lambda_\mu) P_h x_h,\quad "
            r"\sigma^2_h = \lambda_\sigma \sigma^{2,LN} + (1 - \lambda_\sigma)\left(P_h x_h^2 - (P_h x_h)^2\right),\quad "
            r"y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta"
        ),
        placement=(
            r"`P_h = softmax(a_h · R + b_h)` over source tokens, with `R` the relative offsets `(dx, dy, dx² + dy²)` on "
            "the patch grid (one row for text); the gates `λ` are per head. Prefix tokens ([CLS], DeiT's "
            "distillation token) keep LayerNorm statistics, and padding never enters the shared statistics. With "
            "both gates at 1 it is exactly LayerNorm."
        ),
    ),
    "sepnorm": NormText(
        title="SepNorm",
        headline="with **SepNorm** in place of its LayerNorms",
        description="SepNorm normalizes the prefix tokens ([CLS], and DeiT's distillation token) with their own norm.",
        equation=r"y_{\mathrm{prefix}} = \mathrm{Norm}_{\mathrm{prefix}}(x_{\mathrm{prefix}}),\quad y_{\mathrm{tokens}} = \mathrm{LN}(x_{\mathrm{tokens}})",
        placement=(
            "The prefix norm is a BatchNorm over the batch (the paper's default) or a LayerNorm "
            "(`sepnorm_prefix_norm`); every LayerNorm of the model is replaced."
        ),
    ),
    "lape": NormText(
        title="LaPE (layer-adaptive position embedding)",
        headline="with **LaPE**: its position embedding normalized by its own LayerNorm in every layer",
        description=(
            "LaPE takes the position embedding out of the input sum: each layer normalizes it with its own "
            "LayerNorm and adds it to that layer's attention input only."
        ),
        equation=(
            r"p_l = \mathrm{LN}^{pe}_l(p_{l-1}),\quad x \leftarrow x + \mathrm{Attn}(\mathrm{LN}(x) + p_l),\quad "
            r"x \leftarrow x + \mathrm{MLP}(\mathrm{LN}(x))"
        ),
        placement=(
            '`lape_mode="shared"` normalizes the input embedding `p_0` at every layer instead of the previous '
            "layer's; `lape_keep_input_pe` keeps the embedding in the input as well, with every `pe_norm` starting "
            "at zero."
        ),
    ),
}


def with_kept_layernorms(
    text: NormText, norm_type: str, layer_norm_types: list[str] | None, family: str = ""
) -> NormText:
    """`text` for a checkpoint whose config `layer_norm_types` keeps LayerNorm in some encoder layers: the headline and
    the placement name the layers that keep it instead of saying that every LayerNorm is replaced."""
    kept = [index for index, kind in enumerate(layer_norm_types or []) if kind == "layernorm"]
    if norm_type == "layernorm" or not kept:
        return text
    converted = [index for index, kind in enumerate(layer_norm_types) if kind != "layernorm"]
    name = lambda indices: f"layer{'s' if len(indices) != 1 else ''} {', '.join(map(str, indices)) or 'none'}"  # noqa: E731
    placement = text.placement
    for sentence in ("Every LayerNorm of the model is replaced.", "; every LayerNorm of the model is replaced."):
        placement = placement.replace(sentence, "." if sentence.startswith(";") else "").strip()
    return replace(
        text,
        headline=f"{text.headline} in encoder {name(converted)} ({name(kept)} keeping LayerNorm)",
        placement=(
            f"{placement} Not every LayerNorm is replaced: encoder {name(kept)} keep{'s' if len(kept) == 1 else ''} "
            f"LayerNorm (config `layer_norm_types`), {name(converted)} use{'s' if len(converted) == 1 else ''} "
            f"`{norm_type}`; the norms after the encoder follow the last layer"
            + (", the embedding norm the first." if family == "bert" else ".")
        ),
    )
