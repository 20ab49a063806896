"""What a conversion starts from: a LayerNorm model of a supported family, in a checkpoint folder or in memory.

`inspect_source` (a checkpoint folder) and `describe_model` (a model object) say which family and head it is and which
hf-norms class converts it; `load_teacher` and `load_processor` load a folder's model and tokenizer or image
processor. Sentence-transformers checkpoints keep their pipeline files (`modules.json`, pooling, normalisation) through
`copy_sentence_transformers_files`.
"""

from __future__ import annotations

import dataclasses
import difflib
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers
from torch import nn

from ..errors import ConversionError, one_line
from ..models.family_registry import FAMILIES, MODEL_CLASSES, family_names, family_of
from ..models.family_spec import FamilySpec
from ..norms.registry import STOCK
from ..output_folders import copy_checkpoint_files
from ..readers import read_json, read_json_object
from .checkpoint_io import SAFETENSORS_INDEX, SourceCheckpoint
from .config_checks import check_model_fits

PROCESSOR_FILES = {
    "text": ("tokenizer.json", "tokenizer_config.json", "vocab.txt"),
    "image": ("preprocessor_config.json", "processor_config.json"),
}
# The JSON files transformers reads a tokenizer or image processor from: each is read by `readers.read_json_object`
# (size, nesting, an object) before transformers reads it.
PROCESSOR_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                        "preprocessor_config.json", "processor_config.json")  # fmt: skip
# The files a sentence-transformers model keeps beside its transformer (its modules' folders are named in modules.json)
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
DEFAULT_MAX_LENGTH = 128  # tokens per text where the source does not say at what length it is used


@dataclasses.dataclass(frozen=True)
class SourceModel:
    """What a source holds: its family, the class name of its head, the matching hf-norms class name, and whether a
    bare model has a pooler."""

    family: FamilySpec
    architecture: str
    norm_architecture: str
    has_pooler: bool

    @property
    def modality(self) -> str:
        return self.family.modality

    @property
    def pooler_option(self) -> dict[str, bool]:
        """`add_pooling_layer=False` for a bare model saved without a pooler in a family whose bare model takes that
        option (ViT, DeiT, BERT, RoBERTa), else nothing (DINOv2 has no pooler and takes no such option)."""
        without = self.architecture.endswith("Model") and not self.has_pooler and self.family.pooler_option
        return {"add_pooling_layer": False} if without else {}


def source_model(source: str, model_type: str | None, norm_type: str, architecture: str | None, has_pooler: bool):
    """The `SourceModel` of a model of `model_type` and head `architecture`; refuses what hf-norms cannot convert."""
    family = family_of(model_type)
    if family is None:
        raise unsupported_model_type(source, model_type)
    if norm_type != STOCK:
        raise ConversionError(f"{source} already uses norm_type={norm_type!r}; convert from a LayerNorm model.")
    prefix = family.class_prefix
    architecture = architecture or f"{prefix}{'Norm' if model_type == family.model_type else ''}Model"
    stock_name = architecture.replace(f"{prefix}Norm", prefix, 1)
    norm_name = stock_name.replace(prefix, f"{prefix}Norm", 1)
    if not stock_name.startswith(prefix) or norm_name not in MODEL_CLASSES:
        supported = sorted(cls.__name__.replace("Norm", "", 1) for cls in family.heads)
        raise ConversionError(
            f"{source}: architecture {architecture!r} is not a {family.display_name} head hf-norms converts (those "
            f"are {supported}): load it with transformers' {prefix}Model.from_pretrained, save that with "
            "save_pretrained and convert the saved folder."
        )
    return SourceModel(family=family, architecture=architecture, norm_architecture=norm_name, has_pooler=has_pooler)


