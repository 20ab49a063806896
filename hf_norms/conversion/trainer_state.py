"""The checks of a Trainer checkpoint's own files before a run resumes from it (`heal --resume`, `finetune
--resume_from_checkpoint`): its `trainer_state.json` must be a state the Trainer restores as it was saved (only
`TrainerState`'s fields, each of its type and range, a step within its run, callback states `TrainerControl` takes),
and its optimizer, scheduler and random state files torch states that load without running pickled code
(`weights_only=True`), the optimizer's for as many parameters as the model trains. Each failure is one
`ConversionError` line, so a tampered checkpoint never reaches the Trainer's raw `TypeError`, a run of 0 steps
claiming step 10**18, or unpickled code.
"""

from __future__ import annotations

import dataclasses
import math
import random
import reprlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers.trainer_callback import TrainerControl, TrainerState

from ..errors import ConversionError
from ..readers import read_json_object

STEPS = ("global_step", "max_steps")  # integers >= 0, the first at most the second
SETTINGS = ("logging_steps", "eval_steps", "save_steps", "num_train_epochs", "num_input_tokens_seen")  # numbers >= 0
PROGRESS = ("epoch", "total_flos")  # finite numbers >= 0
OPTIONAL_COUNTS = ("train_batch_size", "best_global_step")
FLAGS = ("is_local_process_zero", "is_world_process_zero", "is_hyper_param_search")
TEXTS = ("best_model_checkpoint", "trial_name")
SCALAR = (int, float, str, bool, type(None))
SHOWN = reprlib.Repr()  # a value shown in a message: a few levels and items of it
SHOWN.maxlevel, SHOWN.maxstring, SHOWN.maxother, SHOWN.maxlist, SHOWN.maxdict = 3, 60, 60, 4, 4


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _scalars(value: Any) -> bool:
    """Whether `value` is a mapping of names to numbers, texts, flags or nulls (a log entry, trial parameters)."""
    return isinstance(value, dict) and all(isinstance(item, SCALAR) for item in value.values())


def state_problem(state: dict[str, Any]) -> str | None:
    """What makes `state` (a `trainer_state.json`'s object) other than a state the Trainer saved, or None."""
    unknown = sorted(set(state) - {field.name for field in dataclasses.fields(TrainerState)})
    if unknown:
        return f"has fields a Trainer state does not have: {unknown}"
    rules = [
        (STEPS, _count, "an integer >= 0"),
        (SETTINGS, _number, "a finite number >= 0"),
        (PROGRESS, _number, "a finite number >= 0"),
        (OPTIONAL_COUNTS, lambda value: value is None or _count(value), "an integer >= 0 or null"),
        (FLAGS, lambda value: isinstance(value, bool), "true or false"),
        (TEXTS, lambda value: value is None or isinstance(value, str), "a text or null"),
        (("best_metric",), lambda value: value is None or isinstance(value, (int, float)), "a number or null"),
        (("trial_params",), lambda value: value is None or _scalars(value), "a mapping of values or null"),
        (("log_history",), lambda value: isinstance(value, list) and all(map(_scalars, value)), "a list of mappings"),
    ]
    for names, good, what in rules:
        for name in names:
            if name in state and not good(state[name]):
                return f"{name} must be {what}, got {SHOWN.repr(state[name])}"
    if state.get("global_step", 0) > state.get("max_steps", 0):
        return f"global_step {state['global_step']} is past its max_steps {state.get('max_steps', 0)}"
    return callbacks_problem(state.get("stateful_callbacks"))


