"""The distillation a healing run trains with (`healing.heal`): the loss, the `Trainer` that computes it against a
frozen teacher with a time-aware learning rate, and the callbacks that stop it on a time budget and keep the processes
of a multi-process run together at each checkpoint.

The loss, per batch of unlabeled examples (`distillation_loss`):

    loss = hidden_state_weight * sum over hidden states l of ||h_l - t_l||^2 / ||t_l||^2  (every layer, real tokens)
         + ||f - g||^2 / ||g||^2 + cosine_weight * (1 - cos(pool(f), pool(g)))   (final hidden states f, g)
         + token_weight * mean over token types k of mean over tokens i of type k of (1 - cos(f_i, g_i))
         + head_weight * (||f_p - g_p||^2 / ||g_p||^2 + ||o - q||^2 / ||q||^2)  (what stock heads read)
         + similarity_weight * mean over examples i of KL(softmax_j(T_ij / tau) || softmax_j(S_ij / tau))  (j != i)
         + position_weight * mean over hidden states l and tokens i of ||h_li - t_li||^2 / ||t_li||^2
         + KL(softmax(teacher logits) || softmax(student logits))          (heads with logits)

(the terms are explained in `healing`'s docstring), with `S`, `T` the in-batch cosine-similarity matrices of the
student's and the teacher's pooled final states and `tau = SIMILARITY_TEMPERATURE`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback

from .data import (
    model_inputs,
    real_token_mask,
    token_type_masks,
)
from .fidelity import pooled
from .processes import Processes

SIMILARITY_TEMPERATURE = 0.05  # the softmax temperature of sentence-transformers' in-batch contrastive training
EXTRA_TERMS = ("similarity_weight", "position_weight")  # off (0) unless given


def similarity_divergence(ours: torch.Tensor, theirs: torch.Tensor, temperature: float = SIMILARITY_TEMPERATURE):
    """How differently two models rank a batch's examples against each other, from their embeddings `[batch, dim]`:

        mean over rows i of KL(softmax_j(T_ij / tau) || softmax_j(S_ij / tau)),  j != i,

    `S_ij = cos(ours_i, ours_j)`, `T_ij = cos(theirs_i, theirs_j)`: 0 when both order (and space) every row's
    neighbours alike, which is what semantic search reads. Each example's similarity to itself (1 for both) is left
    out; 0 for a batch of fewer than 3."""
    count = ours.shape[0]
    if count < 3:
        return ours.new_zeros(())
    others = ~torch.eye(count, dtype=torch.bool, device=ours.device)

    def log_rows(embeddings: torch.Tensor) -> torch.Tensor:
        unit = F.normalize(embeddings.float(), dim=-1)
        return ((unit @ unit.T)[others].view(count, count - 1) / temperature).log_softmax(-1)

    return F.kl_div(log_rows(ours), log_rows(theirs), log_target=True, reduction="batchmean")


def per_token_error(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`mean over real tokens i of ||ours_i - theirs_i||^2 / ||theirs_i||^2` of `[batch, seq_len, hidden]` states:
    every position weighs alike, whatever its activation scale (the summed relative error is dominated by the few
    positions of largest norm)."""
    ours, theirs = ours.float(), theirs.float()
    if mask is not None:
        ours, theirs = ours[mask], theirs[mask]
    return ((ours - theirs).pow(2).sum(-1) / theirs.pow(2).sum(-1).clamp_min(1e-12)).mean()


def loss_description(weights: Mapping[str, float], dropout_fraction: float) -> str:
    """The loss in words, with its `weights` (`HealArguments.loss_weights`), for the report; the student trains with
    its dropout for `dropout_fraction` of the healing (0: never)."""
    cosine_weight, hidden_state_weight, token_weight, head_weight = (
        weights[name] for name in ("cosine_weight", "hidden_state_weight", "token_weight", "head_weight")
    )
    return (
        f"{hidden_state_weight:g} * sum over hidden states of ||h - t||^2/||t||^2 + final-state ||f - g||^2/||g||^2 "
        f"+ {cosine_weight:g} * (1 - cosine of pooled final states) + {token_weight:g} * (1 - per-token cosine of "
        f"final states, averaged per token type: prefix, special, ordinary) + {head_weight:g} * (prefix-token final "
        "state and pooler output ||.||^2 errors)"
        + (f" + {weights['similarity_weight']:g} * KL of the in-batch cosine-similarity rows of pooled final states "
           f"(softmax at temperature {SIMILARITY_TEMPERATURE:g})" if weights.get("similarity_weight") else "")
        + (f" + {weights['position_weight']:g} * per-token relative hidden-state error" if weights.get("position_weight")
           else "")
        + " + KL(teacher || student) of logits where a head exists; student "
        + ("without dropout" if not dropout_fraction else "in training mode with its source's dropout"
           + ("" if dropout_fraction >= 1 else f" for the first {dropout_fraction:.0%} of the healing, then without"))
    )  # fmt: skip


