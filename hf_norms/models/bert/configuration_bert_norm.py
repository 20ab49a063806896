"""Configuration of BERT models with a selectable normalization layer (`model_type="bert_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import BertConfig

from ..norm_options import NormOptions


@strict
class BertNormConfig(NormOptions, BertConfig):
    r"""[`BertConfig`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, `dtn_gate_init`, ...).

    BERT is post-LN: DyT on BERT is outside what its paper tested. DTN treats the text as one row of tokens after
    [CLS] and keeps padding out of its inter-token statistics; it mixes statistics over the whole sequence, so it
    cannot run as a causal decoder.
    """

    model_type = "bert_norm"
    num_prefix_tokens = 1  # [CLS]


__all__ = ["BertNormConfig"]
