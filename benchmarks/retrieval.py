"""How much of all-MiniLM-L6-v2's semantic search a converted folder keeps, loaded as users load it:
`SentenceTransformer(folder)` beside `SentenceTransformer(source)` in the same run, on the query -> document sets of
`hf_norms.conversion.retrieval` (in domain: BBC News held-out titles -> articles; out of domain: Python documentation
first sentences -> the rest), recall@1 and MRR@10 and the fraction of the source's each keeps.

    python -m benchmarks.retrieval FOLDER [FOLDER ...] [--pairs 128] [--threads 1] [--output results.json]

Prints one JSON line per folder and set, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer

import hf_norms  # noqa: F401  (registers the hf-norms classes, so converted folders load without remote code)
from benchmarks.timing import markdown_table
from hf_norms import packaged
from hf_norms.conversion.retrieval import rank_scores, retrieval_sets

HEADER = ["folder", "set", "pairs", "recall@1 source", "recall@1", "kept", "MRR@10 source", "MRR@10", "kept"]


def scores(model: SentenceTransformer, queries: list[str], documents: list[str]) -> dict[str, float]:
    embed = lambda texts: model.encode(texts, batch_size=32, convert_to_tensor=True)  # noqa: E731
    return rank_scores(embed(queries), embed(documents))


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.retrieval`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--source", type=Path, default=None, help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output")
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    sets = retrieval_sets(args.pairs)
    source = SentenceTransformer(str(args.source or packaged.minilm_path()), device="cpu")
    baseline = {name: scores(source, s.queries, s.documents) for name, s in sets.items()}
    results, rows = [], []
    for folder in args.folders:
        model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
        for name, s in sets.items():
            got, ref = scores(model, s.queries, s.documents), baseline[name]
            results.append({"folder": str(folder), "set": name, "pairs": len(s.queries),
                            **{f"source_{k}": v for k, v in ref.items()}, **got,
                            **{f"{k}_kept": got[k] / ref[k] for k in ref}})  # fmt: skip
            print(json.dumps(results[-1]), flush=True)
            r = results[-1]
            rows.append([folder.name, name, str(r["pairs"]), f"{r['source_recall_at_1']:.3f}", f"{r['recall_at_1']:.3f}",
                         f"{100 * r['recall_at_1_kept']:.1f} %", f"{r['source_mrr_at_10']:.3f}", f"{r['mrr_at_10']:.3f}",
                         f"{100 * r['mrr_at_10_kept']:.1f} %"])  # fmt: skip
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=1))
    print(markdown_table(HEADER, rows))
    return results


if __name__ == "__main__":
    main()
