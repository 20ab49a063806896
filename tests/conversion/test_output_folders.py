"""One rule keeps every command that writes (convert, heal, finetune, demo) from losing what the user owns: a command
deletes only what it created in the same run; an earlier output is moved aside, never deleted.

The cases run the real command line (`hf_norms.cli.main`, or real subprocesses where processes race) and compare the
sha256 of every file of the user's before and after: outputs re-checked at the move, two runs on one output, files a
user added to an hf-norms output, planted and malformed markers, fine-tuning into the source or a user's folder, links
that copies must not follow, interrupted saves, and resuming from a checkpoint that is not the run's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from test_convert import leftovers, save_images, tree_digest
from test_safety import assert_refused, run

from hf_norms.demo import claim_demo_folder
from hf_norms.output_folders import MARKER_NAME, Marker, OutputFolderError, claim_folder, rename_no_replace

pytestmark = pytest.mark.usefixtures("one_thread")


def convert_args(source: Path, output: Path, *extra: str) -> list[str]:
    return ["convert", str(source), "--norm-type", "lape", "--output", str(output), *extra]


# --------------------------------------------------------------------------------------------------------------------
# Outputs built whole: re-checked at the move, one run at a time, the user's files never deleted
# --------------------------------------------------------------------------------------------------------------------


def test_rename_no_replace_never_replaces_an_empty_folder(tmp_path):
    (tmp_path / "staged").mkdir()
    (tmp_path / "staged" / "config.json").write_text("{}")
    (tmp_path / "target").mkdir()  # os.rename would silently replace it
    with pytest.raises(FileExistsError):
        rename_no_replace(tmp_path / "staged", tmp_path / "target")
    assert (tmp_path / "target").is_dir() and not any((tmp_path / "target").iterdir())
    rename_no_replace(tmp_path / "staged", tmp_path / "moved")
    assert (tmp_path / "moved" / "config.json").is_file()


def test_markers_are_trusted_only_as_files_of_a_live_process_that_started_before_them(tmp_path):
    (tmp_path / "linked").mkdir()
    (tmp_path / "real").mkdir()
    Marker.new("convert").write(tmp_path / "real")
    os.symlink(tmp_path / "real" / MARKER_NAME, tmp_path / "linked" / MARKER_NAME)
    assert Marker.read(tmp_path / "real") is not None and Marker.read(tmp_path / "linked") is None
    mine = Marker.new("convert")
    reused = dataclasses.replace(mine, started_ns=mine.started_ns - 3600 * 10**9)  # written an hour before this process
    # started: its id was reused since
    assert Marker.new("convert").run_is_alive() and not reused.run_is_alive()


VALID_MARKER = {"run_id": "0123456789abcdef", "command": "finetune"}
MALFORMED_MARKERS = {
    "a pid beyond any process id": {"pid": 10**30},
    "a negative pid": {"pid": -1},
    "pid 0": {"pid": 0},
    "a pid that is a bool": {"pid": True},
    "a pid that is text": {"pid": "1"},
    "a start in the future": {"started_ns": 10**30},
    "an unknown command": {"command": "rm"},
    "a run id that is a path": {"run_id": "../../../../tmp/x"},
    "an unknown field": {"delete": ["../victim.txt"]},
    "a process start that is a bool": {"process_started_ns": True},
    "a process start in the future": {"process_started_ns": 10**30},
    "a made_folder that is text": {"made_folder": "yes"},
}


def test_a_marker_that_is_not_valid_data_is_no_marker_and_blocks_nothing(tmp_path):
    valid = {**VALID_MARKER, "pid": os.getpid(), "started_ns": time.time_ns()}
    texts = {what: json.dumps({**valid, **change}) for what, change in MALFORMED_MARKERS.items()}
    texts |= {"not JSON": "{pid", "a list": "[1, 2]", "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
              "10 MB long": json.dumps({**valid, "padding": "x" * 10_000_000})}  # fmt: skip
    for what, text in texts.items():
        folder = tmp_path / what.replace(" ", "-")
        folder.mkdir()
        (folder / MARKER_NAME).write_text(text)
        assert Marker.read(folder) is None, what
        assert claim_folder(folder, command="finetune").take().path == folder, what  # nothing but a marker: taken
        assert Marker.read(folder).pid == os.getpid()
    (tmp_path / "valid").mkdir()
    (tmp_path / "valid" / MARKER_NAME).write_text(json.dumps({**valid, "files": {"../x": [1, 2]}}))  # an older marker
    assert Marker.read(tmp_path / "valid") == Marker(**valid)


def test_a_folder_holding_links_is_never_written_into(tmp_path):
    mine = claim_folder(tmp_path / "mine", command="finetune").take().path
    (tmp_path / "elsewhere.json").write_text("{}")
    os.symlink(tmp_path / "elsewhere.json", mine / "config.json")  # a write of config.json would land outside
    with pytest.raises(OutputFolderError, match="holds symbolic links"):
        claim_folder(mine, command="finetune", resume=True)
    claim_folder(mine, command="finetune", overwrite=True).take()  # moved aside: nothing written through the link
    [aside] = tmp_path.glob("mine.replaced-*")
    assert (aside / "config.json").is_symlink() and (tmp_path / "elsewhere.json").read_text() == "{}"


def test_the_demo_moves_an_earlier_demo_aside_and_refuses_a_users_folder(tmp_path):
    workdir = tmp_path / "demo"
    claim_demo_folder(workdir)
    (workdir / "hub").mkdir()
    (workdir / "hub" / "repo.txt").write_text("an earlier demo's")
    claim_demo_folder(workdir)
    [aside] = tmp_path.glob("demo.replaced-*")
    assert (aside / "hub" / "repo.txt").read_text() == "an earlier demo's" and Marker.read(workdir).command == "demo"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    with pytest.raises(OutputFolderError, match="no earlier demo made it"):
        claim_demo_folder(mine)
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]


HOOKED_CONVERT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from hf_norms import cli
    from hf_norms.conversion import convert
    real, output, action = convert.write_report, Path(sys.argv[2]), sys.argv[1]
    def save_then_meddle(folder, report):  # the report is the staged folder's last file, in every save path
        real(folder, report)
        if action == "create":
            output.mkdir()
            (output / "mine.txt").write_text("the user's")
        elif action == "add":
            (output / "my_run").mkdir()
            (output / "my_run" / "log.txt").write_text("the user's")
    convert.write_report = save_then_meddle
    sys.exit(cli.main(["convert", sys.argv[3], "--norm-type", "lape", "--output", str(output), *sys.argv[4:]]))
    """
)