def unsupported_model_type(source: str, model_type: object) -> ConversionError:
    """The one line for a model_type of no family: for a composite model that holds a family's model (CLIP's
    `vision_config`), how to convert that part; else the families and model types hf-norms converts."""
    known = isinstance(model_type, str) and model_type in transformers.CONFIG_MAPPING
    composite = transformers.CONFIG_MAPPING[model_type] if known else None
    for key, part in getattr(composite, "sub_configs", {}).items():
        family = family_of(part.model_type)
        if family is not None:
            return ConversionError(
                f"{source}: model_type {model_type!r} is not a family hf-norms converts, but its {key} is "
                f"{family.display_name}'s: load it with transformers' {family.class_prefix}Model.from_pretrained, "
                "save that with save_pretrained and convert the saved folder."
            )
    supported = sorted(t for spec in FAMILIES.values() for t in (spec.stock_model_type, spec.model_type))
    nearest = difflib.get_close_matches(model_type, supported, n=1) if isinstance(model_type, str) else []
    hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
    return ConversionError(
        f"{source}: model_type {model_type!r} is not supported{hint}; hf-norms converts {family_names()} models "
        f"(model_type one of {supported})."
    )


def inspect_source(checkpoint: SourceCheckpoint) -> SourceModel:
    """Family and classes of a source checkpoint folder."""
    config = read_json_object(checkpoint.path / "config.json", "the checkpoint's config must be a JSON object")
    return source_model(
        checkpoint.source,
        config.get("model_type"),
        config.get("norm_type", STOCK),
        (config.get("architectures") or [None])[0],
        has_pooler=any(".pooler." in f".{key}" for key in checkpoint.weight_keys),
    )


def describe_model(model: nn.Module) -> SourceModel:
    """Family and classes of a model object (a stock transformers class, or an hf-norms one with LayerNorms)."""
    config = getattr(model, "config", None)
    if config is None:
        raise ConversionError(f"{type(model).__name__} is not a transformers model (it has no config).")
    base = getattr(model, "base_model", model)
    return source_model(
        type(model).__name__,
        config.model_type,
        getattr(config, "norm_type", STOCK),
        type(model).__name__,
        has_pooler=getattr(base, "pooler", None) is not None,
    )


@contextmanager
def quiet_transformers():
    """Silence transformers' load reports and progress bars while converting (the conversion checks loading itself)."""
    previous, bars = transformers.logging.get_verbosity(), transformers.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(previous)
        if bars:
            transformers.logging.enable_progress_bar()


def load_teacher(
    checkpoint: SourceCheckpoint, source: SourceModel, state_dict: dict[str, torch.Tensor] | None = None
) -> nn.Module:
    """The source model as it is (stock transformers class, or an hf-norms class with norm_type layernorm), in eval;
    its config is first checked to fit the stored weights (`check_model_fits`), so nothing oversized is allocated.
    With `state_dict` (the checkpoint's tensors as stored, `sharded.MappedWeights`), the model takes those tensors
    (renamed as from the files) instead of reading the files."""
    model_class = MODEL_CLASSES.get(source.architecture) or getattr(transformers, source.architecture)
    with quiet_transformers():
        config = model_class.config_class.from_pretrained(checkpoint.path)
    check_model_fits(model_class, config, checkpoint.weight_shapes, str(checkpoint.path / "config.json"))
    torch.manual_seed(0)
    with quiet_transformers():
        if state_dict is not None:
            model = model_class.from_pretrained(
                None, config=config, state_dict=state_dict, dtype=torch.float32, **source.pooler_option
            )
        else:
            model = model_class.from_pretrained(
                checkpoint.path, dtype=torch.float32, use_safetensors=not checkpoint.uses_pickle, **source.pooler_option
            )
    return model.eval()


def load_processor(path: Path, modality: str):
    """The tokenizer (text) or image processor (images) saved with the checkpoint, or None when it has none; one that
    does not load is a `ConversionError`, never skipped.

    Its files are looked for first: transformers would otherwise build an empty default tokenizer for a BERT folder.
    """
    if not any((path / name).is_file() for name in PROCESSOR_FILES[modality]):
        return None
    kind = "tokenizer" if modality == "text" else "image processor"
    fix = f"restore the {kind} files the checkpoint was published with, or remove them"
    for name in PROCESSOR_JSON_FILES:
        if (path / name).is_file():
            read_json_object(path / name, fix)
    loader = transformers.AutoTokenizer if modality == "text" else transformers.AutoImageProcessor
    try:
        with quiet_transformers():
            return loader.from_pretrained(path)
    except Exception as error:  # whatever its files make a loader raise (the Rust tokenizers raise plain Exceptions)
        raise ConversionError(f"The {kind} of {path} does not load ({one_line(error)}); {fix}.") from None


