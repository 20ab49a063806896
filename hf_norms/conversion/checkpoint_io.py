"""Reading a source checkpoint safely and writing an output folder atomically.

- `resolve_source` turns a local folder or a Hub id (fetched through `HF_ENDPOINT`) into a local folder and checks its
  weights before anything loads them: safetensors files must be complete and well formed, and pickle-only
  checkpoints (`pytorch_model.bin`) need an explicit opt-in, since unpickling can run code.
- `check_source_config` checks the config against the weights' headers before any tensor is allocated.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

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


class ConversionError(InputError):
    """A conversion or healing input is unusable; the message names the problem and the fix."""


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
    if local.exists():
        if not local.is_dir():
            raise ConversionError(f"Source {text!r} is a file; give the checkpoint folder that holds config.json.")
        if revision is not None:
            raise ConversionError(f"--revision applies to Hub ids only, but {text!r} is a local folder.")
        path, commit = local.resolve(), None
    elif looks_like_a_path(text) or not HUB_ID.match(text):
        raise ConversionError(
            f"There is no folder {str(local.resolve())!r}; give an existing checkpoint folder, or a Hub id 'org/name'."
        )
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


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in `path`; a `ConversionError` naming `what` when it is unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConversionError(f"{path} is not valid JSON ({error}); {what}.") from None
    if not isinstance(value, dict):
        raise ConversionError(f"{path} holds a JSON {type(value).__name__}, not an object; {what}.")
    return value


def check_weights(folder: Path, allow_pickle: bool) -> tuple[bool, dict[str, tuple[int, ...] | None]]:
    """Check the weights of a checkpoint folder; returns (uses pickle, {tensor name: shape}).

    Safetensors files (single or sharded) are checked for a complete header and data section; an index may name only
    files inside the folder. A folder with only `pytorch_model.bin` weights is refused unless `allow_pickle`.
    """
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = read_json_object(index, "re-download the checkpoint").get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConversionError(f"{index} has no weight_map of file names; re-download the checkpoint.")
        shapes: dict[str, tuple[int, ...] | None] = {}
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard or shard in (".", ".."):
                raise ConversionError(f"{index} names the file {shard!r} outside the checkpoint folder; refused.")
            shapes |= safetensors_shapes(folder / shard)
        return False, shapes
    if (folder / SAFETENSORS_FILE).is_file():
        return False, safetensors_shapes(folder / SAFETENSORS_FILE)
    pickles = [name for name in PICKLE_FILES if (folder / name).is_file()]
    if not pickles:
        raise ConversionError(f"{folder} holds no model weights (model.safetensors or pytorch_model.bin).")
    if not allow_pickle:
        raise ConversionError(
            f"{folder} holds only pickle weights ({pickles[0]}); loading a pickle can run arbitrary code. Convert it "
            "to safetensors, or pass --allow-pickle (allow_pickle=True) if you trust its origin."
        )
    return True, dict.fromkeys(_pickle_keys(folder / pickles[0]))


def _pickle_keys(path: Path) -> set[str]:
    """Tensor names of an allowed pickle checkpoint: from its index, or its state dict loaded with `weights_only`."""
    import torch

    if path.name.endswith(".index.json"):
        return set(read_json_object(path, "re-download the checkpoint").get("weight_map") or {})
    try:
        return set(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as error:
        raise ConversionError(f"{path} cannot be read as a PyTorch state dict ({error}); re-download it.") from None


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """`{tensor name: shape}` of a safetensors file, after checking that its header parses and its data is all there.

    Layout: 8-byte little-endian header length N, N bytes of JSON `{name: {dtype, shape, data_offsets}}`, then the
    data, whose size must equal the largest end offset, and each tensor's byte range must fit its dtype and shape.
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
        except ValueError as error:
            raise ConversionError(f"{path} has a corrupt safetensors header ({error}); re-download it.") from None
    if not isinstance(header, dict):
        raise ConversionError(f"{path} has a safetensors header that is not a JSON object; the file is corrupt.")
    tensors = {name: info for name, info in header.items() if name != "__metadata__"}
    data_size = size - 8 - header_size
    end, shapes = 0, {}
    for name, info in tensors.items():
        try:
            start, stop = info["data_offsets"]
            shape = tuple(int(dim) for dim in info["shape"])
            expected = math.prod(shape) * DTYPE_SIZES[info["dtype"]]
        except (KeyError, TypeError, ValueError) as error:
            raise ConversionError(
                f"{path}: tensor {name!r} has a corrupt header entry ({error}); re-download it."
            ) from None
        if stop - start != expected or start < 0 or min(shape, default=0) < 0:
            raise ConversionError(f"{path}: tensor {name!r} has inconsistent offsets; the file is corrupt.")
        end, shapes[name] = max(end, stop), shape
    if end != data_size:
        raise ConversionError(
            f"{path} is truncated or corrupt: its header describes {end} bytes of tensor data, the file holds "
            f"{data_size}; re-download it."
        )
    return shapes


# --------------------------------------------------------------------------------------------------------------------
# The config against the weights, before anything is built
# --------------------------------------------------------------------------------------------------------------------

LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.")
NORM_WEIGHTS = ("LayerNorm.weight", "layernorm.weight", "layernorm_before.weight", "norm1.weight")
POSITIVE_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def check_source_config(folder: Path, shapes: dict[str, tuple[int, ...] | None]) -> dict:
    """The checkpoint's `config.json`, after checking it describes a model that fits its weights' headers.

    Sizes must be positive integers, the heads must divide the hidden size and `layer_norm_eps` must be a positive
    number; the number of layers and the norms' width must match the tensors stored (so a config that asks for a
    million layers is refused before anything is allocated). Returns the config.
    """
    config = read_json_object(folder / "config.json", "the checkpoint's config must be a JSON object")
    where = folder / "config.json"
    for key in POSITIVE_SIZES:
        value = config.get(key)
        if key in config and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
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
