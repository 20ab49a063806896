"""Healing on 2 CPU processes (`torchrun --nproc_per_node 2 -m hf_norms.conversion.heal`, DDP over gloo).

One torchrun start (it is slow on a busy machine) runs, on a tiny ViT converted to DyT:

1. a heal of 16 images in memory, 4 per process and step: it must follow the 1-process heal with the global batch
   of 8 (same examples at every step): the same healed cosine (within 0.005), nearly the same weights (the average
   of the processes' losses is not exactly the loss of the whole batch: its relative errors are ratios of means);
2. a streamed heal of the image folder (each process reads its own half of the files), stopped by its time limit
   after one step, then resumed to the end by a second `--resume` run: the checkpoint holds both processes' RNG
   states, recorded as heal's in the work folder's marker, and the finished run leaves no work folder;

and in each run only rank 0 writes: one report, one healed checkpoint, the work folder's marker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import save_tiny_dyt_vit
from safetensors.torch import load_file

from hf_norms.conversion import healing
from hf_norms.conversion.report import REPORT_JSON
from hf_norms.output_folders import Marker

pytestmark = pytest.mark.usefixtures("one_thread")
STEPS, PER_PROCESS_BATCH = 4, 4
COMMON = ["--max-steps", str(STEPS), "--batch-size", str(PER_PROCESS_BATCH), "--learning-rate", "1e-3"]

RANK_SCRIPT = """
import json, os, sys
import torch
from hf_norms.conversion import healing
from hf_norms.conversion.heal import main
from hf_norms.output_folders import Marker

folder, images, out = sys.argv[1:4]
torch.set_num_threads(1)
common = {common!r}
rank = os.environ["RANK"]
# 1. In memory, to compare with one process.
assert main([f"{{folder}}/in-memory", "--data", images, "--samples", "16", "--output", f"{{out}}/in-memory", *common]) == 0
# 2. Streamed, stopped by the time limit after one step, then resumed.
stream = f"{{folder}}/streamed"
work = f"{{folder}}/.streamed.healing"
steps = {{}}
original_heal = healing.heal_folder  # what `hf_norms.conversion.heal` runs
def recording_heal(*args, **kwargs):
    report = original_heal(*args, **kwargs)
    steps[len(steps)] = report["healing"]
    return report
healing.heal_folder = recording_heal
assert main([stream, "--data", images, "--max-minutes", "0", "--work-dir", work, *common]) == 0
marker = Marker.read(__import__("pathlib").Path(work))
listing = sorted(os.listdir(f"{{work}}/checkpoint-1"))
assert main([stream, "--data", images, "--work-dir", work, "--resume", *common]) == 0
with open(f"{{out}}/rank{{rank}}.json", "w") as file:
    json.dump({{"stopped": steps[0], "resumed": steps[1], "checkpoint": listing,
                "marker": marker.command if marker else None}}, file)
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two-processes")
    _, images = save_tiny_dyt_vit(folder, 24, output="in-memory")
    for name in ("streamed", "one-process"):  # copies with their modification times: still hf-norms' files
        shutil.copytree(folder / "in-memory", folder / name)
    return folder, images


@pytest.fixture(scope="module")
def two_process_run(converted):
    """`torchrun --standalone --nproc_per_node 2` of the rank script; returns the folder its results are in."""
    folder, images = converted
    script, out = folder / "rank_script.py", folder / "out"
    script.write_text(RANK_SCRIPT.format(common=COMMON))
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    completed = subprocess.run([*command, str(folder), str(images), str(out)], env=env, capture_output=True, text=True,
                               timeout=600)  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return out


@pytest.mark.slow
def test_two_processes_heal_as_one_process_with_the_global_batch(converted, two_process_run, tmp_path):
    folder, images = converted
    report = json.loads((two_process_run / "in-memory" / REPORT_JSON).read_text())
    record = report["healing"]
    assert record["processes"] == 2 and record["global_batch_size"] == 2 * PER_PROCESS_BATCH
    assert record["steps"] == STEPS and record["samples"] == 16 and record["streamed"] is False
    assert not (folder / ".in-memory.healing").exists()  # finished: rank 0 removed its checkpoints

    single = healing.heal(folder / "one-process", images, samples=16, output=tmp_path / "single", max_steps=STEPS,
                          batch_size=2 * PER_PROCESS_BATCH, learning_rate=1e-3, progress=False)  # fmt: skip
    two_cosine = report["stages"]["healed"]["end_to_end"]["mean_cosine"]
    one_cosine = single["stages"]["healed"]["end_to_end"]["mean_cosine"]
    calibrated = report["stages"]["calibrated"]["end_to_end"]["mean_cosine"]
    assert abs(two_cosine - one_cosine) < 0.005 and two_cosine != calibrated, (one_cosine, two_cosine, calibrated)
    two, one, start = (load_file(path / "model.safetensors")
                       for path in (two_process_run / "in-memory", tmp_path / "single", folder / "one-process"))  # fmt: skip
    apart, moved = (
        torch.cat([(a[name] - b[name]).flatten() for name in one]).norm() for a, b in ((two, one), (one, start))
    )
    assert apart < 0.05 * moved, (apart, moved)  # measured: 1.2 %, Adam's sign noise on near-zero gradients


@pytest.mark.slow
def test_a_two_process_heal_stops_and_resumes_and_only_rank_0_writes(converted, two_process_run):
    folder, _ = converted
    ranks = [json.loads((two_process_run / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0] == ranks[1]  # every process returns rank 0's report
    stopped, resumed = ranks[0]["stopped"], ranks[0]["resumed"]
    assert stopped["steps"] == 1 and stopped["streamed"] is True and stopped["processes"] == 2
    assert resumed["steps"] == STEPS and resumed["resumed_from_step"] == 1
    assert {"rng_state_0.pth", "rng_state_1.pth", "model.safetensors"} <= set(ranks[0]["checkpoint"])
    assert ranks[0]["marker"] == "heal"
    assert not (folder / ".streamed.healing").exists()  # every file of the work folder was this run's, and removed
    saved = json.loads((folder / "streamed" / REPORT_JSON).read_text())
    assert saved["healing"] == resumed and Marker.read(folder / "streamed") is not None
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no staging left behind
