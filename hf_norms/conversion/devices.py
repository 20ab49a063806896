"""Where conversion and healing run: the device, bfloat16, and the teacher beside the student.

- `resolve_device("auto")` is a CUDA GPU when torch sees one, else the CPU; `"cpu"` and `"cuda"` choose (`"cuda"`
  without a GPU is refused). Which GPUs a run sees is chosen the usual way, with `CUDA_VISIBLE_DEVICES`; under a
  launcher that starts one process per GPU (`torchrun`, `accelerate launch`) each process takes its own,
  `cuda:LOCAL_RANK`.
- `use_bf16(requested, device)`: `True`/`False` are obeyed; `None` (auto) is bfloat16 autocast on a CUDA GPU that
  supports it, float32 elsewhere. bfloat16 on a CPU works (the Trainer's CPU autocast) but only pays where the CPU has
  bfloat16 instructions, so auto leaves it off there.
- `training_teacher(teacher, device, bf16, batch)`: the frozen teacher on the student's device, in eval mode without
  gradients; with bf16, a bfloat16 copy of it (half the memory, and autocast has no float32 weights to cast at every
  step) when that copy keeps the measured fidelity: its pooled final states on `batch`, under the autocast the training
  uses, at a mean cosine of at least `TEACHER_BF16_MIN_COSINE` to the float32 teacher's. Otherwise the float32 teacher.

Batches are moved to the model that reads them where they are used (`data.run_model`, `data.on_device`).
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConversionError
from .arguments import DEVICE_CHOICES
from .data import on_device, real_token_mask
from .fidelity import forward_with_norms, pooled

TEACHER_BF16_MIN_COSINE = 0.999


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """The device a conversion or a healing process runs on (see the module docstring)."""
    name = "auto" if device is None else str(device)
    if name not in DEVICE_CHOICES:
        raise ConversionError(
            f"device {name!r} is not one of {', '.join(DEVICE_CHOICES)}; choose GPUs with CUDA_VISIBLE_DEVICES."
        )
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        built = "" if torch.version.cuda else " (this torch is built without CUDA)"
        raise ConversionError(f"device 'cuda': torch sees no CUDA GPU here{built}; use device 'cpu' or 'auto'.")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", torch.cuda.current_device())))


def use_bf16(requested: bool | None, device: torch.device) -> bool:
    """Whether healing runs under bfloat16 autocast: `requested`, or by default on a CUDA GPU that supports it."""
    if requested is not None:
        return bool(requested)
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def training_teacher(
    teacher: nn.Module, device: torch.device, bf16: bool, batch: dict[str, Any]
) -> tuple[nn.Module, dict[str, Any]]:
    """The teacher a healing run distils from, and a record of it for the report: `{"dtype", "bf16_cosine"}` (see the
    module docstring; the cosine is None without bf16). `teacher` itself is moved to `device` and stays float32."""
    teacher = teacher.to(device).eval().requires_grad_(False)
    if not bf16:
        return teacher, {"dtype": "float32", "bf16_cosine": None}
    candidate = copy.deepcopy(teacher).to(torch.bfloat16)
    batch = on_device(batch, device)
    mask = real_token_mask(batch)
    reference = pooled(forward_with_norms(teacher, batch, [])["final"].double(), mask)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        rounded = pooled(forward_with_norms(candidate, batch, [])["final"].double(), mask)
    cosine = F.cosine_similarity(rounded, reference, dim=-1).mean().item()
    if cosine >= TEACHER_BF16_MIN_COSINE:
        return candidate, {"dtype": "bfloat16", "bf16_cosine": round(cosine, 6)}
    del candidate
    return teacher, {"dtype": "float32", "bf16_cosine": round(cosine, 6)}
