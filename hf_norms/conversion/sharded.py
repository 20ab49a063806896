"""Exact conversions of large checkpoints: the source's safetensors files read memory-mapped, each module's weights
dropped from memory once it has run, and the output written file by file like the source.

An exact conversion (`sepnorm`, `dtn`, `lape`, `layernorm` with their function-preserving options, not folded) keeps
every tensor of the source and adds a few small norm parameters, so `convert` holds no copy of the weights:

- `MappedWeights` maps the source's files: each float32 tensor is a view of its file's pages (other floating dtypes
  are converted to float32, as `from_pretrained(dtype=torch.float32)` does), and the converted model shares these
  tensors with the source model (`convert_model(share_weights=True)`);
- `pages_dropped_after_use` drops each module's pages from the process once the module has run (or once the
  weights' finiteness was checked): the fidelity is measured as always, but the process holds about one layer of
  weights instead of the checkpoint. The pages come back from the page cache (or the file) when next used, with the
  same values: the mapping is read-only, so nothing can have changed them;
- `save_like_source` writes what `save_pretrained` writes (config, remote code, the same tensors under the same keys),
  with the weights in files like the source's: output file i holds the tensors read from source file i plus the new
  norm parameters of the layers in it, and `model.safetensors.index.json` maps them when there is more than one.
"""

from __future__ import annotations

import bisect
import contextvars
import itertools
import json
import math
import mmap
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from ..models.transformers_internals import remove_tied_weights_from_state_dict
from .checkpoint_io import SAFETENSORS_FILE, SAFETENSORS_INDEX, StoredTensor, safetensors_files, safetensors_layout
from .sources import quiet_transformers

TORCH_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
    "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64, "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3": torch.float8_e4m3fn,
}  # fmt: skip
_DROPPING: contextvars.ContextVar[MappedWeights | None] = contextvars.ContextVar("dropping", default=None)


class MappedWeights:
    """The tensors of a checkpoint folder's safetensors files (one file or shards), read without copying.

    `tensors` maps the stored names to tensors: float32 ones are read-only views of the memory-mapped files, other
    floating dtypes float32 copies, the rest views as stored. `file_index(tensor)` says which file a tensor was read
    from; `drop_pages(tensor)` gives a mapped tensor's memory back to the page cache.
    """

    def __init__(self, folder: Path):
        self.files = safetensors_files(folder)
        self.tensors: dict[str, torch.Tensor] = {}
        self._file_of: dict[int, int] = {}  # data_ptr of every tensor read -> index of its file
        self._maps: list[tuple[int, int, mmap.mmap]] = []  # (address, length, map), by address
        for index, path in enumerate(self.files):
            layout = safetensors_layout(path)
            with path.open("rb") as stream:
                mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
            with warnings.catch_warnings():  # torch warns that a read-only buffer gives tensors it cannot protect
                warnings.simplefilter("ignore", UserWarning)
                self._maps.append((torch.frombuffer(mapped, dtype=torch.uint8).data_ptr(), len(mapped), mapped))
                for name, stored in layout.items():
                    tensor = read_tensor(mapped, stored)
                    self.tensors[name] = tensor
                    self._file_of[tensor.data_ptr()] = index
        self._maps.sort(key=lambda entry: entry[0])

    def file_index(self, tensor: torch.Tensor) -> int | None:
        """The index in `files` of the file `tensor` was read from, or None for a tensor not read here."""
        return self._file_of.get(tensor.data_ptr())

    def drop_pages(self, tensor: torch.Tensor) -> None:
        """Drop from this process the whole pages that `tensor`'s data spans in a mapped file (`MADV_DONTNEED`); a
        tensor that is not such a view is left alone. Its values are unchanged: the next read maps the file again."""
        if not hasattr(mmap, "MADV_DONTNEED") or not self._maps or tensor.numel() == 0:
            return
        address = tensor.data_ptr()
        entry = bisect.bisect_right(self._maps, address, key=lambda item: item[0]) - 1
        if entry < 0:
            return
        base, length, mapped = self._maps[entry]
        start, stop = address - base, address - base + tensor.numel() * tensor.element_size()
        first, last = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, stop // mmap.PAGESIZE * mmap.PAGESIZE
        if stop <= length and last > first:
            mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


