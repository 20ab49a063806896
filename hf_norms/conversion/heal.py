"""`hf-norms heal`, also as a module, for launchers that start one process per device:

    torchrun --nproc_per_node 2 -m hf_norms.conversion.heal FOLDER --data corpus/ --max-steps 1000
    accelerate launch --num_processes 2 -m hf_norms.conversion.heal FOLDER --data corpus/ --max-steps 1000
    python -m hf_norms.conversion.heal FOLDER --data corpus/          # one process, as `hf-norms heal`

Every option is a field of `HealArguments` (`hf-norms heal --help`); `--batch-size` is per process. See `processes`
for what each process does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..cli_parsing import ArgumentsParser
from ..errors import handled_errors
from ..redaction import redacted_output
from .arguments import HealArguments

HELP = "distil a converted checkpoint from its LayerNorm original (Trainer, resumable)"
DESCRIPTION = (
    "Heal a checkpoint written by `hf-norms convert` by distillation from its LayerNorm original, through the "
    "transformers Trainer, the student in training mode with its dropout: every layer's hidden states, the pooled final "
    "state's cosine, each token type's cosine, the [CLS] state and pooler output that stock heads read, and the logits. "
    "The healed weights replace FOLDER's (or go to --output) and the report gains a `healed` stage. --data is read as a "
    "stream. On several GPUs or CPU processes: torchrun --nproc_per_node N -m hf_norms.conversion.heal FOLDER --data "
    "... (or accelerate launch -m hf_norms.conversion.heal ...)."
)


def run(arguments: HealArguments) -> int:
    """Heal as `arguments` say and print each stage's figures (on the first process only, under a launcher)."""
    from .healing import heal_folder
    from .report import stage_summary

    report = heal_folder(arguments)
    if os.environ.get("RANK", "0") == "0":  # one process of several (torchrun, accelerate launch): rank 0 prints
        for stage, metrics in report["stages"].items():
            print(stage_summary(stage, metrics, max_abs_diff=False))
        print(f"wrote {Path(arguments.output or arguments.folder).resolve()} (report: conversion_report.md)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m hf_norms.conversion.heal ARGV`; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with redacted_output(argv), handled_errors("hf-norms heal") as outcome:
        outcome.status = run(ArgumentsParser(HealArguments, prog="hf-norms heal", description=DESCRIPTION).parse(argv))
    return outcome.status


if __name__ == "__main__":
    sys.exit(main())
