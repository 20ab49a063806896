"""Reading a source checkpoint safely and writing an output folder atomically.

- `resolve_source` turns a local folder or a Hub id (fetched through `HF_ENDPOINT`) into a local folder and checks its
  weights before anything loads them: safetensors files must be complete and well formed, and pickle-only
  checkpoints (`pytorch_model.bin`) need an explicit opt-in, since unpickling can run code.
- `check_source_config` checks the config against the weights' headers before any tensor is allocated.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConversionError
from ..models.norm_registry import STOCK
from ..output_folders import move_aside
from ..readers import read_json_object

logger = logging.getLogger(__name__)

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
# Bytes per element of each safetensors dtype.
DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


@dataclass(frozen=True)
class SourceCheckpoint:
    """A source checkpoint on local disk.

    `path` is the folder to load; `source` is what the user gave (folder or Hub id); `revision` is the Hub commit
    that was downloaded (None for a local folder); `weight_shapes` maps the tensor names stored in its weights to
    their shapes (None for a pickle, whose shapes are not read before loading).
    """

    path: Path
    source: str
    revision: str | None
    uses_pickle: bool
    weight_shapes: dict[str, tuple[int, ...] | None]

    @property
    def weight_keys(self) -> frozenset[str]:
        return frozenset(self.weight_shapes)


def looks_like_a_path(text: str) -> bool:
    """Whether `text` names a local folder rather than a Hub id `org/name`: it starts with `.`, `/` or `~`, ends with a
    separator, has no `/` or more than one, or holds a backslash."""
    return text.startswith((".", "/", "~")) or text.endswith(("/", os.sep)) or text.count("/") != 1 or "\\" in text


def check_source_name(text: str) -> bool:
    """Whether the source `text` is a local folder (True) or a Hub id (False); anything else, a file or a path that
    does not exist, is a `ConversionError` naming it. Reads no file and imports nothing, so the command line refuses
    a mistyped path before it imports torch."""
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ConversionError(f"Source {text!r} is a file; give the checkpoint folder that holds config.json.")
        return True
    if looks_like_a_path(text) or not HUB_ID.match(text):
        raise ConversionError(
            f"There is no folder {str(local.resolve())!r}; give an existing checkpoint folder, or a Hub id 'org/name'."
        )
    return False


def resolve_source(
    source: str | os.PathLike,
    revision: str | None = None,
    allow_pickle: bool = False,
    token: str | bool | None = None,
) -> SourceCheckpoint:
    """A local folder or a Hub model id, downloaded if needed, with its config and weights checked before anything
    loads them (see the module docstring). A name that looks like a path is never sent to the Hub."""
    text = str(source)
    local = Path(text).expanduser()
    if check_source_name(text):
        if revision is not None:
            raise ConversionError(f"--revision applies to Hub ids only, but {text!r} is a local folder.")
        path, commit = local.resolve(), None
    else:
        path, commit = _download(text, revision, token)
    if not (path / "config.json").is_file():
        raise ConversionError(f"{path} has no config.json: it is not a transformers checkpoint folder.")
    uses_pickle, shapes = check_weights(path, allow_pickle)
    check_source_config(path, shapes)
    return SourceCheckpoint(path=path, source=text, revision=commit, uses_pickle=uses_pickle, weight_shapes=shapes)


def _download(repo_id: str, revision: str | None, token: str | bool | None) -> tuple[Path, str]:
    """Fetch the files a conversion reads from the Hub at `HF_ENDPOINT`; returns the folder and the commit sha."""
    import httpx2
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        commit = HfApi(token=token).model_info(repo_id, revision=revision).sha
        folder = snapshot_download(
            repo_id,
            revision=commit,
            allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt", "*.model", "*.py"],
            token=token,
        )
    except RepositoryNotFoundError:
        raise ConversionError(
            f"There is no local folder {repo_id!r}, and the Hub at {_endpoint()} has no repository {repo_id!r} "
            "(or it is private): check the name, HF_ENDPOINT and the token."
        ) from None
    except RevisionNotFoundError:
        raise ConversionError(f"Revision {revision!r} of {repo_id!r} does not exist on {_endpoint()}.") from None
    except OfflineModeIsEnabled:
        raise ConversionError(
            f"{repo_id!r} is not a local folder, and HF_HUB_OFFLINE=1 forbids downloading it from the Hub."
        ) from None
    except (HfHubHTTPError, httpx2.HTTPError, OSError) as error:
        raise ConversionError(
            f"Downloading {repo_id!r} from {_endpoint()} failed ({type(error).__name__}: {str(error).splitlines()[0]}); "
            "check the network and HF_ENDPOINT, or give a local folder."
        ) from None
    return Path(folder), commit


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def check_weights(folder: Path, allow_pickle: bool) -> tuple[bool, dict[str, tuple[int, ...] | None]]:
    """Check the weights of a checkpoint folder; returns (uses pickle, {tensor name: shape}).

    Safetensors files (single or sharded) are checked for a complete header and data section; an index may name only
    files inside the folder. A folder with only `pytorch_model.bin` weights is refused unless `allow_pickle`.
    """
    files = safetensors_files(folder)
    if files:
        shapes: dict[str, tuple[int, ...] | None] = {}
        for path in files:
            shapes |= safetensors_shapes(path)
        return False, shapes
    pickles = [name for name in PICKLE_FILES if (folder / name).is_file()]
    if not pickles:
        raise ConversionError(f"{folder} holds no model weights (model.safetensors or pytorch_model.bin).")
    if not allow_pickle:
        raise ConversionError(
            f"{folder} holds only pickle weights ({pickles[0]}); loading a pickle can run arbitrary code. Convert it "
            "to safetensors, or pass --allow-pickle (allow_pickle=True) if you trust its origin."
        )
    return True, dict.fromkeys(_pickle_keys(folder / pickles[0]))


def safetensors_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder, in order: the shards its index names (sorted by name), else
    `model.safetensors`, else none. An index may name only files inside the folder."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = read_json_object(index, "re-download the checkpoint").get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConversionError(f"{index} has no weight_map of file names; re-download the checkpoint.")
        for shard in set(weight_map.values()):
            if Path(shard).name != shard or shard in (".", ".."):
                raise ConversionError(f"{index} names the file {shard!r} outside the checkpoint folder; refused.")
        return [folder / shard for shard in sorted(set(weight_map.values()))]
    return [folder / SAFETENSORS_FILE] if (folder / SAFETENSORS_FILE).is_file() else []


def _pickle_keys(path: Path) -> set[str]:
    """Tensor names of an allowed pickle checkpoint: from its index, or its state dict loaded with `weights_only`."""
    import torch

    if path.name.endswith(".index.json"):
        return set(read_json_object(path, "re-download the checkpoint").get("weight_map") or {})
    try:
        return set(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as error:
        raise ConversionError(f"{path} cannot be read as a PyTorch state dict ({error}); re-download it.") from None


@dataclass(frozen=True)
class StoredTensor:
    """Where a tensor lies in a safetensors file: its dtype (`"F32"`, ...), shape, and byte range in the file."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    stop: int


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """`{tensor name: shape}` of a safetensors file, checked as `safetensors_layout` checks it."""
    return {name: stored.shape for name, stored in safetensors_layout(path).items()}


