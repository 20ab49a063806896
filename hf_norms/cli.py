"""The `hf-norms` command line: one subcommand per task, each a thin layer over the Python API.

It follows the conventions of the Hugging Face tools: both spellings of every multi-word option and no abbreviations
(`hf_norms.cli_parsing`); `--version`; `--token` wherever a Hub is reached (default: HF_TOKEN or the login stored by
`hf auth login`), never printed: every command runs inside `hub.redaction.redacted_output`, so what it prints, argument
errors included, holds no token; `hf-norms push REPO_ID [LOCAL_PATH]` takes its arguments as `hf upload` does.

Every `--help` answers at once: this module imports nothing heavy at the top, the code a subcommand runs is imported
only when it runs, the Auto classes are registered then (`main`; `hf_norms/__init__.py` leaves it to the command line
under the `hf-norms` script), and `finetune --help` is rendered from the torch-free `hf_norms.training.arguments`.
Errors that hf-norms raises on purpose (a bad input, a refused folder, an unreachable Hub) are printed as one line on
stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cli_parsing import OneLineParser, non_negative_float, port_number, positive_float, positive_int, spellings
from .errors import InputError, handled_errors
from .models.norm_registry import NORM_NAMES
from .version import VERSION

HEAL_COSINE_WEIGHT = 10.0  # = hf_norms.conversion.distillation.COSINE_WEIGHT (checked by a test)
HEAL_HIDDEN_STATE_WEIGHT = 1.0  # = hf_norms.conversion.distillation.HIDDEN_STATE_WEIGHT
DEVICE_CHOICES = ("auto", "cpu", "cuda")  # = hf_norms.conversion.devices.DEVICE_CHOICES
DEVICE_HELP = "auto (default): a CUDA GPU when torch sees one, else the CPU; choose GPUs with CUDA_VISIBLE_DEVICES"
HEAL_TOKEN_WEIGHT = 1.0  # = hf_norms.conversion.distillation.TOKEN_WEIGHT
HEAL_HEAD_WEIGHT = 1.0  # = hf_norms.conversion.distillation.HEAD_WEIGHT
TOKEN_HELP = "Hub token (default: HF_TOKEN, else the login stored by `hf auth login`); never printed"


def add_convert(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a LayerNorm ViT/DeiT/BERT checkpoint to another norm_type, with a fidelity report",
        description=(
            "Convert a LayerNorm ViT, DeiT or BERT checkpoint (any head; a folder or a Hub id) to another norm_type. "
            "SepNorm, DTN and LaPE convert exactly; DyT and Derf are calibrated on --calibration-data. The output "
            "folder holds a normal checkpoint, its remote code and conversion_report.{json,md,png}."
        ),
    )
    parser.add_argument("source", help="checkpoint folder or Hub model id (read from HF_ENDPOINT)")
    parser.add_argument("--norm-type", required=True, choices=NORM_NAMES)
    parser.add_argument("--output", required=True, help="folder to create (refused if it exists, unless --overwrite)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="norm option, e.g. dyt_per_channel_alpha=false or dtn_gate_init=0.5 (repeatable)")  # fmt: skip
    parser.add_argument("--calibration-data", help="DyT/Derf calibration data: .txt, image folder or saved dataset")
    parser.add_argument("--calibration-samples", type=positive_int, default=64)
    parser.add_argument("--eval-data", help="evaluation data (default: calibration examples held out, or probes)")
    parser.add_argument("--eval-samples", type=positive_int, default=64)
    add_downstream_options(parser)
    parser.add_argument("--max-length", type=positive_int, help="text: tokens per example (default: a "
                        "sentence-transformers source's max_seq_length, else 128)")  # fmt: skip
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--fold", action="store_true", help="fold gamma/beta into the next Linear layers (ViT/DeiT)")
    parser.add_argument("--keep-layernorm", metavar="LAYERS",
                        help="encoder layers that keep LayerNorm, e.g. 4,5 or 4-5 (--keep-layernorm=-1: the last)")  # fmt: skip
    parser.add_argument("--target-cosine", type=float, metavar="C",
                        help="DyT: keep LayerNorm in the fewest last layers that reach this cosine on the calibration "
                        "data (e.g. 0.995); the report shows every choice")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    parser.add_argument("--allow-pickle", action="store_true", help="allow loading pytorch_model.bin (pickle) weights")
    parser.add_argument("--revision", help="Hub revision of the source")
    parser.add_argument("--token", help=TOKEN_HELP)
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help=DEVICE_HELP)
    parser.set_defaults(run=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from .conversion.convert import convert, parse_norm_options

    report = convert(
        args.source,
        args.norm_type,
        args.output,
        options=parse_norm_options(args.option),
        calibration_data=args.calibration_data,
        calibration_samples=args.calibration_samples,
        evaluation_data=args.eval_data,
        evaluation_samples=args.eval_samples,
        max_length=args.max_length,
        batch_size=args.batch_size,
        fold=args.fold,
        keep_layernorm=args.keep_layernorm,
        target_cosine=args.target_cosine,
        **downstream_arguments(args),
        overwrite=args.overwrite,
        allow_pickle=args.allow_pickle,
        revision=args.revision,
        token=args.token,
        progress=True,
        device=args.device,
    )
    for stage, metrics in report["stages"].items():
        e2e = metrics["end_to_end"]
        print(f"{stage}: max abs diff {e2e['max_abs_diff']:.3g}, mean cosine {e2e['mean_cosine']:.4f}"
              + downstream_summary(metrics))  # fmt: skip
    sweep = report.get("layer_sweep")
    if sweep:
        print(f"LayerNorm kept in layers {sweep['chosen_layernorm_layers'] or 'none'} "
              f"(target cosine {sweep['target_cosine']}{'' if sweep['reached'] else ', not reached'})")  # fmt: skip
    print(f"wrote {Path(args.output).resolve()} (report: conversion_report.md)")
    return 0


def add_downstream_options(parser: argparse.ArgumentParser) -> None:
    """`convert`'s downstream checks (`hf_norms.conversion.downstream`), measured at every stage beside cosine."""
    parser.add_argument("--ood-evaluation-data", "--ood-eval-data", help="out-of-domain evaluation data: .txt file, image folder, saved "
                        "dataset, or `packaged` (Python documentation paragraphs / scikit-learn digits)")  # fmt: skip
    parser.add_argument("--ood-evaluation-samples", "--ood-eval-samples", type=positive_int, default=64)
    parser.add_argument("--probe-data", choices=("packaged",),
                        help="labelled data for a linear probe fitted on the original's features: `packaged` "
                        "(BBC News topics / Fashion-MNIST)")  # fmt: skip
    parser.add_argument("--probe-samples", type=positive_int, default=256,
                        help="probe training examples (half as many test examples)")  # fmt: skip


