"""`heal --resume` checks its checkpoint's Trainer files as `finetune --resume_from_checkpoint` does
(`hf_norms/conversion/trainer_state.py`): a tampered `trainer_state.json` or an optimizer file of pickled code is one
line, and the converted folder and the checkpoint are left as they were."""

from __future__ import annotations

import json
import os

import torch
from test_convert import tree_digest
from test_output_folders import calibrated, interrupted_heal  # noqa: F401 (a fixture)
from test_safety import assert_refused, run


class RunsCode:
    def __reduce__(self):
        return (os.system, ("echo planted > planted.txt",))


def test_heal_refuses_a_tampered_trainer_state_or_optimizer_in_one_line(calibrated, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    folder, images = calibrated
    checkpoint = interrupted_heal(folder, images, capsys)
    resume = ["heal", str(folder), "--data", str(images), "--max-steps", "5", "--batch-size", "4", "--resume"]
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    tampering = {
        "trainer_state.json": (
            {**state, "global_step": 10**18},
            "global_step 1000000000000000000 is past its max_steps",
        ),
        "extra": ({**state, "extra": [1]}, "has fields a Trainer state does not have: ['extra']"),
        "optimizer.pt": ({"state": {}, "param_groups": [], "hook": RunsCode()}, "optimizer.pt is not a torch state"),
    }
    pristine = {path.name: path.read_bytes() for path in checkpoint.iterdir() if path.is_file()}
    for what, (content, expected) in tampering.items():
        if what == "optimizer.pt":
            torch.save(content, checkpoint / what)
        else:
            (checkpoint / "trainer_state.json").write_text(json.dumps(content))
        before, held = tree_digest(folder), tree_digest(checkpoint)
        status, err = run(resume, capsys)
        assert_refused(status, err, expected)
        assert tree_digest(folder) == before and tree_digest(checkpoint) == held, what
        assert not (tmp_path / "planted.txt").exists()
        for name, data in pristine.items():
            (checkpoint / name).write_bytes(data)
    assert run(resume, capsys)[0] == 0  # the run's own checkpoint resumes