def safetensors_layout(path: Path) -> dict[str, StoredTensor]:
    """`{tensor name: StoredTensor}` of a safetensors file, after checking that its header parses and its data is all
    there.

    Layout: 8-byte little-endian header length N, N bytes of JSON `{name: {dtype, shape, data_offsets}}` (and an
    optional `__metadata__` object of strings), then the data. Each entry must have a known dtype, a shape of
    non-negative integers and integer offsets whose range fits that dtype and shape; the ranges must tile the data
    section without gap or overlap, as the safetensors library requires.
    """
    if not path.is_file():
        raise ConversionError(f"{path} is missing; the checkpoint is incomplete, re-download it.")
    size = path.stat().st_size
    with path.open("rb") as stream:
        head = stream.read(8)
        if len(head) < 8:
            raise ConversionError(f"{path} is truncated ({size} bytes): not a safetensors file; re-download it.")
        (header_size,) = struct.unpack("<Q", head)
        if header_size > size - 8:
            raise ConversionError(
                f"{path} is truncated or corrupt (header of {header_size} bytes in a {size}-byte file)."
            )
        try:
            header = json.loads(stream.read(header_size))
        except (ValueError, RecursionError) as error:  # RecursionError: arrays nested thousands deep
            reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
            raise ConversionError(f"{path} has a corrupt safetensors header ({reason}); re-download it.") from None
    if not isinstance(header, dict):
        raise ConversionError(f"{path} has a safetensors header that is not a JSON object; the file is corrupt.")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ConversionError(f"{path}: its __metadata__ is not an object of strings; the file is corrupt.")
    ranges, layout = [], {}
    for name, info in header.items():
        if name != "__metadata__":
            shape, start, stop = _header_entry(path, name, info)
            layout[name] = StoredTensor(info["dtype"], shape, 8 + header_size + start, 8 + header_size + stop)
            ranges.append((start, stop, name))
    end = 0
    for start, stop, name in sorted(ranges):
        if start != end:
            raise ConversionError(
                f"{path}: tensor {name!r} {'overlaps another' if start < end else 'leaves a gap'} in the data; "
                "the file is corrupt."
            )
        end = stop
    if end != size - 8 - header_size:
        raise ConversionError(
            f"{path} is truncated or corrupt: its header describes {end} bytes of tensor data, the file holds "
            f"{size - 8 - header_size}; re-download it."
        )
    return layout


