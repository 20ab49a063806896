"""Small random stock checkpoints of the RoBERTa-like text families (RoBERTa, XLM-RoBERTa) for their tests: no
package ships their weights, so each is built with the STOCK transformers classes, with a real tokenizer of the
family's kind whose pad token id is 1, as in the published models (a byte-level BPE for RoBERTa, a Unigram one for
XLM-RoBERTa, both without merges or training)."""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers.convert_slow_tokenizer import bytes_to_unicode

from hf_norms import packaged

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
HEAD_SUFFIXES = (
    "Model",
    "ForCausalLM",
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
)


@dataclass(frozen=True)
class TextFamily:
    """A family under test: its name in the registry, its stock class prefix, the tokenizer class of its checkpoints
    and the part of its model files' names (`modeling_<module>_norm.py`)."""

    name: str
    prefix: str
    tokenizer_class: str
    module: str

    def stock_class(self, suffix: str) -> type:
        return getattr(transformers, f"{self.prefix}{suffix}")

    def norm_class_name(self, suffix: str) -> str:
        return f"{self.prefix}Norm{suffix}"

    def tokenizer(self):
        if self.tokenizer_class == "RobertaTokenizer":
            tokens = [*SPECIALS, *bytes_to_unicode().values(), "<mask>"]
            return transformers.RobertaTokenizer(vocab={token: i for i, token in enumerate(tokens)}, merges=[])
        pieces = [*SPECIALS, "▁", *(string.ascii_letters + string.digits + string.punctuation), "<mask>"]
        return transformers.XLMRobertaTokenizer(vocab=[(piece, -1.0) for piece in pieces])

    def stock_config(self, **overrides):
        """A 2-layer, 48-wide stock config (pad token 1, positions after it) with room for 128 tokens."""
        options = dict(
            vocab_size=len(self.tokenizer()),
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=96,
            max_position_embeddings=130,
            type_vocab_size=1,
            num_labels=3,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        )
        return self.stock_class("Config")(**{**options, **overrides})

    def save_stock(self, folder: Path, suffix: str = "ForMaskedLM", seed: int = 0) -> Path:
        """A stock head with random weights (seeded) and the family's tokenizer saved in `folder`."""
        torch.manual_seed(seed)
        self.stock_class(suffix)(self.stock_config(**head_overrides(suffix))).save_pretrained(folder)
        self.tokenizer().save_pretrained(folder)
        return folder


ROBERTA = TextFamily("roberta", "Roberta", "RobertaTokenizer", "roberta")
XLM_ROBERTA = TextFamily("xlmroberta", "XLMRoberta", "XLMRobertaTokenizer", "xlm_roberta")


def head_overrides(suffix: str, decoder: bool = True) -> dict:
    """The config fields the head `suffix` needs: the causal LM is a decoder (unless `decoder` is false), question
    answering has two labels (start, end)."""
    if suffix == "ForCausalLM" and decoder:
        return {"is_decoder": True}
    return {"num_labels": 2} if suffix == "ForQuestionAnswering" else {}


def news_lines(count: int) -> list[str]:
    """The first lines of `count` real BBC News articles."""
    return [text.strip().split("\n")[0] for text, _ in packaged.bbc_news()[:count]]


def padded_batch(family: TextFamily, suffix: str) -> dict[str, torch.Tensor]:
    """Two real sentences of different lengths through the family's tokenizer (the shorter padded with id 1), shaped
    for the head `suffix` (three choices for multiple choice)."""
    batch = dict(family.tokenizer()(["Shares rose sharply.", news_lines(1)[0][:60]], padding=True, return_tensors="pt"))
    batch.pop("token_type_ids", None)
    if suffix == "ForMultipleChoice":
        return {key: value.unsqueeze(1).expand(-1, 3, -1).contiguous() for key, value in batch.items()}
    return batch


def labels_for(suffix: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Labels of the head `suffix` for `batch` (none for the bare model)."""
    shape = batch["input_ids"].shape
    generator = torch.Generator().manual_seed(1)
    if suffix in ("ForMaskedLM", "ForCausalLM"):
        return {"labels": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)}
    if suffix == "ForTokenClassification":
        return {"labels": torch.randint(0, 3, shape, generator=generator)}
    if suffix == "ForQuestionAnswering":
        return {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([3, 4])}
    if suffix in ("ForSequenceClassification", "ForMultipleChoice"):
        return {"labels": torch.tensor([0, 2])}
    return {}
