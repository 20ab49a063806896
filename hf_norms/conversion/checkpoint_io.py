"""Reading a source checkpoint safely and writing an output folder atomically.

- `resolve_source` turns a local folder or a Hub id (fetched through `HF_ENDPOINT`) into a local folder and checks its
  weights before anything loads them: safetensors files must be complete and well formed, and pickle-only
  checkpoints (`pytorch_model.bin`) need an explicit opt-in, since unpickling can run code.
- the source's config is checked against the weights' headers before any tensor is allocated (`config_checks`).
"""

from __future__ import annotations

import logging
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConversionError
from ..norms.registry import STOCK
from ..output_folders import move_aside
from ..readers import JSON_LIMIT, parse_json, read_json_object
from .arguments import check_source_name
from .config_checks import check_source_config
from .trainer_state import check_trainer_state, check_training_files

logger = logging.getLogger(__name__)

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
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
        if header_size > min(size - 8, JSON_LIMIT):
            raise ConversionError(
                f"{path} is truncated or corrupt (header of {header_size} bytes in a {size}-byte file)."
            )
        header = parse_json(
            stream.read(header_size), f"{path}'s safetensors header", "the file is corrupt: re-download it"
        )
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
# Trainer checkpoints to resume from
# --------------------------------------------------------------------------------------------------------------------


def check_trainer_checkpoint(checkpoint: Path, model) -> None:
    """Refuse to resume from a Trainer `checkpoint` folder that is not `model`'s: a `trainer_state.json` that is not a
    state the Trainer saved (`trainer_state`), weights that are truncated or corrupt or do not have `model`'s tensor
    names and shapes (another norm_type's, another size's), a config whose norms differ, or an optimizer, scheduler
    or random state file that is not a torch state of this model's training."""
    fix = "remove that checkpoint folder, or start again without resuming"
    check_trainer_state(checkpoint / "trainer_state.json", fix)
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
    check_training_files(checkpoint, model, fix)


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
