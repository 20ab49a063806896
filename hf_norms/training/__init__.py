"""Fine-tuning every norm_type with the transformers `Trainer`: `finetune`, the `NormTrainer` and its callbacks, the
data sources and their checks, CPU SyncBatchNorm for multi-process runs, and the shipped `evaluate` metric modules.
Imports `hf_norms.models` and, for model cards, `hf_norms.hub`.

The Trainer pieces are importable from here, as they were from the former `hf_norms.training` module. They are
imported when first used (PEP 562), so that importing a light module of this package (`training.arguments`, which
`hf-norms finetune --help` reads) does not import torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

TRAINER_NAMES = (
    "NORM_STATE_PREFIX",
    "NormStateCallback",
    "NormTrainer",
    "no_decay_parameter_names",
    "norm_state",
    "optimizer_parameter_groups",
)
__all__ = list(TRAINER_NAMES)


def __getattr__(name: str) -> Any:
    if name not in TRAINER_NAMES:
        raise AttributeError(f"module 'hf_norms.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(".trainer", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *TRAINER_NAMES})
