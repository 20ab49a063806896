"""A run reads and writes only inside the folders it owns, checks everything before its slow part, and removes only what
it created (issue 44, items 7 to 10).

The cases run the real command line (`hf_norms.cli.main`) on real checkpoints and compare the sha256 of every file
around before and after. Where a case says "before the slow part", the real `load_teacher` is wrapped to record that it
was never reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import tiny_sentence_transformer
from test_convert import leftovers, save_images, tree_digest
from test_safety import assert_refused, run

from hf_norms.conversion import convert as convert_module
from hf_norms.conversion import distillation, healing
from hf_norms.output_folders import MARKER_NAME, OutputFolderError, copy_checkpoint_files, staging_folder
from hf_norms.output_folders.markers import process_start_ns

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def teacher_loads(monkeypatch) -> list[str]:
    """The sources `convert` loaded a teacher from (the real `load_teacher`, recorded): empty when a run stopped before
    its slow part."""
    loaded, real = [], convert_module.load_teacher
    monkeypatch.setattr(convert_module, "load_teacher", lambda checkpoint, *a: loaded.append(checkpoint.source)
                        or real(checkpoint, *a))  # fmt: skip
    return loaded


def convert_args(source: Path, output: Path) -> list[str]:
    return ["convert", str(source), "--norm-type", "lape", "--output", str(output)]


# --------------------------------------------------------------------------------------------------------------------
# Item 8: every copy's source and destination lie inside the folders the run owns
# --------------------------------------------------------------------------------------------------------------------


def test_a_module_path_that_leads_out_of_the_source_is_refused_before_any_work(
    tiny_bert_dir, minilm_dir, tmp_path, capsys, teacher_loads
):
    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "models" / "st")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "victim.txt").write_text("the user's")
    (tmp_path / "models" / "victim.txt").write_text("the user's")
    modules = json.loads((source / "modules.json").read_text())
    output = tmp_path / "other" / "converted"
    for path in ("..", "../../other", str(tmp_path / "other"), "1_Pooling/../..", "..\\other"):
        (source / "modules.json").write_text(json.dumps([*modules, {"idx": 9, "name": "x", "path": path,
                                                                    "type": "sentence_transformers.models.Pooling"}]))  # fmt: skip
        before = tree_digest(tmp_path)
        status, err = run(convert_args(source, output), capsys)
        assert_refused(status, err, f"names the module path {path!r}, which leads out of {source}")
        assert tree_digest(tmp_path) == before and not output.exists() and not leftovers(output.parent, "converted")
    assert teacher_loads == []


def test_a_module_path_of_a_hub_repo_that_leads_out_of_its_snapshot_is_refused(tiny_bert_dir, minilm_dir, tmp_path):
    """From the real loopback Hub: `..` in modules.json would name the cache's `snapshots/` folder."""
    import huggingface_hub
    from huggingface_hub import HfApi

    from hf_norms.hub.server import HubServer

    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "st")
    modules = json.loads((source / "modules.json").read_text())
    (source / "modules.json").write_text(json.dumps([*modules, {"idx": 9, "name": "x", "path": "..",
                                                                "type": "sentence_transformers.models.Pooling"}]))  # fmt: skip
    token, home, output = "hf_module-path-token-2024", tmp_path / "hf-home", tmp_path / "out" / "st-lape"
    output.parent.mkdir()
    (output.parent / "victim.txt").write_text("the user's")
    with pytest.MonkeyPatch.context() as patch, HubServer(tmp_path / "hub", tokens=[token]) as hub:
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # loopback only
        HfApi(endpoint=hub.url, token=token).create_repo("org/st")
        HfApi(endpoint=hub.url, token=token).upload_folder(folder_path=source, repo_id="org/st")
        env = {**os.environ, **hub.client_env(token), "HF_HOME": str(home)}
        command = ["hf-norms", "convert", "org/st", "--norm-type", "lape", "--output", str(output)]
        result = subprocess.run([str(Path(sys.executable).parent / command[0]), *command[1:]], env=env,
                                capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "names the module path '..', which leads out of" in result.stderr and "snapshots" in result.stderr
    assert sorted(p.name for p in output.parent.iterdir()) == ["victim.txt"]
    assert (output.parent / "victim.txt").read_text() == "the user's"


def test_a_copy_never_reads_or_writes_outside_its_folders(tmp_path):
    source, target, outside = tmp_path / "source", tmp_path / "target", tmp_path / "outside"
    for folder in (source / "sub", target, outside):
        folder.mkdir(parents=True)
    (source / "sub" / "a.txt").write_text("the source's")
    (outside / "victim.txt").write_text("the user's")
    os.symlink(outside, source / "linked")  # a folder reached through a link lies outside
    before = tree_digest(tmp_path)
    for name in ("..", "../outside", str(outside), ".", "", "sub/../..", "linked/victim.txt"):
        with pytest.raises(OutputFolderError, match=r"is not a path inside|symbolic link"):
            copy_checkpoint_files(source, target, [name])
        assert tree_digest(tmp_path) == before, name
    os.symlink(outside, target / "sub")  # a destination reached through a link lies outside too
    with pytest.raises(OutputFolderError, match=f"'sub/a.txt' is not a path inside {target}"):
        copy_checkpoint_files(source, target, ["sub"])
    assert tree_digest(tmp_path) == before and sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    (target / "sub").unlink()
    assert copy_checkpoint_files(source, target, ["sub"]) == ["sub/a.txt"]
    assert (target / "sub" / "a.txt").read_text() == "the source's"


# --------------------------------------------------------------------------------------------------------------------
# Item 9: a staging folder is another run's only when its marker names that run's process, start time included
# --------------------------------------------------------------------------------------------------------------------


def plant_staging(output: Path, name: str, **marker) -> Path:
    folder = output.parent / f".{output.name}.hf-norms-staging.{name}"
    folder.mkdir(parents=True)
    fields = {"run_id": "0123456789abcdef", "command": "convert", "started_ns": time.time_ns(), **marker}
    (folder / MARKER_NAME).write_text(json.dumps(fields))
    (folder / "victim.txt").write_text("the user's")
    return folder


def test_a_staging_marker_naming_a_live_process_that_is_no_run_blocks_nothing(tiny_vit_dir, tmp_path, capsys, caplog):
    output = tmp_path / "out"
    sleeper = subprocess.Popen(["sleep", "120"])  # a live process that is no hf-norms run
    try:
        started = process_start_ns(sleeper.pid)
        planted = [
            plant_staging(output, "pid1", pid=1),
            plant_staging(output, "sleeper", pid=sleeper.pid),
            plant_staging(output, "later", pid=sleeper.pid, process_started_ns=started + 3600 * 10**9),
            plant_staging(output, "earlier", pid=sleeper.pid, process_started_ns=started - 3600 * 10**9),
        ]
        before = [tree_digest(folder) for folder in planted]
        status, err = run(convert_args(tiny_vit_dir, output), capsys)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert status == 0, err
    assert [tree_digest(folder) for folder in planted] == before and (output / "model.safetensors").is_file()
    for folder in planted:
        assert f"{folder} was left by an interrupted hf-norms run" in caplog.text


def test_a_run_on_an_output_another_live_run_stages_stops_before_its_slow_part(
    tiny_vit_dir, tmp_path, capsys, teacher_loads
):
    output = tmp_path / "out"
    alive = staging_folder(output, "convert")  # this process's: a run still going on, started first
    status, err = run(convert_args(tiny_vit_dir, output), capsys)
    assert_refused(status, err, f"Another hf-norms run (process {os.getpid()}) is writing {output}")
    assert teacher_loads == [] and sorted(p.name for p in tmp_path.iterdir()) == [alive.name]


# --------------------------------------------------------------------------------------------------------------------
# Item 10: the staging folder is made first, so a name or a parent it cannot be made in stops the run at once
# --------------------------------------------------------------------------------------------------------------------


def test_an_output_name_too_long_for_its_staging_folder_stops_at_once(tiny_vit_dir, tmp_path, capsys, teacher_loads):
    output = tmp_path / ("x" * 250)  # a valid name; `.NAME.hf-norms-staging.XXXXXXXX` beside it is not
    status, err = run(convert_args(tiny_vit_dir, output), capsys)
    assert_refused(status, err, "its staging folder's name would be too long; choose an output name of at most 228")
    assert teacher_loads == [] and list(tmp_path.iterdir()) == []
    output = tmp_path / ("x" * 228)
    assert run(convert_args(tiny_vit_dir, output), capsys)[0] == 0 and (output / "config.json").is_file()


def test_an_output_in_a_folder_nothing_can_be_made_in_stops_at_once(tiny_vit_dir, tmp_path, capsys, teacher_loads):
    parent = tmp_path / "immutable"
    parent.mkdir()
    (parent / "mine.txt").write_text("the user's")
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(parent)]).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        before = tree_digest(tmp_path)
        status, err = run(convert_args(tiny_vit_dir, parent / "out"), capsys)
        nested, nested_err = run(convert_args(tiny_vit_dir, parent / "new" / "out"), capsys)
    finally:
        subprocess.run(["chattr", "-i", str(parent)], check=True)
    assert_refused(status, err, f"no staging folder can be made in {parent} (Operation not permitted)")
    assert_refused(nested, nested_err, "its folder cannot be made (Operation not permitted)")
    assert teacher_loads == [] and tree_digest(tmp_path) == before
    assert sorted(p.name for p in parent.iterdir()) == ["mine.txt"]


