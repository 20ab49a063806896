"""The one bounded reader (`hf_norms.readers`): each bound is read at the bound and refused one past it, in one line
naming the file, the line and the bound; anything but a regular file is refused before it is opened; a text data file
reaches `datasets` only as the copy that was checked, whole, and leaves nothing in the cache of `datasets`."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from hf_norms import readers
from hf_norms.conversion.data_files import data_file_rows, load_data_files
from hf_norms.errors import InputError
from hf_norms.readers import (
    COLUMN_LIMIT,
    DOCUMENT_LIMIT,
    JSON_DEPTH,
    JSON_LIMIT,
    YAML_LIMIT,
    YAML_NODES,
    card_metadata_of,
    parse_json,
    parse_yaml,
)

BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def refused(call, *arguments, match: str) -> str:
    """The one-line message `call(*arguments)` is refused with (an `InputError`), checked to hold `match`."""
    with pytest.raises(InputError) as error:
        call(*arguments)
    message = str(error.value)
    assert match in message and "\n" not in message, message
    return message


# --------------------------------------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------------------------------------


def test_yaml_values_at_the_bound_and_one_past() -> None:
    """`t: [...]` is a mapping, a key, a list and its items: YAML_NODES - 3 items are read, one more is refused."""
    items = YAML_NODES - 3
    assert len(parse_yaml("t: [" + "a," * (items - 1) + "a]", "card", "fix it")["t"]) == items
    refused(parse_yaml, "t: [" + "a," * items + "a]", "card", "fix it", match=f"holds more than {YAML_NODES} values")


def test_yaml_depth_at_the_bound_and_one_past() -> None:
    assert parse_yaml("[" * JSON_DEPTH + "]" * JSON_DEPTH, "card", "fix it") is not None
    deeper = "[" * (JSON_DEPTH + 1) + "]" * (JSON_DEPTH + 1)
    refused(parse_yaml, deeper, "card", "fix it", match=f"nests deeper than {JSON_DEPTH} levels")


def test_yaml_bytes_at_the_bound_and_one_past() -> None:
    text = "a: " + "x" * (YAML_LIMIT - 3)
    assert len(parse_yaml(text, "options.yaml", "fix it")["a"]) == YAML_LIMIT - 3
    refused(parse_yaml, text + "x", "options.yaml", "fix it", match=f"options.yaml holds more than {YAML_LIMIT} bytes")


def test_a_billion_laughs_card_is_refused_at_its_first_anchor_in_moments(tmp_path: Path) -> None:
    """9**9 "lol"s in 500 bytes: PyYAML's safe_load (huggingface_hub's ModelCard.load) builds them as shared lists,
    which grew `push` to gigabytes where the card's data was copied and written out. No anchor is accepted (card
    metadata needs none); a card without one reads."""
    card = tmp_path / "README.md"
    card.write_text(f"---\nlicense: mit\n{BILLION_LAUGHS}---\n# A model\n")
    started = time.perf_counter()
    message = refused(card_metadata_of, card, match="anchors and aliases are not accepted")
    assert message.startswith(f"{card}, line 3: ") and time.perf_counter() - started < 1
    card.write_text("---\nlicense: mit\ntags: [a, b]\n---\n# A model\n")
    assert card_metadata_of(card) == {"license": "mit", "tags": ["a", "b"]}


def test_a_broken_card_names_its_file_and_line(tmp_path: Path) -> None:
    """It ended push in a raw ScannerError, exit 1."""
    card = tmp_path / "README.md"
    card.write_text("---\nlicense: mit\ntags: [a, b\nlanguage: en\n---\n# A model\n")
    message = refused(card_metadata_of, card, match="not YAML that hf-norms reads")
    assert message.startswith(f"{card}, line 4: ") and message.endswith("(between the --- lines at the top).")


# --------------------------------------------------------------------------------------------------------------------
# JSON, and the rows of data files
# --------------------------------------------------------------------------------------------------------------------


def test_json_depth_at_the_bound_and_one_past() -> None:
    assert parse_json("[" * JSON_DEPTH + "]" * JSON_DEPTH, "x.json", "fix it") is not None
    for levels in (JSON_DEPTH + 1, 20_000):
        deeper = "[" * levels + "]" * levels
        refused(parse_json, deeper, "x.json", "fix it", match=f"x.json is nested too deeply (more than {JSON_DEPTH}")


def test_a_json_file_of_the_bound_and_one_past(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text('"' + "x" * (JSON_LIMIT - 2) + '"')
    assert len(readers.read_json(path, "fix it")) == JSON_LIMIT - 2
    path.write_text('"' + "x" * (JSON_LIMIT - 1) + '"')
    refused(readers.read_json, path, "fix it", match=f"larger than {JSON_LIMIT} bytes")


def csv_with_columns(path: Path, count: int) -> Path:
    path.write_text(",".join(f"c{i}" for i in range(count)) + "\n" + ",".join(["1"] * count) + "\n")
    return path


def test_csv_columns_at_the_bound_and_one_past(tmp_path: Path) -> None:
    """200,000 columns took 91 s and 1.5 GB in pyarrow; now one line at once."""
    assert len(load_data_files([csv_with_columns(tmp_path / "a.csv", COLUMN_LIMIT)]).column_names) == COLUMN_LIMIT
    refused(load_data_files, [csv_with_columns(tmp_path / "b.csv", COLUMN_LIMIT + 1)], match="b.csv, line 1 has 4097")
    started = time.perf_counter()
    refused(load_data_files, [csv_with_columns(tmp_path / "c.csv", 200_000)], match=f"more than the {COLUMN_LIMIT}")
    assert time.perf_counter() - started < 5


def test_a_json_row_of_the_column_bound_and_one_past(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "a"}\n' + "{" + ",".join(f'"k{i}": 1' for i in range(COLUMN_LIMIT)) + "}\n")
    assert load_data_files([path]).num_rows == 2
    path.write_text('{"text": "a"}\n' + "{" + ",".join(f'"k{i}": 1' for i in range(COLUMN_LIMIT + 1)) + "}\n")
    refused(load_data_files, [path], match=f"rows.jsonl, line 2 has {COLUMN_LIMIT + 1} columns")


def test_a_csv_row_and_cell_of_the_document_bound_and_one_past(tmp_path: Path) -> None:
    """A 10 MB article reads; a row (so a cell) of DOCUMENT_LIMIT bytes reads, one byte more is refused (a 100 MB
    cell held 0.9-1.4 GB)."""
    path = tmp_path / "articles.csv"
    cell = "word, " * (DOCUMENT_LIMIT // 6 - 1)
    path.write_text(f'text\n"{cell}{"x" * (DOCUMENT_LIMIT - len(cell) - 3)}"\n')  # 2 quotes and the newline
    assert len(load_data_files([path])["text"][0]) == DOCUMENT_LIMIT - 3
    path.write_text(f'text\n"{cell}{"x" * (DOCUMENT_LIMIT - len(cell) - 2)}"\n')
    refused(load_data_files, [path], match=f"articles.csv, line 2: longer than {DOCUMENT_LIMIT} bytes")


def test_a_json_cell_of_the_document_bound_and_one_past(tmp_path: Path) -> None:
    path = tmp_path / "articles.json"
    path.write_text('[{"text": "' + "x" * DOCUMENT_LIMIT + '"}]')
    assert len(load_data_files([path])["text"][0]) == DOCUMENT_LIMIT
    path.write_text('[{"text": "' + "x" * (DOCUMENT_LIMIT + 1) + '"}]')
    refused(load_data_files, [path], match=f"articles.json, row 0 holds a text of {DOCUMENT_LIMIT + 1} bytes")


@pytest.mark.parametrize("levels", [1_000, 20_000])
def test_a_deep_json_line_after_the_first_is_refused_before_datasets_reads_the_file(levels: int, tmp_path) -> None:
    """20,000 levels ended convert and finetune in a segmentation fault inside pyarrow, 1,000 in a RecursionError; the
    whole file is read before `datasets` sees it, so the line is found wherever it lies, by every command."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "a"}\n' * 3 + '{"text": ' + "[" * levels + "]" * levels + "}\n")
    refused(load_data_files, [path], match="deep.jsonl, line 4 is nested too deeply (more than 64 levels)")
    refused(lambda: next(data_file_rows(path)), match="deep.jsonl, line 4 is nested too deeply")