def meddling_convert(action: str, source: Path, output: Path, *extra: str) -> subprocess.CompletedProcess:
    """A real conversion during which, once its staging folder is complete, the user `create`s the output folder or
    `add`s files to the existing one."""
    return subprocess.run([sys.executable, "-c", HOOKED_CONVERT, action, str(output), str(source), *extra],
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_a_folder_the_user_creates_at_the_output_during_a_run_is_left_alone(tiny_vit_dir, tmp_path):
    output = tmp_path / "out"
    result = meddling_convert("create", tiny_vit_dir, output)
    assert result.returncode == 2, result.stderr
    assert "was created by someone else while this run worked" in result.stderr
    assert [entry.name for entry in output.iterdir()] == ["mine.txt"] and not leftovers(tmp_path, "out")
    assert (output / "mine.txt").read_text() == "the user's"


def test_overwrite_moves_the_earlier_output_aside_with_the_users_files_in_it(tiny_vit_dir, tmp_path, capsys, caplog):
    output = tmp_path / "out"
    assert run(convert_args(tiny_vit_dir, output), capsys)[0] == 0
    (output / "my_run").mkdir()
    (output / "my_run" / "notes.txt").write_text("the user's")
    before = tree_digest(output)
    assert run(convert_args(tiny_vit_dir, output, "--overwrite"), capsys)[0] == 0
    [aside] = tmp_path.glob("out.replaced-*")
    assert tree_digest(aside) == before and f"Moved {output} to {aside}" in caplog.text
    assert Marker.read(output).command == "convert" and not (output / "my_run").exists()
    result = meddling_convert("add", tiny_vit_dir, output, "--overwrite")  # files added while the run works
    assert result.returncode == 0, result.stderr
    [added] = [path for path in tmp_path.glob("out.replaced-*") if path != aside]
    assert (added / "my_run" / "log.txt").read_text() == "the user's" and "Moved" in result.stderr
    assert not leftovers(tmp_path, "out")


def test_overwrite_of_an_earlier_release_output_deletes_none_of_the_users_files(tiny_vit_dir, tmp_path, capsys):
    output = tmp_path / "out"
    assert run(convert_args(tiny_vit_dir, output), capsys)[0] == 0
    (output / MARKER_NAME).unlink()  # as earlier releases wrote it: recognised by its report
    for name in ("train.py", "analysis/eval_probe.py", "conversion_report.my-notes.json", f"{MARKER_NAME}.notes"):
        (output / name).parent.mkdir(exist_ok=True)
        (output / name).write_text(f"the user's {name}")
    before = tree_digest(output)
    assert run(convert_args(tiny_vit_dir, output, "--overwrite"), capsys)[0] == 0
    [aside] = tmp_path.glob("out.replaced-*")
    assert tree_digest(aside) == before
    mine = tmp_path / "mine"  # a folder hf-norms did not make is never moved
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "notes.txt").write_text("the user's")
    status, err = run(convert_args(tiny_vit_dir, mine, "--overwrite"), capsys)
    assert_refused(status, err, "hf-norms did not write it")
    assert (mine / "sub" / "notes.txt").read_text() == "the user's" and not list(tmp_path.glob("mine.*"))


