"""Default PEFT target modules for the hf-norms model types, so that `get_peft_model(model, LoraConfig())` works without
`target_modules`, as it does for the stock models.

peft looks a model's default target modules up by `config.model_type` in its `TRANSFORMERS_MODELS_TO_*_MAPPING`
dictionaries, which know `bert` but not `bert_norm`. Each family (`family_registry.FAMILIES`, so a family added
there joins automatically) gets its stock model type's entries (`bert_norm` -> `bert`: LoRA on `query`, `value`).
Where peft has no LoRA default for the stock type (ViT, DeiT), LoRA targets the attention's query and value
projections under their transformers 5 names, `q_proj` and `v_proj`, peft's choice for most models. Norms are never
targets.

Not part of the remote-code set: `import hf_norms` calls `register_peft_defaults()`, which does nothing unless peft is
installed.
"""

from __future__ import annotations

import importlib.util

from .family_registry import FAMILIES

QUERY_VALUE_PROJECTIONS = ["q_proj", "v_proj"]


def register_peft_defaults() -> None:
    """Copy peft's defaults of each family's stock model type to the family's model type, in place in peft's tables."""
    if importlib.util.find_spec("peft") is None:
        return
    from peft.utils import constants

    mappings = {name: table for name, table in vars(constants).items() if name.startswith("TRANSFORMERS_MODELS_TO_")}
    for family in FAMILIES.values():
        config_class, stock = family.config_class, family.stock_model_type
        for table in mappings.values():
            if isinstance(table, dict) and stock in table:
                table.setdefault(config_class.model_type, table[stock])
        mappings["TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"].setdefault(
            config_class.model_type, QUERY_VALUE_PROJECTIONS
        )
