"""The compatibility set: what must hold on every supported transformers release (`.ci/run` runs it on the oldest, the
full suite runs it on the newest).

For every family x norm_type: the model builds, a stock checkpoint loads with `norm_type` (exactly, where the
mathematics allows), one Trainer step runs, the saved checkpoint loads back through its remote code in a process
without hf_norms with identical outputs. With `HF_NORMS_RELEASE_EXCHANGE` set to a folder, the checkpoints are also
written there under this release's version, and every checkpoint another release wrote there is loaded through remote
code, and with hf_norms through its own classes, and must give the outputs recorded with it (a checkpoint saved on
one release loads on the other).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import transformers
from conftest import NORM_TYPES, run_without_hf_norms, tiny_config
from transformers import Trainer, TrainingArguments

import hf_norms
from hf_norms.norms.build import function_preserving_options

FAMILIES = {"vit": "ViTNormModel", "deit": "DeiTNormModel", "dinov2": "Dinov2NormModel", "bert": "BertNormModel"}
EXCHANGE = os.environ.get("HF_NORMS_RELEASE_EXCHANGE")


def stock_model(family: str):
    """A tiny stock transformers model of `family`, built from the hf-norms config's stock fields."""
    ours = tiny_config(family, "layernorm")
    stock_config_class = getattr(transformers, type(ours).__name__.replace("Norm", "", 1))
    fields = {k: v for k, v in ours.to_dict().items() if k in stock_config_class.__dataclass_fields__}
    fields.pop("model_type", None)
    stock_class = getattr(transformers, FAMILIES[family].replace("Norm", "", 1))
    torch.manual_seed(0)
    return stock_class(stock_config_class(**fields)).eval()


def inputs_for(family: str, batch: int = 2) -> dict:
    generator = torch.Generator().manual_seed(1)
    if family == "bert":
        mask = torch.ones(batch, 10, dtype=torch.long)
        mask[1, 7:] = 0
        return {"input_ids": torch.randint(5, 90, (batch, 10), generator=generator), "attention_mask": mask}
    return {"pixel_values": torch.randn(batch, 3, 32, 32, generator=generator)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("norm_type", NORM_TYPES)
def test_stock_checkpoint_loads_trains_and_round_trips_through_remote_code(family, norm_type, tmp_path):
    stock = stock_model(family)
    stock.save_pretrained(tmp_path / "stock")
    model_class = getattr(hf_norms, FAMILIES[family])
    model = model_class.from_pretrained(tmp_path / "stock", norm_type=norm_type).eval()
    assert isinstance(model, type(stock)) and type(model).forward is type(stock).forward, "the stock class, inherited"
    inputs = inputs_for(family)
    with torch.no_grad():
        expected = stock(**inputs).last_hidden_state
        converted = model(**inputs).last_hidden_state
    if function_preserving_options(norm_type) is not None:
        assert (converted - expected).abs().max().item() == 0, "an exact conversion"

    one_trainer_step(model, family, tmp_path)
    model.eval().save_pretrained(tmp_path / "saved")
    with torch.no_grad():
        reference = model(**inputs).last_hidden_state
    torch.save({"inputs": inputs, "expected": reference}, tmp_path / "saved" / "reference.pt")
    assert max_diff_through_remote_code(tmp_path / "saved", tmp_path) == 0
    if EXCHANGE:
        publish_for_other_releases(tmp_path / "saved", family, norm_type)


def one_trainer_step(model, family: str, tmp_path: Path) -> None:
    """One `Trainer` step on a masked-mean loss of the base model's output: every norm parameter moves."""
    inputs = inputs_for(family, batch=4)
    rows = [{key: value[i] for key, value in inputs.items()} for i in range(4)]

    def loss_of(outputs, labels=None, num_items_in_batch=None):
        return outputs.last_hidden_state.pow(2).mean()

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    arguments = TrainingArguments(
        tmp_path / "run", max_steps=1, per_device_train_batch_size=4, learning_rate=1e-2, use_cpu=True,
        report_to="none", save_strategy="no", remove_unused_columns=False, disable_tqdm=True,
    )  # fmt: skip
    Trainer(model, arguments, train_dataset=rows, compute_loss_func=loss_of).train()
    moved = [name for name, p in model.named_parameters() if not torch.equal(before[name], p)]
    assert moved, "one Trainer step changed no parameter"


REMOTE_LOAD = """
    import json, sys, torch, transformers
    from transformers import AutoModel
    results = {}
    for folder in json.loads(sys.argv[1] if len(sys.argv) > 1 else %r):
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        assert "hf_norms" not in type(model).__module__, type(model).__module__
        reference = torch.load(folder + "/reference.pt")
        with torch.no_grad():
            out = model(**reference["inputs"]).last_hidden_state
        results[folder] = (out - reference["expected"]).abs().max().item()
    print(json.dumps(results))
"""


def max_diff_through_remote_code(folder: Path, cwd: Path) -> float:
    """The largest difference from `folder`'s recorded outputs, loaded by `AutoModel` with `trust_remote_code=True` in
    a process that cannot import hf_norms."""
    results = json.loads(run_without_hf_norms(REMOTE_LOAD % json.dumps([str(folder)]), cwd).strip().splitlines()[-1])
    return results[str(folder)]


def publish_for_other_releases(folder: Path, family: str, norm_type: str) -> None:
    target = Path(EXCHANGE) / transformers.__version__ / f"{family}-{norm_type}"
    target.parent.mkdir(parents=True, exist_ok=True)
    for path in folder.iterdir():
        (target / path.name).parent.mkdir(parents=True, exist_ok=True)
        (target / path.name).write_bytes(path.read_bytes())


@pytest.mark.skipif(not EXCHANGE, reason="HF_NORMS_RELEASE_EXCHANGE is not set: no other release's checkpoints")
def test_checkpoints_saved_on_another_release_load_with_the_same_outputs(tmp_path):
    releases = [p for p in Path(EXCHANGE).iterdir() if p.is_dir() and p.name != transformers.__version__]
    folders = [str(f) for release in releases for f in sorted(release.iterdir())]
    if not folders:
        pytest.skip(f"no other release has written checkpoints to {EXCHANGE} yet")
    code = REMOTE_LOAD % json.dumps(folders)
    results = json.loads(run_without_hf_norms(code, tmp_path).strip().splitlines()[-1])
    assert len(results) == len(folders)
    for folder in folders:  # and with hf_norms, through its own classes
        model = transformers.AutoModel.from_pretrained(folder).eval()
        assert type(model).__module__.startswith("hf_norms.")
        reference = torch.load(f"{folder}/reference.pt")
        with torch.no_grad():
            out = model(**reference["inputs"]).last_hidden_state
        results[f"{folder} (hf_norms)"] = (out - reference["expected"]).abs().max().item()
    worst = max(results.values())
    assert worst <= 1e-6, {k: v for k, v in results.items() if v > 1e-6}