def test_two_conversions_to_one_output_one_succeeds_and_the_other_says_why(tiny_vit_dir, tmp_path):
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hf_norms.cli", *convert_args(tiny_vit_dir, output)]
    processes = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(process.wait(timeout=600), process.stderr.read()) for process in processes]
    assert sorted(status for status, _ in results) == [0, 2], results
    [refused] = [err.strip() for status, err in results if status == 2]
    assert "\n" not in refused and any(
        why in refused for why in ("Another hf-norms run", "by someone else", "already exists")
    ), refused
    assert Marker.read(output).command == "convert" and not leftovers(tmp_path, "out")


# --------------------------------------------------------------------------------------------------------------------
# Healing: links never followed out, the user's files kept, resume only from the run's own checkpoints
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def calibrated(tiny_vit_dir, tmp_path, capsys) -> tuple[Path, Path]:
    """(a DyT conversion of the tiny ViT, its images)."""
    images = save_images(tmp_path / "images", 12)
    folder = tmp_path / "vit-dyt"
    assert run(["convert", str(tiny_vit_dir), "--norm-type", "dyt", "--calibration-data", str(images),
                "--calibration-samples", "8", "--eval-samples", "4", "--heal-steps", "0", "--output", str(folder)], capsys)[0] == 0  # fmt: skip
    return folder, images


def test_heal_never_copies_a_link_out_of_the_folder(calibrated, tmp_path, capsys):
    folder, images = calibrated
    (tmp_path / "secret.txt").write_text("private")
    os.symlink(tmp_path / "secret.txt", folder / "notes.txt")
    before = tree_digest(folder)
    status, err = run(["heal", str(folder), "--data", str(images), "--max-steps", "1", "--batch-size", "4"], capsys)
    assert_refused(status, err, "notes.txt is a symbolic link to")
    assert tree_digest(folder) == before and not leftovers(tmp_path, "vit-dyt")
    (folder / "notes.txt").unlink()
    (folder / "readme-copy.md").write_text("kept")  # the user's, healed in place: kept, and still the user's
    os.symlink("config.json", folder / "config-link.json")  # a link to a file inside: copied as that file
    converted_config = (folder / "config.json").read_bytes()
    before = tree_digest(folder)
    assert run(["heal", str(folder), "--data", str(images), "--max-steps", "1", "--batch-size", "4"], capsys)[0] == 0
    assert (folder / "readme-copy.md").read_text() == "kept" and not (folder / "config-link.json").is_symlink()
    assert (folder / "config-link.json").read_bytes() == converted_config
    [aside] = tmp_path.glob("vit-dyt.replaced-*")  # the converted folder, as it was
    assert tree_digest(aside) == before


def interrupted_heal(folder: Path, images: Path, capsys) -> Path:
    """Heal until the first checkpoint, then stop (as a run cut by --max-minutes); returns that checkpoint."""
    assert run(["heal", str(folder), "--data", str(images), "--max-steps", "5", "--save-steps", "1",
                "--batch-size", "4", "--max-minutes", "0"], capsys)[0] == 0  # fmt: skip
    [checkpoint] = (folder.parent / f".{folder.name}.healing").glob("checkpoint-*")
    return checkpoint