def downstream_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "ood_evaluation_data": args.ood_evaluation_data,
        "ood_evaluation_samples": args.ood_evaluation_samples,
        "probe_data": args.probe_data,
        "probe_samples": args.probe_samples,
    }


def downstream_summary(metrics: dict[str, Any]) -> str:
    """`, short-input cosine 0.97, out-of-domain cosine 0.91, probe accuracy 0.92 -> 0.88 (-4.0 points)` for the
    checks a stage has."""
    text = ""
    if metrics.get("short_inputs"):
        text += f", short-input cosine {metrics['short_inputs']['mean_cosine']:.4f}"
    if metrics.get("out_of_domain"):
        text += f", out-of-domain cosine {metrics['out_of_domain']['mean_cosine']:.4f}"
    if metrics.get("probe"):
        probe = metrics["probe"]
        text += (f", probe accuracy {probe['teacher_accuracy']:.3f} -> {probe['student_accuracy']:.3f} "
                 f"({probe['points_kept']:+.1f} points)")  # fmt: skip
    return text


def add_heal(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "heal",
        help="distil a converted checkpoint from its LayerNorm original (Trainer, resumable)",
        description=(
            "Heal a checkpoint written by `hf-norms convert` by distillation from its LayerNorm original, through the "
            "transformers Trainer, the student in training mode with its dropout: every layer's hidden states, the "
            "pooled final state's cosine, each token type's cosine, the [CLS] state and pooler output that stock heads "
            "read, and the logits. The healed weights replace FOLDER's (or go to --output) and the report gains a "
            "`healed` stage. --data is read as a stream. On several GPUs or CPU processes: torchrun --nproc_per_node N -m "
            "hf_norms.conversion.heal FOLDER --data ... (or accelerate launch -m hf_norms.conversion.heal ...)."
        ),
    )
    parser.add_argument("folder", help="a folder written by `hf-norms convert`")
    parser.add_argument("--data", required=True, help="unlabeled data, read as a stream: .txt, .jsonl or .parquet "
                        "files or a folder of them, an image folder, a saved dataset, or a Hub dataset id")  # fmt: skip
    parser.add_argument("--data-config", help="the configuration of a Hub dataset")
    parser.add_argument("--data-split", help="the split of a Hub dataset or a saved DatasetDict (default: train)")
    parser.add_argument("--text-column", help="the column of texts (default: text, sentence, content, document, "
                        "else the first text column)")  # fmt: skip
    parser.add_argument(
        "--image-column", help="the column of images (default: image, img, else the first image column)"
    )
    parser.add_argument("--teacher", help="the original checkpoint (default: the report's source)")
    parser.add_argument("--output", help="write the healed checkpoint here instead of replacing FOLDER")
    parser.add_argument("--samples", type=positive_int, help="train on the first N examples of --data, in memory")
    parser.add_argument("--max-steps", type=positive_int, default=300)
    parser.add_argument(
        "--max-minutes", type=non_negative_float, help="stop (with a checkpoint to resume from) after this long"
    )
    parser.add_argument("--max-cpu-minutes", type=non_negative_float,
                        help="stop (with a checkpoint) after this much CPU time of the process, all threads")  # fmt: skip
    parser.add_argument("--batch-size", type=positive_int, default=8, help="examples per step and process")
    parser.add_argument("--max-length", type=positive_int, default=128, help="text: tokens per training window")
    parser.add_argument("--learning-rate", type=positive_float, default=2e-4)
    parser.add_argument("--save-steps", type=positive_int, default=50)
    parser.add_argument("--cosine-weight", type=non_negative_float, default=HEAL_COSINE_WEIGHT,
                        help="weight of the pooled final-state cosine term")  # fmt: skip
    parser.add_argument("--hidden-state-weight", type=non_negative_float, default=HEAL_HIDDEN_STATE_WEIGHT,
                        help="weight of the per-layer hidden-state terms (0: match the final states and logits only)")  # fmt: skip
    parser.add_argument("--token-weight", type=non_negative_float, default=HEAL_TOKEN_WEIGHT,
                        help="weight of the per-token cosine of the final states, averaged per token type "
                        "([CLS], special, ordinary)")  # fmt: skip
    parser.add_argument("--head-weight", type=non_negative_float, default=HEAL_HEAD_WEIGHT,
                        help="weight of the [CLS] final state and pooler output errors (what stock heads read)")  # fmt: skip
    parser.add_argument("--no-student-dropout", action="store_true",
                        help="train the student without dropout (it then fine-tunes worse with dropout on)")  # fmt: skip
    parser.add_argument("--bf16", action="store_const", const=True, default=None,
                        help="bfloat16 autocast for both models' forward and the backward (float32 weights and "
                        "optimizer; default: on a CUDA GPU that supports it)")  # fmt: skip
    parser.add_argument("--no-bf16", dest="bf16", action="store_const", const=False, help="float32 on a GPU too")
    parser.add_argument("--device", choices=DEVICE_CHOICES, default="auto", help=DEVICE_HELP)
    parser.add_argument("--eval-data", help="evaluation data, when the report's cannot be reloaded")
    parser.add_argument("--ood-evaluation-data", "--ood-eval-data", help="out-of-domain evaluation data, when the report's cannot be "
                        "reloaded (or `packaged`)")  # fmt: skip
    parser.add_argument("--work-dir", help="Trainer checkpoints (default: .FOLDER.healing beside FOLDER)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the work dir")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output folder")
    parser.add_argument("--allow-pickle", action="store_true", help="allow a pickle-only teacher checkpoint")
    parser.add_argument("--token", help=TOKEN_HELP + ", for a teacher on the Hub")
    parser.set_defaults(run=run_heal)


