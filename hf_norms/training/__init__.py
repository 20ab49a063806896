"""Fine-tuning every norm_type with the transformers `Trainer`: `finetune`, the `NormTrainer` and its callbacks, the
data sources and their checks, CPU SyncBatchNorm for multi-process runs, and the shipped `evaluate` metric modules.
Imports `hf_norms.models` and, for model cards, `hf_norms.hub`.

The Trainer pieces are importable from here, as they were from the former `hf_norms.training` module.
"""

from .trainer import (
    NORM_STATE_PREFIX,
    NormStateCallback,
    NormTrainer,
    no_decay_parameter_names,
    norm_state,
    optimizer_parameter_groups,
)

__all__ = [
    "NORM_STATE_PREFIX",
    "NormStateCallback",
    "NormTrainer",
    "no_decay_parameter_names",
    "norm_state",
    "optimizer_parameter_groups",
]
