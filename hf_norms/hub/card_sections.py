"""The body of a model card: how the checkpoint was made, its fidelity and downstream tables, what to know before
relying on it; each rendered from the facts `card_facts.gather_card_facts` read, for `model_card.render_model_card`."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from ..conversion.downstream import dataset_name
from ..models.norm_options import NormOptions
from ..norms.build import STOCK, norm_spec
from ..norms.spec import CardText
from ..version_guard import SUPPORTED_TRANSFORMERS
from .card_facts import STAGES, CardFacts, data_name, identical_outputs


def downstream_rows(report: dict[str, Any] | None) -> list[dict[str, str]]:
    """The card's downstream table, one row per stage, each `{column title: figure}` in the table's order: in-domain
    cosine, then the out-of-domain and short-input cosine and the probe accuracies of the checks the report made
    (a dash for a figure a stage lacks); empty when it made none."""
    report = report or {}
    ood, short, probe, retrieval = (report.get(key) for key in ("out_of_domain_evaluation", "short_input_evaluation",
                                                                  "probe_evaluation", "retrieval_evaluation"))  # fmt: skip
    if not (ood or short or probe or retrieval):
        return []
    figure = lambda values, key, fmt: "—" if values.get(key) is None else fmt.format(values[key])  # noqa: E731
    rows = []
    for stage in STAGES:
        measured = (report.get("stages") or {}).get(stage)
        if not measured:
            continue
        row = {"stage": stage, "in-domain cosine": figure(identical_outputs(measured["end_to_end"]), "mean_cosine",
                                                          "{:.4f}")}  # fmt: skip
        for title, key, record in (("out-of-domain cosine", "out_of_domain", ood),
                                   ("short-input cosine", "short_inputs", short)):  # fmt: skip
            if record:
                row[title] = figure(identical_outputs(measured.get(key) or {}), "mean_cosine", "{:.4f}")
        if probe:
            scores = measured.get("probe") or {}
            row["probe accuracy, source"] = figure(scores, "teacher_accuracy", "{:.3f}")
            row["probe accuracy, this checkpoint"] = figure(scores, "student_accuracy", "{:.3f}")
            row["refitted probe, this checkpoint"] = figure(scores, "student_retrained_accuracy", "{:.3f}")
            row["points kept"] = figure(scores, "points_kept", "{:+.1f}")
        if retrieval:
            row.update(retrieval_cells(measured.get("retrieval") or {}))
        rows.append(row)
    return rows


def retrieval_cells(measured: dict[str, Any]) -> dict[str, str]:
    """A stage's retrieval columns: per set, recall@1 and MRR@10 as `this checkpoint / source (kept %)`."""
    cells = {}
    for name, title in (("in_domain", "in domain"), ("out_of_domain", "out of domain")):
        for key, metric in (("recall_at_1", "recall@1"), ("mrr_at_10", "MRR@10")):
            scores = measured.get(name) or {}
            kept = scores.get(f"{key}_kept")
            cells[f"search {metric}, {title}"] = "—" if key not in scores else (
                f"{scores[key]:.3f} / {scores[f'source_{key}']:.3f}" + ("" if kept is None else f" ({100 * kept:.1f} %)")
            )  # fmt: skip
    return cells


