"""Reading a source checkpoint safely and writing an output folder atomically.

- `resolve_source` turns a local folder or a Hub id (fetched through `HF_ENDPOINT`) into a local folder and checks its
  weights before anything loads them: safetensors files must be complete and well formed, and pickle-only
  checkpoints (`pytorch_model.bin`) need an explicit opt-in, since unpickling can run code.
- `staged_output` builds an output folder in a hidden sibling and moves it into place only when complete, so an
  error never leaves a half-written checkpoint, and an existing folder is replaced only when asked.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Iterator
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
    that was downloaded (None for a local folder); `weight_keys` are the tensor names stored in its weights.
    """

    path: Path
    source: str
    revision: str | None
    uses_pickle: bool
    weight_keys: frozenset[str]


def resolve_source(
    source: str | os.PathLike, revision: str | None = None, allow_pickle: bool = False
) -> SourceCheckpoint:
    """A local folder or a Hub model id, downloaded if needed, with its weights checked (see module docstring)."""
    text = str(source)
    local = Path(text).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ConversionError(f"Source {text!r} is a file; give the checkpoint folder that holds config.json.")
        if revision is not None:
            raise ConversionError(f"--revision applies to Hub ids only, but {text!r} is a local folder.")
        path, commit = local.resolve(), None
    elif HUB_ID.match(text) and not text.startswith((".", "/")):
        path, commit = _download(text, revision)
    else:
        raise ConversionError(f"Source {text!r} is neither an existing folder nor a Hub model id like 'org/name'.")
    if not (path / "config.json").is_file():
        raise ConversionError(f"{path} has no config.json: it is not a transformers checkpoint folder.")
    uses_pickle, keys = check_weights(path, allow_pickle)
    return SourceCheckpoint(path=path, source=text, revision=commit, uses_pickle=uses_pickle, weight_keys=keys)


def _download(repo_id: str, revision: str | None) -> tuple[Path, str]:
    """Fetch the files a conversion reads from the Hub at `HF_ENDPOINT`; returns the folder and the commit sha."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        commit = HfApi().model_info(repo_id, revision=revision).sha
        folder = snapshot_download(
            repo_id,
            revision=commit,
            allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt", "*.model", "*.py"],
        )
    except RepositoryNotFoundError as error:
        raise ConversionError(
            f"Hub repository {repo_id!r} was not found at {_endpoint()}: check the id, HF_ENDPOINT and HF_TOKEN."
        ) from error
    except RevisionNotFoundError as error:
        raise ConversionError(f"Revision {revision!r} of {repo_id!r} does not exist on {_endpoint()}.") from error
    except HfHubHTTPError as error:
        raise ConversionError(f"Downloading {repo_id!r} from {_endpoint()} failed: {error}") from error
    return Path(folder), commit


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def check_weights(folder: Path, allow_pickle: bool) -> tuple[bool, frozenset[str]]:
    """Check the weights of a checkpoint folder; returns (uses pickle, tensor names).

    Safetensors files (single or sharded) are checked for a complete header and data section. A folder with only
    `pytorch_model.bin` weights is refused unless `allow_pickle`.
    """
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError) as error:
            raise ConversionError(f"{index} is not a valid safetensors index: {error}; re-download it.") from error
        keys: set[str] = set()
        for shard in shards:
            keys |= safetensors_keys(folder / shard)
        return False, frozenset(keys)
    if (folder / SAFETENSORS_FILE).is_file():
        return False, frozenset(safetensors_keys(folder / SAFETENSORS_FILE))
    pickles = [name for name in PICKLE_FILES if (folder / name).is_file()]
    if not pickles:
        raise ConversionError(f"{folder} holds no model weights (model.safetensors or pytorch_model.bin).")
    if not allow_pickle:
        raise ConversionError(
            f"{folder} holds only pickle weights ({pickles[0]}); loading a pickle can run arbitrary code. Convert it "
            "to safetensors, or pass --allow-pickle (allow_pickle=True) if you trust its origin."
        )
    return True, frozenset(_pickle_keys(folder / pickles[0]))


def _pickle_keys(path: Path) -> set[str]:
    """Tensor names of an allowed pickle checkpoint: from its index, or its state dict loaded with `weights_only`."""
    import torch

    if path.name.endswith(".index.json"):
        return set(json.loads(path.read_text())["weight_map"])
    try:
        return set(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as error:
        raise ConversionError(f"{path} cannot be read as a PyTorch state dict ({error}); re-download it.") from error


def safetensors_keys(path: Path) -> set[str]:
    """Tensor names of a safetensors file, after checking that its header parses and its data is all there.

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
            raise ConversionError(f"{path} has a corrupt safetensors header ({error}); re-download it.") from error
    tensors = {name: info for name, info in header.items() if name != "__metadata__"}
    data_size = size - 8 - header_size
    end = 0
    for name, info in tensors.items():
        try:
            start, stop = info["data_offsets"]
            count = 1
            for dim in info["shape"]:
                count *= dim
            expected = count * DTYPE_SIZES[info["dtype"]]
        except (KeyError, TypeError, ValueError) as error:
            raise ConversionError(f"{path}: tensor {name!r} has a corrupt header entry; re-download it.") from error
        if stop - start != expected or start < 0:
            raise ConversionError(f"{path}: tensor {name!r} has inconsistent offsets; the file is corrupt.")
        end = max(end, stop)
    if end != data_size:
        raise ConversionError(
            f"{path} is truncated or corrupt: its header describes {end} bytes of tensor data, the file holds "
            f"{data_size}; re-download it."
        )
    return set(tensors)


@contextlib.contextmanager
def staged_output(output: str | os.PathLike, overwrite: bool, protected: Path | None = None) -> Iterator[Path]:
    """Yield an empty staging folder beside `output`; on success it replaces `output`, on error it is removed.

    An existing `output` is refused unless `overwrite`. `protected` (the source checkpoint) may be neither `output`
    nor inside it, so a conversion can never replace its own source.
    """
    target = Path(output).expanduser().resolve()
    if protected is not None:
        source = protected.resolve()
        if target == source or source.is_relative_to(target) or target.is_relative_to(source):
            raise ConversionError(f"Output {target} overlaps the source {source}; choose another output folder.")
    if target.exists() and not overwrite:
        raise ConversionError(f"Output {target} already exists; pass --overwrite (overwrite=True) to replace it.")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staging.chmod(0o755)
    try:
        yield staging
        replace_folder(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def replace_folder(staging: Path, target: Path) -> None:
    """Move the complete `staging` folder to `target`, replacing an existing `target` only once `staging` is in place."""
    if not target.exists():
        os.replace(staging, target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.replace(target, retired / "folder")
    os.replace(staging, target)
    shutil.rmtree(retired, ignore_errors=True)