# --------------------------------------------------------------------------------------------------------------------
# Item 7: heal removes from its work folder only what it created in the same run
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def calibrated(tiny_vit_dir, tmp_path, capsys) -> tuple[Path, Path]:
    """(a DyT conversion of the tiny ViT, its images)."""
    images = save_images(tmp_path / "images", 12)
    folder = tmp_path / "vit-dyt"
    assert run(["convert", str(tiny_vit_dir), "--norm-type", "dyt", "--calibration-data", str(images),
                "--calibration-samples", "8", "--eval-samples", "4", "--heal-steps", "0", "--output", str(folder)], capsys)[0] == 0  # fmt: skip
    return folder, images


def heal_args(folder: Path, images: Path, *extra: str) -> list[str]:
    return ["heal", str(folder), "--data", str(images), "--max-steps", "2", "--save-steps", "1", "--batch-size", "4",
            *extra]  # fmt: skip


USER_FILES = {"mynotes.txt": "the user's notes", "analysis/a.py": "print('the user's')"}


def test_files_the_user_writes_into_the_work_folder_during_a_heal_are_kept(calibrated, capsys, caplog, monkeypatch):
    folder, images = calibrated
    work = folder.parent / f".{folder.name}.healing"
    real_train, real_save = healing.train, distillation.DistillationTrainer._save_checkpoint

    def train_while_the_user_writes(run_, *args):
        for name, text in USER_FILES.items():  # written once the run has made its work folder
            (work / name).parent.mkdir(exist_ok=True)
            (work / name).write_text(text)
        result = real_train(run_, *args)
        (work / "checkpoint-2" / "mine.txt").write_text("the user's")  # into the last checkpoint this run saved
        return result

    def the_user_writes_then_save(trainer, *args):
        if (earlier := work / f"checkpoint-{trainer.state.global_step - 1}").is_dir():
            (earlier / "mine.txt").write_text("the user's")  # into the checkpoint this save replaces
        real_save(trainer, *args)

    monkeypatch.setattr(healing, "train", train_while_the_user_writes)
    monkeypatch.setattr(distillation.DistillationTrainer, "_save_checkpoint", the_user_writes_then_save)
    assert run(heal_args(folder, images), capsys)[0] == 0
    assert {name: (work / name).read_text() for name in USER_FILES} == USER_FILES
    assert sorted(p.name for p in work.iterdir()) == sorted(
        [MARKER_NAME, "analysis", "checkpoint-1", "checkpoint-2", "mynotes.txt"]
    )
    for checkpoint in ("checkpoint-1", "checkpoint-2"):  # what this run saved is gone, the user's file stays
        assert [p.name for p in (work / checkpoint).iterdir()] == ["mine.txt"]
    assert f"Kept {work}" in caplog.text


