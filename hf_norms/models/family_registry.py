"""The registry of hf-norms' model families: `FAMILIES`, one `FamilySpec` (`family_spec.py`) per family.

A family is its configuration and modeling files plus one entry here; registration with the Auto classes, peft,
conversion, folding, centring, fine-tuning, the cards and the command line read this registry. Also every model class
by name (`MODEL_CLASSES`) and the family of a model type (`family_of`).

Importing it imports the families' configs; `MODEL_CLASSES`, their modeling code. Not part of the remote-code set (no model file imports it).
"""

from __future__ import annotations

from .bert.configuration_bert_norm import BertNormConfig
from .clip_vision.configuration_clip_vision_norm import CLIPVisionNormConfig
from .deit.configuration_deit_norm import DeiTNormConfig
from .dinov2.configuration_dinov2_norm import Dinov2NormConfig
from .family_spec import FamilySpec, FoldLayout, ResidualWrites
from .roberta.configuration_roberta_norm import RobertaNormConfig
from .vit.configuration_vit_norm import ViTNormConfig
from .xlm_roberta.configuration_xlm_roberta_norm import XLMRobertaNormConfig

# ViT and DeiT: what their layers call their norms and the Linears that read them
VIT_FOLDING = dict(
    attention_norm="layernorm_before",
    mlp_norm="layernorm_after",
    attention_readers=("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    mlp_readers=("mlp.fc1",),
    final_norm="layernorm",
)
VIT_WRITES = dict(
    position_table="embeddings.position_embeddings",
    input_projection="embeddings.patch_embeddings.projection",
    output_projections=("attention.o_proj", "mlp.fc2"),
)

FAMILIES: dict[str, FamilySpec] = {
    spec.name: spec
    for spec in (
        FamilySpec(
            name="vit",
            display_name="ViT",
            config_class=ViTNormConfig,
            modality="image",
            pre_ln=True,
            task_heads={"image-classification": "ViTNormForImageClassification"},
            pooler_option=True,
            folding=FoldLayout(**VIT_FOLDING, head_linears=("classifier",)),
            residual=ResidualWrites(tables=("embeddings.cls_token", "embeddings.mask_token"), **VIT_WRITES),
        ),
        FamilySpec(
            name="deit",
            display_name="DeiT",
            config_class=DeiTNormConfig,
            modality="image",
            pre_ln=True,
            task_heads={"image-classification": "DeiTNormForImageClassification"},
            pooler_option=True,
            folding=FoldLayout(**VIT_FOLDING, head_linears=("classifier", "cls_classifier", "distillation_classifier")),
            residual=ResidualWrites(
                tables=("embeddings.cls_token", "embeddings.distillation_token", "embeddings.mask_token"),
                **VIT_WRITES,
            ),
        ),
        FamilySpec(
            name="bert",
            display_name="BERT",
            config_class=BertNormConfig,
            modality="text",
            pre_ln=False,
            task_heads={
                "text-classification": "BertNormForSequenceClassification",
                "masked-lm": "BertNormForMaskedLM",
            },
            pooler_option=True,
        ),
        FamilySpec(
            name="roberta",
            display_name="RoBERTa",
            config_class=RobertaNormConfig,
            modality="text",
            pre_ln=False,
            task_heads={
                "text-classification": "RobertaNormForSequenceClassification",
                "masked-lm": "RobertaNormForMaskedLM",
            },
            pooler_option=True,
        ),
        FamilySpec(
            name="xlmroberta",
            display_name="XLM-RoBERTa",
            config_class=XLMRobertaNormConfig,
            modality="text",
            pre_ln=False,
            task_heads={
                "text-classification": "XLMRobertaNormForSequenceClassification",
                "masked-lm": "XLMRobertaNormForMaskedLM",
            },
            pooler_option=True,
        ),
        FamilySpec(
            name="dinov2",
            display_name="DINOv2",
            config_class=Dinov2NormConfig,
            modality="image",
            pre_ln=True,
            task_heads={"image-classification": "Dinov2NormForImageClassification"},
            # its classifier reads [CLS] and the patches' mean side by side: the final norm stays unfolded
            folding=FoldLayout(
                attention_norm="norm1",
                mlp_norm="norm2",
                attention_readers=VIT_FOLDING["attention_readers"],
                mlp_readers=("mlp.fc1", "mlp.gate_proj", "mlp.up_proj"),
            ),
            residual=ResidualWrites(
                tables=("embeddings.cls_token", "embeddings.mask_token"),
                position_table="embeddings.position_embeddings",
                input_projection="embeddings.patch_embeddings.projection",
                output_projections=("attention.o_proj", "mlp.fc2", "mlp.down_proj"),
                layer_scales=(
                    ("layer_scale1", "attention.o_proj"),
                    ("layer_scale2", "mlp.fc2"),
                    ("layer_scale2", "mlp.down_proj"),
                ),
            ),
            any_image_size=True,
        ),
        FamilySpec(
            name="clipvision",
            display_name="CLIP vision",
            config_class=CLIPVisionNormConfig,
            modality="image",
            pre_ln=True,
            task_heads={},  # transformers has no classification head on a CLIPVisionConfig
            # post_layernorm reads the pooled [CLS] only, and feeds visual_projection: it stays unfolded
            folding=FoldLayout(
                attention_norm="layer_norm1",
                mlp_norm="layer_norm2",
                attention_readers=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                mlp_readers=("mlp.fc1",),
            ),
        ),
    )
}


def __getattr__(name: str) -> dict[str, type]:
    """`MODEL_CLASSES`: every hf-norms model class by name, e.g. MODEL_CLASSES["ViTNormForImageClassification"], made
    on first use, so that the configs (`FAMILIES`) cost no modeling code."""
    if name != "MODEL_CLASSES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = {cls.__name__: cls for spec in FAMILIES.values() for cls in spec.heads}
    return globals()[name]


def family_of(model_type: object) -> FamilySpec | None:
    """The family of a config's `model_type`, its stock one (`bert`) or hf-norms' (`bert_norm`); None for others."""
    return next((spec for spec in FAMILIES.values() if model_type in (spec.model_type, spec.stock_model_type)), None)


def family_names() -> str:
    """The families' display names for a message: `ViT, DeiT, ... and CLIP vision`."""
    names = [spec.display_name for spec in FAMILIES.values()]
    return f"{', '.join(names[:-1])} and {names[-1]}"
