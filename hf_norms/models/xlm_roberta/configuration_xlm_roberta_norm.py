"""Configuration of XLM-RoBERTa models with a selectable normalization layer (`model_type="xlm_roberta_norm"`)."""

from ...version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from huggingface_hub.dataclasses import strict
from transformers import XLMRobertaConfig

from ..norm_options import NormOptions


@strict
class XLMRobertaNormConfig(NormOptions, XLMRobertaConfig):
    r"""[`XLMRobertaConfig`] plus the norm options of [`NormOptions`] (`norm_type`, `dyt_alpha_init`, ...).

    XLM-RoBERTa is post-LN, as RoBERTa: DyT on XLM-RoBERTa is outside what its paper tested. DTN treats the text as
    one row of tokens after `<s>` and keeps padding (the attention mask's zeros) out of its inter-token statistics; it
    mixes statistics over the whole sequence, so it cannot run as a causal decoder.
    """

    model_type = "xlm_roberta_norm"
    num_prefix_tokens = 1  # <s>


__all__ = ["XLMRobertaNormConfig"]
