"""`hf-norms finetune` answers a mistyped option before it imports transformers from its table of `TrainingArguments`'
option names by tested release; on each release this set runs on (the newest in the suite, the oldest in CI's
compatibility step), the table's entry is the installed `TrainingArguments`' names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import transformers

from hf_norms.training.arguments import known_trainer_option_names
from hf_norms.training.trainer_arguments import trainer_field_names


def test_the_table_holds_the_installed_releases_trainer_option_names():
    assert known_trainer_option_names() == trainer_field_names(), (
        f"run `python scripts/trainer_option_names.py` with transformers {transformers.__version__}"
    )


def test_a_mistyped_trainer_option_is_answered_without_importing_transformers():
    """`hf-norms finetune --learning_rte 1` imported torch and transformers to find the mistake (3.1x the CPU of
    `import torch`); it is one line, exit 2, and neither is imported."""
    script = Path(sys.executable).with_name("hf-norms")
    argv = [
        sys.executable,
        "-X",
        "importtime",
        str(script),
        "finetune",
        "--model_name_or_path",
        "x",
        "--learning_rte",
        "1",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    lines = done.stderr.strip().splitlines()
    imported = {line.split("|")[-1].strip() for line in lines if line.startswith("import time:")}
    assert done.returncode == 2 and not {"torch", "transformers"} & imported, done.returncode
    assert lines[-1] == (
        "hf-norms finetune: error: unrecognized option --learning_rte; did you mean --learning_rate? (see `hf-norms "
        "finetune --help`)"
    )
