"""One data grammar for every command (issue 45 item 6): `heal --data` reads the .csv, .tsv, .json/.jsonl and .parquet
files (and folders of them) that `convert` and `finetune` read, through the same `datasets.load_dataset` builders, with
the column named by `--text-column` / `--text_column`; a mistake in a data argument (an unsupported format, a missing
file, an unknown column) is the same one line, exit status 2, in every command, before any model loads."""

from __future__ import annotations

import json

import datasets
import pytest
from test_convert import tree_digest
from test_safety import assert_refused, run

from hf_norms import cli, packaged
from hf_norms.conversion import healing
from hf_norms.conversion.convert import convert
from hf_norms.conversion.data import load_examples
from hf_norms.conversion.report import REPORT_JSON
from hf_norms.conversion.streaming import DataSource, open_stream

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = (".csv", ".tsv", ".json", ".jsonl", ".parquet")


def write_news(path, count: int = 40, start: int = 0):
    """`count` real BBC News articles from the `start`th (their first 300 characters) as a data file of `path`'s kind: columns `title`
    (the first line) and `body`; returns the bodies."""
    articles = [" ".join(text.split()) for text, _ in packaged.bbc_news()[start : start + count]]
    rows = {"title": [text[:30] for text in articles], "body": [text[:300] for text in articles]}
    data = datasets.Dataset.from_dict(rows)
    writers = {".csv": lambda p: data.to_csv(p, index=False), ".tsv": lambda p: data.to_csv(p, sep="\t", index=False),
               ".json": data.to_json, ".jsonl": data.to_json, ".parquet": data.to_parquet}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    writers[path.suffix](str(path))
    return rows["body"]


@pytest.fixture(scope="module")
def tiny_bert_dtn(tiny_bert_dir, tmp_path_factory):
    """A naive (inexact) DTN conversion of a tiny BERT, evaluated on the built-in probe sentences."""
    out = tmp_path_factory.mktemp("grammar") / "dtn"
    convert(tiny_bert_dir, "dtn", out, options={"dtn_gate_init": 0.5}, max_length=32)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_heal_streams_every_data_file_convert_reads_with_the_same_column(kind, tmp_path):
    """A streamed data file gives exactly the examples convert's in-memory read of it gives, from the named column
    (or, unnamed, from the preferred/first text column: `title` here, the first)."""
    path = tmp_path / f"news{kind}"
    bodies = write_news(path)
    stream = open_stream(DataSource(path, column="body"), "text")
    assert [example["item"] for example in stream.dataset] == bodies
    assert load_examples(path, "text", column="body").items == bodies
    titles = [example["item"] for example in open_stream(DataSource(path), "text").dataset]
    assert titles == load_examples(path, "text").items and titles[0] == bodies[0][:30]


def test_a_folder_of_csv_files_streams_one_shard_per_file(tmp_path):
    first = write_news(tmp_path / "corpus" / "a.csv", 10)
    second = write_news(tmp_path / "corpus" / "b" / "c.csv", 10, start=10)
    stream = open_stream(DataSource(tmp_path / "corpus", column="body"), "text")
    assert [example["item"] for example in stream.dataset] == first + second and stream.dataset.n_shards == 2


def test_a_csv_that_stops_reading_midway_or_holds_no_rows_is_one_line(tmp_path):
    """A row that does not parse stops the stream with one line naming the file and the line (it was pandas'
    ParserError), when the stream opens, wherever the row lies (it was found only when the stream reached it, past the
    first 10,000 rows): the bounded reader reads the whole file before `datasets` does; a CSV of a header alone holds
    no examples."""
    rows = [f"title {i},article {i} about markets" for i in range(10_050)]
    path = tmp_path / "long.csv"
    for count in (10_050, 20):
        path.write_text("title,body\n" + "\n".join(rows[:count]) + '\na,"b",c,d\n')
        expected = rf"^{path}, line {count + 2} has 4 cells, more than the header's 2 columns; fix it\.$"
        with pytest.raises(healing.ConversionError, match=expected):
            open_stream(DataSource(path, column="body"), "text")
    (tmp_path / "header.csv").write_text("title,body\n")
    with pytest.raises(healing.ConversionError, match=r"header\.csv holds no text examples to heal on\.$"):
        open_stream(DataSource(tmp_path / "header.csv"), "text")


