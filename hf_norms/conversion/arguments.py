"""The options of `hf-norms convert` and `hf-norms heal`, each declared once, as the dataclasses the command line
parses (`cli_parsing.ArgumentsParser`, transformers' `HfArgumentParser`), the Python API takes (`convert(source,
norm_type, output, **options)`, `heal(folder, data, **options)`) and the reports record.

Every field checks its value when the object is made (`__post_init__`), so a wrong value is one `ConversionError`
line before anything is read or written. Imports neither torch nor transformers, so that the command line answers at
once.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from ..cli_parsing import did_you_mean, flag, option, required
from ..errors import ConversionError, require_type
from ..norms.registry import NORM_NAMES, NORM_TYPES
from ..norms.spec import FLOAT_MAX

Device = Literal["auto", "cpu", "cuda"]
DEVICE_CHOICES = Device.__args__
DEVICE_HELP = "auto (default): a CUDA GPU when torch sees one, else the CPU; choose GPUs with CUDA_VISIBLE_DEVICES"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
TOKEN_HELP = "Hub token (default: HF_TOKEN, else the login stored by `hf auth login`); never printed"


def looks_like_a_path(text: str) -> bool:
    """Whether `text` names a local folder rather than a Hub id `org/name`: it starts with `.`, `/` or `~`, ends with a
    separator, has no `/` or more than one, or holds a backslash."""
    return text.startswith((".", "/", "~")) or text.endswith(("/", os.sep)) or text.count("/") != 1 or "\\" in text


def check_source_name(text: str) -> bool:
    """Whether the source `text` is a local folder (True) or a Hub id (False); anything else, a file or a path that
    does not exist, is a `ConversionError` naming it. Reads no file and imports nothing, so the command line refuses
    a mistyped path before it imports torch."""
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ConversionError(f"Source {text!r} is a file; give the checkpoint folder that holds config.json.")
        return True
    if looks_like_a_path(text) or not HUB_ID.match(text):
        raise ConversionError(
            f"There is no folder {str(local.resolve())!r}; give an existing checkpoint folder, or a Hub id 'org/name'."
        )
    return False


def check_heal_folder(folder: str | os.PathLike) -> None:
    """Refuse, reading no file, a folder to heal that does not exist (the command line, before it imports torch)."""
    if not Path(folder).expanduser().is_dir():
        raise ConversionError(f"There is no folder {os.fspath(folder)!r}; give the folder `hf-norms convert` wrote.")


def check_counts(arguments: Any, *names: str) -> None:
    """Refuse a count that is not a positive integer (`batch_size=0`, `samples=-1`, ...); None passes."""
    for name in names:
        value = getattr(arguments, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConversionError(f"{flag(arguments, name)} must be a positive integer, got {value!r}.")


def check_numbers(arguments: Any, *names: str) -> None:
    """Refuse a rate, weight or duration that is negative, NaN or infinite; None passes."""
    for name in names:
        value = getattr(arguments, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConversionError(f"{flag(arguments, name)} must be a finite number >= 0, got {value!r}.")


def check_choice(arguments: Any, name: str, choices: tuple) -> None:
    """Refuse a value that is not one of `choices` (the command line offers only those; Python takes any)."""
    if getattr(arguments, name) not in choices:
        value, spelled = getattr(arguments, name), flag(arguments, name).split()[0]
        raise ConversionError(f"{name} {value!r} is not one of {', '.join(map(str, choices))} ({spelled}).")


def option_kinds() -> dict[str, str]:
    """The type of each norm option as text (`float`, `bool`, `int | None`, ...), and `list` for `layer_norm_types`."""
    kinds = {option.name: getattr(option.annotation, "__name__", str(option.annotation))
             for spec in NORM_TYPES.values() for option in spec.options}  # fmt: skip
    return {**kinds, "layer_norm_types": "list"}


def check_float_options(options: dict[str, Any]) -> None:
    """Refuse a float norm option that no float32 weight holds (NaN, infinite, or finite but beyond float32's range,
    such as 1e308, which torch refuses only when the model is built), before anything is read."""
    limit = FLOAT_MAX["float32"]
    for key, value in options.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if option_kinds().get(key) == "float" and number and not (math.isfinite(value) and abs(value) <= limit):
            raise ConversionError(
                f"--option {key}={value!r}: must be a finite float32 number (magnitude at most {limit!r})."
            )


def parse_norm_options(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` texts (the command line's `--option`) as norm options, each VALUE parsed by its option's type in the
    registry (bool: true/false, int, float, str, none, a comma-separated list for `layer_norm_types`)."""
    kinds = option_kinds()
    options = {}
    for text in items:
        key, sep, value = text.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in kinds:
            hint = did_you_mean(key, kinds) if sep else ""
            raise ConversionError(f"--option {text!r}: expected KEY=VALUE with KEY one of {sorted(kinds)}{hint or '.'}")
        kind = kinds[key]
        if "bool" in kind:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ConversionError(f"--option {key} takes true or false, got {value!r}.")
            options[key] = value.lower() in ("true", "1")
        elif value.lower() == "none" and "None" in kind:
            options[key] = None
        elif "list" in kind:
            options[key] = [part.strip() for part in value.split(",")]
        else:
            try:
                options[key] = int(value) if "int" in kind else float(value) if "float" in kind else value
            except ValueError:
                raise ConversionError(f"--option {key} takes a {kind.split()[0]}, got {value!r}.") from None
    check_float_options(options)
    return options


