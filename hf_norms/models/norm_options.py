"""The config fields every hf-norms config shares: which norm, and each norm's hyperparameters.

Mixed into `ViTNormConfig`, `DeiTNormConfig` and `BertNormConfig`; `validate_norm_options` runs through the
`@strict` validation of transformers configs, at construction and before saving.
"""

from __future__ import annotations

from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import math
from dataclasses import dataclass
from typing import ClassVar

from transformers import configuration_utils

from .layernorm_loading import held_back, model_type_notice
from .norms import NORM_TYPES

SEPNORM_PREFIX_NORMS = ("batchnorm", "layernorm")
LAPE_MODES = ("cascade", "shared")


@dataclass(kw_only=True)
class NormOptions:
    """Norm selection and hyperparameters.

    norm_type (`str`, defaults to `"layernorm"`):
        One of `layernorm` (stock), `dyt`, `derf`, `dtn`, `sepnorm`, `lape`.
    dyt_alpha_init (`float`, defaults to 0.5):
        DyT's initial alpha (> 0).
    dyt_per_channel_alpha (`bool`, defaults to `False`):
        One alpha per channel instead of one scalar per layer.
    derf_alpha_init (`float`, defaults to 0.5):
        Derf's initial alpha (> 0), the scale inside `erf(alpha * x + shift)`; the paper's 0.5. A later study (arXiv
        2604.01563) found a smaller init (0.3) better at 1B scale with the Muon optimizer.
    derf_shift_init (`float`, defaults to 0.0):
        Derf's initial shift (finite), the offset inside `erf(alpha * x + shift)`; the paper's 0.0.
    derf_per_channel (`bool`, defaults to `False`):
        One alpha and one shift per channel instead of one scalar each per layer (the paper's); the converter's default.
    dtn_num_heads (`int`, *optional*):
        DTN head groups; defaults to `num_attention_heads`. Must divide `hidden_size`.
    dtn_gate_init (`float`, defaults to 0.5):
        Initial value of DTN's mean and variance gates, in [0, 1]; 1.0 is exactly LayerNorm.
    sepnorm_prefix_norm (`str`, defaults to `"batchnorm"`):
        SepNorm's norm for the prefix tokens: `batchnorm` (official) or `layernorm` (exact conversion).
    lape_mode (`str`, defaults to `"cascade"`):
        LaPE: `cascade` (each layer normalises the previous layer's PE, ICCV) or `shared` (each layer normalises the
        input PE, arXiv v1).
    lape_keep_input_pe (`bool`, defaults to `False`):
        LaPE: keep the PE in the input sum and start every `pe_norm` at weight 0, bias 0, which preserves a stock
        model's function exactly.
    layer_norm_types (`list[str]`, *optional*):
        One norm type per encoder layer, each `norm_type` or `layernorm`, e.g. DyT in the first layers and LayerNorm in
        the last ones (DTN's official placement). The norms after the encoder (final norm, task heads) follow the last
        layer, BERT's embedding norm the first. None: every layer uses `norm_type`. Not available with LaPE, whose
        position norms belong to the whole stack.
    """

    num_prefix_tokens: ClassVar[int] = 1

    norm_type: str = "layernorm"
    dyt_alpha_init: float = 0.5
    dyt_per_channel_alpha: bool = False
    derf_alpha_init: float = 0.5
    derf_shift_init: float = 0.0
    derf_per_channel: bool = False
    dtn_num_heads: int | None = None
    dtn_gate_init: float = 0.5
    sepnorm_prefix_norm: str = "batchnorm"
    lape_mode: str = "cascade"
    lape_keep_input_pe: bool = False
    layer_norm_types: list[str] | None = None

    def __post_init__(self, **kwargs):
        # A stock checkpoint's config.json says e.g. `"model_type": "vit"`; this config's type is its class's.
        kwargs.pop("model_type", None)
        super().__post_init__(**kwargs)

    @classmethod
    def stock_config_class(cls) -> type:
        """The stock config this config extends (`BertNormConfig` -> `BertConfig`)."""
        return next(base for base in cls.__mro__[1:] if getattr(base, "model_type", ""))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """`PreTrainedConfig.from_pretrained`, without transformers' notice that a checkpoint of the stock model type
        (`bert` for `bert_norm`) "can yield errors": reading the family's stock checkpoints is what this config is for."""
        notice = model_type_notice(cls.stock_config_class().model_type, cls.model_type)
        with held_back(configuration_utils.logger, notice):
            return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def validate_norm_options(self) -> None:
        """Every size positive, the attention heads dividing the hidden size, eps positive and each norm option in
        its range; runs before any tensor is allocated."""
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "mlp_ratio"):
            if getattr(self, name, 1) is not None and not getattr(self, name, 1) > 0:  # DINOv2 has mlp_ratio instead
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads ({self.num_attention_heads})."
            )
        if not 0 < self.layer_norm_eps < 1:
            raise ValueError(f"layer_norm_eps must be a small positive number, got {self.layer_norm_eps}.")
        if self.norm_type not in NORM_TYPES:
            raise ValueError(f"norm_type={self.norm_type!r} is not supported; choose one of {sorted(NORM_TYPES)}.")
        if not self.dyt_alpha_init > 0:
            raise ValueError(f"dyt_alpha_init must be > 0, got {self.dyt_alpha_init}.")
        if not math.isfinite(self.dyt_alpha_init):  # inf passed `> 0`, then made config.json invalid JSON on save
            raise ValueError(f"dyt_alpha_init must be a finite number, got {self.dyt_alpha_init}.")
        if not self.derf_alpha_init > 0 or not math.isfinite(self.derf_alpha_init):
            raise ValueError(f"derf_alpha_init must be a finite number > 0, got {self.derf_alpha_init}.")
        if not math.isfinite(self.derf_shift_init):
            raise ValueError(f"derf_shift_init must be a finite number, got {self.derf_shift_init}.")
        heads = self.dtn_num_heads or self.num_attention_heads
        if heads <= 0 or self.hidden_size % heads != 0:
            raise ValueError(
                f"DTN heads ({heads}) must be a positive divisor of hidden_size ({self.hidden_size}); "
                "set dtn_num_heads to one."
            )
        if not 0.0 <= self.dtn_gate_init <= 1.0:
            raise ValueError(f"dtn_gate_init must be in [0, 1] (1 is exactly LayerNorm), got {self.dtn_gate_init}.")
        if self.sepnorm_prefix_norm not in SEPNORM_PREFIX_NORMS:
            raise ValueError(
                f"sepnorm_prefix_norm={self.sepnorm_prefix_norm!r} is not supported; choose one of {SEPNORM_PREFIX_NORMS}."
            )
        if self.lape_mode not in LAPE_MODES:
            raise ValueError(f"lape_mode={self.lape_mode!r} is not supported; choose one of {LAPE_MODES}.")
        self.validate_layer_norm_types()

    def validate_layer_norm_types(self) -> None:
        """`layer_norm_types`: None, or one entry per encoder layer, each `norm_type` or `layernorm` (not with LaPE)."""
        if self.layer_norm_types is None:
            return
        if not isinstance(self.layer_norm_types, list) or len(self.layer_norm_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_norm_types must list one norm type per encoder layer ({self.num_hidden_layers}), "
                f"got {self.layer_norm_types!r}."
            )
        if self.norm_type == "lape":
            raise ValueError(
                "layer_norm_types cannot be used with norm_type='lape': LaPE's position norms span all layers."
            )
        allowed = {self.norm_type, "layernorm"}
        wrong = sorted({str(kind) for kind in self.layer_norm_types} - allowed)
        if wrong:
            raise ValueError(
                f"layer_norm_types may hold only norm_type ({self.norm_type!r}) and 'layernorm', got {wrong}."
            )
