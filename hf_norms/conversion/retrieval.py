"""Semantic search as a downstream check of a sentence-embedding conversion: how much of the source's query -> document
retrieval the converted model keeps, in domain and out of domain, measured through sentence-transformers.

Most users of a sentence-transformers model (all-MiniLM-L6-v2, ...) search with it: they embed queries and documents
and rank the documents by cosine. `RetrievalCheck` ranks, for every query, all the documents of its set and scores
the rank of the query's own document:

- `in_domain`: BBC News articles of the held-out split (`packaged.split_train_test(seed=0)`'s test part, the last
  `samples` of it: the articles a recipe calibrates and heals on are training ones); query = the title (first line),
  document = the rest of the article;
- `out_of_domain`: Python documentation paragraphs (`packaged.python_docs_paragraphs`) of at least two sentences;
  query = the first sentence, document = the rest.

Both models embed through the source's own sentence-transformers pipeline (`SentenceTransformer(source folder)`: its
tokenizer, `max_seq_length`, pooling and normalisation), with the source's or the converted transformer as its first
module; the converted folder carries the same modules (`convert` copies them), so this is what
`SentenceTransformer(converted folder)` computes. Figures per set: `recall_at_1` (the query's document ranks first)
and `mrr_at_10` (mean of 1 / rank, 0 beyond rank 10) for the source and the conversion, and the fraction of the
source's each keeps (`*_kept`, 1.0: all kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import packaged
from ..readers import read_json, read_json_object

RETRIEVAL_SETS = ("in_domain", "out_of_domain")
SET_NAMES = {
    "in_domain": "BBC News held-out articles, title -> article",
    "out_of_domain": "Python documentation paragraphs, first sentence -> the rest",
}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'*(])")
MRR_CUTOFF = 10


@dataclasses.dataclass(frozen=True)
class RetrievalSet:
    """`queries[i]`'s relevant document is `documents[i]`."""

    name: str
    queries: list[str]
    documents: list[str]


def retrieval_sets(samples: int) -> dict[str, RetrievalSet]:
    """The in-domain and out-of-domain sets of `samples` query-document pairs each (see the module docstring)."""
    _, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
    articles = [text.split("\n", 1) for text, _ in test[-samples:]]
    news = [(title.strip(), " ".join(body.split())) for title, body in (pair for pair in articles if len(pair) == 2)]
    docs = []
    for paragraph in packaged.python_docs_paragraphs(8 * samples):
        first, *rest = SENTENCE_END.split(paragraph, maxsplit=1)
        if rest and len(first.split()) >= 4 and len(rest[0].split()) >= 4:
            docs.append((first, rest[0]))
        if len(docs) == samples:
            break
    return {
        name: RetrievalSet(SET_NAMES[name], [q for q, _ in pairs], [d for _, d in pairs])
        for name, pairs in (("in_domain", news), ("out_of_domain", docs))
    }


def rank_scores(queries: torch.Tensor, documents: torch.Tensor) -> dict[str, float]:
    """`recall_at_1` and `mrr_at_10` of embeddings `queries` `[n, dim]` against `documents` `[n, dim]` (row i of each
    belong together), ranked by cosine; ties count against the pair (its rank is 1 + the documents scoring at least as
    high, itself left out)."""
    queries = torch.nn.functional.normalize(queries.double(), dim=-1)
    documents = torch.nn.functional.normalize(documents.double(), dim=-1)
    similarity = queries @ documents.T
    own = similarity.diagonal().unsqueeze(1)
    ranks = (similarity >= own).sum(1)  # counts the pair itself: rank 1 when nothing else scores as high
    reciprocal = torch.where(ranks <= MRR_CUTOFF, 1.0 / ranks.double(), torch.zeros((), dtype=torch.float64))
    return {"recall_at_1": (ranks == 1).double().mean().item(), "mrr_at_10": reciprocal.mean().item()}


def is_sentence_transformer(folder: str | Path | None) -> bool:
    return folder is not None and (Path(folder) / "modules.json").is_file()


POOLING_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_mean_sqrt_len_tokens": "mean"}  # mean / sqrt(length): the mean's direction  # fmt: skip


