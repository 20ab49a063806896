"""Heal a calibrated conversion before it is returned: what `convert_model` and `hf-norms convert` give by default.

DyT and Derf cannot compute LayerNorm's division by each token's standard deviation, so a calibrated conversion is
only close to its source (mean cosine about 0.9 on MiniLM) and fine-tunes several points below it. Both routes
therefore heal it by distillation from the source (`hf_norms.conversion.healing`, the loss of `hf-norms heal`) for a
budget of `heal_steps` optimizer steps, never a time budget, with a fixed seed: the same call gives the same weights
on an idle or a busy machine. `heal_steps=0` (`--heal-steps 0`) is the explicit opt-out: the model is returned
calibrated only, and its report (`"healing": None`, `"heal_steps": 0`) and card say so.

The heal runs on copies in a private temporary folder (the source model as it is in memory, the calibrated student,
its report), so that it is the very run `hf-norms heal` makes, and the folder is removed afterwards.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from torch import nn

from .arguments import ConversionOptions, HealArguments
from .data import Examples, load_examples, model_device
from .healing import heal_folder, load_student
from .report import write_report
from .sources import save_checkpoint


def heal_converted(
    student: nn.Module, teacher: nn.Module, processor, arguments: ConversionOptions, evaluation: Examples
) -> nn.Module:
    """`student` (calibrated, with its `conversion_report`) healed from `teacher` for `arguments.heal_steps` steps on
    the calibration data less the examples it was evaluated on (`evaluation`); returned on the student's device with
    the report of the healed stage (`healing`: the steps, their budget, the data, the loss, the seed)."""
    report, modality = student.conversion_report, evaluation.modality
    device = model_device(student)
    column = arguments.data_column(modality)
    with tempfile.TemporaryDirectory(prefix="hf-norms-heal-") as scratch:
        source, converted, healed = (Path(scratch) / name for name in ("source", "converted", "healed"))
        save_checkpoint(teacher, processor, source)
        save_checkpoint(student, processor, converted)
        write_report(converted, {**report, "source": str(source), "source_revision": None})
        healed_report = heal_folder(
            HealArguments(
                folder=str(converted), teacher=str(source), output=str(healed), max_steps=arguments.heal_steps,
                data=healing_data(arguments, modality, report),
                evaluation_data=None if evaluated_on_a_file(arguments) else evaluation.items,
                ood_evaluation_data=arguments.ood_evaluation_data, probe_data=arguments.probe_data,
                max_length=report["evaluation"]["max_length"], device=device.type, progress=arguments.progress,
                **({f"{modality}_column": column} if column else {}),
            )
        )  # fmt: skip
        model = load_student(healed, report["architecture"]).to(device)
    model.conversion_report = {**healed_report, "source": report["source"], "source_revision": None}
    return model


def evaluated_on_a_file(arguments: ConversionOptions) -> bool:
    """Whether the evaluation examples come from a file, which `heal` reads again (and leaves out of its stream)."""
    evaluation = arguments.evaluation_data if arguments.evaluation_data is not None else arguments.calibration_data
    return isinstance(evaluation, (str, os.PathLike))


def healing_data(arguments: ConversionOptions, modality: str, report: dict[str, Any]) -> Any:
    """What the heal trains on: the calibration data file (heal's stream leaves out the evaluation examples it holds),
    or the calibration examples in memory less those evaluated on."""
    data = arguments.calibration_data
    if isinstance(data, (str, os.PathLike)):
        return data
    items = load_examples(data, modality, None, arguments.data_column(modality)).items
    if arguments.evaluation_data is None:
        start, samples = report["evaluation"]["start"], report["evaluation"]["samples"]
        items = items[:start] + items[start + samples :]
    return items
