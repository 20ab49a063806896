"""The registry of hf-norms' normalization layers: `NORM_TYPES`, one `NormSpec` (`spec.py`) per `norm_type`.

A norm is its layer file (`norm_<name>.py`) plus one entry here; everything else (the config fields, building the
models, converting, calibrating, folding, training, the command line's choices, the model cards) reads this registry.
Each entry names its layer file and class, which `NormSpec.layer()` imports by name when first called, so this module
imports neither torch nor transformers (the command line reads the names from here). A checkpoint's remote code holds
its own entries only, with the fields a model reads (`checkpoint_code.registry_source`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .spec import CardText, NormSpec, Option, Paper, finite, one_of, positive_finite, unit_interval

STOCK = "layernorm"  # the stock model's norm_type
CVPR = "Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)"
REPLACED = "Every LayerNorm of the model is replaced."
# What a DyT or Derf checkpoint fine-tunes best with, and the measurement that chose it (docs/converting.md,
# "Normalization-free conversions"): LayerNorm divides each token by its own standard deviation, which keeps dropout
# noise small; DyT and Derf pass it on.
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
NO_DROPOUT_REASON = (
    "these norms pass dropout noise on where LayerNorm divided it away: all-MiniLM-L6-v2 healed to DyT and to Derf, "
    "fine-tuned with a new [CLS] `AutoModelForSequenceClassification` head and the plain `Trainer` on 400 BBC News "
    "articles (2 epochs, lr 5e-5, mean of seeds 0, 1, 2), reached 0.905 and 0.904 without dropout against 0.856 and "
    "0.849 with the source's 0.1 (the source: 0.876)"
)


def statistics_free_caveats(name: str):
    """Card caveats of a norm without statistics called `name`."""

    def caveats(options, family, untrained):
        items = [f"{name} has no statistics: its outputs depend on the scale of its inputs, unlike LayerNorm's."]
        if not family.pre_ln:
            items.append(
                f"{family.display_name} is post-LN; the {name} paper tested pre-LN transformers only, so {name} on "
                f"{family.display_name} is outside what it tested: treat it as experimental."
            )
        return items

    return caveats


def _dtn_caveats(options, family, untrained):
    items = [
        "DTN mixes statistics across tokens: a token's output depends on the other tokens of its sequence, and the "
        "model cannot run as a causal decoder."
    ]
    if family.modality == "text":
        items.append("DTN on text (one row of tokens) has no reference implementation from its authors.")
    if options["dtn_gate_init"] == 1.0 and untrained:
        items.append("Its gates are at 1, where DTN is exactly LayerNorm; token mixing acts only after training.")
    return items


def _dtn_heads(name, value, config) -> str | None:
    heads = value or config.num_attention_heads
    if heads > 0 and config.hidden_size % heads == 0:
        return None
    return f"DTN heads ({heads}) must be a positive divisor of hidden_size ({config.hidden_size}); set {name} to one."


def _sepnorm_caveats(options, family, untrained):
    if options["sepnorm_prefix_norm"] == "batchnorm":
        return [
            "The prefix norm is a BatchNorm: inference uses its running statistics, training needs batches of more "
            "than one example, and multi-process training needs SyncBatchNorm."
        ]
    return ["The prefix norm is a LayerNorm (for an exact conversion), not the BatchNorm of the paper's default."]


def _lape_caveats(options, family, untrained):
    items = []
    if options["lape_keep_input_pe"]:
        items.append(
            "The input position embedding is kept and every `pe_norm` starts at zero (a function-preserving hybrid): "
            "this is the paper's architecture only in spirit until training moves the `pe_norm`s."
        )
    if family.modality == "text":
        items.append(
            f"The LaPE paper covers vision transformers only; its {family.display_name} form here is an analogue."
        )
    return items


NORM_TYPES: dict[str, NormSpec] = {
    STOCK: NormSpec(
        name=STOCK,
        short_name="LayerNorm",
        layer_module="layernorm",
        layer_class="LayerNorm",
        text=CardText(
            title="LayerNorm",
            headline="with its stock LayerNorms",
            description="The stock LayerNorm: statistics over the channels of each token, then a per-channel affine map.",
            equation=r"y = \gamma \odot \frac{x - \mu(x)}{\sqrt{\sigma^2(x) + \epsilon}} + \beta",
            placement="Every norm of the stock model is a LayerNorm; the model is the stock architecture.",
        ),
    ),
    "dyt": NormSpec(
        name="dyt",
        short_name="DyT",
        layer_module="dyt",
        layer_class="DynamicTanh",
        text=CardText(
            title="Dynamic Tanh (DyT)",
            headline="with **Dynamic Tanh (DyT)** in place of its LayerNorms",
            description=(
                "DyT replaces normalization by an element-wise squashing function with a learnable input scale. It "
                "computes no statistics: each channel of each token is mapped on its own."
            ),
            equation=r"y = \gamma \odot \tanh(\alpha x) + \beta",
            placement=(
                "`alpha` is one learnable scalar per norm (or one per channel with `dyt_per_channel_alpha`); `gamma` "
                f"and `beta` are the per-channel `weight` and `bias`. {REPLACED}"
            ),
        ),
        paper=Paper(
            key="zhu2025dyt",
            title="Transformers without Normalization",
            authors=("Jiachen Zhu", "Xinlei Chen", "Kaiming He", "Yann LeCun", "Zhuang Liu"),
            booktitle=CVPR,
            year=2025,
            arxiv_id="2503.10622",
        ),
        options=(
            Option("dyt_alpha_init", float, 0.5, "DyT's initial alpha (> 0).", positive_finite),
            Option("dyt_per_channel_alpha", bool, False, "One alpha per channel instead of one scalar per layer."),
        ),
        preserving_options=None,
        calibration="tanh",
        conversion_options={"dyt_per_channel_alpha": True},
        added_parameters=(".alpha",),
        statistics_free=True,
        caveats=statistics_free_caveats("DyT"),
        fine_tuning_config=NO_DROPOUT,
        fine_tuning_reason=NO_DROPOUT_REASON,
    ),
    "derf": NormSpec(
        name="derf",
        short_name="Derf",
        layer_module="derf",
        layer_class="DynamicErf",
        text=CardText(
            title="Dynamic erf (Derf)",
            headline="with **Dynamic erf (Derf)** in place of its LayerNorms",
            description=(
                "Derf, DyT's successor, replaces normalization by the error function of a learnably scaled and "
                "shifted input. It computes no statistics: each channel of each token is mapped on its own."
            ),
            equation=r"y = \gamma \odot \mathrm{erf}(\alpha x + s) + \beta",
            placement=(
                "`alpha` and the shift `s` are one learnable scalar each per norm (or one per channel with "
                f"`derf_per_channel`); `gamma` and `beta` are the per-channel `weight` and `bias`. {REPLACED}"
            ),
        ),
        paper=Paper(
            key="chen2026derf",
            title="Stronger Normalization-Free Transformers",
            authors=("Mingzhi Chen", "Taiming Lu", "Jiachen Zhu", "Mingjie Sun", "Zhuang Liu"),
            booktitle=CVPR,
            year=2026,
            arxiv_id="2512.10938",
        ),
        options=(
            Option(
                "derf_alpha_init",
                float,
                0.5,
                "Derf's initial alpha (> 0), the scale inside `erf(alpha * x + shift)`; the paper's 0.5. A later "
                "study (arXiv 2604.01563) found a smaller init (0.3) better at 1B scale with the Muon optimizer.",
                positive_finite,
            ),
            Option("derf_shift_init", float, 0.0, "Derf's initial shift (finite); the paper's 0.0.", finite),
            Option(
                "derf_per_channel",
                bool,
                False,
                "One alpha and one shift per channel instead of one scalar each per layer (the paper's).",
            ),
        ),
        preserving_options=None,
        calibration="erf",
        conversion_options={"derf_per_channel": True},
        added_parameters=(".alpha", ".shift"),
        statistics_free=True,
        caveats=statistics_free_caveats("Derf"),
        fine_tuning_config=NO_DROPOUT,
        fine_tuning_reason=NO_DROPOUT_REASON,
    ),
    "dtn": NormSpec(
        name="dtn",
        short_name="DTN",
        layer_module="dtn",
        layer_class="DynamicTokenNorm",
        text=CardText(
            title="Dynamic Token Normalization (DTN)",
            headline="with **Dynamic Token Normalization (DTN)** in place of its LayerNorms",
            description=(
                "DTN mixes, per head group of channels, the LayerNorm statistics of each token with statistics "
                "gathered across tokens, weighted by learned functions of the relative position of the tokens."
            ),
            equation=(
                r"\mu_h = \lambda_\mu \mu^{LN} + (1 - \lambda_\mu) P_h x_h,\quad "
                r"\sigma^2_h = \lambda_\sigma \sigma^{2,LN} + (1 - \lambda_\sigma)\left(P_h x_h^2 - (P_h x_h)^2\right),"
                r"\quad y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta"
            ),
            placement=(
                r"`P_h = softmax(a_h · R + b_h)` over source tokens, with `R` the relative offsets `(dx, dy, dx² + "
                "dy²)` on the patch grid (one row for text); the gates `λ` are per head. Prefix tokens ([CLS], DeiT's "
                "distillation token) keep LayerNorm statistics, and padding never enters the shared statistics. With "
                "both gates at 1 it is exactly LayerNorm."
            ),
        ),
        paper=Paper(
            key="shao2022dtn",
            title="Dynamic Token Normalization Improves Vision Transformers",
            authors=(
                "Wenqi Shao",
                "Yixiao Ge",
                "Zhaoyang Zhang",
                "Xuyuan Xu",
                "Xiaogang Wang",
                "Ying Shan",
                "Ping Luo",
            ),
            booktitle="International Conference on Learning Representations (ICLR)",
            year=2022,
            arxiv_id="2112.02624",
        ),
        options=(
            Option(
                "dtn_num_heads",
                int | None,
                None,
                "DTN head groups; defaults to `num_attention_heads`. Must divide `hidden_size`.",
                _dtn_heads,
            ),
            Option(
                "dtn_gate_init",
                float,
                0.5,
                "Initial value of DTN's mean and variance gates, in [0, 1]; 1.0 is exactly LayerNorm.",
                unit_interval,
            ),
        ),
        preserving_options={"dtn_gate_init": 1.0},  # gates at 1: LayerNorm's statistics for every token
        preserving_note="mean and variance gates at 1 (LayerNorm's statistics) in {count} DTN norms",
        added_parameters=(".pos_proj.weight", ".pos_proj.bias", ".mean_gate", ".var_gate"),
        per_token=False,
        whole_sequence=True,
        caveats=_dtn_caveats,
    ),
    "sepnorm": NormSpec(
        name="sepnorm",
        short_name="SepNorm",
        layer_module="sepnorm",
        layer_class="SeparateNorm",
        whole_sequence=True,
        text=CardText(
            title="SepNorm",
            headline="with **SepNorm** in place of its LayerNorms",
            description=(
                "SepNorm normalizes the prefix tokens ([CLS], and DeiT's distillation token) with their own norm."
            ),
            equation=(
                r"y_{\mathrm{prefix}} = \mathrm{Norm}_{\mathrm{prefix}}(x_{\mathrm{prefix}}),\quad "
                r"y_{\mathrm{tokens}} = \mathrm{LN}(x_{\mathrm{tokens}})"
            ),
            placement=(
                "The prefix norm is a BatchNorm over the batch (the paper's default) or a LayerNorm "
                "(`sepnorm_prefix_norm`); every LayerNorm of the model is replaced."
            ),
        ),
        paper=Paper(
            key="chen2023sepnorm",
            title="On Separate Normalization in Self-supervised Transformers",
            authors=("Xiaohui Chen", "Yinkai Wang", "Yuanqi Du", "Soha Hassoun", "Li-Ping Liu"),
            booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
            year=2023,
            arxiv_id="2309.12931",
        ),
        options=(
            Option(
                "sepnorm_prefix_norm",
                str,
                "batchnorm",
                "SepNorm's norm for the prefix tokens: `batchnorm` (official) or `layernorm` (exact conversion).",
                one_of("batchnorm", "layernorm"),
            ),
        ),
        preserving_options={"sepnorm_prefix_norm": "layernorm"},  # both parts start as copies of the LayerNorm
        preserving_note="prefix_norm copied from the LayerNorm in {count} SepNorm norms",
        added_parameters=tuple(
            f".prefix_norm.{name}" for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
        ),
        uses_batch_statistics=lambda config: config.sepnorm_prefix_norm == "batchnorm",
        caveats=_sepnorm_caveats,
    ),
    "lape": NormSpec(
        name="lape",
        short_name="LaPE",
        layer_module="lape",
        layer_class="LayerNorm",
        position_norm_class="PositionEmbeddingNorm",
        text=CardText(
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
                "layer's; `lape_keep_input_pe` keeps the embedding in the input as well, with every `pe_norm` "
                "starting at zero."
            ),
        ),
        paper=Paper(
            key="yu2023lape",
            title="LaPE: Layer-adaptive Position Embedding for Vision Transformers with Independent Layer Normalization",
            authors=(
                "Runyi Yu",
                "Zhennan Wang",
                "Yinhuai Wang",
                "Kehan Li",
                "Chang Liu",
                "Haoyi Duan",
                "Xiangyang Ji",
                "Jie Chen",
            ),
            booktitle="Proceedings of the IEEE/CVF International Conference on Computer Vision (ICCV)",
            year=2023,
            arxiv_id="2212.05262",
            pages="5886--5896",
        ),
        options=(
            Option(
                "lape_mode",
                str,
                "cascade",
                "LaPE: `cascade` (each layer normalises the previous layer's PE, ICCV) or `shared` (each layer "
                "normalises the input PE, arXiv v1).",
                one_of("cascade", "shared"),
            ),
            Option(
                "lape_keep_input_pe",
                bool,
                False,
                "LaPE: keep the PE in the input sum and start every `pe_norm` at weight 0, bias 0, which preserves a "
                "stock model's function exactly.",
            ),
        ),
        preserving_options={"lape_keep_input_pe": True},  # the input PE stays, every pe_norm starts at zero
        preserving_note="the input position embedding kept and pe_norm at zero in {count} layers",
        added_parameters=(".pe_norm.weight", ".pe_norm.bias"),
        keeps_input_position_embeddings=lambda config: config.lape_keep_input_pe,
        caveats=_lape_caveats,
    ),
    "rmsnorm": NormSpec(
        name="rmsnorm",
        short_name="RMSNorm",
        layer_module="rmsnorm",
        layer_class="RMSNorm",
        text=CardText(
            title="RMSNorm",
            headline="with **RMSNorm** in place of its LayerNorms",
            description=(
                "RMSNorm divides each token by the root mean square of its channels, without subtracting their mean, "
                "then applies a per-channel affine map."
            ),
            equation=r"y = \gamma \odot \frac{x}{\sqrt{\overline{x^2} + \epsilon}} + \beta",
            placement=f"`beta` is optional (`rmsnorm_bias`). {REPLACED}",
        ),
        paper=Paper(
            key="zhang2019rmsnorm",
            title="Root Mean Square Layer Normalization",
            authors=("Biao Zhang", "Rico Sennrich"),
            booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
            year=2019,
            arxiv_id="1910.07467",
        ),
        options=(Option("rmsnorm_bias", bool, True, "RMSNorm with a per-channel bias (a LayerNorm's beta)."),),
        preserving_options=None,
        exact_when_centred=True,
        calibration="gradient",
        caveats=lambda options, family, untrained: (
            [
                f"{family.display_name}'s residual stream cannot be made mean-free (post-LN, it is each LayerNorm's "
                f"output), so RMSNorm on {family.display_name} is calibrated and healed, not exact."
            ]
            if family.residual is None
            else []
        ),
    ),
}
NORM_NAMES = tuple(NORM_TYPES)


def unknown_norm_type(value: object) -> str:
    """The one line saying that `value` is not a norm_type: the choices, and the nearest one where there is one
    (`"DyT"` and `"dyn"` -> `'dyt'`)."""
    near = difflib.get_close_matches(str(value).lower(), NORM_NAMES, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"norm_type={value!r} is not supported{hint}; choose one of {sorted(NORM_NAMES)}."


# Which norm each option belongs to (`dtn_gate_init` -> `dtn`)
OPTION_OWNERS = {option.name: name for name, spec in NORM_TYPES.items() for option in spec.options}
NORM_KEYWORDS = ("norm_type", "layer_norm_types", *OPTION_OWNERS)


def looks_like_a_norm_keyword(name: str) -> bool:
    """Whether keyword `name` of `from_pretrained` / `from_config` is a norm option or was meant as one: it starts with
    a norm's name (`dyt_alpha_int`), or is close to `norm_type` (`norm_typ`, `normtype`) or `layer_norm_types`."""
    return (
        name in NORM_KEYWORDS
        or name.startswith(tuple(f"{kind}_" for kind in NORM_NAMES if kind != STOCK))
        or name.startswith("layer_norm_type")
        or bool(difflib.get_close_matches(name, ("norm_type",), n=1, cutoff=0.85))
    )


