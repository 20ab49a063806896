"""Exact conversions of sharded checkpoints (`conversion.sharded`): the output is written in files like the source's,
holds tensor by tensor what the unsharded path (the source loaded by transformers, converted with copies, saved by
`save_pretrained`) writes, loads with `from_pretrained` and remote code, and the source's pages leave memory once used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from conftest import EXACT_TYPES, run_without_hf_norms
from safetensors import safe_open
from safetensors.torch import save_file

import hf_norms
from hf_norms.conversion.checkpoint_io import ConversionError, check_weights, resolve_source
from hf_norms.conversion.convert import check_finite_weights, convert, convert_model, save_checkpoint
from hf_norms.conversion.sharded import MappedWeights, pages_dropped_after_use
from hf_norms.conversion.sources import inspect_source, load_teacher
from hf_norms.norms.registry import STOCK

EXACT_OR_STOCK = [*EXACT_TYPES, STOCK]
SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_labels=3)
CASES = [
    *[
        ("BertForMaskedLM", norm_type, torch.float32, "40KB") for norm_type in EXACT_OR_STOCK
    ],  # stored keys = runtime keys
    *[("ViTForImageClassification", norm_type, torch.float32, "40KB") for norm_type in EXACT_OR_STOCK],  # 4.x keys
    ("DeiTForImageClassificationWithTeacher", "sepnorm", torch.float32, "40KB"),
    ("Dinov2Model", "dtn", torch.float32, "40KB"),
    ("BertForSequenceClassification", "lape", torch.bfloat16, "20KB"),  # converted to float32, as from_pretrained does
    ("ViTModel", "dtn", torch.float32, None),  # one file stays one file
]


def stock_source(folder: Path, class_name: str, dtype: torch.dtype, max_shard_size: str | None) -> Path:
    """A random stock checkpoint of `class_name`, saved by transformers in files of at most `max_shard_size`."""
    torch.manual_seed(0)
    if class_name.startswith("Bert"):
        config = transformers.BertConfig(vocab_size=99, max_position_embeddings=40, intermediate_size=64, **SIZES)
    elif class_name.startswith("Dinov2"):
        config = transformers.Dinov2Config(image_size=32, patch_size=8, mlp_ratio=2, **SIZES)
    else:
        config_class = transformers.DeiTConfig if class_name.startswith("DeiT") else transformers.ViTConfig
        config = config_class(image_size=32, patch_size=8, encoder_stride=8, intermediate_size=64, **SIZES)
    model = getattr(transformers, class_name)(config).to(dtype)
    model.save_pretrained(folder, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    return folder


def unsharded_conversion(source: Path, norm_type: str, folder: Path) -> dict:
    """What `convert` wrote before: the source loaded by `from_pretrained`, converted with copies of its tensors,
    saved by `save_pretrained`. Returns the report."""
    checkpoint = resolve_source(source)
    student = convert_model(load_teacher(checkpoint, inspect_source(checkpoint)), norm_type)
    save_checkpoint(student, None, folder)
    return student.conversion_report


def stored(folder: Path) -> dict[str, dict[str, torch.Tensor]]:
    """`{file name: {key: tensor}}` of a folder's safetensors files."""
    files = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:
            files[path.name] = {key: handle.get_tensor(key) for key in handle.keys()}
    return files


