"""The `hf-norms` command line: one subcommand per task, each a thin layer over the Python API.

It follows the conventions of the Hugging Face tools: each command's options are the fields of one dataclass, parsed
by transformers' `HfArgumentParser` (`hf_norms.cli_parsing`: both spellings of every multi-word option, no
abbreviations, one-line usage errors), as `finetune` parses `TrainingArguments`; `--version`; `--token` wherever a Hub
is reached (default: HF_TOKEN or the login stored by `hf auth login`), never printed: every command runs inside
`redaction.redacted_output`, so what it prints, argument errors included, holds no token; `hf-norms push REPO_ID
[LOCAL_PATH]` takes its arguments as `hf upload` does.

Every `--help` and every argument error answers at once: the argument dataclasses import neither torch nor
transformers, and the code a subcommand runs is imported only when it runs. Errors that hf-norms raises on purpose (a
bad input, a refused folder, an unreachable Hub) are printed as one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import register_models
from .cli_parsing import ArgumentsParser, OneLineParser, did_you_mean, spellings
from .conversion.arguments import ConvertArguments, HealArguments, check_heal_folder, check_source_name
from .conversion.heal import DESCRIPTION as HEAL_DESCRIPTION
from .conversion.heal import HELP as HEAL_HELP
from .demo import DemoArguments
from .environment import EnvArguments, run_env
from .errors import handled_errors
from .hub.arguments import PushArguments, check_folder
from .hub.server.arguments import HubArguments
from .redaction import redacted_output
from .version import VERSION


def run_convert(arguments: ConvertArguments) -> int:
    from .conversion.convert import convert_checkpoint
    from .conversion.report import stage_summary

    report = convert_checkpoint(dataclasses.replace(arguments, progress=True))
    for stage, metrics in report["stages"].items():
        print(stage_summary(stage, metrics))
    sweep = report.get("layer_sweep")
    if sweep:
        print(f"LayerNorm kept in layers {sweep['chosen_layernorm_layers'] or 'none'} "
              f"(target cosine {sweep['target_cosine']}{'' if sweep['reached'] else ', not reached'})")  # fmt: skip
    print(f"wrote {Path(arguments.output).resolve()} (report: conversion_report.md)")
    return 0


def run_heal(arguments: HealArguments) -> int:
    from .conversion.heal import run

    return run(arguments)


def run_push(arguments: PushArguments) -> int:
    from .hub.publish import publish, pushed_line

    # hf-norms' own INFO lines (what is skipped, what is uploaded) unless --quiet; other libraries' from WARNING (httpx
    # logs every request at INFO)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    logging.getLogger("hf_norms").setLevel(logging.WARNING if arguments.quiet else logging.INFO)
    if arguments.quiet:  # huggingface_hub's upload bars and transformers' weight-loading bar
        from huggingface_hub.utils import disable_progress_bars
        from transformers.utils import logging as transformers_logging

        disable_progress_bars()
        transformers_logging.disable_progress_bar()
    result = publish(arguments)
    if isinstance(result, list):
        print(json.dumps({"files": result}, indent=1))
    else:
        print(result.commit_url if arguments.quiet else pushed_line(arguments.folder, arguments.repo_id, result))
    return 0


def run_hub(arguments: HubArguments) -> int:
    from .hub.server import serve_forever

    return serve_forever(arguments)


def run_demo(arguments: DemoArguments) -> int:
    from .demo import run_demo

    return run_demo(arguments)


@dataclass(frozen=True)
class Command:
    """A subcommand: its arguments dataclass, one line of help, its description, what runs it, what it refuses before
    anything imports torch (`check`: the places it is given, reading no file) and whether it uses the models
    (`hf_norms.register_models` registers them with transformers before it runs)."""

    arguments: type
    help: str
    description: str
    run: Callable[[Any], int]
    check: Callable[[Any], Any] = lambda arguments: None
    models: bool = True

    def parser(self, name: str) -> ArgumentsParser:
        return ArgumentsParser(self.arguments, prog=f"hf-norms {name}", description=self.description)


COMMANDS = {
    "demo": Command(
        DemoArguments,
        "convert the packaged real models, push them to a loopback Hub and load them back by id",
        "Convert the packaged real MiniLM (BERT) and DINOv2-S checkpoints, push them with their model cards to an "
        "embedded Hub on 127.0.0.1 (or --endpoint), and load every repo back by id, with `import hf_norms` and with "
        "trust_remote_code where hf_norms cannot be imported.",
        run_demo,
    ),
    "convert": Command(
        ConvertArguments,
        "convert a LayerNorm checkpoint of a supported family to another norm_type, with a fidelity report",
        "Convert a LayerNorm checkpoint of a supported family (docs/models.md; any head; a folder or a Hub id) to "
        "another norm_type: exactly where the norm allows (SepNorm, DTN, LaPE; RMSNorm on the pre-LN families), else "
        "calibrated on --calibration-data (DyT, Derf). The output folder holds a normal checkpoint, its remote code "
        "and conversion_report.{json,md,png}.",
        run_convert,
        check=lambda arguments: check_source_name(os.fspath(arguments.source)),
    ),
    "heal": Command(
        HealArguments,
        HEAL_HELP,
        HEAL_DESCRIPTION,
        run_heal,
        check=lambda arguments: check_heal_folder(arguments.folder),
    ),
    "push": Command(
        PushArguments,
        "publish a checkpoint folder with its model card to a Hub endpoint (arguments as `hf upload`)",
        "Upload an hf-norms checkpoint folder to REPO_ID in one commit, with a model card rendered from its "
        "conversion report and training metrics; the arguments work as in `hf upload`. What a checkpoint is made of "
        "is uploaded (config, safetensors weights, tokenizer or image processor, sentence-transformers files, "
        "reports, hf-norms' own model code); --include adds files, --exclude removes them. Files holding pickles, "
        "keys or credentials are never uploaded, no file holding the token ever is, and code that is not hf-norms' "
        "own only with --allow-custom-code.",
        run_push,
        check=lambda arguments: check_folder(arguments.folder),
    ),
    "hub": Command(
        HubArguments,
        "serve a Hugging Face Hub-compatible API on 127.0.0.1",
        "Serve the part of the Hub API that huggingface_hub and transformers use (repos, commits, branches, tags, "
        "downloads) on 127.0.0.1, from a folder on disk; point clients at it with the printed HF_ENDPOINT.",
        run_hub,
        models=False,
    ),
    "env": Command(
        EnvArguments,
        "print the versions and the machine a bug report needs",
        "Print hf-norms', Python's and the libraries' versions, the transformers releases hf-norms is tested on, the "
        "accelerator torch sees and the Hub endpoint, for a bug report (as `transformers env`; never a token).",
        run_env,
        models=False,
    ),
}
FINETUNE_HELP = (
    "fine-tune a model of a supported family and any norm_type with the Trainer (one process, or torchrun/accelerate)"
)


FINETUNE_DESCRIPTION = (
    "Fine-tune a model of a supported family and any norm_type with the transformers Trainer: from a checkpoint (a stock one is "
    "converted to --norm_type as it loads) or from scratch, on a datasets dataset, an imagefolder, a CSV/JSON/Parquet "
    "file or packaged:fashion-mnist / packaged:bbc-news. Options may also come from one .json or .yaml file."
)
# The most used `TrainingArguments` options, shown by `hf-norms finetune --help` (which imports no transformers, so it
# shows no defaults of theirs: `--help-all` is transformers' listing, with the defaults): name -> help.
FINETUNE_TRAINER_OPTIONS: dict[str, str] = {
    "output_dir": "where checkpoints, the final model and its metrics are written",
    "num_train_epochs": "epochs to train, unless --max_steps is set",
    "max_steps": "train this many steps (-1: --num_train_epochs epochs)",
    "per_device_train_batch_size": "training batch size per process",
    "learning_rate": "initial learning rate of AdamW",
    "eval_strategy": "when to evaluate: no, steps, epoch",
    "save_strategy": "when to save a checkpoint: no, steps, epoch, best",
    "use_cpu": "train on the CPU even where an accelerator is available",
    "bf16": "bfloat16 mixed precision",
    "seed": "random seed of the initialisation and the data order",
    "resume_from_checkpoint": "a checkpoint folder, or `last` for the newest one in --output_dir",
    "push_to_hub": "publish the finished model once, after evaluation, with its card (--hub_token or HF_TOKEN)",
    "hub_model_id": "the repo --push_to_hub pushes to (default: the name of --output_dir)",
}


FINETUNE_TRAINER_FLAGS = ("use_cpu", "bf16", "push_to_hub")  # given alone: `--bf16`


def run_finetune(arguments: list[str]) -> int:
    """`hf-norms finetune ...`: `--help` lists hf-norms' options and the most used Trainer options without importing
    transformers; `--help-all` is transformers' listing of every option; anything else is checked as far as it can be
    without transformers (`training.arguments.check_command_line`), then, with `TrainingArguments` imported, the option
    names (`training.trainer_arguments.check_trainer_options`), and parsed by transformers' `HfArgumentParser`, as in its
    example scripts (`hf_norms.training.finetune.main`)."""
    if "-h" in arguments or "--help" in arguments:
        parser = finetune_help_parser()
        parser.print_help()
        parser.exit()
    with handled_errors("hf-norms finetune") as outcome:  # importing transformers takes seconds: a Ctrl-C may come
        from .training.arguments import check_command_line

        check_command_line(arguments)  # a wrong batch size, count or rate: one line at once, before transformers
        from .training.trainer_arguments import check_trainer_options

        check_trainer_options(arguments)  # a mistyped Trainer option: before datasets, the Trainer and the models
        register_models()
        from .training.finetune import main

        outcome.status = main(["--help"] if "--help-all" in arguments else arguments)
    return outcome.status


def finetune_help_parser() -> argparse.ArgumentParser:
    """A parser whose help is `hf-norms finetune --help`: the options of `ModelArguments`, `DataArguments` and
    `OutputArguments` (their help and defaults), then `FINETUNE_TRAINER_OPTIONS`. It only renders help; transformers parses a real run."""
    from .training.arguments import OWN_ARGUMENTS

    parser = OneLineParser(
        prog="hf-norms finetune",
        usage="%(prog)s --OPTION VALUE ... | %(prog)s ARGUMENTS.json | %(prog)s ARGUMENTS.yaml",
        description=FINETUNE_DESCRIPTION,
        epilog=(
            "Every other TrainingArguments option is accepted too (weight_decay, warmup_steps, eval_steps, "
            "logging_steps, gradient_accumulation_steps, ...): `hf-norms finetune --help-all` lists them all, with their defaults."
        ),
    )
    for title, arguments in zip(("model", "data", "output"), OWN_ARGUMENTS, strict=True):
        group = parser.add_argument_group(f"{title} options ({arguments.__name__})")
        types = typing.get_type_hints(arguments)
        for field in dataclasses.fields(arguments):
            add_help_option(group, field.name, field.default, field.metadata["help"], literal_values(types[field.name]))
    group = parser.add_argument_group("the most used Trainer options (TrainingArguments)")
    for name, help_text in FINETUNE_TRAINER_OPTIONS.items():
        add_help_option(group, name, False if name in FINETUNE_TRAINER_FLAGS else None, help_text)
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


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: `--version`, `--help` and the list of commands (each command parses its own options)."""
    parser = OneLineParser(
        prog="hf-norms",
        description="DyT, Derf, DTN, SepNorm, LaPE and RMSNorm for Hugging Face transformers models: convert, "
        "heal, fine-tune, publish.",
        epilog="`hf-norms COMMAND --help` describes a command. HF_NORMS_DEBUG=1 shows the traceback of an error.",
    )
    parser.add_argument("--version", action="version", version=f"hf-norms {VERSION}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        subparsers.add_parser(name, help=command.help, add_help=False)
    subparsers.add_parser("finetune", help=FINETUNE_HELP, add_help=False)
    return parser


def parse(argv: list[str]) -> tuple[str, Any]:
    """(the command, its arguments dataclass) of `hf-norms ARGV` for a command other than finetune: a usage error
    exits with status 2 in one line; a value the dataclass refuses raises its error."""
    name = argv[0] if argv else ""
    if name not in COMMANDS:
        parser = build_parser()
        if name and not name.startswith("-"):
            commands = [*COMMANDS, "finetune"]
            parser.error(
                f"unknown command {name!r}{did_you_mean(name, commands)} (the commands: {', '.join(commands)})"
            )
        parser.parse_args(argv)  # --help, --version, or a usage error
    return name, COMMANDS[name].parser(name).parse(argv[1:])


def main(argv: list[str] | None = None) -> int:
    """Run `hf-norms ARGV`; returns the exit status (0; 2 for wrong input; 1 for a failed step; 130 if interrupted).
    Everything it prints, argument errors included, has the tokens it knows and anything shaped like a Hub token
    replaced by `<token>` (`hf_norms.redaction.redacted_output`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with redacted_output(argv):
        if argv[:1] == ["finetune"]:  # transformers' own parser of TrainingArguments, as in its example scripts
            return run_finetune(argv[1:])
        with handled_errors(f"hf-norms {argv[0] if argv else ''}".strip()) as outcome:
            name, arguments = parse(argv)
            COMMANDS[name].check(arguments)
            if COMMANDS[name].models:
                register_models()
            outcome.status = COMMANDS[name].run(arguments) or 0
        return outcome.status


if __name__ == "__main__":
    sys.exit(main())
