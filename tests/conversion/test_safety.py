"""Careless and hostile use of convert, heal and finetune: nothing the user owns is lost, and every mistake is one line.

Each case runs the real command line (`hf_norms.cli.main`, in this process, or in a real subprocess where a process is
killed) and asserts the exit status (2: the input is wrong; 1: a step failed), that stderr is one line, and the sha256
of every file around (the source, the data, the working directory, the output) before and after.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from test_convert import leftovers, save_images, tree_digest

from hf_norms import cli
from hf_norms.conversion.report import REPORT_JSON
from hf_norms.hub.card_facts import gather_card_facts
from hf_norms.hub.model_card import model_card_for_folder
from hf_norms.output_folders import MARKER_NAME, Marker, staging_folder


def run(argv: list[str], capsys) -> tuple[int, str]:
    """`hf-norms ARGV` in this process: (exit status, stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as exited:  # argparse's usage errors
        status = exited.code
    return status, capsys.readouterr().err


STAGE_LINE = re.compile(r"hf-norms \w+: stage \d+/\d+: ")


def assert_refused(status: int, err: str, expected: str, code: int = 2) -> None:
    """Exit status `code` and one error line (after the stage lines of a run that got that far) holding `expected`."""
    assert status == code, err
    err = "".join(line for line in err.splitlines(keepends=True) if not STAGE_LINE.match(line))
    assert err.strip() and "\n" not in err.strip(), f"not one line: {err!r}"
    assert "Traceback" not in err and expected in err, err


@pytest.fixture
def user_files(tmp_path, monkeypatch) -> Path:
    """A working directory holding the user's own files, with HOME inside the temporary folder."""
    home = tmp_path / "home"
    work = home / "project"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("my notes")
    (work / "data").mkdir()
    (work / "data" / "texts.txt").write_text("one text\nanother text\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def converted(tiny_vit_dir, tmp_path) -> Path:
    """An hf-norms output: tiny ViT converted to DTN."""
    folder = tmp_path / "vit-dtn"
    assert cli.main(["convert", str(tiny_vit_dir), "--norm-type", "dtn", "--output", str(folder)]) == 0
    return folder


# --------------------------------------------------------------------------------------------------------------------
# Folders the user owns
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    [".", "..", "~", "data", "data/texts.txt"],
    ids=["cwd", "parent-of-cwd", "home", "user-folder", "user-file"],
)
def test_convert_never_replaces_a_folder_it_did_not_write(output, tiny_vit_dir, user_files, capsys):
    before = tree_digest(user_files.parent)
    status, err = run(["convert", str(tiny_vit_dir), "--norm-type", "sepnorm", "--output", output, "--overwrite"],
                      capsys)  # fmt: skip
    assert_refused(status, err, "Output")
    assert tree_digest(user_files.parent) == before


def test_convert_never_writes_into_the_source_or_the_data(tiny_vit_dir, tmp_path, capsys):
    images = save_images(tmp_path / "images", 6)
    sources = tree_digest(tiny_vit_dir), tree_digest(images)
    for output in (tiny_vit_dir, tiny_vit_dir / "inside", images, images / "out"):
        status, err = run(["convert", str(tiny_vit_dir), "--norm-type", "dyt", "--calibration-data", str(images),
                           "--output", str(output), "--overwrite"], capsys)  # fmt: skip
        assert_refused(status, err, "Output")
    assert (tree_digest(tiny_vit_dir), tree_digest(images)) == sources


def test_heal_refuses_a_work_folder_it_did_not_make(converted, user_files, capsys):
    texts = user_files / "data" / "texts.txt"
    before = tree_digest(converted), tree_digest(user_files)
    for work_dir in (converted, user_files / "data", user_files):
        status, err = run(["heal", str(converted), "--data", str(texts), "--work-dir", str(work_dir)], capsys)
        assert status == 2 and "\n" not in err.strip() and "Traceback" not in err, err
    assert (tree_digest(converted), tree_digest(user_files)) == before


def test_heal_refuses_overlapping_output_and_teacher(converted, tiny_vit_dir, tmp_path, capsys):
    images = save_images(tmp_path / "images", 4)
    before = tree_digest(converted), tree_digest(tiny_vit_dir)
    for output in (tiny_vit_dir, converted / "healed", images):
        status, err = run(["heal", str(converted), "--data", str(images), "--output", str(output), "--overwrite"],
                          capsys)  # fmt: skip
        assert_refused(status, err, "")
    assert (tree_digest(converted), tree_digest(tiny_vit_dir)) == before


def test_a_killed_conversion_leaves_a_staging_folder_that_blocks_nothing_and_is_never_deleted(
    tiny_vit_dir, tmp_path, caplog
):
    output = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import time
        from hf_norms.conversion import convert
        real = convert.write_report  # the staged folder's last file, in every save path
        def save_then_hang(folder, report):
            real(folder, report)
            print("staged", flush=True)
            time.sleep(300)
        convert.write_report = save_then_hang
        convert.convert({str(tiny_vit_dir)!r}, "lape", {str(output)!r})
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "staged"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    [staging] = leftovers(tmp_path, "out")
    killed = tree_digest(tmp_path / staging)
    assert not output.exists() and (tmp_path / staging / "model.safetensors").is_file()
    assert cli.main(["convert", str(tiny_vit_dir), "--norm-type", "lape", "--output", str(output)]) == 0
    assert (output / REPORT_JSON).is_file() and tree_digest(tmp_path / staging) == killed  # named, not touched
    assert f"{tmp_path / staging} was left by an interrupted hf-norms run" in caplog.text


def test_staging_folders_beside_an_output_are_never_deleted(tiny_vit_dir, tmp_path):
    output = tmp_path / "out"
    dead = subprocess.run(
        [sys.executable, "-c", f"from hf_norms.output_folders import staging_folder as s; "
                               f"from pathlib import Path; print(s(Path({str(output)!r}), 'convert'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(dead) / "mine.txt").write_text("kept")
    planted = tmp_path / ".out.hf-norms-staging.planted"  # a marker of a dead run, planted beside the output
    planted.mkdir()
    (planted / MARKER_NAME).write_text(json.dumps({"run_id": "0" * 16, "pid": 1 << 22, "command": "convert",
                                                   "started_ns": 1}))  # fmt: skip
    (planted / "victim.txt").write_text("kept")
    before = tree_digest(tmp_path / ".out.hf-norms-staging.planted"), tree_digest(Path(dead))
    assert cli.main(["convert", str(tiny_vit_dir), "--norm-type", "lape", "--output", str(output)]) == 0
    assert (tree_digest(planted), tree_digest(Path(dead))) == before
    assert Marker.read(output).command == "convert"


def test_a_run_on_an_output_another_live_run_stages_stops_at_once_naming_it(tiny_vit_dir, tmp_path, capsys):
    output = tmp_path / "out"
    alive = staging_folder(output, "convert")  # this process's: a run still going on, started first
    status, err = run(["convert", str(tiny_vit_dir), "--norm-type", "lape", "--output", str(output)], capsys)
    assert_refused(status, err, f"Another hf-norms run (process {os.getpid()}) is writing {output}")
    assert alive.is_dir() and (alive / MARKER_NAME).is_file() and not output.exists()


# --------------------------------------------------------------------------------------------------------------------
# Broken checkpoints and configs
# --------------------------------------------------------------------------------------------------------------------


def broken_copy(source: Path, target: Path, config_edit=None, weights_edit=None) -> Path:
    """A copy of the checkpoint `source` with its config and/or weights edited."""
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    if config_edit is not None:
        config = json.loads((source / "config.json").read_text())
        (target / "config.json").write_text(config_edit(config))
    if weights_edit is not None:
        weights = load_file(source / "model.safetensors")
        weights_edit(weights)
        save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def poison(weights: dict, suffix: str) -> None:
    """Put NaN into the first tensor whose name ends with `suffix`."""
    name = next(name for name in sorted(weights) if name.endswith(suffix))
    weights[name].view(-1)[:3] = float("nan")


def set_value(key, value):
    return lambda config: json.dumps({**config, key: value})


BROKEN = {
    "nan-weight": (None, lambda weights: poison(weights, ".0.output.dense.weight"), "holds NaN"),
    "negative-eps": (set_value("layer_norm_eps", -1), None, "layer_norm_eps"),
    "a-million-layers": (set_value("num_hidden_layers", 1_000_000), None, "num_hidden_layers=1000000"),
    "heads-do-not-divide": (set_value("num_attention_heads", 5), None, "not divisible"),
    "hidden-size-mismatch": (set_value("hidden_size", 64), None, "hidden_size=64"),
    "config-not-json": (lambda config: "{not json", None, "not valid JSON"),
    "config-is-a-list": (lambda config: "[1, 2]", None, "not an object"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_source_is_refused_in_one_line_before_anything_is_built(case, tiny_vit_dir, tmp_path, capsys):
    config_edit, weights_edit, expected = BROKEN[case]
    source = broken_copy(tiny_vit_dir, tmp_path / "source", config_edit, weights_edit)
    before = tree_digest(source)
    started = time.perf_counter()
    status, err = run(["convert", str(source), "--norm-type", "dtn", "--output", str(tmp_path / "out")], capsys)
    assert_refused(status, err, expected)
    assert time.perf_counter() - started < 30 and tree_digest(source) == before
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path, "out")


def test_a_safetensors_header_that_is_not_an_object_and_an_index_outside_the_folder(tiny_vit_dir, tmp_path, capsys):
    source = broken_copy(tiny_vit_dir, tmp_path / "list-header")
    header = b"[1, 2, 3]"
    (source / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    status, err = run(["convert", str(source), "--norm-type", "lape", "--output", str(tmp_path / "a")], capsys)
    assert_refused(status, err, "not a JSON object")
    secret = tmp_path / "x.safetensors"
    secret.write_bytes((tiny_vit_dir / "model.safetensors").read_bytes())
    source = broken_copy(tiny_vit_dir, tmp_path / "index")
    (source / "model.safetensors").unlink()
    keys = load_file(secret)
    (source / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": dict.fromkeys(keys, "../x.safetensors")})
    )
    status, err = run(["convert", str(source), "--norm-type", "lape", "--output", str(tmp_path / "b")], capsys)
    assert_refused(status, err, "outside the checkpoint folder")


def test_a_card_claims_exactness_only_when_every_figure_is_finite(converted):
    report = json.loads((converted / REPORT_JSON).read_text())
    assert gather_card_facts(converted, "org/x").measured_exact
    report["stages"]["exact"]["end_to_end"]["mean_cosine"] = float("nan")
    (converted / REPORT_JSON).write_text(json.dumps(report))  # as an older release wrote it
    facts = gather_card_facts(converted, "org/x")
    assert not facts.measured_exact
    assert "computes the same function" not in str(model_card_for_folder(converted, "org/x"))


# --------------------------------------------------------------------------------------------------------------------
# Wrong arguments
# --------------------------------------------------------------------------------------------------------------------

WRONG_ARGUMENTS = {
    "batch-size-0": (["convert", "{src}", "--norm-type", "lape", "--output", "o", "--batch-size", "0"], "--batch-size"),
    "max-length-negative": (
        ["convert", "{src}", "--norm-type", "lape", "--output", "o", "--max-length=-5"],
        "--max-length",
    ),
    "eval-samples-0": (
        ["convert", "{src}", "--norm-type", "lape", "--output", "o", "--eval-samples", "0"],
        "--eval-samples",
    ),
    "gate-out-of-range": (
        ["convert", "{src}", "--norm-type", "dtn", "--output", "o", "--option", "dtn_gate_init=7"],
        "dtn_gate_init",
    ),
    "unknown-option": (["convert", "{src}", "--norm-type", "dtn", "--output", "o", "--option", "bogus=1"], "bogus"),
    "missing-local-folder": (["convert", "my-minilm", "--norm-type", "dtn", "--output", "o"], "no folder"),
    "missing-nested-folder": (["convert", "models/v2/minilm", "--norm-type", "dtn", "--output", "o"], "no folder"),
    "heal-max-steps-negative": (["heal", "{src}", "--data", "d.txt", "--max-steps=-3"], "--max-steps"),
    "heal-max-steps-0": (["heal", "{src}", "--data", "d.txt", "--max-steps", "0"], "--max-steps"),
    "heal-learning-rate-nan": (["heal", "{src}", "--data", "d.txt", "--learning-rate", "nan"], "--learning-rate"),
    "heal-not-converted": (["heal", "{src}", "--data", "d.txt"], "conversion_report.json"),
    "finetune-missing-csv": (
        ["finetune", "--model_name_or_path", "{src}", "--dataset", "nope.csv", "--output_dir", "out"],
        "nope.csv",
    ),
    "finetune-max-steps-0": (
        [
            "finetune",
            "--model_name_or_path",
            "{src}",
            "--dataset",
            "packaged:bbc-news",
            "--output_dir",
            "out",
            "--max_steps",
            "0",
        ],
        "max_steps",
    ),
    "finetune-not-an-int": (["finetune", "--model_type", "vit_norm", "--max_steps", "abc", "--output_dir", "o"], "abc"),
    "finetune-unknown-flag": (["finetune", "--model_type", "vit_norm", "--output_dir", "o", "--bogus", "1"], "--bogus"),
    "finetune-missing-model": (
        ["finetune", "--model_name_or_path", "./nothing-here", "--dataset", "x.csv", "--output_dir", "out"],
        "nothing-here",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_ARGUMENTS))
def test_a_wrong_argument_is_one_line_with_status_2(case, tiny_vit_dir, user_files, capsys):
    argv, expected = WRONG_ARGUMENTS[case]
    before = tree_digest(user_files)
    started = time.perf_counter()
    status, err = run([arg.format(src=tiny_vit_dir) for arg in argv], capsys)
    assert_refused(status, err, expected)
    assert time.perf_counter() - started < 30  # nothing was sent to a Hub that cannot be reached
    assert tree_digest(user_files) == before


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(tiny_vit_dir, tmp_path, capsys, monkeypatch):
    from hf_norms.conversion import convert

    def broken(*args, **kwargs):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(convert, "load_teacher", broken)
    argv = ["convert", str(tiny_vit_dir), "--norm-type", "lape", "--output", str(tmp_path / "o")]
    status, err = run(argv, capsys)
    assert_refused(status, err, "RuntimeError: something inside broke", code=1)
    assert "HF_NORMS_DEBUG=1" in err
    monkeypatch.setenv("HF_NORMS_DEBUG", "1")
    with pytest.raises(RuntimeError, match="something inside broke"):
        cli.main(argv)


def test_heal_works_from_another_working_directory(tiny_vit_dir, tmp_path, monkeypatch):
    images = save_images(tmp_path / "a" / "images", 8)
    monkeypatch.chdir(tmp_path / "a")
    assert cli.main(["convert", os.path.relpath(tiny_vit_dir), "--norm-type", "dtn", "--output", "converted",
                     "--option", "dtn_gate_init=0.5", "--eval-data", "images", "--eval-samples", "2"]) == 0  # fmt: skip
    report = json.loads((tmp_path / "a" / "converted" / REPORT_JSON).read_text())
    assert Path(report["source"]).is_absolute() and Path(report["evaluation"]["data"]).is_absolute()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    assert cli.main(["heal", "../a/converted", "--data", str(images), "--max-steps", "1", "--batch-size", "2"]) == 0
    assert "healed" in json.loads((tmp_path / "a" / "converted" / REPORT_JSON).read_text())["stages"]
    assert not leftovers(tmp_path / "a", "converted")