def run_heal(args: argparse.Namespace) -> int:
    from .conversion.healing import heal

    report = heal(
        args.folder,
        args.data,
        teacher=args.teacher,
        output=args.output,
        samples=args.samples,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        batch_size=args.batch_size,
        max_length=args.max_length,
        learning_rate=args.learning_rate,
        save_steps=args.save_steps,
        cosine_weight=args.cosine_weight,
        hidden_state_weight=args.hidden_state_weight,
        token_weight=args.token_weight,
        head_weight=args.head_weight,
        student_dropout=not args.no_student_dropout,
        max_cpu_minutes=args.max_cpu_minutes,
        bf16=args.bf16,
        device=args.device,
        data_config=args.data_config,
        data_split=args.data_split,
        text_column=args.text_column,
        image_column=args.image_column,
        evaluation_data=args.eval_data,
        ood_evaluation_data=args.ood_evaluation_data,
        work_dir=args.work_dir,
        resume=args.resume,
        overwrite=args.overwrite,
        allow_pickle=args.allow_pickle,
        token=args.token,
    )
    if os.environ.get("RANK", "0") != "0":  # one process of several (torchrun, accelerate launch): rank 0 prints
        return 0
    for stage, metrics in report["stages"].items():
        cosine = metrics["end_to_end"]["mean_cosine"]
        print(f"{stage}: mean cosine {cosine:.4f}" + ("" if math.isfinite(cosine) else " (not finite)")
              + downstream_summary(metrics))  # fmt: skip
    return 0