@pytest.mark.parametrize(("kind", "spelling"), [(".csv", "--text_column"), (".json", "--text-column")])
def test_heal_on_a_csv_or_json_file_names_its_column_in_either_spelling(kind, spelling, tiny_bert_dtn, tmp_path,
                                                                        capsys):  # fmt: skip
    path = tmp_path / f"news{kind}"
    write_news(path)
    output = tmp_path / "healed"
    argv = ["heal", str(tiny_bert_dtn), "--data", str(path), spelling, "body", "--max-steps", "2", "--batch-size",
            "4", "--max-length", "32", "--output", str(output)]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err
    record = json.loads((output / REPORT_JSON).read_text())["healing"]
    assert (record["data"], record["steps"], record["streamed"]) == (str(path), 2, True)


def refusals(data: str, column: list[str], tiny_bert_dtn, tiny_bert_dir, tmp_path) -> dict[str, list[str]]:
    """The three commands' command lines reading `data`, each with its spelling of the text column option."""
    underscored = ["--" + c[2:].replace("-", "_") if c.startswith("--") else c for c in column]
    convert = ["convert", str(tiny_bert_dir), "--norm-type", "dyt", "--calibration-data", data]
    finetune = ["finetune", "--model_name_or_path", str(tiny_bert_dir), "--dataset", data, "--label_column", "title"]
    return {
        "heal": ["heal", str(tiny_bert_dtn), "--data", data, *column, "--output", str(tmp_path / "healed")],
        "convert": [*convert, *column, "--output", str(tmp_path / "converted")],
        "finetune": [*finetune, *underscored, "--output_dir", str(tmp_path / "tuned"), "--use_cpu"],
    }


def test_a_mistake_in_a_data_argument_is_the_same_line_in_every_command_before_any_model_loads(
    tiny_bert_dtn, tiny_bert_dir, tmp_path, capsys, monkeypatch
):
    """An unsupported format, a missing file and an unknown column: exit 2, one line naming the fix, the same in heal,
    convert and finetune (which names the split a column is missing from, not the file); no model is loaded and
    nothing is written (every file keeps its sha256)."""
    import transformers

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the data was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", no_model)
    sheet = tmp_path / "data" / "news.xlsx"
    sheet.parent.mkdir()
    sheet.write_bytes(b"PK\x03\x04 a spreadsheet")
    news = tmp_path / "data" / "news.csv"
    write_news(news)
    missing = tmp_path / "data" / "missing.csv"
    unsupported = f"{sheet} is not a data file hf-norms reads: save it as a .txt, .csv, .tsv, .json, .jsonl or .parquet"
    column = "has no text column 'summary'; its columns are ['title', 'body']. Name the right one with --text"
    cases = [
        (str(sheet), [], unsupported + " file."),
        (str(missing), [], f"There is no file or folder {missing}; check the data path."),
        (str(news), ["--text-column", "summary"], column),
    ]
    capsys.readouterr()  # the data file's writer's progress bar
    before = {folder: tree_digest(folder) for folder in (tmp_path / "data", tiny_bert_dtn, tiny_bert_dir)}
    for data, options, expected in cases:
        for command, argv in refusals(data, options, tiny_bert_dtn, tiny_bert_dir, tmp_path).items():
            status, err = run(argv, capsys)
            assert_refused(status, err, expected)
            where = "The train data " if command == "finetune" else f"{data} "
            assert f"hf-norms {command}: error: {where if options else ''}{expected}" in err
    assert {folder: tree_digest(folder) for folder in before} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data"]
    with pytest.raises(healing.ConversionError, match="is not a data file hf-norms reads"):
        load_examples(sheet, "text")
