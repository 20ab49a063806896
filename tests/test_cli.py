"""The `hf-norms` command line: every subcommand is listed, and the values it keeps to stay fast agree with the code."""

from __future__ import annotations

import pytest

import hf_norms
from hf_norms import cli
from hf_norms.conversion import healing


def test_the_command_line_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    listing = capsys.readouterr().out
    for command in ("demo", "convert", "heal", "finetune", "push", "hub"):
        assert command in listing


def test_values_kept_in_the_command_line_agree_with_the_code():
    assert set(cli.NORM_TYPE_CHOICES) == set(hf_norms.NORM_TYPES)
    assert cli.HEAL_COSINE_WEIGHT == healing.COSINE_WEIGHT
    assert cli.HEAL_HIDDEN_STATE_WEIGHT == healing.HIDDEN_STATE_WEIGHT