# --------------------------------------------------------------------------------------------------------------------
# Regular files only; nothing left in the cache of datasets
# --------------------------------------------------------------------------------------------------------------------


def test_a_fifo_a_device_and_a_socket_are_refused_before_they_are_opened(tmp_path: Path) -> None:
    """A FIFO blocked the reader for ever (heal hung, its staging folder left behind)."""
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "data.txt"))
        for path in (fifo, Path("/dev/zero"), tmp_path / "data.txt"):
            refused(readers.open_regular, path, match=f"{path} is not a regular file")
    started = time.perf_counter()
    refused(load_data_files, [fifo], match="is not a regular file (it is a FIFO, device or socket")
    refused(readers.read_json, fifo, "fix it", match="is not a regular file")
    refused(card_metadata_of, fifo, match="is not a regular file")
    assert time.perf_counter() - started < 5


def test_loading_a_data_file_leaves_nothing_in_the_cache_of_datasets(tmp_path: Path) -> None:
    """`convert --calibration-data` left datasets' Arrow cache (481 MB in one run) in $HF_HOME/datasets."""
    import datasets

    cache = Path(datasets.config.HF_DATASETS_CACHE)
    before = sorted(cache.rglob("*")) if cache.exists() else []
    path = tmp_path / "news.csv"
    path.write_text("text,label\n" + "".join(f'"article {i}, about markets",{i % 3}\n' for i in range(500)))
    loaded = load_data_files([path])
    assert loaded.num_rows == 500 and loaded.features["label"].dtype == "int64"
    assert (sorted(cache.rglob("*")) if cache.exists() else []) == before
    assert not [name for name in os.listdir(os.environ.get("TMPDIR", "/tmp")) if name.startswith("hf-norms-data-")]


def test_the_copy_datasets_reads_is_the_file_that_was_checked(tmp_path: Path) -> None:
    """What `datasets` reads is the checked copy: a file changed afterwards changes nothing that was read."""
    path = tmp_path / "texts.jsonl"
    path.write_text('{"text": "first"}\n{"text": "second"}\n')
    rows = data_file_rows(path)
    assert next(rows) == {"text": "first"}
    path.write_text('{"text": ' + "[" * 20_000 + "]" * 20_000 + "}\n")
    assert [row["text"] for row in rows] == ["second"]
    with pytest.raises(InputError, match="line 1 is nested too deeply"):
        next(data_file_rows(path))


def test_a_fifo_in_a_healing_data_folder_is_refused_before_the_stream_opens(tmp_path: Path) -> None:
    """`heal --data folder` with a FIFO among its files hung for ever (its staging folder left behind)."""
    from hf_norms.conversion.streaming import DataSource, open_stream

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("a text about the weather\n" * 4)
    os.mkfifo(folder / "b.txt")
    started = time.perf_counter()
    refused(open_stream, DataSource(folder), "text", match=f"{folder / 'b.txt'} is not a regular file")
    assert time.perf_counter() - started < 5
