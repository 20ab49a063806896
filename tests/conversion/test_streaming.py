"""Streamed healing data (`hf_norms/conversion/streaming.py`): every source read one example at a time, in pieces
that are the stream's shards, giving exactly the examples an in-memory read gives; the evaluation examples left out;
columns chosen or named; a Hub dataset id read through the loopback Hub; and a heal on a stream."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import random
import re
import subprocess
import sys
import textwrap
import tracemalloc

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_convert import save_images
from transformers import AutoTokenizer

from hf_norms.conversion import healing, streaming
from hf_norms.conversion.checkpoint_io import ConversionError
from hf_norms.conversion.convert import convert
from hf_norms.conversion.data import load_examples
from hf_norms.conversion.report import REPORT_JSON
from hf_norms.conversion.streaming import DataSource, HeldOut, open_stream
from hf_norms.hub.server import HubServer
from hf_norms.readers import TEXT_LIMIT, file_records

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple:
    """A text file with what a line reader must get right: blank lines, CRLF, a form feed, non-ASCII, long lines."""
    from hf_norms import packaged

    texts = [" ".join(text.split()) for text, _ in packaged.bbc_news()[:120]]
    lines = []
    for index, text in enumerate(texts):
        lines.append(text[: 40 + (index * 37) % 400])
        lines += [""] * (index % 5 == 0) + ["   "] * (index % 7 == 0)
    lines[3] += "\r"
    lines[10] = "first part\x0csecond part \u2013 with a dash"
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    return path, load_examples(path, "text").items


def items(dataset) -> list:
    return [example["item"] for example in dataset]


def test_a_text_file_streams_in_pieces_as_a_line_reader_reads_it(corpus):
    path, expected = corpus
    stream = open_stream(DataSource(path), "text")
    assert stream.dataset.n_shards == streaming.MIN_PIECES and stream.size is None
    assert items(stream.dataset) == expected and {"first part", "second part \u2013 with a dash"} <= set(expected)
    shards = [items(stream.dataset.shard(2, index)) for index in (0, 1)]  # what accelerate gives 2 processes
    assert shards[0] + shards[1] == expected and min(map(len, shards)) > 40
    assert open_stream(DataSource(path), "text", processes=32).dataset.n_shards == 32  # one piece per process
    assert stream.first(5).items == expected[:5] and stream.first(5).description == str(path)


def test_the_evaluation_texts_are_left_out(corpus, tmp_path):
    path, expected = corpus
    held_out = HeldOut(16, 8, frozenset(expected[16:24]))
    assert items(open_stream(DataSource(path), "text", held_out).dataset) == expected[:16] + expected[24:]
    every = HeldOut(0, len(expected), frozenset(expected))  # a --data that is all evaluation examples: said so
    with pytest.raises(ConversionError, match=rf"^Every text example of {re.escape(str(path))} is also one the "
                       rf"conversion evaluates on \({len(expected)} held out from position 0\), so none is left to "
                       "heal on: give --data other examples, or --eval-data"):  # fmt: skip
        open_stream(DataSource(path), "text", every)
    (tmp_path / "empty.txt").write_text("\n\n")  # a file without examples is still that
    with pytest.raises(ConversionError, match=r"empty\.txt holds no text examples to heal on"):
        open_stream(DataSource(tmp_path / "empty.txt"), "text", HeldOut(0, 1))
    (tmp_path / "bad.txt").write_bytes(b"fine line\nbad \xff byte\n")
    with pytest.raises(ConversionError, match=r"bad\.txt is not UTF-8 text \(byte 0xff at offset 14\)"):
        items(open_stream(DataSource(tmp_path / "bad.txt"), "text").dataset)


def test_jsonl_and_parquet_files_and_folders_of_them(corpus, tmp_path):
    _, expected = corpus
    folder = tmp_path / "jsonl"
    (folder / "b").mkdir(parents=True)
    for name, part in (("a.jsonl", expected[:50]), ("b/c.jsonl", expected[50:])):
        (folder / name).write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(part)))
    assert items(open_stream(DataSource(folder), "text").dataset) == expected  # the only text column, sorted files
    with pytest.raises(
        ConversionError,
        match=r"has no text column 'text'; its columns are \['id', 'body'\]\. Name the right one with --text-column",
    ):
        open_stream(DataSource(folder / "a.jsonl", column="text"), "text")
    table = pa.table({"title": [t[:10] for t in expected], "text": expected})
    pq.write_table(table, tmp_path / "corpus.parquet", row_group_size=25)
    stream = open_stream(DataSource(tmp_path / "corpus.parquet"), "text")  # `text` is preferred over `title`
    assert items(stream.dataset) == expected and stream.dataset.n_shards == 5 and stream.size == len(expected)
    titles = open_stream(DataSource(tmp_path / "corpus.parquet", column="title"), "text")
    assert items(titles.dataset) == [t[:10] for t in expected]
    (folder / "d.parquet").write_bytes((tmp_path / "corpus.parquet").read_bytes())
    with pytest.raises(ConversionError, match=r"\.parquet files \(one kind\), .*found \.jsonl, \.jsonl, \.parquet"):
        open_stream(DataSource(folder), "text")
    with pytest.raises(ConversionError, match=r"^There is no file or folder .*missing\.txt; check the data path\.$"):
        open_stream(DataSource(tmp_path / "missing.txt"), "text")
    with pytest.raises(ConversionError, match=r"--data-config names a configuration of a Hub dataset"):
        open_stream(DataSource(tmp_path / "corpus.parquet", config="news"), "text")


def test_images_stream_from_a_folder_parquet_and_a_saved_dataset(tmp_path):
    images = save_images(tmp_path / "images", 10)
    expected = load_examples(images, "image").items
    stream = open_stream(DataSource(images), "image", HeldOut(2, 3))
    assert stream.size == 7 and stream.dataset.n_shards == 7
    pixels = [list(image.getdata()) for image in items(stream.dataset)]
    assert pixels == [list(image.getdata()) for image in expected[:2] + expected[5:]]
    with pytest.raises(ConversionError, match=r"^Every image example of .* \(10 held out from position 0\)"):
        open_stream(DataSource(images), "image", HeldOut(0, 10))

    encoded = []
    for image in expected:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        encoded.append({"bytes": buffer.getvalue(), "path": None})
    pq.write_table(pa.table({"label": list(range(10)), "picture": encoded}), tmp_path / "images.parquet")
    from_parquet = items(open_stream(DataSource(tmp_path / "images.parquet"), "image").dataset)
    assert [list(image.getdata()) for image in from_parquet] == [list(image.getdata()) for image in expected]

    gray = [image.convert("L") for image in expected]  # a saved dataset's images come out as RGB
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"img": gray}),
                                   "test": datasets.Dataset.from_dict({"img": gray[:2]})})  # fmt: skip
    splits.save_to_disk(str(tmp_path / "saved"))
    saved = open_stream(DataSource(tmp_path / "saved"), "image", HeldOut(0, 4))
    got = items(saved.dataset)
    assert saved.size == 6 and {image.mode for image in got} == {"RGB"}
    assert [list(image.convert("L").getdata()) for image in got] == [list(image.getdata()) for image in gray[4:]]
    assert open_stream(DataSource(tmp_path / "saved", split="test"), "image").size == 2
    with pytest.raises(ConversionError, match=r"has no split 'validation' \(splits: \['train', 'test'\]\)"):
        open_stream(DataSource(tmp_path / "saved", split="validation"), "image")


def test_a_stream_trains_on_the_windows_of_the_in_memory_path(corpus, minilm_dir):
    path, expected = corpus
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    stream = open_stream(DataSource(path), "text")
    streamed = list(stream.training_dataset(tokenizer, 32, seed=0))
    in_memory = healing.training_examples(tokenizer, load_examples(path, "text"), 32)
    assert len(streamed) == len(in_memory) > len(expected)  # long texts give several windows
    assert streamed != in_memory  # shuffled ...
    assert sorted(map(json.dumps, streamed)) == sorted(map(json.dumps, in_memory))  # ... the same windows
    assert list(stream.training_dataset(tokenizer, 32, seed=0)) == streamed  # the same order for every process


def test_accelerate_gives_each_process_its_own_pieces(corpus, minilm_dir):
    """What the Trainer's data loader becomes in each of 2 processes (`accelerate.data_loader.prepare_data_loader`,
    `dispatch_batches=False` as heal sets it): the stream's own shards, half the pieces each, so no process reads the
    other's part of the file; together they are every training window once."""
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader

    path, _ = corpus
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    dataset = open_stream(DataSource(path), "text").training_dataset(tokenizer, 32, seed=0)
    windows = []
    for rank in (0, 1):
        loader = DataLoader(dataset, batch_size=4, collate_fn=lambda batch: batch)
        prepared = prepare_data_loader(loader, num_processes=2, process_index=rank, put_on_device=False,
                                       dispatch_batches=False)  # fmt: skip
        assert isinstance(prepared.dataset, datasets.IterableDataset)
        assert prepared.dataset.n_shards == streaming.MIN_PIECES // 2
        windows.append([json.dumps(window) for batch in prepared for window in batch])
    assert sorted(windows[0] + windows[1]) == sorted(map(json.dumps, dataset)) and not set(windows[0]) & set(windows[1])


