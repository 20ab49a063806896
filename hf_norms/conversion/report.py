"""The conversion report beside every converted checkpoint: `conversion_report.json`, `.md` and `.png`.

The JSON holds what was converted and how (source, norm_type, options, calibration, healing, evaluation data) and, per
stage (naive, calibrated, healed, exact), the fidelity measured by `fidelity.measure_fidelity`. The Markdown renders it
as tables; the PNG plots each stage's per-norm relative error against the norm's position in the forward pass.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from ..errors import ConversionError
from ..models.family_registry import FAMILIES, MODEL_CLASSES
from ..norms.build import fine_tuning_config, norm_spec
from ..readers import read_json_object
from .data import TOKEN_TYPES

REPORT_JSON = "conversion_report.json"
REPORT_MD = "conversion_report.md"
REPORT_PNG = "conversion_report.png"
STAGE_ORDER = ("naive", "calibrated", "healed", "exact")
# the parts of a norm's module path a short name leaves out: base models (`bert`, `vit`, ...) and layer lists
PATH_PARTS_LEFT_OUT = {cls.base_model_prefix for cls in MODEL_CLASSES.values()} | {"encoder", "layer", "layers"}


# The fields a report is read for (healing, fine-tuning records): name -> whether a value fits.
REPORT_FIELDS = {
    "source": lambda value: isinstance(value, str),
    "source_revision": lambda value: value is None or isinstance(value, str),
    "architecture": lambda value: isinstance(value, str) and value in MODEL_CLASSES,
    "evaluation": lambda value: (
        isinstance(value, dict)
        and isinstance(value.get("data"), str)
        and _count(value.get("start"), 0)
        and all(_count(value.get(key), 1) for key in ("samples", "max_length"))
    ),
    "stages": lambda value: (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(stage, dict) and isinstance(stage.get("per_norm"), dict) for stage in value.values())
    ),
}


def read_report(folder: str | Path) -> dict[str, Any]:
    """The report in `folder` (`readers.read_json_object`), refused in one line when a field it is read for is missing
    or of the wrong kind (`REPORT_FIELDS`)."""
    path = Path(folder) / REPORT_JSON
    fix = "restore the report `hf-norms convert` wrote, or convert again"
    report = read_json_object(path, fix)
    for name, fits in REPORT_FIELDS.items():
        if not fits(report.get(name)):
            raise ConversionError(f"{path}: its {name!r} is missing or malformed ({report.get(name)!r:.60}); {fix}.")
    return report


def _count(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _float64_comparison(errors: dict[str, float] | None) -> str:
    if not errors:
        return ""
    return (
        f" (float32 rounding: to the unfolded model computed in float64, the unfolded model is "
        f"{_number(errors['unfolded'])} off and the folded one {_number(errors['folded'])})"
    )


def write_report(folder: str | Path, report: dict[str, Any]) -> None:
    """Write the JSON, Markdown and PNG forms of `report` into `folder`."""
    folder = Path(folder)
    report = {**report, "stages": {s: report["stages"][s] for s in STAGE_ORDER if s in report["stages"]}}
    (folder / REPORT_JSON).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")  # strict JSON
    (folder / REPORT_MD).write_text(report_markdown(report))
    plot_per_norm_error(report, folder / REPORT_PNG)


def stage_summary(stage: str, metrics: dict[str, Any], max_abs_diff: bool = True) -> str:
    """One line of a stage's figures, as `convert` and `heal` print them: `healed: max abs diff 3.4, mean cosine 0.9649,
    out-of-domain cosine 0.9327, probe accuracy 0.92 -> 0.90 (-1.6 points)`."""
    end_to_end = metrics["end_to_end"]
    cosine = end_to_end["mean_cosine"]
    text = f"{stage}: " + (f"max abs diff {end_to_end['max_abs_diff']:.3g}, " if max_abs_diff else "")
    text += f"mean cosine {cosine:.4f}" + ("" if cosine is not None and math.isfinite(cosine) else " (not finite)")
    if metrics.get("short_inputs"):
        text += f", short-input cosine {metrics['short_inputs']['mean_cosine']:.4f}"
    if metrics.get("out_of_domain"):
        text += f", out-of-domain cosine {metrics['out_of_domain']['mean_cosine']:.4f}"
    if metrics.get("probe"):
        probe = metrics["probe"]
        text += (f", probe accuracy {probe['teacher_accuracy']:.3f} -> {probe['student_accuracy']:.3f} "
                 f"({probe['points_kept']:+.1f} points)")  # fmt: skip
    for name, scores in (metrics.get("retrieval") or {}).items():
        text += (f", {name.replace('_', '-')} search recall@1 {scores['source_recall_at_1']:.3f} -> "
                 f"{scores['recall_at_1']:.3f}, MRR@10 {scores['source_mrr_at_10']:.3f} -> {scores['mrr_at_10']:.3f}")  # fmt: skip
    return text


def _number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"


def report_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: what was converted and how, then end-to-end and per-norm tables by stage."""
    stages = report["stages"]
    lines = [
        f"# Conversion report: {report['architecture']} to `{report['norm_type']}`",
        "",
        f"- Source: `{report['source']}`"
        + (f" (revision `{report['source_revision']}`)" if report["source_revision"] else ""),
        f"- Family: {report['family']}; norm_type: `{report['norm_type']}`; exact conversion: {'yes' if report['exact'] else 'no'}",
        f"- Norm options: `{json.dumps(report['options'])}`",
        f"- Folded affine parameters into the next Linear layers: {'yes' if report['folded'] else 'no'}",
        f"- hf-norms version: {report['hf_norms_version']}",
    ]
    calibration, healing, evaluation = report.get("calibration"), report.get("healing"), report["evaluation"]
    if calibration:
        lines.append(
            f"- Calibration: {calibration['samples']} examples from `{calibration['data']}`, "
            f"{calibration['seconds']:.1f} s; {calibration['method']}"
        )
    if healing:
        examples = (f"a stream of `{healing['data']}`" if healing.get("samples") is None
                    else f"{healing['samples']} examples from `{healing['data']}`")  # fmt: skip
        lines.append(
            f"- Healing: {healing['steps']} steps on {examples}, {healing['seconds']:.0f} s; loss: {healing['loss']}"
        )
    elif report.get("heal_steps") == 0:
        lines.append("- Healing: none (`heal_steps=0`: calibrated only; `hf-norms heal` distils it from the source)")
    folding = report.get("folding")
    if folding:
        skipped = "; ".join(f"`{name}`: {reason}" for name, reason in folding["skipped"].items()) or "none"
        lines.append(
            f"- Folding: {len(folding['folded'])} norms folded (skipped: {skipped}); max abs diff to the unfolded "
            f"model {_number(folding['max_abs_diff_to_unfolded'])}"
            + _float64_comparison(folding.get("max_abs_diff_to_float64"))
        )
    pooling = "mean over real tokens" if evaluation.get("pooling") == "mean" else "the [CLS] token"
    length = f"; texts cut to {evaluation['max_length']} tokens" if evaluation.get("pooling") == "mean" else ""
    lines.append(
        f"- Evaluation: {evaluation['samples']} examples from `{evaluation['data']}`{length}; pooling: {pooling}"
    )
    family = FAMILIES.get(report["family"])
    if family is not None and not family.pre_ln and norm_spec(report["norm_type"]).statistics_free:
        name = norm_spec(report["norm_type"]).short_name
        lines.append(
            f"- Note: {family.display_name} is post-LN; {name} was not tested on post-LN models by its authors "
            "(experimental)."
        )
    lines += [
        "",
        "## End to end",
        "",
        "Max abs diff over the final hidden states and logits; mean cosine of the pooled final hidden states; per "
        "token type, the mean cosine of single tokens' final hidden states ([CLS]/prefix, which stock heads read; the "
        "other special tokens such as [SEP]; ordinary tokens); top-1 agreement and KL(original || converted) of the "
        "logits where the model has a head.",
        "",
        "| stage | max abs diff | mean cosine | [CLS]/prefix cosine | special-token cosine | ordinary-token cosine "
        "| top-1 agreement | KL divergence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stage, metrics in stages.items():
        e2e = metrics["end_to_end"]
        tokens = metrics.get("token_cosine") or {}
        lines.append(
            f"| {stage} | {_number(e2e['max_abs_diff'])} | {_number(e2e['mean_cosine'])} | "
            + " | ".join(_number(tokens.get(kind)) for kind in TOKEN_TYPES)
            + f" | {_number(e2e['top1_agreement'])} | {_number(e2e['kl_divergence'])} |"
        )
    names = list(next(iter(stages.values()))["per_norm"]) if stages else []
    lines += [
        "",
        "## Per norm: relative error of the output, ||y - y_ln|| / ||y_ln||",
        "",
        "| norm | " + " | ".join(stages) + " |",
        "|---" * (len(stages) + 1) + "|",
    ]
    for name in names:
        lines.append(f"| `{name}` | " + " | ".join(_number(stages[s]["per_norm"].get(name)) for s in stages) + " |")
    lines += downstream_markdown(report)
    lines += fine_tuning_markdown(report.get("fine_tuning"))
    return "\n".join(lines + layer_sweep_markdown(report.get("layer_sweep"))) + "\n"


def fine_tuning_rows(record: dict[str, Any] | None) -> list[dict[str, str]]:
    """Per fine-tuning protocol of a `fine_tuning` record (`record_fine_tuning`): the settings, the seeds, this
    checkpoint's and the source's accuracy (mean ± standard deviation over seeds) and the gap in points."""
    rows = []
    for protocol in (record or {}).get("protocols", []):
        ours, source = protocol["accuracy"], protocol["source_accuracy"]
        rows.append({
            "protocol": protocol["name"],
            "settings": f"{protocol['epochs']:g} epochs, learning rate {protocol['learning_rate']:g}",
            "seeds": ", ".join(map(str, protocol["seeds"])),
            "accuracy": _mean_and_spread(ours),
            "source_accuracy": _mean_and_spread(source),
            "points_below": f"{100 * (statistics.mean(source) - statistics.mean(ours)):+.1f}",
        })  # fmt: skip
    return rows


def _mean_and_spread(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {spread:.3f}"


def fine_tuning_markdown(record: dict[str, Any] | None) -> list[str]:
    """The `fine_tuning` record as Markdown lines: how it was fine-tuned, and this checkpoint beside its source."""
    if not record:
        return []
    lines = [
        "",
        "## Fine-tuned beside the source",
        "",
        f"{record['description']} (`{record['command']}`).",
        "",
        "| protocol | settings | seeds | accuracy, this checkpoint | accuracy, source | points below the source |",
        "|---|---|---|---|---|---|",
    ]
    for row in fine_tuning_rows(record):
        lines.append(" | ".join(["", *row.values(), ""]).strip())
    return lines


def record_fine_tuning(folder: str | Path, record: dict[str, Any]) -> None:
    """Add a `fine_tuning` record to the report in `folder` (and re-render its Markdown and plot): `description`
    (the task, the head, the Trainer), `command`, `weights_sha256` (of the weights fine-tuned) and `protocols`, a list
    of `{name, epochs, learning_rate, seeds, accuracy, source_accuracy}` with one accuracy per seed."""
    report = read_report(folder)
    report["fine_tuning"] = record
    write_report(folder, report)


def layer_sweep_markdown(sweep: dict[str, Any] | None) -> list[str]:
    """The `--target-cosine` sweep as Markdown lines: fidelity against the number of normalization-free layers."""
    if not sweep:
        return []
    kept = sweep["chosen_layernorm_layers"]
    outcome = "reached" if sweep["reached"] else "not reached; every layer keeps LayerNorm"
    lines = [
        "",
        "## LayerNorm layers kept",
        "",
        f"Target mean cosine {sweep['target_cosine']} on the calibration data ({outcome}); chosen: LayerNorm in "
        f"{'layers ' + ', '.join(map(str, kept)) if kept else 'no layer'}. Method: {sweep['method']}.",
        "",
        "| normalization-free layers | LayerNorm layers | calibration cosine | calibration max abs diff | "
        "evaluation cosine | evaluation max abs diff |",
        "|---|---|---|---|---|---|",
    ]
    for row in sweep["rows"]:
        layers = ", ".join(map(str, row["layernorm_layers"])) or "none"
        calibration, evaluation = row["calibration"], row["evaluation"]
        lines.append(
            f"| {row['norm_free_layers']} | {layers} | {_number(calibration['mean_cosine'])} | "
            f"{_number(calibration['max_abs_diff'])} | {_number(evaluation['mean_cosine'])} | "
            f"{_number(evaluation['max_abs_diff'])} |"
        )
    return lines


def downstream_markdown(report: dict[str, Any]) -> list[str]:
    """Lines of the downstream tables (`downstream`): in-domain fidelity beside the out-of-domain and short-input
    fidelity, and the linear probe's accuracy, per stage; nothing for a check that was not made."""
    stages, lines = report["stages"], []
    short, ood = report.get("short_input_evaluation"), report.get("out_of_domain_evaluation")
    probe = report.get("probe_evaluation")
    checks = [(name, key) for name, key, record in (("out-of-domain", "out_of_domain", ood),
                                                    ("short-input", "short_inputs", short)) if record]  # fmt: skip
    if checks:
        places = [place for place, record in (("out of domain", ood), ("on short inputs", short)) if record]
        data = [f"out of domain: {ood['name']} (`{ood['data']}`, {ood['samples']} examples)"] if ood else []
        if short:
            data.append(f"short inputs: the first {short['words']} words of the {short['samples']} evaluation texts")
        lines += [
            "",
            "## " + ", ".join(["In domain", *places[:-1]]) + f" and {places[-1]}",
            "",
            f"In domain: `{report['evaluation']['data']}`; {'; '.join(data)}. Mean cosine of the pooled final hidden "
            "states and max abs diff to the original.",
            "",
            "| stage | in-domain cosine | " + " | ".join(f"{name} cosine" for name, _ in checks)
            + " | in-domain max abs diff | " + " | ".join(f"{name} max abs diff" for name, _ in checks) + " |",
            "|---|---|" + "---|" * (2 * len(checks) + 1),
        ]  # fmt: skip
        for stage, metrics in stages.items():
            inside, others = metrics["end_to_end"], [metrics.get(key) or {} for _, key in checks]
            lines.append(
                f"| {stage} | {_number(inside['mean_cosine'])} | "
                + " | ".join(_number(other.get("mean_cosine")) for other in others)
                + f" | {_number(inside['max_abs_diff'])} | "
                + " | ".join(_number(other.get("max_abs_diff")) for other in others) + " |"
            )  # fmt: skip
    if probe:
        lines += [
            "",
            "## Linear probe",
            "",
            f"{probe['name']} (`{probe['data']}`): {probe['method']}, fitted on the original's features of "
            f"{probe['train_samples']} training examples, scored on {probe['test_samples']} test examples. Points kept: "
            "the converted model's accuracy minus the original's, in percentage points.",
            "",
            "| stage | original | converted, original's probe | converted, refitted probe | points kept | "
            "points kept (refitted) |",
            "|---|---|---|---|---|---|",
        ]
        for stage, metrics in stages.items():
            scores = metrics.get("probe") or {}
            lines.append(
                f"| {stage} | " + " | ".join(_number(scores.get(key)) for key in (
                    "teacher_accuracy", "student_accuracy", "student_retrained_accuracy")) + " | "
                + " | ".join("n/a" if scores.get(key) is None else f"{scores[key]:+.1f}"
                             for key in ("points_kept", "points_kept_retrained")) + " |"
            )  # fmt: skip
    return lines + retrieval_markdown(report)


def retrieval_markdown(report: dict[str, Any]) -> list[str]:
    """The report's semantic-search section (`retrieval.RetrievalCheck`): per measured stage and set, recall@1 and
    MRR@10 of the original and the converted model, and the fraction kept."""
    record = report.get("retrieval_evaluation")
    if not record:
        return []
    sets = "; ".join(
        f"{name.replace('_', ' ')}: {s['pairs']} pairs of {s['name']}" for name, s in record["sets"].items()
    )
    lines = ["", "## Semantic search", "", f"{record['method']} ({sets}).", "",
             "| stage | set | recall@1, original | recall@1, converted | kept | MRR@10, original | MRR@10, converted | kept |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for stage, metrics in report["stages"].items():
        for name, scores in (metrics.get("retrieval") or {}).items():
            lines.append(f"| {stage} | {name.replace('_', ' ')} | " + " | ".join(
                _number(scores.get(key)) for key in ("source_recall_at_1", "recall_at_1", "recall_at_1_kept",
                                                     "source_mrr_at_10", "mrr_at_10", "mrr_at_10_kept")) + " |")  # fmt: skip
    return lines


def plot_per_norm_error(report: dict[str, Any], path: Path) -> None:
    """A PNG line plot of each stage's per-norm relative error against the norm's position in the forward pass."""
    from matplotlib.figure import Figure  # without pyplot: no GUI backend, no global state, a faster import

    stages = report["stages"]
    names = list(next(iter(stages.values()))["per_norm"]) if stages else []
    sweep = report.get("layer_sweep")
    width = max(6.0, 0.35 * len(names) + 2)
    figure = Figure(figsize=(width + (4.5 if sweep else 0), 4.2), dpi=110)
    axes, *sweep_axes = figure.subplots(1, 2, width_ratios=[width, 4.5]) if sweep else [figure.subplots()]
    if sweep:
        plot_layer_sweep(sweep, sweep_axes[0])
    floor = 1e-9
    for stage, metrics in stages.items():
        values = [max(metrics["per_norm"][name], floor) for name in names]
        axes.plot(range(len(names)), values, marker="o", label=stage)
    axes.set_yscale("log")
    axes.set_xticks(range(len(names)))
    axes.set_xticklabels([_short_name(name) for name in names], rotation=75, fontsize=7)
    axes.set_ylabel("relative error of the norm output")
    axes.set_title(f"{report['architecture']}: LayerNorm to {report['norm_type']}", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)


def plot_layer_sweep(sweep: dict[str, Any], axes) -> None:
    """Mean cosine (calibration and evaluation data) against the number of normalization-free layers, the target as a
    dashed line."""
    rows = sorted(sweep["rows"], key=lambda row: row["norm_free_layers"])
    free = [row["norm_free_layers"] for row in rows]
    for data_name in ("calibration", "evaluation"):
        axes.plot(free, [row[data_name]["mean_cosine"] for row in rows], marker="o", label=f"{data_name} data")
    axes.axhline(sweep["target_cosine"], linestyle="--", color="grey", label="target")
    axes.set_xticks(free)
    axes.set_xlabel("normalization-free layers (the rest keep LayerNorm)")
    axes.set_ylabel("mean cosine to the original")
    axes.set_title("fidelity against depth without LayerNorm", fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)


def _short_name(name: str) -> str:
    """`bert.encoder.layer.3.attention.output.LayerNorm` -> `3.attn.LayerNorm` (`output.LayerNorm` -> `ffn.LayerNorm`)."""
    parts = [p for p in name.split(".") if p not in PATH_PARTS_LEFT_OUT]
    return ".".join(parts).replace("attention.output.", "attn.").replace("output.", "ffn.") or name


def set_fine_tuning_config(model, report: dict[str, Any]) -> None:
    """Set in `model.config`, the config saved with it, the values its norms fine-tune best with
    (`NormSpec.fine_tuning_config`: DyT and Derf, no dropout), so that the plain `Trainer` and any other tool fine-tune
    the saved checkpoint with them; record them in `report["fine_tuning_config"]` with the source's values (what `heal`
    trains with) and why. The modules keep what they were built with: the model in memory is unchanged."""
    chosen, specs = fine_tuning_config(model.config)
    if not chosen:
        return
    recorded = report.get("fine_tuning_config") or {}
    report["fine_tuning_config"] = {
        "config": {**recorded.get("config", {}), **chosen},
        "source_values": {
            **{name: getattr(model.config, name) for name in chosen},
            **recorded.get("source_values", {}),
        },
        "reason": "; ".join(dict.fromkeys(spec.fine_tuning_reason for spec in specs)),
    }
    for name, value in chosen.items():
        setattr(model.config, name, value)