def sentence_pooling(folder: str | Path | None) -> str | None:
    """How a sentence-transformers checkpoint in `folder` pools its token states into the sentence embedding its users
    search with (its `modules.json`'s Pooling module): `cls`, `mean` or `max` (`fidelity.pooled`); None for any other
    folder, or a pooling that is none of these alone (weighted mean, last token, several modes concatenated)."""
    if not is_sentence_transformer(folder):
        return None
    fix = "re-download the sentence-transformers files"
    modules = read_json(Path(folder) / "modules.json", fix)
    paths = [m.get("path", "") for m in modules if m.get("type", "").endswith("models.Pooling")]
    config = Path(folder) / (paths[0] if paths else "missing") / "config.json"
    if not config.is_file():
        return None
    modes = [key for key, on in read_json_object(config, fix).items() if key.startswith("pooling_mode") and on is True]
    return POOLING_MODES.get(modes[0]) if len(modes) == 1 else None


@dataclasses.dataclass
class RetrievalCheck:
    """The source's sentence-transformers pipeline, the retrieval sets, and the source's embeddings once computed."""

    encoder: Any  # sentence_transformers.SentenceTransformer of the source folder
    sets: dict[str, RetrievalSet]
    batch_size: int = 32
    _source: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None

    @classmethod
    def load(cls, source_folder: str | Path | None, samples: int, batch_size: int = 32) -> RetrievalCheck | None:
        """The check for a sentence-transformers `source_folder` (one with `modules.json`); None for any other."""
        if not samples or not is_sentence_transformer(source_folder):
            return None
        from sentence_transformers import SentenceTransformer

        encoder = SentenceTransformer(str(source_folder), device="cpu")
        return cls(encoder, retrieval_sets(samples), batch_size)

    def record(self) -> dict[str, Any]:
        """The report's `retrieval_evaluation`: what each set holds and how it is scored."""
        return {
            "samples": max(len(s.queries) for s in self.sets.values()),
            "sets": {name: {"name": s.name, "pairs": len(s.queries)} for name, s in self.sets.items()},
            "max_seq_length": self.encoder.max_seq_length,
            "method": f"sentence-transformers embeddings of the source's pipeline, documents ranked by cosine per "
            f"query; recall@1 and MRR@{MRR_CUTOFF}",
        }

    def embed(self, model: nn.Module, texts: list[str]) -> torch.Tensor:
        """`[len(texts), dim]` sentence embeddings of the source's pipeline with `model` as its transformer."""
        module = self.encoder[0]
        original, module.model = module.model, getattr(model, "base_model", model)
        device = next(model.parameters()).device
        try:
            with torch.no_grad(), _eval_mode(model):
                return self.encoder.encode(texts, batch_size=self.batch_size, convert_to_tensor=True,
                                           device=str(device), show_progress_bar=False).cpu()  # fmt: skip
        finally:
            module.model = original

    def measure(self, student: nn.Module, teacher: nn.Module) -> dict[str, dict[str, float]]:
        """Per set: the source's and the conversion's `recall_at_1` and `mrr_at_10`, and the fraction kept of each."""
        if self._source is None:
            self._source = {name: (self.embed(teacher, s.queries), self.embed(teacher, s.documents))
                            for name, s in self.sets.items()}  # fmt: skip
        result = {}
        for name, s in self.sets.items():
            source = rank_scores(*self._source[name])
            converted = rank_scores(self.embed(student, s.queries), self.embed(student, s.documents))
            result[name] = {
                **{f"source_{key}": value for key, value in source.items()},
                **converted,
                **{f"{key}_kept": converted[key] / source[key] if source[key] else None for key in source},
            }
        return result


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def measure_retrieval(report: dict[str, Any], check: RetrievalCheck | None, student: nn.Module,
                      teacher: nn.Module) -> None:  # fmt: skip
    """Add the retrieval figures of `student` against `teacher` to `report`'s last stage, and what was measured as
    `retrieval_evaluation`; nothing without a check (a source that is not a sentence-transformers model)."""
    if check is None:
        return
    last = list(report["stages"])[-1]
    report["stages"][last]["retrieval"] = check.measure(student, teacher)
    report["retrieval_evaluation"] = check.record()