def test_a_file_the_user_writes_into_a_checkpoint_while_it_is_saved_is_kept(calibrated, capsys, caplog, monkeypatch):
    """A file written into `checkpoint-N` while the Trainer saves it (after the model, before the optimizer and the
    state) was recorded with the checkpoint as this run's and deleted by the rotation; only what the Trainer writes is
    recorded now, so the file stays, and everything the Trainer wrote is still removed."""
    folder, images = calibrated
    work = folder.parent / f".{folder.name}.healing"
    real_save_model = distillation.DistillationTrainer.save_model

    def save_model_then_the_user_writes(trainer, output_dir=None, *args, **kwargs):
        real_save_model(trainer, output_dir, *args, **kwargs)
        if output_dir is not None and Path(output_dir).name.startswith("checkpoint-"):
            (Path(output_dir) / "during-save.txt").write_text("the user's")

    monkeypatch.setattr(distillation.DistillationTrainer, "save_model", save_model_then_the_user_writes)
    assert run(heal_args(folder, images), capsys)[0] == 0
    assert sorted(p.name for p in work.iterdir()) == sorted([MARKER_NAME, "checkpoint-1", "checkpoint-2"])
    for checkpoint in ("checkpoint-1", "checkpoint-2"):
        assert [p.name for p in (work / checkpoint).iterdir()] == ["during-save.txt"]
    assert f"Kept {work}" in caplog.text