FINETUNE_DESCRIPTION = (
    "Fine-tune a ViT/DeiT/BERT of any norm_type with the transformers Trainer: from a checkpoint (a stock one is "
    "converted to --norm_type as it loads) or from scratch, on a datasets dataset, an imagefolder, a CSV/JSON/Parquet "
    "file or packaged:fashion-mnist / packaged:bbc-news. Options may also come from one .json or .yaml file."
)
# The most used `TrainingArguments` options, shown by `hf-norms finetune --help` without importing transformers:
# name -> (default, help). A test checks each name and default against `TrainingArguments`.
FINETUNE_TRAINER_OPTIONS: dict[str, tuple[Any, str]] = {
    "output_dir": (None, "where checkpoints, the final model and its metrics are written"),
    "num_train_epochs": (3.0, "epochs to train, unless --max_steps is set"),
    "max_steps": (-1, "train this many steps (-1: --num_train_epochs epochs)"),
    "per_device_train_batch_size": (8, "training batch size per process"),
    "learning_rate": (5e-5, "initial learning rate of AdamW"),
    "eval_strategy": ("no", "when to evaluate: no, steps, epoch"),
    "save_strategy": ("steps", "when to save a checkpoint: no, steps, epoch, best"),
    "use_cpu": (False, "train on the CPU even where an accelerator is available"),
    "bf16": (False, "bfloat16 mixed precision"),
    "seed": (42, "random seed of the initialisation and the data order"),
    "resume_from_checkpoint": (None, "a checkpoint folder, or `last` for the newest one in --output_dir"),
    "push_to_hub": (
        False,
        "publish the finished model once, after evaluation, with its card (--hub_token or HF_TOKEN)",
    ),
    "hub_model_id": (None, "the repo --push_to_hub pushes to (default: the name of --output_dir)"),
}