@pytest.mark.parametrize(
    ("class_name", "norm_type", "dtype", "max_shard_size"),
    CASES,
    ids=[f"{c}-{n}-{str(d).removeprefix('torch.')}-{s or 'one-file'}" for c, n, d, s in CASES],
)
def test_sharded_exact_conversion_writes_what_the_unsharded_path_writes(
    class_name, norm_type, dtype, max_shard_size, tmp_path
):
    source = stock_source(tmp_path / "source", class_name, dtype, max_shard_size)
    report = convert(source, norm_type, tmp_path / "sharded")
    reference_report = unsharded_conversion(source, norm_type, tmp_path / "reference")

    ours, source_files = stored(tmp_path / "sharded"), stored(source)
    expected = stored(tmp_path / "reference")["model.safetensors"]
    tensors = {key: tensor for file in ours.values() for key, tensor in file.items()}
    assert sorted(tensors) == sorted(expected)
    assert max((tensors[key] - expected[key]).abs().max().item() for key in expected) == 0
    assert all(tensors[key].dtype == expected[key].dtype == torch.float32 for key in expected)
    assert len(ours) == len(source_files) >= (3 if max_shard_size else 1)
    code = sorted(path.name for path in (tmp_path / "reference").glob("*.py"))
    assert len(code) == 2 and code == sorted(path.name for path in (tmp_path / "sharded").glob("*.py"))
    for name in ("config.json", *code):
        assert (tmp_path / "sharded" / name).read_text() == (tmp_path / "reference" / name).read_text()
    assert report["stages"].keys() == reference_report["stages"].keys() == {"exact"}
    figures, reference_figures = report["stages"]["exact"], reference_report["stages"]["exact"]
    assert figures["end_to_end"] == pytest.approx(reference_figures["end_to_end"], abs=1e-6)
    assert figures["per_norm"] == pytest.approx(reference_figures["per_norm"], abs=1e-6)

    index_file = tmp_path / "sharded" / "model.safetensors.index.json"
    if not max_shard_size:
        assert list(ours) == ["model.safetensors"] and not index_file.exists()
        return
    index = json.loads(index_file.read_text())
    assert index["weight_map"] == {key: name for name, file in ours.items() for key in file}
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    if class_name.startswith("Bert"):  # the stored keys are the runtime keys: each tensor stays in its source file,
        for number, file in enumerate(ours.values()):  # and a new norm parameter joins its module's
            for key in file:
                assert number in source_files_of_module(key, list(source_files.values())), key


def source_files_of_module(key: str, source_files: list[dict]) -> set[int]:
    """The numbers of the source files that hold `key`, or else tensors of its nearest enclosing module."""
    parts = key.split(".")
    for length in range(len(parts), 0, -1):
        prefix = ".".join(parts[:length])
        numbers = {n for n, file in enumerate(source_files) for k in file if k == prefix or k.startswith(prefix + ".")}
        if numbers:
            return numbers
    return set()


