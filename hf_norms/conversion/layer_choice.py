"""Per-layer norm choice in a conversion: which encoder layers keep their LayerNorm.

A converted model may keep LayerNorm in some encoder layers and use `norm_type` in the others (config
`layer_norm_types`; DTN's official placement keeps LayerNorm in the last blocks, and DyT cannot give every token of the
last post-LN layers LayerNorm's scale). Two ways to choose:

- `--keep-layernorm LAYERS` names the layers (`parse_layer_selection`);
- `--target-cosine C` lets the converter choose: every layer is calibrated once as `norm_type`, then for k = 0, 1, ...
  the last k layers get the original LayerNorms back (`with_layernorm_layers`; the earlier layers' calibrated fits do
  not depend on later layers, so they stay valid), each variant is measured on the calibration data (the choice) and on
  the evaluation data (reported), and the fewest kept layers whose calibration cosine reaches C win
  (`sweep_layernorm_layers`); LayerNorm in every layer (nothing converted) is measured as the reference but never
  chosen: a target only it reaches is an error. The report shows the whole sweep: fidelity against the number of
  normalization-free layers.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

from torch import nn

from ..errors import ConversionError
from ..norms.build import STOCK, norm_spec
from .fidelity import measure_fidelity


def parse_layer_selection(selection: str | int | Sequence[int], num_layers: int) -> list[int]:
    """Encoder layer indices from `"4,5"`, `"4-5"`, `"-2,-1"` (negative counts from the end) or a list of ints;
    sorted, each in range, at least one. A range is checked against `num_layers` from its ends, before any of its
    indices is listed (`0-300000000` is refused at once, not after building 300 million of them)."""
    out_of_range = ConversionError(
        f"--keep-layernorm {reprlib.repr(selection)}: the model has {num_layers} encoder layers (0 to {num_layers - 1})."
    )
    if isinstance(selection, str):
        spans = [layer_span(part.strip(), selection) for part in selection.split(",")]
        if any(not -num_layers <= end < num_layers for span in spans for end in span):
            raise out_of_range
        indices = [index for first, last in spans for index in range(first, last + 1)]
    else:
        items = [selection] if isinstance(selection, Integral) else selection
        if not isinstance(items, Sequence) or any(isinstance(i, bool) or not isinstance(i, Integral) for i in items):
            raise ConversionError(
                f"keep_layernorm={reprlib.repr(selection)}: expected layer indices, e.g. [4, 5], -1 or '4-5'."
            )  # 1.7 and True used to become layer 1, 5 a TypeError
        indices = [int(index) for index in items]
    if not indices or any(not -num_layers <= index < num_layers for index in indices):
        raise out_of_range
    return sorted({index % num_layers for index in indices})


def layer_span(part: str, selection: str) -> tuple[int, int]:
    """The first and last layer of one part of `--keep-layernorm` (`"4"`, `"4-5"`, `"-1"`), refused when it names
    none."""
    first, dash, last = part.partition("-") if not part.startswith("-") else (part, "", "")
    try:
        span = (int(first), int(last) if dash else int(first))
    except ValueError:
        raise ConversionError(
            f"--keep-layernorm {reprlib.repr(selection)}: expected layer indices such as '4,5', '4-5' or '-1'."
        ) from None
    if span[0] > span[1]:  # "3-1" names no layer; within "0,3-1" it would vanish silently
        raise ConversionError(
            f"--keep-layernorm {reprlib.repr(selection)}: the range {reprlib.repr(part)} is empty; write it low-high."
        )
    return span


def layer_norm_types(norm_type: str, num_layers: int, kept: Sequence[int]) -> list[str] | None:
    """The config's `layer_norm_types` for a `norm_type` model keeping LayerNorm in layers `kept` (None: none kept)."""
    if not kept:
        return None
    return [STOCK if index in set(kept) else norm_type for index in range(num_layers)]


def with_layernorm_layers(
    student: nn.Module,
    teacher: nn.Module,
    norm_names: Sequence[str],
    build: Callable[[list[str] | None], nn.Module],
    kept: Sequence[int],
) -> nn.Module:
    """A new student whose layers `kept` have the teacher's LayerNorms and whose other norms are copies of `student`'s.

    `build(layer_norm_types)` makes a student with the teacher's weights in that layout; each norm of `norm_names` that
    is not a LayerNorm there then takes `student`'s parameters (the calibrated or healed values)."""
    mixed = build(layer_norm_types(student.config.norm_type, student.config.num_hidden_layers, kept))
    for name in norm_names:
        module = mixed.get_submodule(name)
        if not isinstance(module, nn.LayerNorm):
            module.load_state_dict(student.get_submodule(name).state_dict())
    return mixed