def distillation_loss(
    student_outputs,
    teacher_outputs,
    finals: tuple[torch.Tensor, torch.Tensor],
    mask,
    weights: Mapping[str, float],
    token_types: dict[str, torch.Tensor] | None = None,
    pooler_outputs: tuple[torch.Tensor, torch.Tensor] | None = None,
    pooling: str | None = None,
) -> torch.Tensor:
    """The healing loss of the module docstring for one batch, with the `weights` of its terms (`cosine_weight`,
    `hidden_state_weight`, `token_weight`, `head_weight`, and the `EXTRA_TERMS`, 0 when absent); `mask` is
    `[batch, seq_len]` bool or None (images), `token_types` the `data.token_type_masks` of the batch (the per-type
    terms are left out without it), `pooler_outputs` the student's and the teacher's `[batch, hidden]` pooler
    outputs, or None; `pooling` how the pooled terms pool (`fidelity.pooled`: a sentence-transformers checkpoint's
    own pooling); `finals` the student's and the teacher's final hidden states `[batch, seq_len, hidden]`."""
    cosine_weight, hidden_state_weight, token_weight, head_weight = (
        weights[name] for name in ("cosine_weight", "hidden_state_weight", "token_weight", "head_weight")
    )
    student_final, teacher_final = finals

    def relative_mse(ours: torch.Tensor, theirs: torch.Tensor, rows: torch.Tensor | None = mask) -> torch.Tensor:
        ours, theirs = ours.float(), theirs.float()  # bf16 autocast gives half-precision states
        if rows is not None:
            ours, theirs = ours[rows], theirs[rows]
        return (ours - theirs).pow(2).mean() / theirs.pow(2).mean().clamp_min(1e-12)

    loss = hidden_state_weight * sum(
        relative_mse(h, t) for h, t in zip(student_outputs.hidden_states, teacher_outputs.hidden_states, strict=True)
    )
    loss = loss + relative_mse(student_final, teacher_final)
    embeddings = [pooled(final.float(), mask, pooling) for final in (student_final, teacher_final)]
    loss = loss + cosine_weight * (1 - F.cosine_similarity(*embeddings, dim=-1)).mean()
    similarity_weight, position_weight = (weights.get(name, 0.0) for name in EXTRA_TERMS)
    if similarity_weight:
        loss = loss + similarity_weight * similarity_divergence(*embeddings)
    if position_weight:
        loss = loss + position_weight * sum(
            per_token_error(h, t, mask)
            for h, t in zip(student_outputs.hidden_states, teacher_outputs.hidden_states, strict=True)
        ) / len(student_outputs.hidden_states)
    if token_types is not None:
        token_distance = 1 - F.cosine_similarity(student_final.float(), teacher_final.float(), dim=-1)
        per_type = [token_distance[rows].mean() for rows in token_types.values() if rows.any()]
        loss = loss + token_weight * torch.stack(per_type).mean()
        loss = loss + head_weight * relative_mse(student_final, teacher_final, token_types["prefix"])
    if pooler_outputs is not None:
        loss = loss + head_weight * relative_mse(*pooler_outputs, rows=None)
    student_logits = getattr(student_outputs, "logits", None)
    teacher_logits = getattr(teacher_outputs, "logits", None)
    if student_logits is not None and teacher_logits is not None:
        rows = (lambda t: t[mask]) if mask is not None and student_logits.dim() == 3 else (lambda t: t)
        log_q = rows(student_logits).flatten(0, -2).float().log_softmax(-1)
        log_p = rows(teacher_logits).flatten(0, -2).float().log_softmax(-1)
        loss = loss + F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")
    return loss


class TimeBudget:
    """Minutes of wall-clock time and of this process's CPU time (all threads; a busy machine does not inflate it),
    either or both; `used()` is the largest fraction of either spent since `start()`, 0 without a budget.

    Under several processes (`agree`: `Processes.largest`), every process must decide alike: `check()`, called by
    every process once per step, agrees on the largest fraction any process has spent, and `used()` is that fraction
    until the next `check()`."""

    def __init__(self, minutes: float | None = None, cpu_minutes: float | None = None):
        self.seconds = {"wall": None if minutes is None else 60.0 * minutes,
                        "cpu": None if cpu_minutes is None else 60.0 * cpu_minutes}  # fmt: skip
        self.agree: Callable[[float], float] | None = None
        self.start()

    @staticmethod
    def clocks() -> dict[str, float]:
        return {"wall": time.monotonic(), "cpu": time.process_time()}

    def start(self) -> None:
        self.started, self.agreed = self.clocks(), 0.0

    def own(self) -> float:
        """The largest fraction of a budget this process has spent."""
        now = self.clocks()
        spent = [(now[k] - self.started[k]) / limit if limit else math.inf
                 for k, limit in self.seconds.items() if limit is not None]  # fmt: skip
        return max(spent, default=0.0)

    def used(self) -> float:
        return self.own() if self.agree is None else self.agreed

    def check(self) -> float:
        """`used()` after agreeing with the other processes (where there are any and a budget to agree on)."""
        if self.agree is not None and any(limit is not None for limit in self.seconds.values()):
            self.agreed = self.agree(self.own())
        return self.used()


