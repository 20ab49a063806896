"""Training every norm_type with the transformers `Trainer`: weight-decay groups as the papers use, norm-state logs,
and publishing with the hf-norms model card.

- `no_decay_parameter_names(model)`: the parameters trained without weight decay. The papers train with the timm/DeiT
  recipe, which exempts every 1-D parameter (norm affine, DyT's `alpha`, Derf's `alpha` and `shift`, DTN gates, biases) and ViT/DeiT's prefix tokens
  and position embeddings. We also exempt every parameter inside a normalization module, which adds DTN's position
  projection `pos_proj.weight` (`[H, 3]`): it parametrises the norm's token mixing like the gates. The stock
  `Trainer.get_decay_parameter_names` only knows `nn.LayerNorm` and names containing "bias"/"norm", so it would decay
  DyT's `alpha`, Derf's `alpha` and `shift` (when per channel they are 1-D anyway) and DTN's gates.
- `NormCardTrainerMixin`: makes a Trainer write and publish the hf-norms model card, once, through
  `hf_norms.hub.publish.push_to_hub`.
- `NormTrainer`: a `Trainer` whose optimizer uses those groups, with that mixin.
- `NormStateCallback`: adds each norm's learned state (its `learned_state()`: DyT alpha, Derf alpha and shift, DTN gates,
  LaPE position-norm gain) to the training logs, so it shows in the console and in `trainer_state.json`'s
  `log_history`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard
from huggingface_hub import constants as hub_constants
from torch import nn
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.utils import logging as transformers_logging

from ..hub.card_facts import REPORT_NAME, source_lineage
from ..hub.model_card import model_card_for_folder
from ..hub.publish import push_to_hub
from ..norms.build import NORM_TYPES
from ..output_folders import copy_checkpoint_files

logger = logging.getLogger(__name__)

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


def trainer_card_arguments(trainer, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """(repo id, `CardArguments` keyword arguments) of a Trainer's output folder, from the keyword `arguments` of
    `Trainer.create_model_card` (`model_name`, `license`, `language`, `tags`, `finetuned_from`, `dataset`: what was
    trained on, `dataset_tags`: its Hub ids), after saving the Trainer's state there (`trainer_state.json`) and copying
    the conversion report of the checkpoint the model was loaded from when the folder has none, so the folder holds
    everything the card says."""
    output_dir = Path(trainer.args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer.save_state()
    loaded_from = str(getattr(trainer.model, "name_or_path", "") or "")
    if loaded_from and not (output_dir / REPORT_NAME).is_file() and (Path(loaded_from) / REPORT_NAME).is_file():
        copy_checkpoint_files(Path(loaded_from), output_dir, [REPORT_NAME])  # never through a link out of it
    as_list = lambda value: [value] if isinstance(value, str) else list(value or [])  # noqa: E731
    given = {name: value for name, value in arguments.items() if value is not None}
    repo_id = trainer.args.hub_model_id or given.get("model_name") or output_dir.absolute().name
    source = source_lineage(loaded_from) if loaded_from else {}
    return repo_id, {
        "base_model": given.get("finetuned_from") or source.get("base_model"),
        "license": given.get("license") or source.get("license"),
        "language": given.get("language") or source.get("language"),
        "datasets": as_list(given.get("dataset_tags")),
        "training_dataset": ", ".join(as_list(given.get("dataset"))) or None,
        "tags": as_list(given.get("tags")),
    }


def create_trainer_model_card(trainer, **card_arguments: Any) -> ModelCard | None:
    """Write the hf-norms card of a Trainer's output folder to its README.md, as `push_to_hub` of that folder renders
    it; `card_arguments` are those of `Trainer.create_model_card` (see `trainer_card_arguments`). Returns the card
    (None on processes other than the main one)."""
    if not trainer.is_world_process_zero():
        return None
    repo_id, overrides = trainer_card_arguments(trainer, **card_arguments)
    card = model_card_for_folder(trainer.args.output_dir, repo_id, **overrides)
    card.save(Path(trainer.args.output_dir) / "README.md")
    return card


class NormCardTrainerMixin:
    """Mix in front of `transformers.Trainer` so it publishes as `hf-norms push` does, once, with the hf-norms card::

        class NormTrainer(NormCardTrainerMixin, Trainer): ...

    - `push_to_hub()` saves the model, writes the card to the output folder's README.md and uploads the folder with
      `hf_norms.hub.publish.push_to_hub`: one commit, the rendered card, and none of what that push skips
      (`training_args.bin`, which pickles `hub_token`; `checkpoint-*/`; secrets), the token in no file or log line.
      Call it after evaluating, as transformers' example scripts do, so the card has the evaluation.
    - Nothing is pushed before that: making the Trainer with `push_to_hub=True` creates no repo (`init_hf_repo` only
      names it), saving a checkpoint pushes nothing whatever `hub_strategy` says (those pushes publish an unfinished
      model, and `checkpoint`/`all_checkpoints` pickled optimizer states), and neither does `save_model()`.
    - `create_model_card` writes the same card and uploads nothing: what a push publishes is checked by the push.
    """

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """Name the repo `push_to_hub` will create (`hub_model_id`, else the output folder's name); nothing is sent."""
        strategy = getattr(self.args.hub_strategy, "value", self.args.hub_strategy)  # a HubStrategy, or its value
        if strategy in ("checkpoint", "all_checkpoints"):
            logger.warning(
                "hub_strategy=%s is ignored: hf-norms pushes once, at the end (push_to_hub), and never pickled "
                "checkpoints; keep checkpoints locally to resume.",
                strategy,
            )
        self.hub_model_id = self.args.hub_model_id or Path(self.args.output_dir).absolute().name
        self.push_in_progress = None

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """Push nothing at a checkpoint: the model is unfinished (see the class docstring)."""

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save as the Trainer does, without pushing (the push is `push_to_hub`, once, at the end)."""
        super().save_model(output_dir, _internal_call=True)

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        **card_arguments: Any,
    ):
        """Save the model and publish the output folder with its card in one commit (`hf_norms.push_to_hub`); returns
        the `CommitInfo` (None on processes other than the main one). `card_arguments` are those of
        `create_model_card`; the upload always blocks."""
        self.save_model()
        if not self.is_world_process_zero():
            return None
        repo_id, overrides = trainer_card_arguments(self, **card_arguments)
        model_card_for_folder(self.args.output_dir, repo_id, **overrides).save(Path(self.args.output_dir) / "README.md")
        return push_to_hub(
            self.args.output_dir,
            repo_id,
            private=bool(self.args.hub_private_repo if private is None else private),
            revision=revision or self.args.hub_revision,
            commit_message=commit_message,
            token=token or self.args.hub_token,
            **overrides,
        )

    def create_model_card(self, **card_arguments: Any) -> None:
        """Write the hf-norms card to the output folder's README.md; `card_arguments` are `Trainer.create_model_card`'s
        (`language`, `license`, `tags`, `model_name`, `finetuned_from`, `dataset_tags`, `dataset`)."""
        create_trainer_model_card(self, **card_arguments)


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


@contextlib.contextmanager
def only_the_trainers_bar() -> Iterator[None]:
    """While the block runs (`trainer.train()`), transformers' own progress bars are off: the "Writing model shards" of
    every checkpoint save and the "Loading weights" of the best model's reload drew over the Trainer's bar, which is
    `tqdm` itself and stays. Their previous state is restored after."""
    if not transformers_logging.is_progress_bar_enabled() or hub_constants.HF_HUB_DISABLE_PROGRESS_BARS:
        yield  # off already (HF_HUB_DISABLE_PROGRESS_BARS=1 also refuses to turn them back on)
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


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