@dataclass(kw_only=True)
class ConversionOptions:
    """How a model is converted and measured (`convert_model` in memory; `convert` adds where from and to)."""

    calibration_data: str | None = option(
        "DyT/Derf calibration data: .txt, .csv, .tsv, .json, .jsonl or .parquet file, image folder or saved dataset "
        "(in Python also texts, images or a datasets.Dataset)"
    )
    calibration_samples: int = option("examples the calibration fits on", 64)
    evaluation_data: str | None = option(
        "evaluation data (default: calibration examples held out, or probes)", aliases=["--eval-data", "--eval_data"]
    )
    evaluation_samples: int = option("evaluation examples", 64, aliases=["--eval-samples", "--eval_samples"])
    ood_evaluation_data: str | None = option(
        "out-of-domain evaluation data: what --calibration-data takes, or `packaged` (Python documentation "
        "paragraphs / scikit-learn digits)",
        aliases=["--ood-eval-data", "--ood_eval_data"],
    )
    ood_evaluation_samples: int = option(
        "out-of-domain evaluation examples", 64, aliases=["--ood-eval-samples", "--ood_eval_samples"]
    )
    probe_data: Literal["packaged"] | None = option(
        "labelled data for a linear probe fitted on the original's features: `packaged` (BBC News topics / "
        "Fashion-MNIST)"
    )
    probe_samples: int = option("probe training examples (half as many test examples)", 256)
    retrieval_samples: int = option(
        "sentence-transformers sources: measure semantic search on this many query-document pairs per set (BBC News "
        "titles -> articles, Python documentation first sentences -> the rest; e.g. 128), recall@1 and MRR@10 "
        "against the source's (default 0: not measured)",
        0,
    )
    max_length: int | None = option(
        "text: tokens per example (default: a sentence-transformers source's max_seq_length, else 128)"
    )
    batch_size: int = option("examples per forward pass", 16)
    fold: bool = option(
        "fold gamma/beta into the next Linear layers (pre-LN families: ViT, DeiT, DINOv2, CLIP vision)", False
    )
    keep_layernorm: str | None = option(
        "encoder layers that keep LayerNorm, e.g. 4,5 or 4-5 (--keep-layernorm=-1: the last; in Python also a list)",
        metavar="LAYERS",
    )
    target_cosine: float | None = option(
        "DyT: keep LayerNorm in the fewest last layers that reach this cosine on the calibration data (e.g. 0.995); "
        "the report shows every choice",
        metavar="C",
    )
    heal_steps: int = option(
        "DyT/Derf: optimizer steps of healing by distillation from the source after calibration, on the calibration "
        "data less the evaluation examples, as `hf-norms heal` runs it (0: calibrated only, which the report and the "
        "card then state; a calibrated-only model fine-tunes several points below its source)",
        300,
        metavar="N",
    )
    text_column: str | None = option(
        "the column of texts in a .csv/.tsv/.json/.jsonl/.parquet file or saved dataset (default: text, sentence, "
        "content or document, else the first text column)"
    )
    image_column: str | None = option("the column of images (default: image, img, else the first image column)")
    progress: bool = option("show progress bars", False, cli=False)

    def data_column(self, modality: str) -> str | None:
        """The column the data of a `modality` ("text" or "image") model is read from, where one is named."""
        return self.text_column if modality == "text" else self.image_column

    def __post_init__(self) -> None:
        check_counts(self, "calibration_samples", "evaluation_samples", "ood_evaluation_samples", "probe_samples",
                     "max_length", "batch_size")  # fmt: skip
        if not isinstance(self.heal_steps, int) or isinstance(self.heal_steps, bool) or self.heal_steps < 0:
            raise ConversionError(f"{flag(self, 'heal_steps')} must be an integer >= 0, got {self.heal_steps!r}.")
        cosine = self.target_cosine
        if cosine is not None and not (isinstance(cosine, (int, float)) and 0 < cosine <= 1):
            raise ConversionError(f"--target-cosine must be in (0, 1], got {cosine}.")
        if self.retrieval_samples != 0:
            check_counts(self, "retrieval_samples")