def provenance(facts: CardFacts) -> list[str]:
    """The numbered steps of "How this checkpoint was made"."""
    report = facts.report
    steps = []
    if report is None:
        steps.append(
            f'Built as `{facts.architecture}` with `norm_type="{facts.norm_type}"`. No conversion report was '
            "found next to the weights, so how they were obtained is not recorded here."
        )
    else:
        source = f"`{facts.base_model}`" if facts.base_model else "a local LayerNorm checkpoint"
        if report.get("source_revision"):
            source += f" at revision `{report['source_revision']}`"
        exact = (
            "exactly: the converted model computes the same function as the source"
            if facts.measured_exact
            else "approximately: this norm cannot reproduce the source's LayerNorms exactly (see the fidelity table)"
        )
        steps.append(f"Source: {source}.")
        steps.append(
            f"Converted with hf-norms {facts.hf_norms_version} to `{facts.architecture}`, "
            f'`norm_type="{facts.norm_type}"`{layers_kept(facts, report)}, {exact}.'
            + (
                " The norms' gamma and beta were then folded into the Linear layers that read them."
                if report.get("folded")
                else ""
            )
        )
        if report.get("calibration"):
            c = report["calibration"]
            steps.append(
                f"Calibrated ({c['method']}) on {c['samples']} samples of {data_name(c['data'])}, in {c['seconds']:.1f} s."
            )
        if report.get("heal_steps") == 0 and not report.get("healing"):
            steps.append(
                "Not healed: the conversion was asked to stop after calibration (`heal_steps=0`), so the model "
                "fine-tunes several points below its source; `hf-norms heal` distils it from the source."
            )
        if report.get("healing"):
            h = report["healing"]
            data = data_name(h["data"])
            examples = f"a stream of {data}" if h.get("samples") is None else f"{h['samples']} samples of {data}"
            steps.append(
                f"Healed by distillation from the source ({h['loss']}) on {examples}: "
                f"{plural(h['steps'], 'step')}, {h['seconds']:.0f} s."
            )
        if report.get("fine_tuning_config"):
            steps.append(fine_tuning_config_note(report["fine_tuning_config"]))
    if facts.training is not None:
        run = facts.training
        detail = ", ".join(
            part
            for part in (
                plural(run.global_step, "step") if run.global_step else "",
                f"{run.epochs:g} epoch{'' if run.epochs == 1 else 's'}" if run.epochs else "",
            )
            if part
        )
        steps.append(
            f"Fine-tuned with the transformers Trainer{f' on {run.dataset}' if run.dataset else ''}"
            f"{f' ({detail})' if detail else ''}."
        )
    return [*steps, *facts.notes]


def fine_tuning_config_note(record: dict[str, Any]) -> str:
    """Why the config holds other values than the source's (`convert.set_fine_tuning_config`), and how to undo it."""
    names = " and ".join(f"`{name}`" for name in record["config"])
    values = ", ".join(f"{name}={value}" for name, value in record["config"].items())
    source = ", ".join(f"{name}={value}" for name, value in record["source_values"].items())
    return (
        f"The config sets {names} to what this checkpoint fine-tunes best with ({values}; the source's: {source}), so "
        f"that the plain `Trainer` and any other tool fine-tune it that way: {record['reason']}. Inference is "
        f"unchanged (dropout acts only in training). To fine-tune with the source's values, pass {source} to "
        "`from_pretrained`."
    )


def layers_kept(facts: CardFacts, report: dict[str, Any]) -> str:
    """`" in layers 0-3, with the source's LayerNorm kept in layers 4, 5 (...)"`, or "" when every layer converted."""
    types = facts.norm_options.get("layer_norm_types")
    if not types:
        return ""
    kept = [index for index, kind in enumerate(types) if kind == STOCK]
    converted = [index for index, kind in enumerate(types) if kind != STOCK]
    sweep = report.get("layer_sweep")
    why = (
        f" (the fewest last layers whose cosine to the source reached {sweep['target_cosine']} on the calibration data)"
        if sweep and sweep.get("reached")
        else ""
    )
    return (
        f" in encoder layers {', '.join(map(str, converted)) or 'none'}, with the source's LayerNorm kept in layers "
        f"{', '.join(map(str, kept))}{why}"
    )


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def limitations(facts: CardFacts) -> list[str]:
    """What a user must know before relying on the checkpoint, from its family, norm, options and history."""
    items = []
    options = {**{f.name: f.default for f in fields(NormOptions)}, **facts.norm_options}
    report = facts.report or {}
    if report.get("evaluation"):
        items.append(
            f"The fidelity figures hold for {data_name(report['evaluation']['data'])}; inputs far from it may differ more."
        )
    if report and not facts.measured_exact and not facts.trained_after_conversion:
        items.append(
            "The weights were converted without any training, so the model does not compute what the source "
            "computed; check the fidelity table before using it as a drop-in replacement."
        )
    if facts.measured_exact and facts.training is None:
        items.append(
            "The conversion is exact, so the model computes what the source computes: the new norm makes a "
            "difference only once the model is trained further."
        )
    untrained = facts.training is None and not report.get("healing")
    items += norm_spec(facts.norm_type).caveats(options, facts.family, untrained)
    if facts.without_pooler:
        items.append(
            "The checkpoint has no pooler weights (its source has none): load it with `add_pooling_layer=False` and "
            "use `last_hidden_state`; without that argument the pooler is randomly initialised."
        )
    items.append(
        f"The remote code is tested on transformers{SUPPORTED_TRANSFORMERS}; on a newer release it warns once and runs, "
        "an older one is refused with the release to install."
    )
    return items