def add_finetune(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune a ViT/DeiT/BERT of any norm_type with the Trainer (one process, or torchrun/accelerate)",
        description=FINETUNE_DESCRIPTION,
    )
    parser.set_defaults(run=None)  # `main` hands every argument after `finetune` to `run_finetune`


def run_finetune(arguments: list[str]) -> int:
    """`hf-norms finetune ...`: `--help` lists hf-norms' options and the most used Trainer options without importing
    transformers; `--help-all` is transformers' listing of every option; anything else is parsed by transformers'
    `HfArgumentParser`, as in its example scripts (`hf_norms.training.finetune.main`)."""
    if "-h" in arguments or "--help" in arguments:
        parser = finetune_help_parser()
        parser.print_help()
        parser.exit()
    with handled_errors("hf-norms finetune") as outcome:  # importing transformers takes seconds: a Ctrl-C may come
        from .training.arguments import check_command_line

        check_command_line(arguments)  # a wrong batch size, count or rate: one line at once, before the slow imports
        from . import register_auto_classes
        from .training.finetune import main

        if "--help-all" in arguments:
            outcome.status = main(["--help"])
        else:
            register_auto_classes()
            outcome.status = main(arguments)
    return outcome.status


def finetune_help_parser() -> argparse.ArgumentParser:
    """A parser whose help is `hf-norms finetune --help`: the options of `ModelArguments` and `DataArguments` (their
    help and defaults), then `FINETUNE_TRAINER_OPTIONS`. It only renders help; transformers parses a real run."""
    from .training.arguments import DataArguments, ModelArguments, OutputArguments

    parser = OneLineParser(
        prog="hf-norms finetune",
        usage="%(prog)s --OPTION VALUE ... | %(prog)s ARGUMENTS.json | %(prog)s ARGUMENTS.yaml",
        description=FINETUNE_DESCRIPTION,
        epilog=(
            "Every other TrainingArguments option is accepted too (weight_decay, warmup_steps, eval_steps, "
            "logging_steps, gradient_accumulation_steps, ...): `hf-norms finetune --help-all` lists them all."
        ),
    )
    for title, arguments in (("model", ModelArguments), ("data", DataArguments), ("output", OutputArguments)):
        group = parser.add_argument_group(f"{title} options ({arguments.__name__})")
        types = typing.get_type_hints(arguments)
        for field in dataclasses.fields(arguments):
            add_help_option(group, field.name, field.default, field.metadata["help"], literal_values(types[field.name]))
    group = parser.add_argument_group("the most used Trainer options (TrainingArguments)")
    for name, (default, help_text) in FINETUNE_TRAINER_OPTIONS.items():
        add_help_option(group, name, default, help_text)
    return parser


def add_help_option(
    group: argparse._ArgumentGroup, name: str, default: Any, help_text: str, choices: tuple | None = None
) -> None:
    """Show `--name` (both spellings) with its help and, where it has one, its default."""
    shown = "" if default is None or default is False else f" (default: {default})"
    if isinstance(default, bool):
        options: dict[str, Any] = {"action": "store_true"}
    else:
        options = {"choices": choices, "metavar": None if choices else "VALUE"}
    group.add_argument(*spellings(f"--{name}"), help=(help_text + shown).replace("%", "%%"), **options)


