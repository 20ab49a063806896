"""Add the installed transformers release's `TrainingArguments` option names to hf-norms' table of them, so that
`hf-norms finetune` answers a mistyped option before importing transformers:

    .venv/bin/python scripts/trainer_option_names.py   # once per tested release (each venv)

`tests/compatibility/test_trainer_option_names.py` checks the table against the installed release."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import transformers

from hf_norms.training.arguments import TRAINER_OPTION_NAMES
from hf_norms.training.trainer_arguments import trainer_field_names

table = json.loads(TRAINER_OPTION_NAMES.read_text()) if TRAINER_OPTION_NAMES.exists() else {}
table[transformers.__version__] = sorted(trainer_field_names())
TRAINER_OPTION_NAMES.write_text(json.dumps(dict(sorted(table.items())), indent=0) + "\n")
print(
    f"{TRAINER_OPTION_NAMES}: {len(table[transformers.__version__])} names for transformers {transformers.__version__}"
)