def fidelity_rows(report: dict[str, Any] | None) -> list[dict[str, str]]:
    """The fidelity table, one row per stage in the order they were made, numbers formatted for reading; the cosine per
    token type ([CLS]/prefix, special, ordinary) where the report measured it."""
    formats = {"max_abs_diff": "{:.3g}", "mean_cosine": "{:.4f}", "top1_agreement": "{:.3f}", "kl_divergence": "{:.3g}",
               "prefix": "{:.4f}", "special": "{:.4f}", "ordinary": "{:.4f}"}  # fmt: skip
    rows = []
    for stage in STAGES:
        measured = ((report or {}).get("stages") or {}).get(stage)
        if measured:
            values = {**identical_outputs(measured["end_to_end"]), **(measured.get("token_cosine") or {})}
            rows.append(
                {
                    "stage": stage,
                    **{
                        key: "—" if values.get(key) is None else fmt.format(values[key]) for key, fmt in formats.items()
                    },
                }
            )
    return rows


def fidelity_measurement(report: dict[str, Any] | None, max_seq_length: int | None = None) -> str:
    """What the fidelity table's cosines compare: the pooling, the tokens per text (and how that compares with the
    `max_seq_length` a sentence-transformers checkpoint runs at), the per-token-type columns."""
    evaluation = (report or {}).get("evaluation") or {}
    text = evaluation.get("pooling") == "mean"
    pooling = "the mean over real tokens, as a sentence embedding pools" if text else "the [CLS] token"
    length = f", texts truncated to {evaluation['max_length']} tokens" if text and evaluation.get("max_length") else ""
    if length and max_seq_length is not None:
        length += (
            ", the max_seq_length this sentence-transformers model runs at"
            if max_seq_length == evaluation["max_length"]
            else f", while this sentence-transformers model runs at max_seq_length {max_seq_length}"
        )
    return (
        f"Mean cosine: of the pooled final hidden states ({pooling}{length}). Per token type: the mean cosine of single "
        "tokens' final hidden states, for the [CLS] (prefix) token that a stock classification head reads, the other "
        "special tokens ([SEP], ...) and the ordinary tokens."
    )


def readable_data(description: str) -> str:
    """`BBC News (held-out articles) (bbc_news-test-128.txt)` for a known packaged set, else the description without
    local folders."""
    data = data_name(description)
    name = dataset_name(data)
    return data if name == data else f"{name} ({data})"


def with_kept_layernorms(text: CardText, norm_type: str, layer_norm_types: list[str] | None) -> CardText:
    """`text` for a checkpoint whose config `layer_norm_types` keeps LayerNorm in some encoder layers: the headline and
    the placement name the layers that keep it instead of saying that every LayerNorm is replaced."""
    kept = [index for index, kind in enumerate(layer_norm_types or []) if kind == STOCK]
    if norm_type == STOCK or not kept:
        return text
    converted = [index for index, kind in enumerate(layer_norm_types) if kind != STOCK]
    name = lambda indices: f"layer{'s' if len(indices) != 1 else ''} {', '.join(map(str, indices)) or 'none'}"  # noqa: E731
    placement = text.placement
    for sentence in ("Every LayerNorm of the model is replaced.", "; every LayerNorm of the model is replaced."):
        placement = placement.replace(sentence, "." if sentence.startswith(";") else "").strip()
    return replace(
        text,
        headline=f"{text.headline} in encoder {name(converted)} ({name(kept)} keeping LayerNorm)",
        placement=(
            f"{placement} Not every LayerNorm is replaced: encoder {name(kept)} keep{'s' if len(kept) == 1 else ''} "
            f"LayerNorm (config `layer_norm_types`), {name(converted)} use{'s' if len(converted) == 1 else ''} "
            f"`{norm_type}`; a norm before the encoder (an embedding norm) follows the first layer, the norms after it "
            "the last."
        ),
    )