@dataclass(kw_only=True)
class ConvertArguments(ConversionOptions):
    """`hf-norms convert SOURCE --norm-type T --output DIR [...]`: `ConversionOptions` plus the source, the target
    and the norm options."""

    source: str = required("checkpoint folder or Hub model id (read from HF_ENDPOINT)", positional=True)
    norm_type: str = required(f"one of {', '.join(NORM_NAMES)}", choices=NORM_NAMES)
    output: str = required("folder to create (refused if it exists, unless --overwrite)")
    options: dict[str, Any] | None = option(
        "norm option, e.g. dyt_per_channel_alpha=false or dtn_gate_init=0.5 (repeatable; in Python a dict)",
        aliases=["--option"],
        repeatable=True,
        metavar="KEY=VALUE",
    )
    overwrite: bool = option("move an existing output folder aside and write a new one", False)
    allow_pickle: bool = option("allow loading pytorch_model.bin (pickle) weights", False)
    revision: str | None = option("Hub revision of the source")
    token: str | None = option(TOKEN_HELP)
    device: Device = option(DEVICE_HELP, "auto")

    def __post_init__(self) -> None:
        require_type("source", self.source, (str, os.PathLike), "a checkpoint folder or a Hub id")
        require_type("norm_type", self.norm_type, str, f"one of {sorted(NORM_NAMES)}")
        require_type("output", self.output, (str, os.PathLike), "the folder to write")
        super().__post_init__()
        check_choice(self, "device", DEVICE_CHOICES)
        if isinstance(self.options, list):
            self.options = parse_norm_options(self.options)
        elif isinstance(self.options, dict):
            check_float_options(self.options)


