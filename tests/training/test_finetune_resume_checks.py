"""`hf-norms finetune --resume_from_checkpoint`: a checkpoint whose `trainer_state.json` is not a Trainer state of its
own run (an extra field, a field of another type, a step past its run's end, callback states the Trainer cannot
restore) or whose optimizer or scheduler file is not a torch state without pickled code is refused in one line, before
the output folder is made, and left as it was; a checkpoint with nothing left to train is refused too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from hf_norms import cli

pytestmark = pytest.mark.usefixtures("one_thread")

FIX = "remove that checkpoint folder, or start again without resuming."


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def command(source: Path, data: Path, output: Path, *extra: str) -> list[str]:
    return ["finetune", "--model_name_or_path", str(source), "--dataset", str(data), "--output_dir", str(output),
            "--use_cpu", "--max_steps", "2", "--per_device_train_batch_size", "4", "--save_steps", "1",
            "--max_seq_length", "16", "--report_to", "none", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def earlier_run(tiny_bert_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(the data, the checkpoint-2 folder) of a real 2-step fine-tuning run of the tiny BERT."""
    folder = tmp_path_factory.mktemp("earlier")
    data = folder / "news.csv"
    data.write_text("text,label\n" + "".join(f"story number {i} about {'sport' if i % 2 else 'money'},{i % 2}\n"
                                             for i in range(16)))  # fmt: skip
    assert cli.main(command(tiny_bert_dir, data, folder / "run")) == 0
    return data, folder / "run" / "checkpoint-2"


def edited_state(**fields):
    def edit(checkpoint: Path) -> None:
        path = checkpoint / "trainer_state.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))

    return edit


def junk_zip(checkpoint: Path) -> None:
    with zipfile.ZipFile(checkpoint / "optimizer.pt", "w") as archive:
        archive.writestr("junk/data.txt", "not a torch state")


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo planted > planted.txt",))


def pickled_code(checkpoint: Path) -> None:
    torch.save({"state": {}, "param_groups": [], "hook": RunsCode()}, checkpoint / "optimizer.pt")


def other_parameter_count(checkpoint: Path) -> None:
    torch.save({"state": {}, "param_groups": [{"params": [0, 1], "lr": 0.1}]}, checkpoint / "optimizer.pt")


def control_arguments(checkpoint: Path) -> None:
    path = checkpoint / "trainer_state.json"
    state = json.loads(path.read_text())
    state["stateful_callbacks"]["TrainerControl"]["args"]["bogus"] = True
    path.write_text(json.dumps(state))


def scheduler_junk(checkpoint: Path) -> None:
    (checkpoint / "scheduler.pt").write_bytes(b"PK\x03\x04 junk")


def rng_junk(checkpoint: Path) -> None:
    (checkpoint / "rng_state.pth").write_bytes(b"junk")


def rng_other_state(checkpoint: Path) -> None:
    torch.save(
        {"python": 1, "numpy": "MT19937", "cpu": torch.zeros(3, dtype=torch.uint8)}, checkpoint / "rng_state.pth"
    )


TAMPERED = {
    "extra-field": (edited_state(extra=1), "has fields a Trainer state does not have: ['extra']"),
    "log-history-string": (edited_state(log_history="abc"), "log_history must be a list of mappings, got 'abc'"),
    "step-10**18": (edited_state(global_step=10**18), "global_step 1000000000000000000 is past its max_steps 2"),
    "step-text": (edited_state(global_step="2"), "global_step must be an integer >= 0, got '2'"),
    "step-negative": (edited_state(global_step=-1), "global_step must be an integer >= 0, got -1"),
    "epoch-nan": (edited_state(epoch=float("nan")), "epoch must be a finite number >= 0, got nan"),
    "log-history-of-lists": (edited_state(log_history=[[1]]), "log_history must be a list of mappings, got [[1]]"),
    "control-arguments": (control_arguments, "stateful_callbacks TrainerControl takes the flags ["),
    "optimizer-junk-zip": (junk_zip, "optimizer.pt is not a torch state"),
    "optimizer-pickled-code": (pickled_code, "optimizer.pt is not a torch state"),
    "optimizer-other-model": (other_parameter_count, "optimizer.pt holds the state of 2 parameters, this model has"),
    "scheduler-junk": (scheduler_junk, "scheduler.pt is not a torch state"),
    "rng-junk": (rng_junk, "rng_state.pth is not a torch state"),
    "rng-other-state": (rng_other_state, "rng_state.pth is not the random state of Python, numpy and torch"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_checkpoint_is_refused_in_one_line_and_left_as_it_was(
    case, earlier_run, tiny_bert_dir, tmp_path, capsys, monkeypatch
):
    """They used to be a raw TypeError, AttributeError or RuntimeError, or a run that trained 0 steps and rewrote the
    card claiming step 10**18."""
    monkeypatch.chdir(tmp_path)
    data, original = earlier_run
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(original, checkpoint)
    edit, said = TAMPERED[case]
    assert (checkpoint / "rng_state.pth").is_file()
    edit(checkpoint)
    before = digest(checkpoint)
    status = cli.main(command(tiny_bert_dir, data, tmp_path / "new", "--resume_from_checkpoint", str(checkpoint),
                              "--max_steps", "3"))  # fmt: skip
    err = "\n".join(line for line in capsys.readouterr().err.splitlines() if line.strip() and "Loading" not in line)
    assert status == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith("hf-norms finetune: error: resume_from_checkpoint: ") and said in err and err.endswith(FIX)
    assert digest(checkpoint) == before and not (tmp_path / "new").exists() and not (tmp_path / "planted.txt").exists()


def test_a_checkpoint_with_nothing_left_to_train_is_refused(earlier_run, tiny_bert_dir, tmp_path, capsys):
    data, checkpoint = earlier_run
    status = cli.main(command(tiny_bert_dir, data, tmp_path / "new", "--resume_from_checkpoint", str(checkpoint)))
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"hf-norms finetune: error: resume_from_checkpoint: {checkpoint} is at step 2, and max_steps is 2: there is "
        "nothing left to train; give a larger --max_steps."
    )
    assert not (tmp_path / "new").exists()