def literal_values(annotation: Any) -> tuple | None:
    """The values of a `Literal[...]` annotation, or of the `Literal` in `Literal[...] | None`; else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is typing.Literal:
            return typing.get_args(candidate)
    return None


def add_push(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "push",
        help="publish a checkpoint folder with its model card to a Hub endpoint (arguments as `hf upload`)",
        description=(
            "Upload an hf-norms checkpoint folder to REPO_ID in one commit, with a model card rendered from its "
            "conversion report and training metrics; the arguments work as in `hf upload`. Only what a checkpoint is "
            "made of is uploaded (config, safetensors weights, tokenizer or image processor, sentence-transformers "
            "files, reports, hf-norms' own model code); --include adds files, --exclude removes them. Files holding "
            "pickles, keys or credentials are never uploaded, no file holding the token ever is, and code that is not "
            "hf-norms' own only with --allow-custom-code."
        ),
    )
    parser.add_argument("repo_id", metavar="REPO_ID", help="e.g. my-org/vit-dyt")
    parser.add_argument("local_path", metavar="LOCAL_PATH", nargs="?", default=".",
                        help="the checkpoint folder (config.json, model.safetensors, ...; default: the current folder)")  # fmt: skip
    parser.add_argument("--include", action="append", default=[], metavar="GLOB",
                        help="also upload the files whose path inside the folder matches, e.g. '*.onnx' or 'sub/' "
                             "(repeatable; read for the token and for pickles, keys and credentials first)")  # fmt: skip
    parser.add_argument("--exclude", action="append", metavar="GLOB",
                        help="do not upload the files whose path inside the folder matches (repeatable; README.md is "
                             "the card)")  # fmt: skip
    parser.add_argument("--include-skipped", action="append", default=[], metavar="PATH",
                        help="also upload this file: the same as --include PATH (repeatable)")  # fmt: skip
    parser.add_argument("--allow-custom-code", action="store_true",
                        help="publish .py files, and configs naming code, that are not hf-norms' own (the card then "
                             "names them and says to load with trust_remote_code=False)")  # fmt: skip
    parser.add_argument("--delete", action="append", default=[], metavar="GLOB",
                        help="delete matching remote files in the commit (repeatable)")  # fmt: skip
    parser.add_argument("--token", help=TOKEN_HELP)
    parser.add_argument("--private", action="store_true", help="create the repo private (no effect if it exists)")
    parser.add_argument("--revision", help="branch to commit to (created from main if missing)")
    parser.add_argument("--commit-message", help="commit title")
    parser.add_argument("--endpoint", help="Hub endpoint URL (default: HF_ENDPOINT, else huggingface.co)")
    parser.add_argument("--base-model", help="Hub id of the source checkpoint, when the report names a local copy")
    parser.add_argument("--license", help="license id for the card (default: the source's, where known)")
    parser.add_argument("--dataset", action="append", default=[], metavar="ID", help="Hub dataset id for the card")
    parser.add_argument("--training-dataset", help="what a Trainer run in this folder trained and evaluated on")
    parser.add_argument("--note", action="append", default=[], help="a sentence for 'How this checkpoint was made'")
    parser.add_argument("--dry-run", action="store_true", help="check and list the files, upload nothing")
    parser.set_defaults(run=run_push)


def run_push(args: argparse.Namespace) -> int:
    import json
    import logging

    from .hub.publish import push_to_hub

    check_push_order(args.repo_id, args.local_path)
    # hf-norms' own INFO lines (what is skipped, what is uploaded); other libraries' from WARNING (httpx logs every
    # request at INFO)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    logging.getLogger("hf_norms").setLevel(logging.INFO)
    result = push_to_hub(
        args.local_path,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        commit_message=args.commit_message,
        endpoint=args.endpoint,
        token=args.token,
        include=args.include,
        exclude=args.exclude,
        include_skipped=args.include_skipped,
        allow_custom_code=args.allow_custom_code,
        delete_patterns=args.delete,
        dry_run=args.dry_run,
        base_model=args.base_model,
        license=args.license,
        datasets=args.dataset,
        training_dataset=args.training_dataset,
        notes=args.note,
    )
    if isinstance(result, list):
        print(json.dumps({"files": result}, indent=1))
    else:
        print(f"Pushed {args.local_path} to {args.repo_id}: commit {result.oid} ({result.commit_url})")
    return 0


def check_push_order(repo_id: str, local_path: str) -> None:
    """Refuse `hf-norms push DIR REPO_ID`, the order of hf-norms 0.1: a first argument that is a folder and a second
    that is not."""
    if Path(repo_id).is_dir() and not Path(local_path).is_dir():
        raise InputError(
            f"{repo_id!r} is a folder and {local_path!r} is not: the order is REPO_ID LOCAL_PATH, as in `hf upload`; "
            f"run `hf-norms push {shlex.quote(local_path)} {shlex.quote(repo_id)}`."
        )


def add_hub(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hub",
        help="serve a Hugging Face Hub-compatible API on 127.0.0.1",
        description=(
            "Serve the part of the Hub API that huggingface_hub and transformers use (repos, commits, branches, tags, "
            "downloads) on 127.0.0.1, from a folder on disk; point clients at it with the printed HF_ENDPOINT."
        ),
    )
    parser.add_argument("--root", required=True, help="folder holding the repos (created if missing)")
    parser.add_argument("--port", type=port_number, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--token", action="append", help="accepted bearer token (repeatable; default: any token)")
    parser.add_argument("--user", default=None, help="user name the tokens authenticate as")
    parser.set_defaults(run=run_hub, uses_models=False)  # the server needs neither torch nor transformers


def run_hub(args: argparse.Namespace) -> int:
    from .hub.server import serve_forever

    return serve_forever(args.root, tokens=args.token, port=args.port, user=args.user)


def add_demo(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="convert the packaged real models, push them to a loopback Hub and load them back by id",
        description=(
            "Convert the packaged real MiniLM (BERT) and DINOv2-S checkpoints, push them with their model cards to an "
            "embedded Hub on 127.0.0.1 (or --endpoint), and load every repo back by id, with `import hf_norms` and "
            "with trust_remote_code where hf_norms cannot be imported."
        ),
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where to keep the outputs (default: a new temp dir)"
    )
    parser.add_argument("--endpoint", default=None, help="push to this Hub endpoint instead of an embedded one")
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    import tempfile

    from .demo import run_demo

    return run_demo(args.workdir or Path(tempfile.mkdtemp(prefix="hf-norms-demo-")), args.endpoint)


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    add_demo,
    add_convert,
    add_heal,
    add_finetune,
    add_push,
    add_hub,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="hf-norms",
        description="DyT, Derf, DTN, SepNorm and LaPE for Hugging Face ViT, DeiT and BERT: convert, heal, fine-tune, publish.",
        epilog="`hf-norms COMMAND --help` describes a command. HF_NORMS_DEBUG=1 shows the traceback of an error.",
    )
    parser.add_argument("--version", action="version", version=f"hf-norms {VERSION}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `hf-norms ARGV`; returns the exit status (0; 2 for wrong input; 1 for a failed step; 130 if interrupted).
    Everything it prints, argument errors included, has the tokens it knows and anything shaped like a Hub token
    replaced by `<token>` (`hf_norms.hub.redaction.redacted_output`)."""
    from .hub.redaction import redacted_output

    argv = sys.argv[1:] if argv is None else list(argv)
    with redacted_output(argv):
        if argv[:1] == ["finetune"]:  # transformers' own parser of TrainingArguments, as in its example scripts
            return run_finetune(argv[1:])
        args = build_parser().parse_args(argv)
        with handled_errors(f"hf-norms {args.command}") as outcome:
            if getattr(args, "uses_models", True):  # `hub` does not: the models import torch and transformers
                from . import register_auto_classes

                register_auto_classes()  # what `import hf_norms` does, skipped under the `hf-norms` script
            outcome.status = args.run(args) or 0
        return outcome.status


if __name__ == "__main__":
    sys.exit(main())