@dataclass(kw_only=True)
class HealArguments:
    """`hf-norms heal FOLDER --data DATA [...]`: what a healing run distils on, how long, with which loss, where."""

    folder: str = required("a folder written by `hf-norms convert`", positional=True)
    data: str = required(
        "unlabeled data, read as a stream: a .txt, .csv, .tsv, .json, .jsonl or .parquet file or a folder of them, an "
        "image folder, a saved dataset, or a Hub dataset id (in Python also texts, images or a datasets.Dataset)"
    )
    data_config: str | None = option("the configuration of a Hub dataset")
    data_split: str | None = option("the split of a Hub dataset or a saved DatasetDict (default: train)")
    text_column: str | None = option(
        "the column of texts (default: text, sentence, content, document, else the first text column)"
    )
    image_column: str | None = option("the column of images (default: image, img, else the first image column)")
    teacher: str | None = option("the original checkpoint (default: the report's source)")
    output: str | None = option("write the healed checkpoint here instead of replacing FOLDER")
    samples: int | None = option("train on the first N examples of --data, in memory")
    max_steps: int = option("optimizer steps", 300)
    max_minutes: float | None = option("stop (with a checkpoint to resume from) after this long")
    max_cpu_minutes: float | None = option(
        "stop (with a checkpoint) after this much CPU time of the process, all threads (one thread buys the most "
        "steps with it: OMP_NUM_THREADS=1)"
    )
    batch_size: int = option("examples per step and process", 8)
    max_length: int = option("text: tokens per training window", 128)
    learning_rate: float = option("AdamW's peak learning rate", 2e-4)
    warmup_steps: int = option("steps of linear warm-up (at most a third of the steps)", 10)
    save_steps: int = option("steps between checkpoints in the work folder", 50)
    cosine_weight: float = option("weight of the pooled final-state cosine term", 10.0)
    hidden_state_weight: float = option(
        "weight of the per-layer hidden-state terms (0: match the final states and logits only)", 1.0
    )
    token_weight: float = option(
        "weight of the per-token cosine of the final states, averaged per token type ([CLS], special, ordinary)", 1.0
    )
    head_weight: float = option("weight of the [CLS] final state and pooler output errors (what stock heads read)", 1.0)
    similarity_weight: float = option(
        "weight of the in-batch similarity term: KL of each example's softmax over its cosines to the batch's other "
        "pooled final states (a sentence-transformers checkpoint's pooling), student against teacher: the neighbour "
        "order semantic search reads (0: off)",
        0.0,
    )
    position_weight: float = option(
        "weight of the per-layer hidden-state error measured per token, every position alike whatever its activation "
        "scale (0: off)",
        0.0,
    )
    student_dropout: bool = option(
        "train the student with its source's dropout (--no-student-dropout: without; it then fine-tunes worse with "
        "dropout on)",
        True,
    )
    student_dropout_until: float = option(
        "with the student's dropout: the fraction of the healing (of --max-steps or of the time budget, whichever is "
        "spent faster) after which the student trains without it, to match the teacher's deterministic outputs in "
        "the last steps (1: dropout throughout; the default 0.67 kept 99 percent of MiniLM DyT's in-domain search at "
        "a 1.6-point cost in fine-tuning: docs/converting.md)",
        0.67,
    )
    bf16: bool | None = option(
        "bfloat16 autocast for both models' forward and the backward (float32 weights and optimizer; default: on a "
        "CUDA GPU that supports it; --no-bf16: float32 on a GPU too)",
        nargs="?",
        const=True,
        negation="--no-bf16",
    )
    device: Device = option(DEVICE_HELP, "auto")
    evaluation_data: str | None = option(
        "evaluation data, when the report's cannot be reloaded", aliases=["--eval-data", "--eval_data"]
    )
    ood_evaluation_data: str | None = option(
        "out-of-domain evaluation data, when the report's cannot be reloaded (or `packaged`)",
        aliases=["--ood-eval-data", "--ood_eval_data"],
    )
    probe_data: Literal["packaged"] | None = option("labelled data for the linear probe, when the report has none")
    work_dir: str | None = option("Trainer checkpoints (default: .FOLDER.healing beside FOLDER)")
    resume: bool = option("continue from the last complete checkpoint in the work dir", False)
    overwrite: bool = option("move an existing --output folder aside and write a new one", False)
    allow_pickle: bool = option("allow a pickle-only teacher checkpoint", False)
    token: str | None = option(TOKEN_HELP + ", for a teacher on the Hub")
    seed: int = option("seed of the data order and of dropout", 0)
    progress: bool = option("show progress bars", True, cli=False)

    def __post_init__(self) -> None:
        require_type("folder", self.folder, (str, os.PathLike), "the folder `hf-norms convert` wrote")
        if self.data is None:
            raise ConversionError(
                "heal needs data to distil on (--data): a .txt, .csv, .tsv, .json, .jsonl or .parquet file, a folder of "
                "images, a saved dataset or a Hub dataset id."
            )
        check_counts(self, "max_steps", "batch_size", "max_length", "save_steps", "samples")
        check_numbers(self, "learning_rate", "cosine_weight", "hidden_state_weight", "token_weight", "head_weight",
                      "similarity_weight", "position_weight", "warmup_steps", "max_minutes", "max_cpu_minutes",
                      "student_dropout_until")  # fmt: skip
        if self.student_dropout_until > 1:
            raise ConversionError(
                f"{flag(self, 'student_dropout_until')} is a fraction in [0, 1], got {self.student_dropout_until}."
            )
        if self.learning_rate == 0:
            raise ConversionError(f"{flag(self, 'learning_rate')} must be > 0, got 0.")
        check_choice(self, "device", DEVICE_CHOICES)

    @property
    def loss_weights(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in ("cosine_weight", "hidden_state_weight", "token_weight",
                                                        "head_weight", "similarity_weight", "position_weight")}  # fmt: skip


def split_options(cls: type, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keyword arguments that are fields of the dataclass `cls`, the others)."""
    names = {field.name for field in fields(cls)}
    return {k: v for k, v in options.items() if k in names}, {k: v for k, v in options.items() if k not in names}
