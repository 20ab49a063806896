"""What the registry (`registry.py`) says about each norm_type: `NormSpec`, with its config `Option`s, its `Paper`
and the `CardText` a model card explains it with.

Imports neither torch nor transformers (a norm's layer file is imported by name when its layer is first built).
Part of a checkpoint's configuration file (`checkpoint_code`), less what is `@package_only`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..package_only import package_only

# The largest finite value of each floating dtype a model's weights may have (torch's `finfo(dtype).max`)
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}

# A config check: (the option's name, its value, the whole config) -> the sentence saying what is wrong, or None.
Check = Callable[[str, Any, Any], "str | None"]


def positive_finite(name: str, value: Any, config: Any) -> str | None:
    return None if value > 0 and math.isfinite(value) else f"{name} must be a finite number > 0, got {value}."


def finite(name: str, value: Any, config: Any) -> str | None:
    return None if math.isfinite(value) else f"{name} must be a finite number, got {value}."


def unit_interval(name: str, value: Any, config: Any) -> str | None:
    return None if 0.0 <= value <= 1.0 else f"{name} must be in [0, 1], got {value}."


def one_of(*choices: str) -> Check:
    def check(name: str, value: Any, config: Any) -> str | None:
        return None if value in choices else f"{name}={value!r} is not supported; choose one of {choices}."

    return check


@dataclass(frozen=True)
class Option:
    """A config field a norm adds: its name, type (`annotation`), default, one sentence for the config's docstring, and
    the check of its value (`check(name, value, config)`: what is wrong, or None)."""

    name: str
    annotation: Any
    default: Any
    doc: str
    check: Check | None = None


@dataclass(frozen=True)
class Paper:
    """The paper a norm comes from; `authors` as "First Last" in the paper's order."""

    key: str
    title: str
    authors: tuple[str, ...]
    booktitle: str
    year: int
    arxiv_id: str
    pages: str | None = None

    @property
    @package_only
    def short_citation(self) -> str:
        """E.g. `Zhu et al., Transformers without Normalization, CVPR 2025 (arXiv 2503.10622)`."""
        return f"{self.authors[0].split()[-1]} et al., {self.title}, {self.venue} (arXiv {self.arxiv_id})"

    @property
    @package_only
    def venue(self) -> str:
        return f"{self.booktitle.split('(')[-1].rstrip(')')} {self.year}" if "(" in self.booktitle else self.booktitle

    @property
    @package_only
    def url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv_id}"

    @package_only
    def bibtex(self) -> str:
        """A BibTeX `@inproceedings` entry with the arXiv id as `eprint`."""
        authors = " and ".join(f"{name.split()[-1]}, {' '.join(name.split()[:-1])}" for name in self.authors)
        fields = [("title", self.title), ("author", authors), ("booktitle", self.booktitle), ("year", str(self.year)),
                  *([("pages", self.pages)] if self.pages else []), ("eprint", self.arxiv_id),
                  ("archivePrefix", "arXiv")]  # fmt: skip
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
        return f"@inproceedings{{{self.key},\n{body}\n}}"


@dataclass(frozen=True)
class CardText:
    """How a model card explains a norm: a title, what it does to the model (`headline`), a paragraph, a LaTeX
    equation, and where it sits (`placement`)."""

    title: str
    headline: str
    description: str
    equation: str
    placement: str