def test_heal_resumes_only_from_a_checkpoint_of_its_own_model(calibrated, tiny_vit_dir, tmp_path, capsys):
    folder, images = calibrated
    checkpoint = interrupted_heal(folder, images, capsys)
    resume = ["heal", str(folder), "--data", str(images), "--max-steps", "5", "--batch-size", "4", "--resume"]
    weights = load_file(checkpoint / "model.safetensors")
    other = {name.replace(".alpha", ".gamma"): tensor for name, tensor in weights.items()}
    tampering = {
        "another model's weights": (lambda: save_file(other, str(checkpoint / "model.safetensors")), "does not hold"),
        "truncated weights": (lambda: truncate(checkpoint / "model.safetensors"), "truncated"),
        "a corrupt trainer state": (lambda: (checkpoint / "trainer_state.json").write_text("{not json"), "not valid"),
        "another norm_type": (lambda: set_norm_type(checkpoint, "derf"), "norm_type='derf'"),
    }
    pristine = {path.name: path.read_bytes() for path in checkpoint.iterdir() if path.is_file()}
    for what, (tamper, expected) in tampering.items():
        tamper()
        before = tree_digest(folder)
        status, err = run(resume, capsys)
        assert_refused(status, err, expected)
        assert tree_digest(folder) == before, what
        for name, data in pristine.items():
            (checkpoint / name).write_bytes(data)
    status, err = run(resume, capsys)
    assert status == 0, err  # the run's own checkpoint resumes


def test_a_planted_marker_makes_heal_delete_nothing_it_did_not_create(calibrated, tmp_path, capsys):
    folder, images = calibrated
    victims = tmp_path / "victims"
    victims.mkdir()
    (victims / "v1.txt").write_text("the victim's")
    work = folder.parent / f".{folder.name}.healing"  # anyone who can write to the parent folder can plant this
    (work / "checkpoint-1").mkdir(parents=True)
    (work / "checkpoint-1" / "trainer_state.json").write_text("planted")
    marker = {
        "run_id": "0123456789abcdef",
        "pid": 1 << 22,
        "command": "heal",
        "started_ns": time.time_ns() - 10**9,
        "files": {"../victims/v1.txt": [12, 0], str(victims / "v1.txt"): [12, 0], "checkpoint-1": [1, 0]},
    }
    (work / MARKER_NAME).write_text(json.dumps(marker))
    planted = tree_digest(work)
    heal = ["heal", str(folder), "--data", str(images), "--max-steps", "2", "--batch-size", "4"]
    status, err = run([*heal, "--resume"], capsys)
    assert_refused(status, err, "trainer_state.json")  # nothing to resume from: refused, nothing touched
    assert tree_digest(work) == planted
    assert run(heal, capsys)[0] == 0  # the planted folder moved aside, a new one made, used and removed
    [aside] = tmp_path.glob(f".{folder.name}.healing.replaced-*")
    assert tree_digest(aside) == planted and not work.exists()
    assert (victims / "v1.txt").read_text() == "the victim's"


def test_an_interrupted_save_is_set_aside_and_never_blocks_the_next_heal(calibrated, tmp_path, capsys, caplog):
    folder, images = calibrated
    checkpoint = interrupted_heal(folder, images, capsys)
    partial = checkpoint.with_name("checkpoint-3")  # what `kill -9` during the next save leaves
    partial.mkdir()
    (partial / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes()[:1000])
    (checkpoint.parent / "notes.txt").write_text("the user's")
    before = tree_digest(partial)
    resume = ["heal", str(folder), "--data", str(images), "--max-steps", "5", "--batch-size", "4", "--resume"]
    assert run(resume, capsys)[0] == 0
    assert json.loads((folder / "conversion_report.json").read_text())["healing"]["resumed_from_step"] == 1
    [set_aside] = checkpoint.parent.glob("interrupted-checkpoint-3-*")  # what this run did not make stays
    assert tree_digest(set_aside) == before and sorted(p.name for p in checkpoint.parent.iterdir()) == sorted(
        [set_aside.name, "notes.txt", MARKER_NAME]
    )
    assert f"Kept {checkpoint.parent}" in caplog.text
    assert run(["heal", str(folder), "--data", str(images), "--max-steps", "2", "--batch-size", "4"], capsys)[0] == 0
    [aside] = tmp_path.glob(f".{folder.name}.healing.replaced-*")  # not resumed: moved aside, not deleted
    assert (aside / "notes.txt").read_text() == "the user's" and not checkpoint.parent.exists()


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def set_norm_type(checkpoint: Path, norm_type: str) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "norm_type": norm_type}))


