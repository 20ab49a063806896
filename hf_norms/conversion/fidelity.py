"""How far a converted model is from its LayerNorm original.

`measure_fidelity` runs the original (teacher) and the converted model (student) on the same evaluation batches and
returns, for one stage of the conversion (naive, calibrated, healed or exact):

- `end_to_end`: `max_abs_diff` over the final hidden states (real tokens) and the logits; `mean_cosine`, the mean over
  examples of the cosine between pooled final hidden states (mean over real tokens for text, the [CLS] token for
  images); and, where the model has a head with logits, `top1_agreement` (fraction of rows whose argmax agrees) and
  `kl_divergence` (mean over rows of `KL(softmax(teacher) || softmax(student))`), else null;
- `token_cosine`: per token type (`data.TOKEN_TYPES`: the [CLS]/prefix tokens, the other special tokens such as [SEP],
  the ordinary tokens), the mean over those tokens of the cosine between their final hidden states (null for a type
  absent from the data: images have no special tokens), since heads read single tokens ([CLS]) that the pooled cosine
  hardly weighs;
- `per_norm`: for every replaced norm, `||y - y_ln|| / ||y_ln||` over all real tokens, with `y` the converted norm's
  output and `y_ln` the original LayerNorm's output at the same place.

The report files that hold these figures are written by `report.write_report`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..errors import ConversionError
from .data import TOKEN_TYPES, model_device, on_device, real_token_mask, run_model, token_type_masks

# Examples per forward pass while comparing: the teacher's norm outputs are held until the student's are computed, and
# at 224 px each example's 25 norm outputs and activations take tens of MB.
EXAMPLES_PER_FORWARD = 2
LOGIT_FIELDS = ("logits", "prediction_logits", "start_logits")


def forward_with_norms(
    model: nn.Module, batch: dict, norm_names: Sequence[str], on_norm: Callable[[str, torch.Tensor], None] | None = None
) -> dict[str, Any]:
    """One forward pass; returns `final` (`[batch, seq_len, hidden]`, the base model's last hidden state), `logits`
    (or None) and `norms` (`{name: [batch, seq_len, hidden]}`, each named module's output). With `on_norm`, each norm's
    output goes to `on_norm(name, output)` as it is computed instead, and `norms` stays empty."""
    captured: dict[str, torch.Tensor] = {}
    keep = on_norm or captured.__setitem__
    handles = [
        model.get_submodule(name).register_forward_hook(lambda _m, _a, output, name=name: keep(name, output))
        for name in norm_names
    ]
    base = {}
    handles.append(model.base_model.register_forward_hook(lambda _m, _a, output: base.__setitem__("out", output)))
    try:
        with torch.no_grad():
            outputs = run_model(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    final = base["out"][0] if isinstance(base["out"], tuple) else base["out"].last_hidden_state
    logits = next((getattr(outputs, f) for f in LOGIT_FIELDS if getattr(outputs, f, None) is not None), None)
    return {"final": final, "logits": logits, "norms": captured}


def pooled(final: torch.Tensor, mask: torch.Tensor | None, pooling: str | None = None) -> torch.Tensor:
    """`[batch, hidden]`: the mean over real tokens (text) or the [CLS] token (images) of `[batch, seq_len, hidden]`;
    with `pooling` (a sentence-transformers checkpoint's, `retrieval.sentence_pooling`), what its users embed with:
    `cls` the first token, `max` the largest value over real tokens per channel, `mean` the mean over real tokens."""
    if mask is None or pooling == "cls":
        return final[:, 0]
    if pooling == "max":
        return final.masked_fill(~mask.unsqueeze(-1), torch.finfo(final.dtype).min).amax(1)
    weights = mask.unsqueeze(-1).to(final.dtype)
    return (final * weights).sum(1) / weights.sum(1).clamp_min(1)


def _real_tokens(mask: torch.Tensor | None):
    """`[batch, seq_len, ...] -> [tokens, ...]` keeping real tokens (text), or the identity (images)."""
    return (lambda tensor: tensor[mask]) if mask is not None else (lambda tensor: tensor)


def _logit_rows(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`[rows, classes]`: per-example logits as they are, per-token logits of the real tokens only."""
    if logits.dim() == 3 and mask is not None and logits.shape[:2] == mask.shape:
        return logits[mask]
    return logits.reshape(-1, logits.shape[-1])


def require_finite(tensor: torch.Tensor, what: str) -> None:
    """Stop a measurement whose figures would be meaningless: a NaN or infinite output is named as an error."""
    if not torch.isfinite(tensor).all():
        raise ConversionError(
            f"{what} is NaN or infinite on the evaluation data, so no fidelity can be measured; check the weights "
            "and the config (layer_norm_eps, sizes) for broken values."
        )


def _mean(parts: list[torch.Tensor]) -> float | None:
    """The mean of all values in `parts`, None when there are none."""
    values = torch.cat(parts) if parts else torch.zeros(0)
    return values.mean().item() if values.numel() else None


def split_batch(batch: dict, size: int) -> list[dict]:
    """`batch` as consecutive parts of at most `size` examples (every value's first dimension is the example)."""
    count = len(next(iter(batch.values())))
    return [{key: value[start : start + size] for key, value in batch.items()} for start in range(0, count, size)]


def measure_fidelity(
    student: nn.Module, teacher: nn.Module, batches: Sequence[dict], norm_names: Sequence[str], progress: bool = False
) -> dict[str, Any]:
    """End-to-end and per-norm fidelity of `student` to `teacher` (on the same device) on `batches` (see module
    docstring), compared `EXAMPLES_PER_FORWARD` examples at a time, with a tqdm bar of them when `progress`."""
    student_training, teacher_training = student.training, teacher.training
    student.eval(), teacher.eval()
    max_abs, cosines, agree, kl, rows = 0.0, [], 0.0, 0.0, 0
    token_cosines: dict[str, list[torch.Tensor]] = {kind: [] for kind in TOKEN_TYPES}
    prefix_tokens = getattr(student.config, "num_prefix_tokens", 1)
    squared_error = dict.fromkeys(norm_names, 0.0)
    squared_norm = dict.fromkeys(norm_names, 0.0)
    has_logits = True
    try:
        parts = [part for whole in batches for part in split_batch(whole, EXAMPLES_PER_FORWARD)]
        for part in tqdm(parts, desc="measuring", unit="part", disable=not progress, leave=False):
            batch = on_device(part, model_device(student))  # the teacher is on the same device
            mask = real_token_mask(batch)
            select = _real_tokens(mask)
            theirs = forward_with_norms(teacher, batch, norm_names)

            def compare(name: str, output: torch.Tensor, theirs: dict = theirs, select: Callable = select) -> None:
                """Each student norm output is compared as it is computed (and the teacher's then dropped), so the
                two models' norm outputs are never all held at once."""
                reference = select(theirs["norms"].pop(name)).double()
                require_finite(reference, f"the source model's {name}")
                require_finite(output, f"the converted model's {name}")
                squared_error[name] += (select(output).double() - reference).pow(2).sum().item()
                squared_norm[name] += reference.pow(2).sum().item()

            ours = forward_with_norms(student, batch, norm_names, on_norm=compare)
            for model_name, outputs in (("source", theirs), ("converted", ours)):
                for key in ("final", "logits"):
                    if outputs[key] is not None:
                        require_finite(outputs[key], f"the {model_name} model's {key} output")
            max_abs = max(max_abs, (select(ours["final"]) - select(theirs["final"])).abs().max().item())
            cosines.append(F.cosine_similarity(pooled(ours["final"], mask), pooled(theirs["final"], mask), dim=-1))
            per_token = F.cosine_similarity(ours["final"].double(), theirs["final"].double(), dim=-1)
            for kind, tokens in token_type_masks(batch, per_token.shape[1], prefix_tokens).items():
                token_cosines[kind].append(per_token[tokens])
            if ours["logits"] is None or theirs["logits"] is None:
                has_logits = False
            else:
                student_rows = _logit_rows(ours["logits"], mask).double()
                teacher_rows = _logit_rows(theirs["logits"], mask).double()
                max_abs = max(max_abs, (student_rows - teacher_rows).abs().max().item())
                agree += (student_rows.argmax(-1) == teacher_rows.argmax(-1)).sum().item()
                log_p, log_q = teacher_rows.log_softmax(-1), student_rows.log_softmax(-1)
                kl += (log_p.exp() * (log_p - log_q)).sum(-1).sum().item()
                rows += teacher_rows.shape[0]
    finally:
        student.train(student_training), teacher.train(teacher_training)
    end_to_end = {
        "max_abs_diff": max_abs,
        "mean_cosine": torch.cat(cosines).double().mean().item(),
        "top1_agreement": agree / rows if has_logits and rows else None,
        "kl_divergence": kl / rows if has_logits and rows else None,
    }
    per_norm = {name: math.sqrt(squared_error[name] / max(squared_norm[name], 1e-30)) for name in norm_names}
    token_cosine = {kind: _mean(parts) for kind, parts in token_cosines.items()}
    return {"end_to_end": end_to_end, "token_cosine": token_cosine, "per_norm": per_norm}