def test_a_work_dir_the_user_made_and_a_mount_point_are_never_removed(calibrated, tmp_path, capsys):
    folder, images = calibrated
    made = tmp_path / "my-work"
    made.mkdir()
    assert run(heal_args(folder, images, "--work-dir", str(made)), capsys)[0] == 0
    assert made.is_dir() and list(made.iterdir()) == []  # what the run made is gone, the user's folder stays
    stopped = heal_args(folder, images, "--work-dir", str(made), "--max-steps", "3", "--max-minutes", "0")
    assert run(stopped, capsys)[0] == 0 and (made / "checkpoint-1").is_dir()  # stopped by the time limit
    assert run([*stopped[:-2], "--resume"], capsys)[0] == 0  # the run it continues did not make the folder either
    assert made.is_dir() and list(made.iterdir()) == []
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)]).returncode:
        pytest.skip("no tmpfs can be mounted here")
    try:
        status, err = run(heal_args(folder, images, "--work-dir", str(mount)), capsys)
        assert status == 0, err
        assert os.path.ismount(mount) and list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def sentence_model(tiny_bert_dir, minilm_dir, tmp_path, capsys) -> tuple[Path, Path]:
    """(a DTN conversion of a tiny sentence-transformers model, texts to heal it on)."""
    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "st", max_seq_length=32)
    folder = tmp_path / "st-dtn"
    assert run(["convert", str(source), "--norm-type", "dtn", "--output", str(folder)], capsys)[0] == 0
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"a short text number {i} about the weather\n" for i in range(16)))
    return folder, texts


def test_heal_checks_its_inputs_before_it_makes_its_work_folder(sentence_model, tmp_path, capsys):
    folder, texts = sentence_model
    deep = "[" * 100_000 + "]" * 100_000
    first, later = tmp_path / "first.jsonl", tmp_path / "later.jsonl"
    first.write_text(deep + "\n" + '{"text": "a text"}\n' * 8)
    later.write_text('{"text": "a text"}\n' + deep + "\n" + '{"text": "a text"}\n' * 8)
    pooling = folder / "1_Pooling" / "config.json"
    deep_line = "the line is nested too deeply (more than 64 levels)"
    for data, expected in ((first, f"{first}, line 1: {deep_line}"), (later, f"{later}, line 2: {deep_line}")):
        before = tree_digest(tmp_path)
        status, err = run(heal_args(folder, data, "--max-length", "16"), capsys)
        assert_refused(status, err, expected)
        assert tree_digest(tmp_path) == before and not leftovers(tmp_path, folder.name)
    pooling.write_text("[1, 2]")
    before = tree_digest(tmp_path)
    status, err = run(heal_args(folder, texts, "--max-length", "16"), capsys)
    assert_refused(status, err, f"{pooling} holds a JSON list, not an object")
    assert tree_digest(tmp_path) == before and not leftovers(tmp_path, folder.name)


def test_heal_makes_its_output_staging_folder_before_its_slow_part(calibrated, tmp_path, capsys, monkeypatch):
    folder, images = calibrated
    loaded, real = [], healing.load_student
    monkeypatch.setattr(healing, "load_student", lambda *args: loaded.append(args[0]) or real(*args))
    alive = staging_folder(tmp_path / "healed", "heal")  # this process's: a live run staging that output
    before = tree_digest(tmp_path)
    status, err = run(heal_args(folder, images, "--output", str(tmp_path / ("h" * 250))), capsys)
    assert_refused(status, err, "choose an output name of at most 228 characters")
    status, err = run(heal_args(folder, images, "--output", str(tmp_path / "healed")), capsys)
    assert_refused(status, err, f"Another hf-norms run (process {os.getpid()}) is writing {tmp_path / 'healed'}")
    assert loaded == [] and tree_digest(tmp_path) == before and not leftovers(tmp_path, folder.name)
    shutil.rmtree(alive)  # the test's own folder
    planted = plant_staging(tmp_path / "healed", "pid1", pid=1, command="heal")
    assert run(heal_args(folder, images, "--output", str(tmp_path / "healed")), capsys)[0] == 0
    assert (tmp_path / "healed" / "model.safetensors").is_file() and (planted / "victim.txt").is_file()