def _header_entry(path: Path, name: str, info) -> tuple[tuple[int, ...], int, int]:
    """(shape, start, stop) of one header entry, refused when any part is malformed."""

    def integers(value) -> bool:
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)

    offsets, shape = (info.get("data_offsets"), info.get("shape")) if isinstance(info, dict) else (None, None)
    dtype = info.get("dtype") if isinstance(info, dict) else None
    if not (integers(offsets) and len(offsets) == 2 and integers(shape) and dtype in DTYPE_SIZES):
        raise ConversionError(
            f"{path}: tensor {name!r} has a corrupt header entry (dtype, shape and data_offsets must be a known dtype "
            "and lists of integers); re-download it."
        )
    start, stop = offsets
    if start < 0 or min(shape, default=0) < 0 or stop - start != math.prod(shape) * DTYPE_SIZES[dtype]:
        raise ConversionError(f"{path}: tensor {name!r} has inconsistent offsets; the file is corrupt.")
    return tuple(shape), start, stop


# --------------------------------------------------------------------------------------------------------------------
# The config against the weights, before anything is built
# --------------------------------------------------------------------------------------------------------------------

LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.")
NORM_WEIGHTS = ("LayerNorm.weight", "layernorm.weight", "layernorm_before.weight", "norm1.weight")
POSITIVE_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                  "max_position_embeddings", "type_vocab_size", "patch_size", "num_channels", "encoder_stride",
                  "num_labels")  # fmt: skip
PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "drop_path_rate")
NEW_PARAMETERS_ALLOWED = 10**6  # parameters a model may add to its checkpoint's beyond doubling it (a new head)


def check_source_config(folder: Path, shapes: dict[str, tuple[int, ...] | None]) -> dict:
    """The checkpoint's `config.json`, after checking its values (`check_config_values`) and that the number of layers
    and the norms' width match the tensors stored, so a config that asks for a million layers is refused before
    anything is allocated. Returns the config."""
    config = read_json_object(folder / "config.json", "the checkpoint's config must be a JSON object")
    where = folder / "config.json"
    check_config_values(config, where)
    check_size_fields(config, shapes, where)
    layers = {int(match.group(1)) for name in shapes if (match := LAYER_INDEX.search(name))}
    if "num_hidden_layers" in config and layers != set(range(config["num_hidden_layers"])):
        stored = f"layers 0-{max(layers)}" if layers else "no layers"
        raise ConversionError(
            f"{where} says num_hidden_layers={config['num_hidden_layers']}, but the weights hold {stored}; "
            "the config does not belong to these weights."
        )
    for name, shape in shapes.items():
        if shape is not None and name.endswith(NORM_WEIGHTS) and shape != (config.get("hidden_size", shape[0]),):
            raise ConversionError(
                f"{where} says hidden_size={config.get('hidden_size')}, but {name} has shape {list(shape)}; the "
                "config does not belong to these weights."
            )
    return config


def check_size_fields(config: dict, shapes: dict[str, tuple[int, ...] | None], where: str | Path) -> None:
    """Refuse, from the numbers alone, a size field whose table (`vocab_size`, `max_position_embeddings`,
    `num_labels`, ... rows of `hidden_size`) would hold more parameters than the model may add to its weights
    (`NEW_PARAMETERS_ALLOWED` beyond doubling them); `check_model_fits` makes the exact count later. Even building the
    config of `num_labels=10**6` takes seconds (its label names are formatted, and logged)."""
    if not shapes or any(shape is None for shape in shapes.values()) or not config.get("hidden_size"):
        return
    stored = sum(math.prod(shape) for shape in shapes.values())
    for key in ("vocab_size", "max_position_embeddings", "type_vocab_size", "num_labels"):
        rows = config.get(key, 0)
        if isinstance(rows, int) and rows * config["hidden_size"] > 2 * stored + NEW_PARAMETERS_ALLOWED:
            raise ConversionError(
                f"{where} says {key}={rows}: a table of {rows} x {config['hidden_size']} parameters, more than the "
                f"{stored:,} the weights hold; the config does not belong to these weights."
            )