def test_a_line_of_20_mb_is_read_in_windows_holding_a_window_at_a_time(tmp_path):
    """One line of 20 MB (with two-byte characters) between two short ones: streamed in 16 pieces, it comes as windows
    of at most `TEXT_LIMIT` bytes whose text is the line's, the same windows a whole read gives; the reading holds a
    few windows at a time (Python's allocations), not the line."""
    line = "abcd\u00e9" * 4_000_000
    path = tmp_path / "long.txt"
    path.write_text(f"first\n{line}\nlast\n")
    stream = open_stream(DataSource(path), "text", processes=4)
    assert stream.dataset.n_shards == 16
    tracemalloc.start()
    digest, sizes = hashlib.sha256(), []
    for example in stream.dataset:
        digest.update(example["item"].encode())
        sizes.append(len(example["item"].encode()))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(line.encode()) == 24_000_000 and peak < 4_000_000
    assert digest.hexdigest() == hashlib.sha256(f"first{line}last".encode()).hexdigest()
    cuts = (len("first\n") + len(line.encode())) // TEXT_LIMIT  # the multiples of TEXT_LIMIT inside the line
    assert sizes[0] == 5 and sizes[-1] == 4 and len(sizes) == 2 + cuts + 1 and max(sizes) <= TEXT_LIMIT + 3
    assert [len(text.encode()) for text in load_examples(path, "text").items] == sizes
    tracemalloc.start()
    assert len(load_examples(path, "text", 3).items[2]) > 0  # the first three examples: the line's first two windows
    assert tracemalloc.get_traced_memory()[1] < 1_000_000
    tracemalloc.stop()


