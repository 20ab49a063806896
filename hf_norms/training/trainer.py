"""Training every norm_type with the transformers `Trainer`: weight-decay groups as the papers use, and norm-state logs.

- `no_decay_parameter_names(model)`: the parameters trained without weight decay. The papers train with the timm/DeiT
  recipe, which exempts every 1-D parameter (norm affine, DyT's `alpha`, Derf's `alpha` and `shift`, DTN gates, biases) and ViT/DeiT's prefix tokens
  and position embeddings. We also exempt every parameter inside a normalization module, which adds DTN's position
  projection `pos_proj.weight` (`[H, 3]`): it parametrises the norm's token mixing like the gates. The stock
  `Trainer.get_decay_parameter_names` only knows `nn.LayerNorm` and names containing "bias"/"norm", so it would decay
  DyT's `alpha`, Derf's `alpha` and `shift` (when per channel they are 1-D anyway) and DTN's gates.
- `NormTrainer`: a `Trainer` whose optimizer uses those groups.
- `NormStateCallback`: adds each norm's learned state (its `learned_state()`: DyT alpha, Derf alpha and shift, DTN gates,
  LaPE position-norm gain) to the training logs, so it shows in the console and in `trainer_state.json`'s
  `log_history`.
"""

from __future__ import annotations

from torch import nn
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..hub.model_card import NormCardTrainerMixin
from ..models.norms import NORM_TYPES

NORM_MODULE_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,  # includes hf_norms.LayerNorm and PositionEmbeddingNorm
    nn.RMSNorm,
    nn.GroupNorm,
    nn.modules.batchnorm._NormBase,  # BatchNorm / SyncBatchNorm (SepNorm's prefix norm)
    *dict.fromkeys(spec.layer() for spec in NORM_TYPES.values()),  # every registered norm
)
# Parameters held directly by ViT/DeiT embeddings that timm's `no_weight_decay()` lists.
TOKEN_PARAMETER_NAMES = frozenset({"cls_token", "distillation_token", "mask_token", "position_embeddings"})
NORM_STATE_PREFIX = "norm_state/"


def no_decay_parameter_names(model: nn.Module) -> set[str]:
    """Names (as `model.named_parameters()` gives them) of the parameters to train with weight decay 0.

    A parameter is exempt when it is 1-D or a scalar, when it belongs to a normalization module (`NORM_MODULE_TYPES`,
    including its sub-modules), or when it is a prefix token or position embedding held directly by a module.
    """
    exempt: set[str] = set()
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        if isinstance(module, NORM_MODULE_TYPES):
            exempt.update(f"{prefix}{name}" for name, _ in module.named_parameters())
        for name, parameter in module.named_parameters(recurse=False):
            if parameter.ndim <= 1 or name in TOKEN_PARAMETER_NAMES:
                exempt.add(f"{prefix}{name}")
    return exempt


def optimizer_parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two optimizer groups for `torch.optim.AdamW(groups, ...)`: decayed parameters, and the exempt ones at 0.

    Only trainable parameters are included; each appears once even when tied.
    """
    exempt = no_decay_parameter_names(model)
    trainable = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    return [
        {"params": [p for name, p in trainable if name not in exempt], "weight_decay": weight_decay},
        {"params": [p for name, p in trainable if name in exempt], "weight_decay": 0.0},
    ]


class NormTrainer(NormCardTrainerMixin, Trainer):
    """`Trainer` whose optimizer exempts norm parameters, 1-D parameters and vision tokens from weight decay.

    Everything else (optimizer choice, schedule, checkpointing, distribution) is the stock Trainer's; only
    `get_decay_parameter_names`, which its `create_optimizer` uses to split the two groups, is replaced, and
    `push_to_hub` publishes the hf-norms model card (`NormCardTrainerMixin`).
    """

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        exempt = no_decay_parameter_names(model)
        return [name for name, _ in model.named_parameters() if name not in exempt]


def norm_state(model: nn.Module) -> dict[str, float]:
    """The learned state of each norm in `model` that has one (its `learned_state()`: DyT's `alpha`, Derf's `alpha`
    and `shift`, DTN's effective gates, LaPE's position-norm gain), keyed `norm_state/<module name>.<quantity>`."""
    state: dict[str, float] = {}
    for name, module in model.named_modules():
        if callable(getattr(module, "learned_state", None)):
            state.update({f"{NORM_STATE_PREFIX}{name}.{key}": value for key, value in module.learned_state().items()})
    return state


class NormStateCallback(TrainerCallback):
    """Adds `norm_state(model)` to every training log (the entries that carry a `loss`).

    The values join the log dict that the console/progress callbacks print (they run after user callbacks) and the
    matching `state.log_history` entry, which the Trainer writes to `trainer_state.json` in each checkpoint and in
    `trainer.save_state()`. Works with any `Trainer`: `Trainer(..., callbacks=[NormStateCallback()])`.
    """

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        model: nn.Module | None = None,
        **kwargs,
    ) -> None:
        if logs is None or model is None or "loss" not in logs:
            return
        values = {key: round(value, 6) for key, value in norm_state(model).items()}
        logs.update(values)
        if state.log_history and state.log_history[-1].get("loss") == logs["loss"]:
            state.log_history[-1].update(values)