def check_config_values(config: dict, where: str | Path) -> None:
    """Refuse a config whose values no model can be built from: sizes that are not positive integers, heads that do
    not divide the hidden size, a `layer_norm_eps` that is not a small positive number, dropout probabilities outside
    [0, 1), an activation transformers does not have, labels (`id2label`) that disagree with `num_labels`."""

    def positive_int(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    for key in (*POSITIVE_SIZES, "image_size"):
        value = config.get(key)
        sizes = value if key == "image_size" and isinstance(value, list) and value else [value]
        if key in config and value is not None and not all(positive_int(size) for size in sizes):
            raise ConversionError(f"{where}: {key} must be a positive integer, got {value!r}.")
    if config.get("hidden_size") and config.get("num_attention_heads"):
        if config["hidden_size"] % config["num_attention_heads"]:
            raise ConversionError(
                f"{where}: hidden_size {config['hidden_size']} is not divisible by num_attention_heads "
                f"{config['num_attention_heads']}."
            )
    eps = config.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise ConversionError(f"{where}: layer_norm_eps must be a small positive number, got {eps!r}.")
    for key in PROBABILITIES:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1):
            raise ConversionError(f"{where}: {key} must be a probability in [0, 1), got {value!r}.")
    check_activation(config.get("hidden_act", "gelu"), where)
    check_labels(config, where)


def check_activation(name, where: str | Path) -> None:
    from transformers.activations import ACT2FN

    if not isinstance(name, str) or name not in ACT2FN:
        raise ConversionError(
            f"{where}: hidden_act {name!r} is not an activation transformers has; use one of "
            f"{', '.join(sorted(ACT2FN)[:8])}, ..."
        )


def check_labels(config: dict, where: str | Path) -> None:
    """`id2label` maps 0..n-1 to names, with n = `num_labels` where both are given."""
    id2label = config.get("id2label")
    if id2label is None:
        return
    if not isinstance(id2label, dict) or sorted(map(str, id2label)) != sorted(map(str, range(len(id2label)))):
        raise ConversionError(f"{where}: id2label must map the class indices 0, 1, ... to names.")
    if "num_labels" in config and config["num_labels"] != len(id2label):
        raise ConversionError(
            f"{where}: id2label names {len(id2label)} classes but num_labels is {config['num_labels']}; make them "
            "agree (or remove num_labels)."
        )


def check_model_fits(model_class, config, stored: dict[str, tuple[int, ...] | None] | None, where: str) -> None:
    """Refuse, before any memory is allocated, a model that `config` would make too large: larger in float32 than this
    machine's memory, or, with `stored` (the checkpoint's tensor shapes), more than twice the parameters stored plus a
    new head's worth (`NEW_PARAMETERS_ALLOWED`), as `max_position_embeddings=10**7` or `num_labels=10**6` would.
    The model is built on the meta device, which holds shapes and no data."""
    import torch

    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    attention = config.num_hidden_layers * 4 * config.hidden_size**2  # fewer parameters than the model has
    if 4 * attention > memory:
        raise ConversionError(_too_large(where, attention, memory, "at least"))
    with torch.device("meta"):
        model = model_class(config)
    count = sum(parameter.numel() for parameter in model.parameters())
    if 4 * count > memory:
        raise ConversionError(_too_large(where, count, memory))
    stored_count = sum(math.prod(shape) for shape in (stored or {}).values() if shape is not None)
    known = bool(stored) and all(shape is not None for shape in stored.values())  # a pickle's shapes are not read
    if known and count > 2 * stored_count + NEW_PARAMETERS_ALLOWED:
        shapes = {shape for shape in stored.values()}
        name, parameter = max(
            ((n, p) for n, p in model.named_parameters() if tuple(p.shape) not in shapes),
            key=lambda item: item[1].numel(),
        )
        raise ConversionError(
            f"{where} describes a model of {count:,} parameters, but the weights hold {stored_count:,} (e.g. {name} "
            f"would be {list(parameter.shape)}): the config does not belong to these weights."
        )


