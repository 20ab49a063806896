"""A converted sentence-transformers model stays one: all-MiniLM-L6-v2 converted, healed or fine-tuned keeps its
pooling, normalisation and max_seq_length, and exact conversions embed long real articles as the original does."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_without_hf_norms, tiny_sentence_transformer
from sentence_transformers import SentenceTransformer

from hf_norms import cli, packaged
from hf_norms.conversion.convert import convert
from hf_norms.conversion.sources import sentence_transformers_files
from hf_norms.hub.model_card import model_card_for_folder


@pytest.fixture(scope="module")
def long_articles() -> list[str]:
    """Six whole BBC News articles, most longer than the model's 256-token window."""
    return [text for text, _ in packaged.bbc_news()[:6]]


@pytest.fixture(scope="module")
def original(minilm_dir, long_articles):
    model = SentenceTransformer(str(minilm_dir), device="cpu")
    return model, model.encode(long_articles, convert_to_tensor=True)


@pytest.mark.parametrize("norm_type", ["dtn", "sepnorm", "lape"])
def test_an_exact_conversion_embeds_as_the_original(norm_type, minilm_dir, original, long_articles, tmp_path):
    output = tmp_path / f"minilm-{norm_type}"
    assert cli.main(["convert", str(minilm_dir), "--norm-type", norm_type, "--output", str(output)]) == 0
    assert sentence_transformers_files(output) == sentence_transformers_files(minilm_dir)
    assert {"modules.json", "sentence_bert_config.json", "1_Pooling"} <= set(sentence_transformers_files(output))
    stock, expected = original
    converted = SentenceTransformer(str(output), device="cpu")
    assert converted.max_seq_length == stock.max_seq_length == 256
    assert [type(module).__name__ for module in converted] == [type(module).__name__ for module in stock]
    embeddings = converted.encode(long_articles, convert_to_tensor=True)
    assert (embeddings - expected).abs().max().item() <= 1e-5
    assert (embeddings.norm(dim=-1) - 1).abs().max().item() <= 1e-5  # the Normalize module is still there


def test_the_card_and_remote_code_of_a_converted_sentence_transformer(minilm_dir, original, long_articles, tmp_path):
    output = tmp_path / "minilm-dtn"
    assert cli.main(["convert", str(minilm_dir), "--norm-type", "dtn", "--output", str(output)]) == 0
    card = model_card_for_folder(output, "org/minilm-dtn")
    assert card.data.library_name == "sentence-transformers" and card.data.pipeline_tag == "sentence-similarity"
    assert 'SentenceTransformer("org/minilm-dtn", trust_remote_code=True)' in card.text
    assert 'pipeline("feature-extraction", model="org/minilm-dtn"' in card.text  # a task pipeline() knows
    from transformers import pipeline

    features = pipeline("feature-extraction", model=str(output))(long_articles[0][:200])
    assert len(features[0][0]) == 384
    code = f"""
        import json
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer({str(output)!r}, device="cpu", trust_remote_code=True)
        print(json.dumps(model.encode({long_articles[:2]!r}).tolist()))
    """
    remote = run_without_hf_norms(code, tmp_path)  # hf_norms cannot be imported there
    _, expected = original
    assert max(abs(a - b) for row, ref in zip(json.loads(remote), expected[:2].tolist(), strict=True)
               for a, b in zip(row, ref, strict=True)) <= 1e-5  # fmt: skip


def test_fidelity_is_measured_at_the_max_seq_length_the_model_runs_at(tiny_bert_dir, minilm_dir, tmp_path, capsys):
    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "source", max_seq_length=48)
    output = tmp_path / "dtn"
    assert cli.main(["convert", str(source), "--norm-type", "dtn", "--output", str(output)]) == 0  # no --max-length
    printed = capsys.readouterr().out
    assert "exact: max abs diff 0, mean cosine 1.0000, short-input cosine 1.0000" in printed
    report = json.loads((output / "conversion_report.json").read_text())
    assert report["evaluation"]["max_length"] == 48
    card = str(model_card_for_folder(output, "org/tiny-dtn"))
    assert "texts truncated to 48 tokens, the max_seq_length this sentence-transformers model runs at)" in card
    # an explicit length wins, and the card says that it is not the model's
    report = convert(source, "dtn", tmp_path / "dtn-16", max_length=16)
    assert report["evaluation"]["max_length"] == 16
    card = str(model_card_for_folder(tmp_path / "dtn-16", "org/tiny-dtn"))
    assert "texts truncated to 16 tokens, while this sentence-transformers model runs at max_seq_length 48)" in card
    # MiniLM's own 256 is cut to the tiny BERT's 64 position embeddings
    report = convert(tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "long"), "dtn", tmp_path / "64")
    assert report["evaluation"]["max_length"] == 64


def test_rank_scores_count_ties_against_the_pair():
    from hf_norms.conversion.retrieval import rank_scores

    documents = torch.eye(4)
    assert rank_scores(documents, documents) == {"recall_at_1": 1.0, "mrr_at_10": 1.0}
    queries = documents[[1, 0, 2, 3]] + 0.5 * documents  # the first two find each other's document first: rank 2
    assert rank_scores(queries, documents) == {"recall_at_1": 0.5, "mrr_at_10": 0.75}
    assert rank_scores(torch.ones(4, 4), documents)["recall_at_1"] == 0.0  # every document ties: none ranks first


