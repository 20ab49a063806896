"""`hf-norms demo`: the whole flow on the real packaged models, offline, against an embedded loopback Hub.

1. Build the real checkpoints: all-MiniLM-L6-v2 (BERT, a sentence-transformers model) and DINOv2-S/14 (a
   `Dinov2Model`), from the packages that ship them (`hf_norms.packaged`).
2. Convert them (`hf_norms.convert`): exact SepNorm/DTN/LaPE, and DyT calibrated on BBC News texts and healed for a
   short demo budget (`DEMO_HEAL_STEPS`; a conversion's default is 300 steps).
3. Push each with its model card (`hf_norms.push_to_hub`) to a Hub on 127.0.0.1 (`hf_norms.hub.server`), or to
   `--endpoint`.
4. In fresh processes with `HF_ENDPOINT` set, load every repo by id with `AutoModel.from_pretrained` after
   `import hf_norms`, and with `trust_remote_code=True` where hf_norms cannot be imported, and run `pipeline()`;
   compare the outputs with the local folders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from .cli_parsing import option
from .errors import OutputFolderError
from .output_folders import claim_folder, made_by_hf_norms

DEMO_HEAL_STEPS = 20  # a heal the demo can wait for on 2 cores (about a minute); the default is 300


@dataclass(kw_only=True)
class DemoArguments:
    """`hf-norms demo [--workdir DIR] [--endpoint URL]`."""

    workdir: str | None = option("where to keep the outputs (default: a new temporary folder)")
    endpoint: str | None = option("push to this Hub endpoint instead of an embedded one")


DEMO_ORG = "hf-norms-demo"
DEMO_TOKEN = "hf_norms_demo_token"

BLOCK_HF_NORMS = textwrap.dedent(
    """
    import importlib.abc, sys

    class BlockHfNorms(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "hf_norms":
                raise ModuleNotFoundError(f"No module named {name!r} (blocked: loading through remote code)")

    sys.meta_path.insert(0, BlockHfNorms())
    """
)

# Runs in a fresh process with HF_ENDPOINT set: load each repo by id, compare with the local folder, run a pipeline.
LOAD_BY_ID = textwrap.dedent(
    """
    import json, sys, torch
    from transformers import AutoModel, pipeline
    from PIL import Image
    jobs, remote = json.loads(sys.argv[1]), sys.argv[2] == "remote"
    if not remote:
        import hf_norms
    results = {}
    for job in jobs:
        kwargs = {"trust_remote_code": True} if remote else {}
        by_id = AutoModel.from_pretrained(job["repo_id"], **kwargs).eval()
        local = AutoModel.from_pretrained(job["folder"], **kwargs).eval()
        for model in (by_id, local):
            for tensor in [*model.parameters(), *model.buffers()]:
                tensor.data = tensor.data.clone()  # out of the memory map: same alignment, same BLAS kernels
        inputs = torch.load(job["inputs"])
        with torch.no_grad():
            diff = (by_id(**inputs).last_hidden_state - local(**inputs).last_hidden_state).abs().max().item()
        task = "feature-extraction" if job["modality"] == "text" else "image-feature-extraction"
        extractor = pipeline(task, model=job["repo_id"], **kwargs)
        sample = "Offline hubs are handy." if job["modality"] == "text" else Image.new("RGB", (224, 224), "teal")
        features = extractor(sample)
        results[job["repo_id"]] = {"class": type(by_id).__name__, "module": type(by_id).__module__,
                                   "max_abs_diff": diff, "pipeline_ok": len(features) > 0}
    print(json.dumps(results))
    """
)


@dataclass(frozen=True)
class DemoJob:
    name: str
    source: str
    modality: str
    norm_type: str
    convert_kwargs: dict


def demo_jobs(minilm: str | Path, dinov2: Path, texts_file: Path, held_out_file: Path) -> list[DemoJob]:
    text_data = {"evaluation_data": str(held_out_file), "evaluation_samples": 32}
    return [
        DemoJob("all-MiniLM-L6-v2-sepnorm", str(minilm), "text", "sepnorm", text_data),
        DemoJob(
            "all-MiniLM-L6-v2-dyt",
            str(minilm),
            "text",
            "dyt",
            {
                **text_data,
                "calibration_data": str(texts_file),
                "calibration_samples": 32,
                "heal_steps": DEMO_HEAL_STEPS,
            },
        ),
        DemoJob("dinov2-small-dtn", str(dinov2), "image", "dtn", {}),
        DemoJob("dinov2-small-lape", str(dinov2), "image", "lape", {}),
    ]


def write_texts(workdir: Path) -> tuple[Path, Path]:
    """BBC News calibration texts and held-out evaluation texts (first paragraph of each article), one per line."""
    from .packaged import bbc_news, split_train_test

    articles = [" ".join(text.split("\n\n")[:2]).replace("\n", " ") for text, _ in bbc_news()]
    calibration, held_out = split_train_test(articles, test_fraction=0.5, seed=0)
    paths = workdir / "calibration.txt", workdir / "held_out.txt"
    for path, texts in zip(paths, (calibration[:128], held_out[:64]), strict=True):
        path.write_text("\n".join(texts) + "\n")
    return paths


def probe_inputs(job: DemoJob, folder: Path, path: Path) -> None:
    """Save real model inputs for the load-back comparison: two sentences, or two photos."""
    import torch
    from transformers import AutoImageProcessor, AutoTokenizer

    from .packaged import photos

    if job.modality == "text":
        tokenizer = AutoTokenizer.from_pretrained(folder)
        inputs = tokenizer(
            ["Markets rallied on Monday.", "The film won three awards."], padding=True, return_tensors="pt"
        )
    else:
        processor = AutoImageProcessor.from_pretrained(folder)
        images = photos()
        inputs = processor(images=[images["astronaut"], images["coffee"]], return_tensors="pt")
    torch.save(dict(inputs), path)


def load_back(jobs: list[dict], env: dict[str, str], remote: bool) -> dict:
    code = (BLOCK_HF_NORMS if remote else "") + LOAD_BY_ID
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(jobs), "remote" if remote else "hf_norms"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        timeout=900,
    )
    if result.returncode != 0:
        raise RuntimeError(f"Loading by repo id failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def fidelity_summary(report: dict) -> str:
    stage = report["stages"].get("exact") or report["stages"].get("healed") or report["stages"].get("calibrated")
    end_to_end = stage["end_to_end"]
    return f"max abs diff {end_to_end['max_abs_diff']:.2e}, mean cosine {end_to_end['mean_cosine']:.4f}"


def run_demo(arguments: DemoArguments) -> int:
    """`hf-norms demo`: convert, push and load back (see the module docstring); the exit status."""
    from transformers.utils import logging as transformers_logging

    from .conversion.convert import convert
    from .hub.publish import push_to_hub
    from .hub.server import HubServer
    from .packaged import dinov2_small_path, minilm_path

    workdir = Path(arguments.workdir or tempfile.mkdtemp(prefix="hf-norms-demo-"))
    endpoint = arguments.endpoint
    transformers_logging.disable_progress_bar()  # the demo prints its own one line per step
    started = time.perf_counter()
    claim_demo_folder(workdir)
    hub = None if endpoint else HubServer(workdir / "hub").start()
    endpoint = endpoint or hub.url
    try:
        print(f"Hub endpoint: {endpoint}" + (" (embedded, on 127.0.0.1)" if hub else ""))
        texts_file, held_out_file = write_texts(workdir)
        jobs = demo_jobs(minilm_path(), dinov2_small_path(), texts_file, held_out_file)
        loads = []
        for job in jobs:
            folder = workdir / job.name
            step = time.perf_counter()
            report = convert(job.source, job.norm_type, folder, overwrite=True, **job.convert_kwargs)
            print(f"converted {job.name:<28} {fidelity_summary(report)}  ({time.perf_counter() - step:.1f} s)")
            repo_id = f"{DEMO_ORG}/{job.name}"
            commit = push_to_hub(folder, repo_id, endpoint=endpoint, token=os.environ.get("HF_TOKEN", DEMO_TOKEN))
            print(f"pushed    {repo_id:<41} {commit.commit_url}")
            probe_inputs(job, folder, workdir / f"{job.name}.inputs.pt")
            loads.append(
                {"repo_id": repo_id, "folder": str(folder), "modality": job.modality,
                 "inputs": str(workdir / f"{job.name}.inputs.pt")}
            )  # fmt: skip

        env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(workdir / "hf_home")}
        env.setdefault("HF_TOKEN", DEMO_TOKEN)
        print("\nLoading every repo by id in fresh processes ...")
        with_package = load_back(loads, env, remote=False)
        remote_code = load_back(loads, env, remote=True)
        print("\n| repo | AutoModel after `import hf_norms` | trust_remote_code, no hf_norms | pipeline |")
        print("|---|---|---|---|")
        failures = 0
        for load in loads:
            ours, remote = with_package[load["repo_id"]], remote_code[load["repo_id"]]
            ok = ours["max_abs_diff"] == 0 and remote["max_abs_diff"] == 0 and "hf_norms" not in remote["module"]
            ok = ok and ours["pipeline_ok"] and remote["pipeline_ok"]
            failures += not ok
            print(
                f"| {load['repo_id']} | {ours['class']}, max abs diff {ours['max_abs_diff']:.1e} "
                f"| {remote['class']} from `{remote['module'].split('.')[0]}`, max abs diff {remote['max_abs_diff']:.1e} "
                f"| {'ok' if ours['pipeline_ok'] and remote['pipeline_ok'] else 'FAILED'} |"
            )
        print(f"\nDone in {time.perf_counter() - started:.0f} s; checkpoints, reports and cards are in {workdir}.")
        return 1 if failures else 0
    finally:
        if hub is not None:
            hub.stop()


def claim_demo_folder(workdir: Path) -> None:
    """The demo's folder: a new or empty one, or one an earlier demo wrote, which is moved aside
    (`output_folders.claim_folder`)."""
    if workdir.is_dir() and any(workdir.iterdir()) and not made_by_hf_norms(workdir, "demo"):
        raise OutputFolderError(f"--workdir {workdir} is not empty and no earlier demo made it; give a new folder.")
    claim_folder(workdir, command="demo", overwrite=True, what="--workdir").take()