def healing_progress(step: int, max_steps: int, budget: TimeBudget) -> float:
    """How much of a healing run is done: the larger of the steps done out of `max_steps` and the time `budget` used
    (1: the end)."""
    return max(step / max(1, max_steps), budget.used())


class DistillationTrainer(Trainer):
    """A `Trainer` whose loss distils the frozen `teacher` into the trained model (see `distillation_loss`).

    Its learning rate warms up linearly over `warmup_steps`, then decays linearly to zero at `max_steps` or, with a
    time `budget`, at that budget's end, whichever comes first: a run cut short by time still ends at a small rate.
    The pooled terms pool as `pooling` says (a sentence-transformers checkpoint's pooling; None: `fidelity.pooled`'s
    default).
    """

    def __init__(
        self,
        *args,
        teacher: nn.Module,
        loss_weights: Mapping[str, float],
        budget: TimeBudget | None = None,
        pooling: str | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.teacher = teacher.eval().requires_grad_(False)
        self.budget = budget or TimeBudget()
        self.loss_weights = dict(loss_weights)
        self.pooling = pooling

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            warmup = self.args.warmup_steps
            self.budget.start()

            def factor(step: int) -> float:
                # the first step trains whatever the budget (a budget of 0 stops after it, with a checkpoint)
                progress = healing_progress(step, num_training_steps, self.budget) if step > 0 else 0.0
                warm = (step + 1) / (warmup + 1) if step < warmup else 1.0
                return warm * max(0.0, 1.0 - progress)

            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, factor)
        return self.lr_scheduler

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        finals, poolers = {}, {}

        def keep_final(name: str):
            def hook(_module, _args, output):
                finals[name] = output[0] if isinstance(output, tuple) else output.last_hidden_state
                pooler = output[1] if isinstance(output, tuple) and len(output) > 1 else None
                poolers[name] = getattr(output, "pooler_output", pooler)

            return hook

        handles = [
            _unwrap(model).base_model.register_forward_hook(keep_final("student")),
            self.teacher.base_model.register_forward_hook(keep_final("teacher")),
        ]
        try:
            self.teacher.to(next(model.parameters()).device)
            with torch.no_grad():
                teacher_outputs = self.teacher(**model_inputs(inputs), output_hidden_states=True)
            student_outputs = model(**model_inputs(inputs), output_hidden_states=True)
        finally:
            for handle in handles:
                handle.remove()
        prefix_tokens = getattr(_unwrap(model).config, "num_prefix_tokens", 1)
        pooler_outputs = (poolers["student"], poolers["teacher"])
        loss = distillation_loss(
            student_outputs,
            teacher_outputs,
            (finals["student"], finals["teacher"]),
            real_token_mask(inputs),
            token_types=token_type_masks(inputs, finals["student"].shape[1], prefix_tokens),
            weights=self.loss_weights,
            pooler_outputs=None if any(p is None for p in pooler_outputs) else pooler_outputs,
            pooling=self.pooling,
        )
        return (loss, student_outputs) if return_outputs else loss


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)


class TimeLimit(TrainerCallback):
    """Stop training (and save a checkpoint to resume from) once the time `budget` is spent."""

    def __init__(self, budget: TimeBudget):
        self.budget = budget

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget.check() >= 1.0:
            control.should_training_stop = True
            control.should_save = True
        return control


class DropoutUntil(TrainerCallback):
    """Turn the model's dropout off once `fraction` (< 1; 1: never) of the healing is done (`healing_progress`, as the
    learning-rate schedule reads it); from a resumed checkpoint past that point, from its first step."""

    def __init__(self, fraction: float, budget: TimeBudget):
        self.fraction, self.budget = fraction, budget

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        progress = healing_progress(state.global_step, state.max_steps, self.budget)
        if model is not None and self.fraction < 1 and progress >= self.fraction:
            disable_dropout(model)
        return control


def disable_dropout(model: nn.Module) -> None:
    """Set every `nn.Dropout` of `model` to p = 0: the student then matches the teacher's deterministic (eval)
    outputs more closely, but a student that never trained with dropout fine-tunes worse (docs/converting.md)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


class EveryProcessSaved(TrainerCallback):
    """At each checkpoint, wait until every process has written its part of it (its RNG state): a checkpoint is whole
    before the main process goes on (and, at the end, removes the work folder)."""

    def __init__(self, processes: Processes):
        self.processes = processes

    def on_save(self, args, state, control, **kwargs):
        self.processes.wait()
