"""Every error line is bounded, whatever size of value it echoes (issue 54, item 4): a huge option value, JSON key or
JSON value, or file name is cut to `errors.VALUE_LIMIT` characters around `...` and the line to `errors.LINE_LIMIT`,
with exit status 2 and the fix still named at the end. Each case runs the real command line in this process."""

from __future__ import annotations

import json
import shutil

import pytest
from test_safety import assert_refused, run

from hf_norms.errors import LINE_LIMIT, VALUE_LIMIT, bounded_line

HUGE = 600_000  # characters of the value a case echoes (the line was 652 KB in the issue)
PREFIX = len("hf-norms convert: error: ")


def assert_bounded(status: int, err: str, ending: str) -> None:
    assert_refused(status, err, ending)
    line = err.strip().splitlines()[-1]
    assert len(line) <= PREFIX + LINE_LIMIT and line.endswith(ending), (len(line), line[-200:])
    assert max(map(len, line.split())) <= VALUE_LIMIT


def test_a_huge_json_key_in_an_option_gives_a_bounded_line(tiny_bert_dir, tmp_path, capsys):
    options = json.dumps({"k" * HUGE: 1})
    status, err = run(["convert", str(tiny_bert_dir), "--norm-type", "dyt", "--options", options,
                       "--output", str(tmp_path / "out")], capsys)  # fmt: skip
    assert_bounded(status, err, "'sepnorm_prefix_norm'].")
    assert not (tmp_path / "out").exists()


def test_a_huge_json_value_in_a_config_gives_a_bounded_line(tiny_bert_dir, tmp_path, capsys):
    source = tmp_path / "source"
    shutil.copytree(tiny_bert_dir, source)
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "model_type": "x" * HUGE}))
    status, err = run(["convert", str(source), "--norm-type", "lape", "--output", str(tmp_path / "out")], capsys)
    assert_bounded(status, err, "'xlm_roberta_norm']).")


def test_a_huge_file_name_gives_a_bounded_line(tiny_bert_dir, tmp_path, capsys):
    missing = tmp_path.joinpath(*["d" * 250] * 16)  # 4,000 characters: a path the system still takes
    status, err = run(["convert", str(missing), "--norm-type", "lape", "--output", str(tmp_path / "out")], capsys)
    assert_bounded(status, err, "or a Hub id 'org/name'.")
    status, err = run(["convert", str(tiny_bert_dir), "--norm-type", "lape", "--output", "/" + "a/" * 3000], capsys)
    assert_bounded(status, err, "cannot be used: File name too long.")  # too long for the system, bounded alike


@pytest.mark.parametrize(
    "message",
    [
        "v " * HUGE + "do this.",  # many short values: the line's bound
        f"a {'/'.join(['segment'] * HUGE)} b do this.",  # one long value
        "key 'hf_" + "A" * 36 + "' " + "x" * HUGE + " do this.",  # a token-shaped word before a cut is whole
    ],
)
def test_a_line_keeps_its_start_and_its_fix_and_never_part_of_a_word(message):
    line = bounded_line(message)
    assert len(line) <= LINE_LIMIT and line.endswith(" do this.") and line[:2] == message[:2]
    words = set(message.replace("...", " ").split())
    assert all(word in words or "..." in word for word in line.split())
    for piece in (piece for word in line.split() for piece in word.split("...")):
        assert any(piece in word for word in words)  # each shown piece is a word's start or end, no token part
    assert ("hf_" in line) == ("hf_" + "A" * 36 in line)