def _too_large(where: str, count: int, memory: int, bound: str = "") -> str:
    return (
        f"{where} describes a model of {bound + ' ' if bound else ''}{count:,} parameters, {4 * count / 2**30:.1f} GiB "
        f"in float32, more than this machine's {memory / 2**30:.1f} GiB of memory; check the sizes in the config."
    )


# --------------------------------------------------------------------------------------------------------------------
# Trainer checkpoints to resume from
# --------------------------------------------------------------------------------------------------------------------


def check_trainer_checkpoint(checkpoint: Path, model) -> None:
    """Refuse to resume from a Trainer `checkpoint` folder that is not `model`'s: a `trainer_state.json` that is not a
    readable state, weights that are truncated or corrupt or do not have `model`'s tensor names and shapes (another
    norm_type's, another size's), a config whose norms differ, or an optimizer state that is not a complete file."""
    fix = "remove that checkpoint folder, or start again without resuming"
    state = read_json_object(checkpoint / "trainer_state.json", fix)
    if not isinstance(state.get("global_step"), int) or state["global_step"] < 0:
        raise ConversionError(f"{checkpoint / 'trainer_state.json'} has no global_step; {fix}.")
    config = read_json_object(checkpoint / "config.json", fix)
    for option, default in (("norm_type", STOCK), ("layer_norm_types", None)):
        if config.get(option, default) != getattr(model.config, option, default):
            raise ConversionError(
                f"{checkpoint} holds a model with {option}={config.get(option)!r}, but this run trains "
                f"{getattr(model.config, option, None)!r}: it belongs to another run; {fix}."
            )
    try:
        stored = check_weights(checkpoint, allow_pickle=False)[1]
    except ConversionError as error:
        raise ConversionError(f"{error} (in the checkpoint to resume from: {fix})") from None
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    tied = _tied_names(model)
    wrong = sorted(name for name in stored if expected.get(name) != stored[name])
    missing = sorted(name for name in expected.keys() - stored.keys() if not (tied.get(name, set()) & stored.keys()))
    if wrong or missing:
        raise ConversionError(
            f"{checkpoint} does not hold this model's weights ({listing_of(wrong, 'unexpected or of another shape')}"
            f"{'; ' if wrong and missing else ''}{listing_of(missing, 'missing')}): it belongs to another run; {fix}."
        )
    optimizer = checkpoint / "optimizer.pt"
    if optimizer.exists() and not zipfile.is_zipfile(optimizer):
        raise ConversionError(f"{optimizer} is truncated or corrupt; {fix}.")


def trainer_checkpoints(folder: Path) -> dict[int, Path]:
    """The Trainer checkpoint folders (`checkpoint-N`, not links) in `folder`, by step."""
    return {int(path.name.split("-")[1]): path for path in folder.glob("checkpoint-*")
            if re.fullmatch(r"checkpoint-\d+", path.name) and path.is_dir() and not path.is_symlink()}  # fmt: skip


def last_complete_checkpoint(folder: Path, model) -> Path | None:
    """The newest Trainer checkpoint in `folder` that `model` can resume from (`check_trainer_checkpoint`), passing
    over newer ones that fail the check (saves a killed run did not finish); None when there is none. When none
    passes, the newest one's reason is raised."""
    checkpoints = trainer_checkpoints(folder)
    newest_error = None
    for step in sorted(checkpoints, reverse=True):
        try:
            check_trainer_checkpoint(checkpoints[step], model)
        except ConversionError as error:
            newest_error = newest_error or error
            continue
        return checkpoints[step]
    if newest_error is not None:
        raise newest_error
    return None


def set_aside_newer_checkpoints(checkpoint: Path) -> None:
    """Move the checkpoints beside `checkpoint` with a later step (those `last_complete_checkpoint` passed over) aside,
    out of the Trainer's sight: its rotation would keep them as the most recent and delete what this run saves."""
    step = int(checkpoint.name.split("-")[1])
    for later, path in sorted(trainer_checkpoints(checkpoint.parent).items()):
        if later > step:
            logger.warning("%s is not a complete checkpoint (an interrupted save); resuming from %s", path, checkpoint)
            move_aside(path, f"interrupted-{path.name}")


def _tied_names(model) -> dict[str, set[str]]:
    """For each state-dict name, the other names that share its storage (tied weights are saved once)."""
    groups: dict[int, set[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(tensor.data_ptr(), set()).add(name)
    return {name: group - {name} for group in groups.values() for name in group}


def listing_of(names: list[str], what: str) -> str:
    if not names:
        return ""
    return f"{what}: {', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''}"