def test_sharded_output_loads_like_the_unsharded_one(tmp_path):
    """Through the hf-norms class, the Auto class and remote code, the sharded output loads the same tensors as the
    unsharded one, and computes what the source computes."""
    source = stock_source(tmp_path / "source", "BertForMaskedLM", torch.float32, "40KB")
    convert(source, "dtn", tmp_path / "sharded")
    unsharded_conversion(source, "dtn", tmp_path / "reference")
    loaded = [hf_norms.BertNormForMaskedLM.from_pretrained(tmp_path / name).eval() for name in ("sharded", "reference")]
    assert type(transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "sharded")) is hf_norms.BertNormForMaskedLM
    states = [model.state_dict() for model in loaded]
    assert states[0].keys() == states[1].keys() and all(torch.equal(states[0][k], states[1][k]) for k in states[1])
    input_ids = torch.randint(5, 99, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = transformers.BertForMaskedLM.from_pretrained(source).eval()(input_ids=input_ids).logits
        assert (loaded[0](input_ids=input_ids).logits - expected).abs().max().item() <= 1e-5
    code = f"""
        import torch
        from transformers import AutoModelForMaskedLM
        first, second = (AutoModelForMaskedLM.from_pretrained({str(tmp_path)!r} + "/" + name, trust_remote_code=True)
                         for name in ("sharded", "reference"))
        pairs = zip(first.state_dict().items(), second.state_dict().items(), strict=True)
        print(type(first).__name__, max((a - b).abs().max().item() for (k, a), (j, b) in pairs if k == j))
    """
    name, difference = run_without_hf_norms(code, tmp_path).split()
    assert name == "BertNormForMaskedLM" and float(difference) == 0


def resident_file_kib() -> int:
    """This process's resident memory that maps files (`RssFile`), in KiB."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("RssFile:")).split()[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_mapped_weights_leave_memory_once_used(tmp_path):
    """A model on mapped weights holds their pages once it ran; inside `pages_dropped_after_use` every module gives
    its pages back after its forward pass, with unchanged outputs."""
    config = transformers.BertConfig(vocab_size=99, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=4096, max_position_embeddings=40)  # fmt: skip
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(tmp_path / "source", max_shard_size="5MB")  # 2 x 9 MB of Linears
    weights = MappedWeights(tmp_path / "source")
    model = transformers.BertModel.from_pretrained(None, config=config, state_dict=weights.tensors).eval()
    assert all(weights.file_index(tensor) is not None for tensor in model.state_dict().values())
    input_ids = torch.randint(5, 99, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), pages_dropped_after_use(weights):
        model(input_ids=input_ids)  # the libraries' own pages, touched once
        before = resident_file_kib()
        dropped = model(input_ids=input_ids).last_hidden_state
        assert resident_file_kib() - before < 2048
    with torch.no_grad():
        kept = model(input_ids=input_ids).last_hidden_state
    assert resident_file_kib() - before > 15 * 1024 and torch.equal(kept, dropped)
    for tensor in model.state_dict().values():
        weights.drop_pages(tensor)
    assert resident_file_kib() - before < 2048


def test_mapped_weights_read_every_dtype_as_from_pretrained(tmp_path):
    """Float32 tensors are views of the file, other floating dtypes float32 copies, integers as stored, empty and
    oddly placed tensors too."""
    tensors = {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(4).bfloat16(),
        "ids": torch.arange(6),
        "empty": torch.ones(0),
    }
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text("{}")
    weights = MappedWeights(tmp_path)
    read = weights.tensors
    assert torch.equal(read["f32"], tensors["f32"]) and weights.file_index(read["f32"]) == 0
    assert read["bf16"].dtype == torch.float32 and torch.equal(read["bf16"], tensors["bf16"].float())
    assert read["ids"].dtype == torch.int64 and torch.equal(read["ids"], tensors["ids"]) and read["empty"].shape == (0,)


def test_sharing_weights_is_refused_where_the_conversion_edits_them():
    torch.manual_seed(0)
    model = transformers.BertModel(
        transformers.BertConfig(vocab_size=99, max_position_embeddings=40, intermediate_size=64, **SIZES)
    )
    with pytest.raises(ConversionError, match="share_weights=True needs an exact conversion"):
        convert_model(model, "dyt", ["a text"], share_weights=True)
    with pytest.raises(ConversionError, match="share_weights=True needs an exact conversion"):
        convert_model(model, "dtn", dtn_gate_init=0.5, share_weights=True)


def test_saving_over_a_copied_sharded_folder_leaves_no_stale_index(tmp_path):
    """`heal` copies the converted folder's files, then saves the healed model over them in one file: the copied
    shards and their index must go, or hf-norms (which reads the index first) refuses the healed folder."""
    source = stock_source(tmp_path / "source", "BertForMaskedLM", torch.float32, "40KB")
    convert(source, "sepnorm", tmp_path / "sharded")
    healed = tmp_path / "healed"
    shutil.copytree(tmp_path / "sharded", healed)
    model = hf_norms.BertNormForMaskedLM.from_pretrained(healed)
    save_checkpoint(model, None, healed)
    assert sorted(path.name for path in healed.glob("*safetensors*")) == ["model.safetensors"]
    assert check_weights(healed, allow_pickle=False)[1].keys() == stored(healed)["model.safetensors"].keys()


def test_the_finiteness_check_sums_first_and_checks_values_where_the_sum_is_not_finite():
    """Huge finite weights whose sum overflows are accepted; NaN, +inf and -inf are refused, naming the tensor."""
    layer = torch.nn.Linear(4, 2)
    with torch.no_grad():
        layer.weight.fill_(3e38)
    assert not torch.isfinite(layer.weight.sum())
    check_finite_weights(layer, "huge")
    for value in (float("nan"), float("inf"), -float("inf")):
        with torch.no_grad():
            layer.bias[1] = value
        with pytest.raises(ConversionError, match="tensor 'bias' holds NaN or infinite values"):
            check_finite_weights(layer, "broken")