def read_tensor(mapped: mmap.mmap, stored: StoredTensor) -> torch.Tensor:
    """The tensor `stored` in the mapped file: a view of its bytes, a float32 copy for another floating dtype (and a
    copy where the file places it at an address its dtype cannot be read from)."""
    dtype = TORCH_DTYPES[stored.dtype]
    count = math.prod(stored.shape)
    if count == 0:
        tensor = torch.empty(stored.shape, dtype=dtype)
    elif stored.start % dtype.itemsize:
        raw = torch.frombuffer(mapped, dtype=torch.uint8, count=stored.stop - stored.start, offset=stored.start)
        tensor = raw.clone().view(dtype).view(stored.shape)
    else:
        tensor = torch.frombuffer(mapped, dtype=dtype, count=count, offset=stored.start).view(stored.shape)
    return tensor.float() if tensor.is_floating_point() and dtype != torch.float32 else tensor


@contextmanager
def pages_dropped_after_use(weights: MappedWeights) -> Iterator[None]:
    """While inside, every module drops the pages of its own parameters and buffers from `weights`' files after its
    forward pass, and `drop_pages_after_reading` drops those of a tensor read whole (a finiteness check)."""

    def drop(module: nn.Module, _inputs, _output) -> None:
        for tensor in itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False)):
            weights.drop_pages(tensor)

    handle = torch.nn.modules.module.register_module_forward_hook(drop)
    token = _DROPPING.set(weights)
    try:
        yield
    finally:
        _DROPPING.reset(token)
        handle.remove()


def drop_pages_after_reading(tensor: torch.Tensor) -> None:
    """Inside `pages_dropped_after_use`, drop `tensor`'s pages now that it was read; elsewhere nothing."""
    weights = _DROPPING.get()
    if weights is not None:
        weights.drop_pages(tensor)


def saved_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors `model.save_pretrained` writes, under its keys: the state dict without the keys the model ignores
    on save and without the second name of a tied weight (safetensors stores no aliases)."""
    state = model.state_dict()
    for key in model._keys_to_ignore_on_save or ():
        state.pop(key, None)
    return remove_tied_weights_from_state_dict(state, model)


def files_like_source(tensors: dict[str, torch.Tensor], weights: MappedWeights) -> dict[str, list[str]]:
    """`{output file name: keys}`: each key in the file of the source file its tensor was read from; a tensor not read
    from the source (a new norm parameter) joins the tensor before it in the state dict, its own layer's. The files are
    named as `save_pretrained` names shards (`model-00001-of-00003.safetensors`), or `model.safetensors` alone."""
    groups: dict[int, list[str]] = {}
    current = 0
    for key, tensor in tensors.items():
        index = weights.file_index(tensor)
        current = current if index is None else index
        groups.setdefault(current, []).append(key)
    ordered = [groups[index] for index in sorted(groups)]
    if len(ordered) == 1:
        return {SAFETENSORS_FILE: ordered[0]}
    return {f"model-{number:05d}-of-{len(ordered):05d}.safetensors": keys for number, keys in enumerate(ordered, 1)}


def save_like_source(model: nn.Module, processor, folder: Path, weights: MappedWeights) -> dict[str, list[str]]:
    """`convert.save_checkpoint`'s output (config with the full auto_map, remote code, weights, tokenizer or image
    processor), with the weights in files like the source's (`files_like_source`); each file's source pages are
    dropped once it is written. Returns `{file name: keys}`."""
    with quiet_transformers():
        model.save_pretrained(folder, state_dict={})  # everything but the weights: config, remote code
    (folder / SAFETENSORS_FILE).unlink(missing_ok=True)  # an empty weights file, where one is written
    tensors = saved_tensors(model)
    files = files_like_source(tensors, weights)
    for name, keys in files.items():
        save_file({key: tensors[key].contiguous() for key in keys}, folder / name, metadata={"format": "pt"})
        for key in keys:
            weights.drop_pages(tensors[key])
    if len(files) > 1:
        index = {
            "metadata": {
                "total_parameters": model.num_parameters(),
                "total_size": sum(tensor.numel() * tensor.element_size() for tensor in tensors.values()),
            },
            "weight_map": {key: name for name, keys in files.items() for key in keys},
        }
        (folder / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if processor is not None:
        with quiet_transformers():
            processor.save_pretrained(folder)
    return files