@dataclass(frozen=True)
class NormSpec:
    """One `norm_type`: everything hf-norms knows about it.

    - `layer_module`, `layer_class`: its layer file (`dyt` for `dyt.py`, beside this file; in a checkpoint's
      remote code its modeling file, which defines the layers) and class; `layer()` imports that class, built from a
      config by `layer().from_config(config,
      hidden_size, num_prefix_tokens, one_dimensional)`; the layer takes `[batch, seq_len, hidden]` and an optional
      `TokenLayout` and returns the same shape; its affine parameters are `weight` and `bias`, as LayerNorm's.
    - `options`: the config fields it adds, with defaults and checks.
    - `preserving_options`: the option values under which a LayerNorm checkpoint loaded into it computes exactly the
      same function (None: no values can, it has no statistics); `preserving_note` says what such a load sets, for a
      count of modules. `exact_when_centred`: it reproduces LayerNorm exactly once the residual stream is kept free of
      its channel mean (`conversion.residual_stream`), in families (pre-LN) that can centre it. Elsewhere a conversion is
      calibrated on data with `calibration` (the per-layer fit: `tanh`, `erf` or `gradient`) and healed, with the
      `conversion_options` (e.g. one alpha per channel) unless the user sets them.
    - `added_parameters`: the parameter-name suffixes it adds to a LayerNorm's `weight` and `bias` (what a LayerNorm
      checkpoint lacks).
    - `per_token`: each token's output depends only on that token (else it mixes tokens: not in a task head, not in a
      causal decoder). `whole_sequence`: it reads where each token sits (the prefix tokens, the grid), so it must see a
      whole sequence at once, never a chunk of its tokens. `position_norm_class`: each layer gets a position norm of
      this class of `layer_module` (LaPE's), and then `position_norms` is true. `folds`: its output is `weight * z +
      bias`, so the affine folds into the next Linear layers. `statistics_free`: no statistics (the output follows the
      input's scale). `uses_batch_statistics(config)`, `keeps_input_position_embeddings(config)`: what a config of it
      does.
    - `fine_tuning_config`: config values a checkpoint with this norm fine-tunes measurably better with than its
      LayerNorm source's (DyT, Derf: no dropout), which `convert` and `heal` write into the config they save and
      `hf-norms finetune` sets; `fine_tuning_reason` is the measurement that chose them, for the card and the log.
    - `paper`, `text`, `caveats(options, family, untrained)` (`family` a `FamilySpec`): what a model card cites and
      says (a checkpoint's remote code, which has no card, leaves them out).
    """

    name: str
    short_name: str
    layer_module: str
    layer_class: str
    text: CardText | None = None
    paper: Paper | None = None
    options: tuple[Option, ...] = ()
    preserving_options: Mapping[str, Any] | None = field(default_factory=dict)
    preserving_note: str = ""
    exact_when_centred: bool = False
    calibration: str | None = None
    conversion_options: Mapping[str, Any] = field(default_factory=dict)
    added_parameters: tuple[str, ...] = ()
    per_token: bool = True
    whole_sequence: bool = False
    position_norm_class: str | None = None
    folds: bool = True
    statistics_free: bool = False
    uses_batch_statistics: Callable[[Any], bool] = lambda config: False
    keeps_input_position_embeddings: Callable[[Any], bool] = lambda config: True
    caveats: Callable[[Mapping[str, Any], Any, bool], list[str]] = lambda options, family, untrained: []
    fine_tuning_config: Mapping[str, Any] = field(default_factory=dict)
    fine_tuning_reason: str = ""

    @property
    def position_norms(self) -> bool:
        """Whether each encoder layer gets a position norm (`position_norm_class`, LaPE's)."""
        return self.position_norm_class is not None

    @package_only
    def centres(self, family: Any) -> bool:
        """Whether a conversion to it centres the residual stream of a `family` (a `FamilySpec`) model to be exact."""
        return self.exact_when_centred and family.residual is not None

    def layer(self) -> type:
        """The layer class, imported from `layer_module` by name: the registry imports no torch, and no static import
        reaches every norm's file."""
        return getattr(importlib.import_module(f".{self.layer_module}", __package__), self.layer_class)

    def position_norm(self) -> type:
        """The class of its per-layer position norms (`position_norm_class` of `layer_module`)."""
        return getattr(importlib.import_module(f".{self.layer_module}", __package__), self.position_norm_class)

    @package_only
    def converts_exactly(self, family: Any, options: Mapping[str, Any]) -> bool:
        """Whether a conversion of a `family` (a `FamilySpec`) LayerNorm checkpoint with these option values computes
        its function."""
        if self.centres(family):
            return True
        preserving = self.preserving_options
        return preserving is not None and all(options.get(name) == value for name, value in preserving.items())
