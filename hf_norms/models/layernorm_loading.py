"""Loading a LayerNorm checkpoint into another norm_type: the options that keep its function, and transformers'
notices about such a load replaced by one line saying what hf-norms did.

Two notices of transformers are wrong for the loads hf-norms makes on purpose: "You are using a model of type `bert` to
instantiate a model of type `bert_norm` ... can yield errors" (a stock checkpoint of the family is what the hf-norms
config reads), and a load report listing the parameters a function-preserving norm adds (SepNorm's prefix norm, DTN's
gates, LaPE's `pe_norm`) as MISSING and "newly initialized" although hf-norms set them so that the model computes
what the checkpoint computed, or, for DyT and Derf, which cannot, to the initial values the warning of such a load
announces (one row per layer: 13 rows for a ViT). `held_notices.held_back` keeps such records from being logged while
loading; the caller logs the rest of the report (any other missing, unexpected or mismatched keys) and one line of its
own.

Package-only: a checkpoint's remote code leaves it out (`checkpoint_code.PACKAGE_ONLY_MODULES`).
"""

from __future__ import annotations

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

import logging
from collections.abc import Iterable
from typing import Any

from torch import nn
from transformers import modeling_utils
from transformers.utils import logging as transformers_logging

from ..norms.build import function_preserving_options, preserves_layernorm_function
from .transformers_internals import LoadStateDictInfo, log_state_dict_report

logger = transformers_logging.get_logger(__name__)

NOT_PRESERVING_WARNING = (
    "A LayerNorm checkpoint loaded into norm_type={norm_type!r} does not compute what it computed (no option can make "
    "it), and fine-tuning may not learn from this start: calibrate it first with "
    "hf_norms.convert_model(model, {norm_type!r}, calibration_data=...) or `hf-norms convert`."
)
INITIALISED_NOTE = (
    "Loaded the LayerNorm checkpoint {path} into {model} with norm_type={norm_type!r}: {what} (transformers' notices "
    "about these parameters are left out)."
)
INITIAL_NOTE = "{names} at their initial values in {count} norms"
PRESERVED_NOTE = (
    "Loaded the LayerNorm checkpoint {path} into {model} with norm_type={norm_type!r}, computing what it computed: "
    "{what} (transformers' notices about these parameters are left out)."
)


def layernorm_loading_options(norm_type: str, explicit: Iterable[str]) -> dict[str, Any]:
    """The options a LayerNorm checkpoint is loaded into `norm_type` with, besides the `explicit` ones: the function-
    preserving ones (`norms.function_preserving_options`); none for DyT and Derf, which cannot keep the function, and a
    warning naming `hf_norms.convert_model`, which calibrates them."""
    preserving = function_preserving_options(norm_type, explicit)
    if preserving is None:
        logger.warning(NOT_PRESERVING_WARNING.format(norm_type=norm_type))
    return preserving or {}


def added_keys(model: nn.Module, missing_keys: Iterable[str]) -> dict[str, set[str]]:
    """The missing keys that are parameters `model.config.norm_type` adds to LayerNorm's, by the module holding them."""
    added = model.config.norm_spec.added_parameters
    by_owner: dict[str, set[str]] = {}
    for key in missing_keys:
        suffix = next((suffix for suffix in added if key.endswith(suffix)), None)
        if suffix is not None:
            by_owner.setdefault(key.removesuffix(suffix), set()).add(key)
    return by_owner


def set_on_purpose(model: nn.Module, missing_keys: Iterable[str]) -> tuple[dict[str, set[str]], str]:
    """The missing keys a load of a LayerNorm checkpoint set on purpose, by module, and what it set them to: the
    parameters a function-preserving load sets to keep the function, or those of a norm that cannot keep it (DyT,
    Derf: at their initial values, as `NOT_PRESERVING_WARNING` said); none when the config could keep the function but
    does not (SepNorm with a BatchNorm prefix norm, whose fresh statistics transformers' report names)."""
    spec = model.config.norm_spec
    by_owner = added_keys(model, missing_keys)
    if preserves_layernorm_function(model.config):
        return by_owner, spec.preserving_note.format(count=len(by_owner))
    if spec.preserving_options is None and by_owner:
        names = sorted({key.removeprefix(owner) for owner, keys in by_owner.items() for key in keys})
        return by_owner, INITIAL_NOTE.format(names=", ".join(name.lstrip(".") for name in names), count=len(by_owner))
    return {}, ""


def replace_load_notices(model: nn.Module, path, info: dict, held_reports: list[logging.LogRecord]) -> None:
    """After loading a LayerNorm checkpoint into `model`: log one line saying which parameters hf-norms set on purpose
    (`set_on_purpose`), and transformers' load report (`held_reports`) without them (not at all when nothing else is
    in it). Other loads get their report as transformers wrote it."""
    by_owner, note = set_on_purpose(model, info["missing_keys"])
    if not by_owner:
        for record in held_reports:
            modeling_utils.logger.handle(record)
        return
    template = PRESERVED_NOTE if preserves_layernorm_function(model.config) else INITIALISED_NOTE
    logger.info(template.format(path=path, model=type(model).__name__, norm_type=model.config.norm_type, what=note))
    if held_reports:
        preserved = set().union(*by_owner.values())
        rest = LoadStateDictInfo(
            missing_keys=set(info["missing_keys"]) - preserved,
            unexpected_keys=set(info["unexpected_keys"]),
            mismatched_keys=set(info["mismatched_keys"]),
            error_msgs=[],
            conversion_errors={},
            skipped_pp_keys=set(),
        )
        # transformers' own report of the other keys (none: no report); mismatched sizes were already refused
        log_state_dict_report(model, str(path), True, rest, logger=modeling_utils.logger)