def test_semantic_search_is_measured_through_sentence_transformers(tiny_bert_dir, minilm_dir, tmp_path):
    """An exact conversion keeps all of the source's recall@1 and MRR@10 (in the report, its Markdown and the card),
    the converted folder embeds through `SentenceTransformer` as the check measured it, and a perturbed model keeps
    less."""
    from hf_norms.conversion.retrieval import RetrievalCheck

    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "source", max_seq_length=48)
    output = tmp_path / "dtn"
    arguments = ["convert", str(source), "--norm-type", "dtn", "--output", str(output), "--retrieval-samples", "24"]
    assert cli.main(arguments) == 0
    report = json.loads((output / "conversion_report.json").read_text())
    assert report["retrieval_evaluation"]["sets"]["in_domain"]["pairs"] == 24
    assert report["retrieval_evaluation"]["sets"]["out_of_domain"]["pairs"] == 24
    measured = report["stages"]["exact"]["retrieval"]
    for name in ("in_domain", "out_of_domain"):
        scores = measured[name]
        assert 0 < scores["source_mrr_at_10"] <= 1 and scores["mrr_at_10"] == pytest.approx(scores["source_mrr_at_10"])
        assert scores["recall_at_1"] == scores["source_recall_at_1"] and scores["mrr_at_10_kept"] == pytest.approx(1)
    assert "## Semantic search" in (output / "conversion_report.md").read_text()
    card = str(model_card_for_folder(output, "org/tiny-dtn"))
    assert "semantic search through sentence-transformers" in card and "search recall@1, in domain" in card
    check = RetrievalCheck.load(source, 24)
    converted = SentenceTransformer(str(output), device="cpu")
    student, teacher = converted[0].auto_model, check.encoder[0].auto_model
    texts = check.sets["in_domain"].queries[:4]
    assert (converted.encode(texts, convert_to_tensor=True) - check.embed(student, texts)).abs().max() <= 1e-6
    with torch.no_grad():
        for parameter in student.encoder.layer[0].parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    perturbed = check.measure(student, teacher)
    assert perturbed["in_domain"]["source_mrr_at_10"] == pytest.approx(measured["in_domain"]["source_mrr_at_10"])
    assert perturbed["in_domain"]["mrr_at_10"] != pytest.approx(perturbed["in_domain"]["source_mrr_at_10"])


def test_the_healing_loss_pools_as_sentence_transformers_and_its_similarity_term(minilm_dir, original, long_articles):
    """all-MiniLM-L6-v2 pools by the mean over real tokens: the healing loss's pooled states are the embeddings
    `SentenceTransformer` computes (up to its normalisation). The in-batch similarity term is 0 for the model against
    itself, grows with a perturbation of one layer, and enters the loss with its weight."""
    from types import SimpleNamespace

    from transformers import AutoModel, AutoTokenizer

    from hf_norms.conversion.distillation import distillation_loss, similarity_divergence
    from hf_norms.conversion.fidelity import pooled
    from hf_norms.conversion.retrieval import sentence_pooling

    assert sentence_pooling(minilm_dir) == "mean" and sentence_pooling(minilm_dir / "1_Pooling") is None
    batch = AutoTokenizer.from_pretrained(minilm_dir)(long_articles, truncation=True, max_length=256, padding=True,
                                                      return_tensors="pt")  # fmt: skip
    mask = batch["attention_mask"].bool()
    teacher = AutoModel.from_pretrained(minilm_dir).eval()
    student = AutoModel.from_pretrained(minilm_dir).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in student.encoder.layer[0].parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
        finals = [model(**batch).last_hidden_state for model in (student, teacher)]
    embeddings = [pooled(final, mask, sentence_pooling(minilm_dir)) for final in finals]
    cosine = torch.nn.functional.cosine_similarity(embeddings[1], original[1], dim=-1)
    assert cosine.min().item() == pytest.approx(1, abs=1e-5)
    assert similarity_divergence(embeddings[1], embeddings[1]).item() == pytest.approx(0, abs=1e-6)
    divergence = similarity_divergence(*embeddings).item()
    assert divergence > 0.01

    def loss(**weights):
        outputs = [SimpleNamespace(hidden_states=(final,)) for final in finals]
        zero = {"cosine_weight": 0, "hidden_state_weight": 0, "token_weight": 0, "head_weight": 0}
        return distillation_loss(*outputs, finals, mask, {**zero, **weights}, pooling="mean").item()

    assert loss(similarity_weight=2) - loss() == pytest.approx(2 * divergence, rel=1e-4)


def test_heal_passes_the_similarity_weight_and_the_checkpoint_pooling_to_the_loss(tiny_bert_dir, minilm_dir,
                                                                                   long_articles, tmp_path, monkeypatch):  # fmt: skip
    """A sentence-transformers checkpoint that pools by [CLS] is healed with its pooled terms on [CLS], and
    `--similarity-weight` reaches the loss and the report."""
    from hf_norms.conversion import distillation, healing

    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "source", max_seq_length=48)
    pooling_config = source / "1_Pooling" / "config.json"
    pooling = json.loads(pooling_config.read_text())
    pooling_config.write_text(
        json.dumps({**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
    )
    data = tmp_path / "news.txt"
    data.write_text("\n".join(" ".join(text.split()) for text in long_articles) + "\n")
    convert(
        source,
        "dyt",
        tmp_path / "dyt",
        calibration_data=data,
        calibration_samples=4,
        evaluation_samples=2,
        heal_steps=0,
    )
    calls, loss = [], distillation.distillation_loss
    monkeypatch.setattr(distillation, "distillation_loss", lambda *a, **k: calls.append(k) or loss(*a, **k))
    report = healing.heal(tmp_path / "dyt", data, output=tmp_path / "healed", max_steps=1, batch_size=4,
                          max_length=32, similarity_weight=3.0, progress=False)  # fmt: skip
    assert calls and calls[0]["pooling"] == "cls" and calls[0]["weights"]["similarity_weight"] == 3.0
    assert "3 * KL of the in-batch cosine-similarity rows" in report["healing"]["loss"]
    assert report["healing"]["pooling"] == "cls"
