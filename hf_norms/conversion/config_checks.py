"""Checks of a checkpoint's config before anything is built from it: values a model can be built from, sizes that agree
with the weights stored, and a model that fits in memory, each refused in one line naming the config.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from ..errors import ConversionError
from ..readers import read_json_object

LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.")
NORM_WEIGHTS = ("LayerNorm.weight", "layernorm.weight", "layernorm_before.weight", "norm1.weight")
POSITIVE_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                  "max_position_embeddings", "type_vocab_size", "patch_size", "num_channels", "encoder_stride",
                  "num_labels")  # fmt: skip
PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "drop_path_rate")
NEW_PARAMETERS_ALLOWED = 10**6  # parameters a model may add to its checkpoint's beyond doubling it (a new head)


def check_source_config(folder: Path, shapes: dict[str, tuple[int, ...] | None]) -> dict:
    """The checkpoint's `config.json`, after checking its values (`check_config_values`) and that the number of layers
    and the norms' width match the tensors stored, so a config that asks for a million layers is refused before
    anything is allocated. Returns the config."""
    config = read_json_object(folder / "config.json", "the checkpoint's config must be a JSON object")
    where = folder / "config.json"
    check_config_values(config, where)
    check_size_fields(config, shapes, where)
    layers = {int(match.group(1)) for name in shapes if (match := LAYER_INDEX.search(name))}
    if "num_hidden_layers" in config and layers != set(range(config["num_hidden_layers"])):
        stored = f"layers 0-{max(layers)}" if layers else "no layers"
        raise ConversionError(
            f"{where} says num_hidden_layers={config['num_hidden_layers']}, but the weights hold {stored}; "
            "the config does not belong to these weights."
        )
    for name, shape in shapes.items():
        if shape is not None and name.endswith(NORM_WEIGHTS) and shape != (config.get("hidden_size", shape[0]),):
            raise ConversionError(
                f"{where} says hidden_size={config.get('hidden_size')}, but {name} has shape {list(shape)}; the "
                "config does not belong to these weights."
            )
    return config


def check_size_fields(config: dict, shapes: dict[str, tuple[int, ...] | None], where: str | Path) -> None:
    """Refuse, from the numbers alone, a size field whose table (`vocab_size`, `max_position_embeddings`,
    `num_labels`, ... rows of `hidden_size`) would hold more parameters than the model may add to its weights
    (`NEW_PARAMETERS_ALLOWED` beyond doubling them); `check_model_fits` makes the exact count later. Even building the
    config of `num_labels=10**6` takes seconds (its label names are formatted, and logged)."""
    if not shapes or any(shape is None for shape in shapes.values()) or not config.get("hidden_size"):
        return
    stored = sum(math.prod(shape) for shape in shapes.values())
    for key in ("vocab_size", "max_position_embeddings", "type_vocab_size", "num_labels"):
        rows = config.get(key, 0)
        if isinstance(rows, int) and rows * config["hidden_size"] > 2 * stored + NEW_PARAMETERS_ALLOWED:
            raise ConversionError(
                f"{where} says {key}={rows}: a table of {rows} x {config['hidden_size']} parameters, more than the "
                f"{stored:,} the weights hold; the config does not belong to these weights."
            )


def check_config_values(config: dict, where: str | Path) -> None:
    """Refuse a config whose values no model can be built from: sizes that are not positive integers, heads that do
    not divide the hidden size, a `layer_norm_eps` that is not a small positive number, dropout probabilities outside
    [0, 1), an activation transformers does not have, labels (`id2label`) that disagree with `num_labels`."""

    def positive_int(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    for key in (*POSITIVE_SIZES, "image_size"):
        value = config.get(key)
        sizes = value if key == "image_size" and isinstance(value, list) and value else [value]
        if key in config and value is not None and not all(positive_int(size) for size in sizes):
            raise ConversionError(f"{where}: {key} must be a positive integer, got {value!r}.")
    if config.get("hidden_size") and config.get("num_attention_heads"):
        if config["hidden_size"] % config["num_attention_heads"]:
            raise ConversionError(
                f"{where}: hidden_size {config['hidden_size']} is not divisible by num_attention_heads "
                f"{config['num_attention_heads']}."
            )
    eps = config.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise ConversionError(f"{where}: layer_norm_eps must be a small positive number, got {eps!r}.")
    for key in PROBABILITIES:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1):
            raise ConversionError(f"{where}: {key} must be a probability in [0, 1), got {value!r}.")
    check_activation(config.get("hidden_act", "gelu"), where)
    check_labels(config, where)


def check_activation(name, where: str | Path) -> None:
    from transformers.activations import ACT2FN

    if not isinstance(name, str) or name not in ACT2FN:
        raise ConversionError(
            f"{where}: hidden_act {name!r} is not an activation transformers has; use one of "
            f"{', '.join(sorted(ACT2FN)[:8])}, ..."
        )


def check_labels(config: dict, where: str | Path) -> None:
    """`id2label` maps 0..n-1 to names, with n = `num_labels` where both are given."""
    id2label = config.get("id2label")
    if id2label is None:
        return
    if not isinstance(id2label, dict) or sorted(map(str, id2label)) != sorted(map(str, range(len(id2label)))):
        raise ConversionError(f"{where}: id2label must map the class indices 0, 1, ... to names.")
    if "num_labels" in config and config["num_labels"] != len(id2label):
        raise ConversionError(
            f"{where}: id2label names {len(id2label)} classes but num_labels is {config['num_labels']}; make them "
            "agree (or remove num_labels)."
        )


def check_model_fits(model_class, config, stored: dict[str, tuple[int, ...] | None] | None, where: str) -> None:
    """Refuse, before any memory is allocated, a model that `config` would make too large: larger in float32 than this
    machine's memory, or, with `stored` (the checkpoint's tensor shapes), more than twice the parameters stored plus a
    new head's worth (`NEW_PARAMETERS_ALLOWED`), as `max_position_embeddings=10**7` or `num_labels=10**6` would.
    The model is built on the meta device, which holds shapes and no data."""
    import torch

    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    attention = config.num_hidden_layers * 4 * config.hidden_size**2  # fewer parameters than the model has
    if 4 * attention > memory:
        raise ConversionError(_too_large(where, attention, memory, "at least"))
    with torch.device("meta"):
        model = model_class(config)
    count = sum(parameter.numel() for parameter in model.parameters())
    if 4 * count > memory:
        raise ConversionError(_too_large(where, count, memory))
    stored_count = sum(math.prod(shape) for shape in (stored or {}).values() if shape is not None)
    known = bool(stored) and all(shape is not None for shape in stored.values())  # a pickle's shapes are not read
    if known and count > 2 * stored_count + NEW_PARAMETERS_ALLOWED:
        shapes = {shape for shape in stored.values()}
        name, parameter = max(
            ((n, p) for n, p in model.named_parameters() if tuple(p.shape) not in shapes),
            key=lambda item: item[1].numel(),
        )
        raise ConversionError(
            f"{where} describes a model of {count:,} parameters, but the weights hold {stored_count:,} (e.g. {name} "
            f"would be {list(parameter.shape)}): the config does not belong to these weights."
        )


def _too_large(where: str, count: int, memory: int, bound: str = "") -> str:
    return (
        f"{where} describes a model of {bound + ' ' if bound else ''}{count:,} parameters, {4 * count / 2**30:.1f} GiB "
        f"in float32, more than this machine's {memory / 2**30:.1f} GiB of memory; check the sizes in the config."
    )