def sweep_layernorm_layers(
    student: nn.Module,
    teacher: nn.Module,
    norm_names: Sequence[str],
    build: Callable[[list[str] | None], nn.Module],
    batches: dict[str, Sequence[dict]],
    target_cosine: float,
) -> tuple[nn.Module, dict[str, Any]]:
    """The variant of the calibrated `student` with the fewest LayerNorm layers (the last ones) whose mean cosine on
    `batches["calibration"]` reaches `target_cosine`, and the sweep's record: one row per number of kept layers with
    the mean cosine and max abs diff on each set of `batches` (`calibration`, `evaluation`)."""
    num_layers = student.config.num_hidden_layers
    rows, chosen = [], None
    for kept_count in range(num_layers + 1):
        kept = list(range(num_layers - kept_count, num_layers))
        variant = with_layernorm_layers(student, teacher, norm_names, build, kept) if kept else student
        row: dict[str, Any] = {"layernorm_layers": kept, "norm_free_layers": num_layers - kept_count}
        for data_name, data_batches in batches.items():
            end_to_end = measure_fidelity(variant, teacher, data_batches, norm_names)["end_to_end"]
            row[data_name] = {key: end_to_end[key] for key in ("mean_cosine", "max_abs_diff")}
        rows.append(row)
        converts_some = kept_count < num_layers  # every layer LayerNorm: the original, measured as the reference
        if chosen is None and converts_some and row["calibration"]["mean_cosine"] >= target_cosine:
            chosen = (variant, kept)
    if chosen is None:
        raise ConversionError(unreached_message(student.config.norm_type, target_cosine, rows[:-1]))
    variant, kept = chosen
    record = {
        "target_cosine": target_cosine,
        "chosen_layernorm_layers": kept,
        "reached": True,
        "rows": rows,
        "method": (
            f"every layer calibrated as {student.config.norm_type} once; the last k layers then given back the "
            "original LayerNorms, for k = 0 to all; the fewest kept layers whose mean cosine on the calibration data "
            "reaches the target"
        ),
    }
    return variant, record


def unreached_message(norm_type: str, target_cosine: float, rows: list[dict[str, Any]]) -> str:
    """Why no layer choice was made: only LayerNorm in every layer (no `norm_type` left) would reach the target."""
    best = max(rows, key=lambda row: row["calibration"]["mean_cosine"])
    return (
        f"--target-cosine {target_cosine}: no choice that leaves a {norm_type} layer reaches it on the calibration data "
        f"(best {best['calibration']['mean_cosine']:.4f}, with LayerNorm in layers "
        f"{', '.join(map(str, best['layernorm_layers'])) or 'none'}); lower the target or name the layers with "
        "--keep-layernorm."
    )


def layer_plan(
    norm_type: str,
    num_layers: int,
    keep_layernorm: Any,
    target_cosine: float | None,
    exact: bool,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `layer_norm_types` option that `keep_layernorm` asks for (empty when it is None), after checking that the
    per-layer choice fits: one way at a time (`--keep-layernorm`, `--target-cosine` or the option
    `layer_norm_types` in `options`), not LaPE, a target cosine only where the conversion is inexact, and at least one
    layer left to convert."""
    ways = [name for name, given in (("--keep-layernorm", keep_layernorm is not None),
                                     ("--target-cosine", target_cosine is not None),
                                     ("--option layer_norm_types", (options or {}).get("layer_norm_types") is not None))
            if given]  # fmt: skip
    if len(ways) > 1:
        raise ConversionError(f"Give one of {' and '.join(ways)}, not both: each chooses the LayerNorm layers.")
    check_some_layer_converted(norm_type, (options or {}).get("layer_norm_types"))
    spec = norm_spec(norm_type)
    if spec.position_norms and (keep_layernorm is not None or target_cosine is not None):
        raise ConversionError(
            f"{spec.short_name}'s position norms span all layers: --keep-layernorm and --target-cosine do not apply."
        )
    if target_cosine is not None:
        if exact:
            raise ConversionError(f"The {norm_type} conversion is exact: there is no LayerNorm layer to choose.")
        if not 0 < target_cosine <= 1:
            raise ConversionError(f"--target-cosine must be in (0, 1], got {target_cosine}.")
        return {}
    if keep_layernorm is None:
        return {}
    kept = parse_layer_selection(keep_layernorm, num_layers)
    types = layer_norm_types(norm_type, num_layers, kept)
    check_some_layer_converted(norm_type, types)
    return {"layer_norm_types": types}


def check_some_layer_converted(norm_type: str, types: Any) -> None:
    """Refuse `layer_norm_types` that keep LayerNorm in every encoder layer: nothing would become `norm_type`."""
    if norm_type != STOCK and isinstance(types, list) and types and all(kind == STOCK for kind in types):
        raise ConversionError(
            f"Every encoder layer would keep its LayerNorm, so nothing would be converted to {norm_type}: "
            "leave at least one layer out of --keep-layernorm (or layer_norm_types)."
        )