def sentence_transformers_files(folder: Path) -> list[str]:
    """The sentence-transformers files of a checkpoint folder (relative paths; empty for a plain transformers one):
    its configuration files and the folders of the modules `modules.json` names (pooling, dense layers, ...). A module
    path that leads out of the folder (`..`, an absolute path) is a `ConversionError`; `""` and `.` name the folder
    itself (the transformer), whose files are not copied."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return []
    modules = read_json(modules_file, "re-download the sentence-transformers files")
    if not isinstance(modules, list) or not all(isinstance(module, dict) for module in modules):
        raise ConversionError(f"{modules_file} is not a sentence-transformers module list; re-download it.")
    folders = [module["path"] for module in modules if isinstance(module.get("path"), str)]
    for path in folders:
        if Path(path).is_absolute() or ".." in Path(path).parts or "\\" in path:
            raise ConversionError(
                f"{modules_file} names the module path {path!r}, which leads out of {folder}; a module's files lie "
                "in a folder inside the model's. Correct modules.json, or re-download it."
            )
    names = [name for name in SENTENCE_TRANSFORMERS_FILES if (folder / name).is_file()]
    return names + [path for path in folders if path not in ("", ".") and Path(path).name == path
                    and (folder / path).is_dir()]  # fmt: skip


def check_sentence_transformers_files(folder: Path) -> list[str]:
    """`sentence_transformers_files(folder)`, after reading each of their JSON files but `modules.json` (the configs
    of the model and of each module, `1_Pooling/config.json`, ...) with the bounded reader: each must be a JSON
    object. Returns the files."""
    names = sentence_transformers_files(folder)
    for name in names:
        files = sorted((folder / name).glob("*.json")) if (folder / name).is_dir() else [folder / name]
        for path in files:
            if path.name != "modules.json" and path.suffix == ".json":
                read_json_object(path, "re-download the sentence-transformers files")
    return names


def copy_sentence_transformers_files(source: Path, target: Path) -> list[str]:
    """Copy the sentence-transformers files of `source` into `target`, so the converted model stays a
    sentence-transformers model (same pooling, normalisation, max_seq_length and prompts); returns what was copied.
    No link out of `source` (or, for a Hub download, its cache folder: `output_folders.link_root`) is followed."""
    copied = sentence_transformers_files(source)
    copy_checkpoint_files(source, target, copied)
    return copied


def sentence_transformers_max_length(folder: Path) -> int | None:
    """The `max_seq_length` a sentence-transformers model in `folder` runs at (`sentence_bert_config.json`), or None
    where the folder is no such model or the file does not set it."""
    config_file = folder / "sentence_bert_config.json"
    if not (folder / "modules.json").is_file() or not config_file.is_file():
        return None
    length = read_json_object(config_file, "re-download the sentence-transformers files").get("max_seq_length")
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 1):
        raise ConversionError(f"{config_file}: max_seq_length must be a positive integer or null, got {length!r}.")
    return length


def own_max_length(folder: Path) -> int:
    """The tokens per text a source is used with, at which a conversion measures it: a sentence-transformers model's
    `max_seq_length`, else `DEFAULT_MAX_LENGTH`."""
    return sentence_transformers_max_length(folder) or DEFAULT_MAX_LENGTH


def save_checkpoint(model: nn.Module, processor, folder: Path) -> None:
    """Weights (safetensors), config with the full auto_map, remote code files, and the tokenizer/image processor.

    Saved over a copy of a sharded checkpoint (`heal`), the copy's shards go (`save_pretrained` removes them) and so
    does their index, which it would leave naming files that no longer exist."""
    (folder / SAFETENSORS_INDEX).unlink(missing_ok=True)
    with quiet_transformers():
        model.save_pretrained(folder)
        if processor is not None:
            processor.save_pretrained(folder)
