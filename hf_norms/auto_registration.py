"""Register the hf-norms configs and models with transformers' Auto classes."""

import transformers
from transformers import AutoConfig

from . import modeling_bert_norm, modeling_deit_norm, modeling_vit_norm
from .configuration_bert_norm import BertNormConfig
from .configuration_deit_norm import DeiTNormConfig
from .configuration_vit_norm import ViTNormConfig
from .modeling_bert_norm import BERT_NORM_AUTO_MAP
from .modeling_deit_norm import DEIT_NORM_AUTO_MAP
from .modeling_vit_norm import VIT_NORM_AUTO_MAP

FAMILIES = (
    (ViTNormConfig, VIT_NORM_AUTO_MAP, modeling_vit_norm),
    (DeiTNormConfig, DEIT_NORM_AUTO_MAP, modeling_deit_norm),
    (BertNormConfig, BERT_NORM_AUTO_MAP, modeling_bert_norm),
)


def register_auto_classes() -> None:
    """`AutoConfig` for each model type, and each family's model class under every Auto class of its `auto_map`."""
    for config_class, auto_map, modeling_module in FAMILIES:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        for auto_class_name, reference in auto_map.items():
            if auto_class_name == "AutoConfig":
                continue
            model_class = getattr(modeling_module, reference.split(".")[1])
            getattr(transformers, auto_class_name).register(config_class, model_class, exist_ok=True)