# --------------------------------------------------------------------------------------------------------------------
# Fine-tuning: the same rules for --output_dir
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def news_csv(tmp_path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "news.csv"
    path.write_text("text,label\n" + "".join(f"story number {i} about {'sport' if i % 2 else 'money'},{i % 2}\n"
                                             for i in range(16)))  # fmt: skip
    return path


def finetune_args(source: Path, data: Path, output: Path | str, *extra: str) -> list[str]:
    return ["finetune", "--model_name_or_path", str(source), "--dataset", str(data), "--output_dir", str(output),
            "--use_cpu", "--max_steps", "2", "--per_device_train_batch_size", "4", "--save_steps", "1",
            "--max_seq_length", "16", *extra]  # fmt: skip


def test_a_folder_a_stopped_run_left_holding_only_its_marker_is_claimed_afresh(tmp_path):
    """A run stopped (Ctrl-C, an error) before it wrote anything leaves the folder and its marker: there is nothing to
    resume or to protect, so the next run takes it without --resume or --overwrite; once a file is there, not."""
    folder = tmp_path / "run"
    claim_folder(folder, command="finetune").take()
    assert [entry.name for entry in folder.iterdir()] == [MARKER_NAME]
    claimed = claim_folder(folder, command="finetune")
    assert not claimed.move_aside_first
    claimed.take()
    (folder / "config.json").write_text("{}")
    with pytest.raises(OutputFolderError, match="holds an earlier hf-norms finetune run"):
        claim_folder(folder, command="finetune")


def test_finetune_never_writes_into_its_source_its_data_or_the_working_directory(
    tiny_bert_dir, news_csv, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    before = tree_digest(tiny_bert_dir), tree_digest(news_csv.parent)
    for output in (tiny_bert_dir, tiny_bert_dir / "inside", news_csv.parent, ".", tmp_path.parent):
        for flag in ((), ("--overwrite_output_dir",)):
            status, err = run(finetune_args(tiny_bert_dir, news_csv, output, *flag), capsys)
            assert_refused(status, err, "--output_dir")
    assert (tree_digest(tiny_bert_dir), tree_digest(news_csv.parent)) == before
    assert json.loads((tiny_bert_dir / "config.json").read_text())["model_type"] == "bert"


def test_finetune_moves_a_users_folder_aside_only_when_asked(tiny_bert_dir, news_csv, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    status, err = run(finetune_args(tiny_bert_dir, news_csv, mine), capsys)
    assert_refused(status, err, "--overwrite_output_dir")
    (mine / "config.json").write_text("{}")
    (mine / "checkpoint-1").mkdir()  # the Trainer's rotation would delete it
    (mine / "checkpoint-1" / "log.txt").write_text("the user's")
    before = tree_digest(mine)
    assert run(finetune_args(tiny_bert_dir, news_csv, mine, "--overwrite_output_dir"), capsys)[0] == 0
    [aside] = tmp_path.glob("mine.replaced-*")
    assert tree_digest(aside) == before and (mine / "model.safetensors").is_file()
    assert not (mine / "notes.txt").exists() and Marker.read(mine).command == "finetune"


def test_finetune_resumes_its_own_run_and_refuses_another_models_checkpoint(tiny_bert_dir, news_csv, tmp_path, capsys):
    output = tmp_path / "run"
    assert run(finetune_args(tiny_bert_dir, news_csv, output), capsys)[0] == 0
    status, err = run(finetune_args(tiny_bert_dir, news_csv, output), capsys)
    assert_refused(status, err, "holds an earlier hf-norms finetune run")
    partial = output / "checkpoint-4"  # what `kill -9` during a save leaves
    partial.mkdir()
    (partial / "config.json").write_text("{")
    assert run(finetune_args(tiny_bert_dir, news_csv, output, "--resume_from_checkpoint", "last",
                             "--max_steps", "3"), capsys)[0] == 0  # fmt: skip
    assert next(path.name for path in output.glob("*checkpoint-4*")).startswith("interrupted-checkpoint-4-")
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == 3
    other = tmp_path / "other"
    assert run(finetune_args(tiny_bert_dir, news_csv, other, "--norm_type", "dtn"), capsys)[0] == 0
    status, err = run(finetune_args(tiny_bert_dir, news_csv, tmp_path / "third", "--resume_from_checkpoint",
                                    str(other / "checkpoint-2")), capsys)  # fmt: skip
    assert_refused(status, without_progress_bars(err), "norm_type='dtn'")  # refused once the model is loaded


def without_progress_bars(err: str) -> str:
    """stderr without transformers' "Loading weights" progress bar, which a run shows before the model can be checked."""
    return "\n".join(line for line in err.splitlines() if "Loading weights" not in line)