def test_the_cuts_of_long_lines_depend_on_the_file_alone(tmp_path):
    """`readers.file_records` on random files of short and long lines with one-, two-, three- and four-byte characters
    (with a limit of 8 bytes): the records tile the file (newlines between them where lines end), a line of at most 8
    bytes is one whole record, no record is longer than 8 + 3 bytes or cut inside a character, and reading any split of
    the file into byte ranges gives the same records as reading it whole."""
    generator = random.Random(0)
    characters = ["a", "b", " ", "\u00e9", "\u20ac", "\U0001f600"]
    for _ in range(300):
        lines = ["".join(generator.choices(characters, k=generator.choice([0, 1, 3, 7, 8, 9, 16, 17, 40])))
                 for _ in range(generator.randint(1, 8))]  # fmt: skip
        data = "\n".join(lines).encode() + generator.choice([b"", b"\n"])
        path = tmp_path / "records.txt"
        path.write_bytes(data)
        records = list(file_records(path, limit=8))
        position = 0
        for offset, raw, _ in records:
            assert offset == position and data[offset : offset + len(raw)] == raw and len(raw) <= 11
            raw.decode("utf-8")
            position = offset + len(raw) + (data[offset + len(raw) : offset + len(raw) + 1] == b"\n")
        assert position == len(data)
        whole = {raw for _, raw, is_whole in records if is_whole}
        assert {line.encode() for line in lines if len(line.encode()) <= 8} - {b""} <= whole
        bounds = sorted({0, len(data), *generator.sample(range(len(data) + 1), min(4, len(data) + 1))})
        pieces = [record for begin, end in itertools.pairwise(bounds)
                  for record in file_records(path, begin, end, limit=8)]  # fmt: skip
        assert pieces == records