def norm_keyword_problem(keywords: Iterable[str], norm_type: object, layer_norm_types: object = None) -> str | None:
    """The one line about the norm keywords a caller gave (`from_pretrained(path, **keywords)`) for a model of
    `norm_type` (and `layer_norm_types`), or None: a keyword that is no option (with the nearest one), or an option of
    a norm the model does not use, which the model would silently ignore (`dtn_gate_init` without `norm_type="dtn"`)."""
    in_use = {norm_type, *(layer_norm_types if isinstance(layer_norm_types, list) else ())}
    for name in keywords:
        if name not in NORM_KEYWORDS and looks_like_a_norm_keyword(name):
            near = difflib.get_close_matches(name, NORM_KEYWORDS, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}?" if near else f"the norm options are {sorted(NORM_KEYWORDS)}."
            return f"{name!r} is not a norm option; {hint}"
        owner = OPTION_OWNERS.get(name)
        if owner is not None and owner not in in_use:
            return (
                f"{name} is an option of norm_type={owner!r}, but the model's norm_type is {norm_type!r}, which "
                f"would ignore it: pass norm_type={owner!r} too, or leave {name} out."
            )
    return None


def layer_class_named(name: str) -> type:
    """The layer class called `name` of a norm in the registry (`RMSNorm`, LaPE's `PositionEmbeddingNorm`, ...);
    AttributeError for any other name, as a module attribute lookup raises."""
    for spec in NORM_TYPES.values():
        if spec.layer_class == name:
            return spec.layer()
        if spec.position_norm_class == name:
            return spec.position_norm()
    raise AttributeError(f"module 'hf_norms' has no attribute {name!r}")