def callbacks_problem(callbacks: Any) -> str | None:
    """What makes `stateful_callbacks` other than the Trainer restores: each callback's name mapped to its `args`
    and `attributes` (or a list of them), `TrainerControl`'s only its own flags; or None."""
    if callbacks is None:
        return None
    if not isinstance(callbacks, dict):
        return f"stateful_callbacks must map callback names to their states, got {SHOWN.repr(callbacks)}"
    flags = sorted(field.name for field in dataclasses.fields(TrainerControl))
    for name, saved in callbacks.items():
        for entry in saved if isinstance(saved, list) else [saved]:
            parts = entry.values() if isinstance(entry, dict) and set(entry) <= {"args", "attributes"} else None
            if parts is None or not all(isinstance(part, dict) for part in parts):
                return f"stateful_callbacks {name} must hold its args and attributes, got {SHOWN.repr(entry)}"
            settings = [(key, value) for part in parts for key, value in part.items()]
            if name == "TrainerControl" and any(
                key not in flags or not isinstance(value, bool) for key, value in settings
            ):
                return f"stateful_callbacks TrainerControl takes the flags {flags}, got {SHOWN.repr(entry)}"
    return None


def check_trainer_state(path: Path, fix: str) -> dict[str, Any]:
    """The object in a checkpoint's `trainer_state.json` (read bounded, `readers.read_json_object`), refused in one
    line ending in `fix` when it is not a state the Trainer saved (`state_problem`)."""
    state = read_json_object(path, fix)
    problem = state_problem(state)
    if problem:
        raise ConversionError(f"{path} is not a Trainer state to resume from ({problem}); {fix}.")
    return state


def load_torch_state(path: Path, fix: str, allowed: tuple = ()) -> Any:
    """What the torch file `path` holds, loaded as the Trainer loads it but never running pickled code
    (`weights_only=True`, with the classes `allowed` besides torch's own) and mapped rather than read (`mmap=True`);
    one line ending in `fix` when it does not load."""
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # torch raises many kinds (UnpicklingError, RuntimeError, ...) for a broken file
        raise ConversionError(
            f"{path} is not a torch state that loads without running code ({type(error).__name__}); {fix}."
        ) from None


def check_training_files(checkpoint: Path, model: nn.Module, fix: str) -> None:
    """Refuse a checkpoint's `optimizer.pt` that is not a torch optimizer state for as many parameters as `model`
    trains, a `scheduler.pt` that is not a torch state, or random states that do not load (`check_random_states`), in
    one line ending in `fix`; each may be absent."""
    check_random_states(checkpoint, fix)
    optimizer = checkpoint / "optimizer.pt"
    if optimizer.exists():
        state = load_torch_state(optimizer, fix)
        groups = state.get("param_groups") if isinstance(state, dict) else None
        if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
            raise ConversionError(f"{optimizer} is not a torch state of an optimizer (no param_groups); {fix}.")
        stored = sum(len(group.get("params", ())) for group in groups)
        trained = sum(1 for parameter in model.parameters() if parameter.requires_grad)
        if stored != trained:
            raise ConversionError(
                f"{optimizer} holds the state of {stored} parameters, this model has {trained} to train: it belongs "
                f"to another run; {fix}."
            )
    scheduler = checkpoint / "scheduler.pt"
    if scheduler.exists() and not isinstance(load_torch_state(scheduler, fix), dict):
        raise ConversionError(f"{scheduler} is not a torch state of a learning-rate scheduler; {fix}.")


# What a random state file holds besides torch's own types: numpy's generator state, an array of one dtype
NUMPY_CORE = np._core if hasattr(np, "_core") else np.core  # numpy 2 renamed it
NUMPY_STATE = (np.ndarray, np.dtype, type(np.dtype(np.uint32)), NUMPY_CORE.multiarray._reconstruct)


def check_random_states(checkpoint: Path, fix: str) -> None:
    """Refuse a checkpoint's `rng_state.pth` (`rng_state_N.pth` per process) that does not load as the Trainer loads it
    or whose Python, numpy and CPU torch states do not set a generator of their kind, in one line ending in `fix`."""
    for path in sorted(checkpoint.glob("rng_state*.pth")):
        state = load_torch_state(path, fix, NUMPY_STATE)
        try:
            random.Random().setstate(state["python"])
            np.random.RandomState().set_state(state["numpy"])
            torch.Generator().set_state(state["cpu"])
        except (TypeError, ValueError, KeyError, IndexError, RuntimeError):
            raise ConversionError(
                f"{path} is not the random state of Python, numpy and torch that a Trainer saves; {fix}."
            ) from None