HUB_SCRIPT = """
import json, sys
from hf_norms.conversion.streaming import DataSource, open_stream
from hf_norms.conversion.checkpoint_io import ConversionError
results = {}
for name, source in (("default", DataSource("org/corpus")),
                     ("config", DataSource("org/corpus", config="news", split="test", column="body"))):
    stream = open_stream(source, "text", token="hf_stream-token")
    results[name] = {"items": [e["item"] for e in stream.dataset], "shards": stream.dataset.n_shards,
                     "description": stream.description}
try:
    open_stream(DataSource("org/no-such-corpus"), "text", token="hf_stream-token")
except ConversionError as error:
    results["missing"] = str(error)
print(json.dumps(results))
"""


def test_a_hub_dataset_id_streams_from_the_loopback_hub(tmp_path, monkeypatch):
    """A private dataset repo with two Parquet shards, and a `news` configuration (README `configs:`) with a `test`
    split whose texts are in its `body` column, read by id through HF_ENDPOINT with the token."""
    import huggingface_hub
    from huggingface_hub import HfApi

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest is offline; this is loopback

    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True), (folder / "news").mkdir()
    texts = [f"text number {i}" for i in range(30)]
    pq.write_table(pa.table({"text": texts[:20]}), folder / "data" / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"text": texts[20:]}), folder / "data" / "train-00001-of-00002.parquet")
    news = pa.table({"id": list(range(5)), "body": [f"news {i}" for i in range(5)]})
    pq.write_table(news, folder / "news" / "test.parquet")
    (folder / "README.md").write_text(textwrap.dedent("""\
        ---
        configs:
        - config_name: default
          data_files:
          - split: train
            path: data/train-*.parquet
        - config_name: news
          data_files:
          - split: test
            path: news/test.parquet
        ---
        """))  # fmt: skip
    with HubServer(tmp_path / "hub", tokens=["hf_stream-token"]) as hub:
        api = HfApi(endpoint=hub.url, token="hf_stream-token")
        api.create_repo("org/corpus", repo_type="dataset", private=True)
        api.upload_folder(folder_path=folder, repo_id="org/corpus", repo_type="dataset")
        env = {**os.environ, **hub.client_env(), "HF_HOME": str(tmp_path / "hf-home")}
        env.pop("HF_TOKEN", None)
        result = subprocess.run(
            [sys.executable, "-c", HUB_SCRIPT], env=env, capture_output=True, text=True, timeout=300
        )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["default"] == {"items": texts, "shards": 2, "description": "org/corpus, split train"}
    assert found["config"]["items"] == [f"news {i}" for i in range(5)]
    assert found["config"]["description"] == "org/corpus (news), split test"
    assert found["missing"].startswith("Hub dataset org/no-such-corpus, split train:")


@pytest.fixture(scope="module")
def tiny_bert_dtn(tiny_bert_dir, corpus, tmp_path_factory):
    """A naive (inexact) DTN conversion of a tiny BERT, evaluated on the corpus' first 8 texts; no calibration."""
    path, _ = corpus
    out = tmp_path_factory.mktemp("stream-heal") / "dtn"
    convert(tiny_bert_dir, "dtn", out, options={"dtn_gate_init": 0.5}, evaluation_data=path, evaluation_samples=8,
            max_length=32)  # fmt: skip
    return out


def test_heal_streams_its_data(tiny_bert_dtn, corpus, tmp_path):
    """No `samples`: the text file is streamed (its evaluation texts left out), tokenised on the fly; the report says
    so, and the run is on the device the automatic choice gives (here the CPU, in float32)."""
    path, _ = corpus
    torch.manual_seed(0)
    report = healing.heal(tiny_bert_dtn, path, output=tmp_path / "healed", max_steps=3, batch_size=4, max_length=32,
                          warmup_steps=0, progress=False)  # fmt: skip
    record = report["healing"]
    assert record["streamed"] is True and record["samples"] is None and record["training_examples"] is None
    assert record["data"] == str(path) and record["steps"] == 3
    assert record["bf16"] is (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert record["device"] == ("cuda" if torch.cuda.is_available() else "cpu") and record["processes"] == 1
    saved = json.loads((tmp_path / "healed" / REPORT_JSON).read_text())
    assert list(saved["stages"]) == ["naive", "healed"]
    assert "on a stream of" in (tmp_path / "healed" / "conversion_report.md").read_text()
