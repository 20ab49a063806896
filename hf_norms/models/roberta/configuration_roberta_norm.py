"""Configuration of RoBERTa models with a selectable normalization layer (`model_type="roberta_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import RobertaConfig

from ..norm_options import NormOptions


@strict
class RobertaNormConfig(NormOptions, RobertaConfig):
    r"""[`RobertaConfig`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, `dtn_gate_init`, ...).

    RoBERTa is post-LN, as BERT: DyT on RoBERTa is outside what its paper tested. DTN treats the text as one row of
    tokens after `<s>` and keeps padding (the attention mask's zeros) out of its inter-token statistics; it mixes
    statistics over the whole sequence, so it cannot run as a causal decoder.
    """

    model_type = "roberta_norm"
    num_prefix_tokens = 1  # <s>


__all__ = ["RobertaNormConfig"]
