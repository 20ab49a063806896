"""Device selection for convert, calibration and heal: the automatic choice, `--device`, bfloat16 by default only on
a GPU that supports it, and the teacher beside the student (in bfloat16 only where that keeps its outputs).

On a machine without a GPU the automatic choice is the CPU and `cuda` is refused; the same functions choose the GPU
where there is one, so these tests run the path a GPU takes up to the device itself."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import save_tiny_dyt_vit
from transformers import AutoTokenizer, BertConfig, BertModel

from hf_norms import cli
from hf_norms.conversion import devices, healing
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.conversion.data import Examples, encode_batches
from hf_norms.conversion.report import REPORT_JSON

pytestmark = pytest.mark.usefixtures("one_thread")
HAS_CUDA = torch.cuda.is_available()


def test_the_automatic_device_is_the_gpu_where_there_is_one_else_the_cpu():
    expected = torch.device("cuda", torch.cuda.current_device()) if HAS_CUDA else torch.device("cpu")
    assert devices.resolve_device("auto") == devices.resolve_device(None) == expected
    assert devices.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConversionError, match=r"device 'tpu' is not one of auto, cpu, cuda"):
        devices.resolve_device("tpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where torch sees no GPU")
def test_cuda_is_refused_without_a_gpu(tmp_path, capsys):
    with pytest.raises(ConversionError, match=r"torch sees no CUDA GPU here.*use device 'cpu' or 'auto'"):
        devices.resolve_device("cuda")
    # refused before anything is read: the heal folder and the convert source are empty folders (a missing one is
    # refused even earlier, before torch is imported)
    (tmp_path / "empty").mkdir()
    assert cli.main(["heal", str(tmp_path / "empty"), "--data", "x.txt", "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err
    assert cli.main(["heal", str(tmp_path / "missing"), "--data", "x.txt", "--device", "cuda"]) == 2
    assert "There is no folder" in capsys.readouterr().err
    command = ["convert", str(tmp_path / "empty"), "--norm-type", "dtn", "--output", str(tmp_path / "out")]
    assert cli.main([*command, "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_bf16_by_default_only_on_a_gpu_that_supports_it():
    cpu = torch.device("cpu")
    assert [devices.use_bf16(requested, cpu) for requested in (None, True, False)] == [False, True, False]
    if HAS_CUDA:
        assert devices.use_bf16(None, torch.device("cuda", 0)) is torch.cuda.is_bf16_supported()
    assert "cuda" in devices.DEVICE_CHOICES


@pytest.fixture(scope="module")
def tiny_bert_teacher(minilm_dir):
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    batch = encode_batches(tokenizer, Examples(["A short sentence.", "Another, longer sentence here."], "", "text"))
    return BertModel(config).eval(), batch[0]


def test_the_teacher_follows_the_student_in_bfloat16_only_where_its_outputs_stay_close(tiny_bert_teacher):
    teacher, batch = tiny_bert_teacher
    weights = {name: tensor.clone() for name, tensor in teacher.state_dict().items()}
    same, record = devices.training_teacher(teacher, torch.device("cpu"), False, batch)
    assert same is teacher and record == {"dtype": "float32", "bf16_cosine": None}
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())

    rounded, record = devices.training_teacher(teacher, torch.device("cpu"), True, batch)
    assert rounded is not teacher and {p.dtype for p in rounded.parameters()} == {torch.bfloat16}
    assert record["dtype"] == "bfloat16" and devices.TEACHER_BF16_MIN_COSINE <= record["bf16_cosine"] <= 1.0
    assert all(torch.equal(weights[name], tensor) for name, tensor in teacher.state_dict().items())  # untouched

    # Word embeddings offset by 300: LayerNorm removes the offset exactly in float32, but bfloat16 (8 significant
    # bits) rounds 300 + x to a few values, so the embeddings lose the tokens: the float32 teacher is kept.
    with torch.no_grad():
        teacher.embeddings.word_embeddings.weight.add_(300.0)
    kept, record = devices.training_teacher(teacher, torch.device("cpu"), True, batch)
    assert kept is teacher and record["dtype"] == "float32"
    assert record["bf16_cosine"] < devices.TEACHER_BF16_MIN_COSINE


@pytest.fixture(scope="module")
def tiny_vit_dyt(tmp_path_factory):
    return save_tiny_dyt_vit(tmp_path_factory.mktemp("devices"), 16, device="auto")


def test_heal_on_the_automatic_device_with_bf16_requested(tiny_vit_dyt, tmp_path):
    """bf16 asked for on the device the automatic choice gives (here the CPU): bfloat16 autocast through the Trainer,
    and a bfloat16 teacher, recorded in the report."""
    folder, images = tiny_vit_dyt
    report = healing.heal(folder, images, output=tmp_path / "healed", max_steps=2, batch_size=4, warmup_steps=0,
                          bf16=True, device="auto", progress=False)  # fmt: skip
    healing_record = report["healing"]
    assert healing_record["device"] == ("cuda" if HAS_CUDA else "cpu") and healing_record["bf16"] is True
    assert healing_record["teacher_dtype"] == "bfloat16" and healing_record["teacher_bf16_cosine"] >= 0.999
    assert healing_record["processes"] == 1 and healing_record["global_batch_size"] == 4
    assert healing_record["steps"] == 2 and healing_record["examples_per_second"] > 0
    assert json.loads((tmp_path / "healed" / REPORT_JSON).read_text())["healing"] == healing_record
