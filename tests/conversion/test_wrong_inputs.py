"""Every wrong input is one line on stderr with exit status 2, before anything is allocated or written.

Each case gives the real command line (`hf_norms.cli.main`, in this process) a broken config, a malformed safetensors
header, unreadable data or an unusable path, and asserts the status, that stderr is one line without a traceback, the
words that say what is wrong, and that the source and the user's files are byte for byte unchanged. Configs that would
allocate gigabytes are refused from their numbers, in well under the time an allocation would take.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub.errors import StrictDataclassError
from test_convert import save_images, tree_digest
from test_safety import assert_refused, run

import hf_norms
from hf_norms.conversion.healing import heal
from hf_norms.errors import ArgumentTypeError
from hf_norms.training.finetune import finetune


def edited_copy(source: Path, target: Path, config: dict | None = None, header=None) -> Path:
    """A copy of the checkpoint `source` with `config` merged into its config.json and/or its safetensors header text
    replaced by `header(text)` (the tensor data kept)."""
    shutil.copytree(source, target)
    if config is not None:
        (target / "config.json").write_text(json.dumps({**json.loads((target / "config.json").read_text()), **config}))
    if header is not None:
        raw = (target / "model.safetensors").read_bytes()
        size = struct.unpack("<Q", raw[:8])[0]
        text = header(raw[8 : 8 + size].decode()).encode()
        (target / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + size :])
    return target


def edit_header(edit):
    """A header editor: parse, let `edit` change the dict, serialise."""

    def apply(text: str) -> str:
        header = json.loads(text)
        edit(header)
        return json.dumps(header)

    return apply


def tensors(header: dict) -> list[str]:
    return sorted((name for name in header if name != "__metadata__"), key=lambda n: header[n]["data_offsets"][0])


def same_size_pair(header: dict) -> tuple[str, str]:
    sizes: dict[int, list[str]] = {}
    for name in tensors(header):
        start, stop = header[name]["data_offsets"]
        sizes.setdefault(stop - start, []).append(name)
    return next(tuple(names[:2]) for names in sizes.values() if len(names) > 1)


def overlap(header: dict) -> None:
    first, second = same_size_pair(header)
    header[second]["data_offsets"] = header[first]["data_offsets"]


def float_offsets(header: dict) -> None:
    name = tensors(header)[0]
    header[name]["data_offsets"] = [float(v) for v in header[name]["data_offsets"]]


BROKEN_SOURCES = {
    "negative-hidden-size": ({"hidden_size": -48}, None, "hidden_size must be a positive integer"),
    "unknown-activation": ({"hidden_act": "nope"}, None, "hidden_act 'nope' is not an activation"),
    "float-heads": ({"num_attention_heads": 4.5}, None, "num_attention_heads must be a positive integer"),
    "labels-disagree": (
        {"id2label": {"0": "a"}, "num_labels": 3},
        None,
        "id2label names 1 classes but num_labels is 3",
    ),
    "labels-not-indices": ({"id2label": {"x": "a"}}, None, "id2label must map the class indices"),
    "dropout-nan": ({"hidden_dropout_prob": float("nan")}, None, "hidden_dropout_prob must be a probability"),
    "ten-million-positions": ({"max_position_embeddings": 10**7}, None, "the config does not belong to these weights"),
    "a-million-labels": (
        {"num_labels": 10**6, "id2label": None, "label2id": None},
        None,
        "the config does not belong to these weights",
    ),
    "header-nested-deep": (
        None,
        lambda text: text.rstrip()[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "nested too deeply",
    ),
    "header-overlap": (None, edit_header(overlap), "overlaps another"),
    "header-float-offsets": (None, edit_header(float_offsets), "corrupt header entry"),
    "header-metadata-list": (None, edit_header(lambda h: h.update(__metadata__=[1, 2])), "__metadata__"),
    "header-infinite-shape": (
        None,
        edit_header(lambda h: h[tensors(h)[0]].update(shape=[10**30, 10**30])),
        "inconsistent offsets",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_SOURCES))
def test_a_broken_source_is_one_line_before_anything_is_allocated(case, tiny_vit_dir, tiny_bert_dir, tmp_path, capsys):
    config, header, expected = BROKEN_SOURCES[case]
    base = tiny_bert_dir if case == "ten-million-positions" else tiny_vit_dir
    source = edited_copy(base, tmp_path / "source", config, header)
    before = tree_digest(source)
    started = time.perf_counter()
    status, err = run(["convert", str(source), "--norm-type", "dtn", "--output", str(tmp_path / "out")], capsys)
    assert_refused(status, err, expected)
    assert time.perf_counter() - started < 20  # a 10**7 x 32 position table alone would be 1.2 GB
    assert tree_digest(source) == before and not (tmp_path / "out").exists()


def test_an_oversized_config_is_refused_by_heal_and_finetune_too(tiny_bert_dir, tmp_path, capsys):
    converted = tmp_path / "converted"
    assert run(["convert", str(tiny_bert_dir), "--norm-type", "dtn", "--output", str(converted)], capsys)[0] == 0
    config = json.loads((converted / "config.json").read_text())
    (converted / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 10**7}))
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\nanother text\n")
    status, err = run(["heal", str(converted), "--data", str(texts)], capsys)
    assert_refused(status, err, "the config does not belong to these weights")
    source = edited_copy(tiny_bert_dir, tmp_path / "stock", {"num_labels": 10**6, "id2label": None, "label2id": None})
    data = tmp_path / "news.csv"
    data.write_text("text,label\n" + "".join(f"text number {i},{i % 2}\n" for i in range(8)))
    status, err = run(["finetune", "--model_name_or_path", str(source), "--dataset", str(data), "--num_labels",
                       "1000000", "--max_seq_length", "16", "--output_dir", str(tmp_path / "ft"), "--use_cpu"], capsys)  # fmt: skip
    assert_refused(status, err, "the config does not belong to these weights")


def test_unreadable_data_is_one_line(tiny_vit_dir, tiny_bert_dir, tmp_path, capsys):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    status, err = run(["convert", str(tiny_bert_dir), "--norm-type", "dyt", "--calibration-data", str(binary),
                       "--output", str(tmp_path / "a")], capsys)  # fmt: skip
    assert_refused(status, err, "is not UTF-8 text (byte 0x80 at offset 128)")
    images = save_images(tmp_path / "images", 3)
    (images / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    status, err = run(["convert", str(tiny_vit_dir), "--norm-type", "dyt", "--calibration-data", str(images),
                       "--output", str(tmp_path / "b")], capsys)  # fmt: skip
    assert_refused(status, err, "broken.png is not a readable image")
    header_only = tmp_path / "header.csv"
    header_only.write_text("text,label\n")
    status, err = run(["finetune", "--model_name_or_path", str(tiny_bert_dir), "--dataset", str(header_only),
                       "--output_dir", str(tmp_path / "c"), "--use_cpu"], capsys)  # fmt: skip
    assert_refused(status, err, "header.csv as a csv file with rows of data")
    assert not any((tmp_path / name).exists() for name in "abc")


def test_a_corrupt_image_in_a_fine_tuning_imagefolder_is_one_line_before_training(tmp_path, capsys):
    folder = tmp_path / "photos"
    for label in ("cats", "dogs"):
        save_images(folder / label, 3)
    (folder / "dogs" / "z.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    status, err = run(["finetune", "--model_type", "vit_norm", "--config_overrides",
                       "image_size=32,patch_size=8,hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
                       "intermediate_size=32", "--dataset", str(folder), "--output_dir", str(tmp_path / "out"),
                       "--use_cpu", "--max_steps", "1"], capsys)  # fmt: skip
    assert_refused(status, err, "z.png) is not a readable image")
    assert not (tmp_path / "out").exists()


def test_unusable_paths_are_one_line(tiny_vit_dir, tmp_path, capsys):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    cases = {
        str(loop): "link",
        str(tmp_path / ("x" * 300)): "File name too long",
        str(tmp_path / "file.txt"): "is a file",
    }
    (tmp_path / "file.txt").write_text("mine")
    for output, expected in cases.items():
        status, err = run(["convert", str(tiny_vit_dir), "--norm-type", "lape", "--output", output], capsys)
        assert_refused(status, err, expected)
    status, err = run(["convert", "/" + "a/" * 3000, "--norm-type", "lape", "--output", str(tmp_path / "o")], capsys)
    assert_refused(status, err, "File name too long")
    assert (tmp_path / "file.txt").read_text() == "mine" and loop.is_symlink()


def test_push_refuses_an_oversized_config_before_loading_it(tiny_bert_dir, tmp_path, capsys):
    converted = tmp_path / "converted"
    assert run(["convert", str(tiny_bert_dir), "--norm-type", "lape", "--output", str(converted)], capsys)[0] == 0
    config = json.loads((converted / "config.json").read_text())
    (converted / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 10**7}))
    started = time.perf_counter()
    status, err = run(["push", "org/tiny", str(converted), "--dry-run"], capsys)
    assert_refused(status, err, "the config does not belong to these weights")
    assert time.perf_counter() - started < 20


def test_wrong_types_in_the_python_api_are_type_errors_with_one_line(tiny_vit_dir, tmp_path):
    calls = {
        "convert(None, ...)": lambda: hf_norms.convert(None, "dtn", tmp_path / "o"),
        "convert(..., norm_type=3)": lambda: hf_norms.convert(tiny_vit_dir, 3, tmp_path / "o"),
        "convert(..., output=None)": lambda: hf_norms.convert(tiny_vit_dir, "dtn", None),
        "convert_model(None, ...)": lambda: hf_norms.convert_model(None, "dtn"),
        "heal(None, ...)": lambda: heal(None, "data.txt"),
        "finetune(None, ...)": lambda: finetune(None, None, None),
        "push_to_hub(None, ...)": lambda: hf_norms.push_to_hub(None, "org/x"),
        "push_to_hub(..., repo_id=None)": lambda: hf_norms.push_to_hub(tmp_path, None),
    }
    for call in calls.values():
        with pytest.raises(ArgumentTypeError) as raised:
            call()
        assert isinstance(raised.value, TypeError) and "\n" not in str(raised.value)
    assert not (tmp_path / "o").exists()


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def with_field(text: str, field: str) -> str:
    """A JSON object's text with one more field (given as `"name": value`)."""
    return text.rstrip()[:-1] + f", {field}}}"


# Files of a sentence-transformers checkpoint made unreadable: name -> (file, its new text from the old, what stderr says).
BROKEN_FILES = {
    "tokenizer-truncated": ("tokenizer.json", lambda text: text[: len(text) // 2], "tokenizer.json is not valid JSON"),
    "tokenizer-config-a-list": ("tokenizer_config.json", lambda text: "[1, 2]", "holds a JSON list, not an object"),
    "tokenizer-config-200k-deep": (
        "tokenizer_config.json",
        lambda text: with_field(text, f'"deep": {nested(200_000)}'),
        "tokenizer_config.json is nested too deeply",
    ),
    "config-200k-deep": (
        "config.json",
        lambda text: with_field(text, f'"deep": {nested(200_000)}'),
        "nested too deeply",
    ),
    "config-65-deep": ("config.json", lambda text: with_field(text, f'"deep": {nested(65)}'), "more than 64 levels"),
    "config-over-64-mb": (
        "config.json",
        lambda text: with_field(text, '"padding": "' + "x" * (1 << 26) + '"'),
        "config.json is larger than 67108864 bytes",
    ),
    "modules-200k-deep": ("modules.json", lambda text: nested(200_000), "modules.json is nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_a_json_file_of_the_source_that_does_not_read_is_one_line_and_nothing_is_written(
    case, tiny_bert_dir, minilm_dir, tmp_path, capsys
):
    """Every JSON file hf-norms or the tokenizer reads from the source goes through one bounded reader (size, nesting,
    an object where one is needed): a truncated tokenizer.json is refused, not skipped (the conversion used to succeed
    without a tokenizer), and a list or a deep nest is one line, not an AttributeError or a RecursionError."""
    from conftest import tiny_sentence_transformer

    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, tmp_path / "source")
    name, edit, expected = BROKEN_FILES[case]
    (source / name).write_text(edit((source / name).read_text()))
    before = tree_digest(source)
    status, err = run(["convert", str(source), "--norm-type", "dtn", "--output", str(tmp_path / "out")], capsys)
    assert_refused(status, err, expected)
    assert tree_digest(source) == before and sorted(p.name for p in tmp_path.iterdir()) == ["source"]


def test_a_broken_conversion_report_is_one_line_before_healing_starts(tiny_bert_dir, tmp_path, capsys):
    converted = tmp_path / "converted"
    assert run(["convert", str(tiny_bert_dir), "--norm-type", "dtn", "--output", str(converted)], capsys)[0] == 0
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\nanother text\n")
    report = json.loads((converted / "conversion_report.json").read_text())
    cases = {
        "its 'evaluation' is missing or malformed": {**report, "evaluation": None},
        "its 'architecture' is missing or malformed": {**report, "architecture": "GPT2Model"},
        "conversion_report.json is nested too deeply": {**report, "deep": json.loads(nested(70))},
        "holds a JSON list, not an object": [report],
    }
    for expected, broken in cases.items():
        (converted / "conversion_report.json").write_text(json.dumps(broken))
        before = tree_digest(tmp_path)
        status, err = run(["heal", str(converted), "--data", str(texts), "--max-steps", "1"], capsys)
        assert_refused(status, err, expected)
        assert tree_digest(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == [
            "converted",
            "texts.txt",
        ]


def image_bomb(path: Path, side: int = 13000) -> Path:
    """A PNG of `side` x `side` black pixels: 20 KB on disk, 507 MB as RGB."""
    from PIL import Image

    Image.new("1", (side, side)).save(path)
    return path


def test_an_image_of_too_many_pixels_is_refused_from_its_header(tiny_vit_dir, tmp_path, capsys):
    """A 13000 x 13000 PNG among calibration images (and in a fine-tuning imagefolder): one line naming it, from its
    header, without PIL's raw DecompressionBombWarning, before anything is decoded or written."""
    images = save_images(tmp_path / "images", 3)
    image_bomb(images / "bomb.png")
    before = tree_digest(images)
    started = time.perf_counter()
    status, err = run(["convert", str(tiny_vit_dir), "--norm-type", "dyt", "--calibration-data", str(images),
                       "--output", str(tmp_path / "out")], capsys)  # fmt: skip
    assert_refused(status, err, "bomb.png is an image of 13000 x 13000 pixels, more than the 67,108,864")
    assert time.perf_counter() - started < 20 and "Warning" not in err
    assert tree_digest(images) == before and not (tmp_path / "out").exists()
    folder = tmp_path / "photos"
    for label in ("cats", "dogs"):
        save_images(folder / label, 3)
    image_bomb(folder / "dogs" / "z.png")
    status, err = run(["finetune", "--model_type", "vit_norm", "--config_overrides",
                       "image_size=32,patch_size=8,hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
                       "intermediate_size=32", "--dataset", str(folder), "--output_dir", str(tmp_path / "ft"),
                       "--use_cpu", "--max_steps", "1"], capsys)  # fmt: skip
    assert_refused(status, err, "z.png) is an image of 13000 x 13000 pixels")
    assert not (tmp_path / "ft").exists() and "Warning" not in err


def test_a_tokenizer_that_does_not_load_stops_fine_tuning_in_one_line(tiny_bert_dir, tmp_path, capsys):
    """The checkpoint's tokenizer is read as a conversion reads it: a truncated tokenizer.json is refused before the
    output folder is made, not skipped for another tokenizer file."""
    source = edited_copy(tiny_bert_dir, tmp_path / "source")
    text = (source / "tokenizer.json").read_text()
    (source / "tokenizer.json").write_text(text[: len(text) // 2])
    data = tmp_path / "news.csv"
    data.write_text("text,label\n" + "".join(f"text number {i},{i % 2}\n" for i in range(8)))
    before = tree_digest(source)
    status, err = run(["finetune", "--model_name_or_path", str(source), "--dataset", str(data), "--max_seq_length",
                       "16", "--max_steps", "1", "--output_dir", str(tmp_path / "out"), "--use_cpu"], capsys)  # fmt: skip
    assert_refused(status, err, "tokenizer.json is not valid JSON")
    assert tree_digest(source) == before and not (tmp_path / "out").exists()


OUT_OF_RANGE_OPTIONS = {
    "dyt_alpha_init=1e308": "--option dyt_alpha_init=1e+308: must be a finite float32 number (magnitude at most 3.4028234663852886e+38).",
    "dyt_alpha_init=3.5e38": "--option dyt_alpha_init=3.5e+38: must be a finite float32 number (magnitude at most 3.4028234663852886e+38).",
    "derf_shift_init=-1e39": "--option derf_shift_init=-1e+39: must be a finite float32 number (magnitude at most 3.4028234663852886e+38).",
    "derf_alpha_init=nan": "--option derf_alpha_init=nan: must be a finite float32 number (magnitude at most 3.4028234663852886e+38).",
    "dtn_gate_init=-inf": "--option dtn_gate_init=-inf: must be a finite float32 number (magnitude at most 3.4028234663852886e+38).",
}
HUGE_LAYER_RANGES = {
    "0-300000000": "--keep-layernorm '0-300000000': the model has 2 encoder layers (0 to 1).",
    "1,5-1000000000000000000": "--keep-layernorm '1,5-1000000000000000000': the model has 2 encoder layers (0 to 1).",
    "99999999999999999999": "--keep-layernorm '99999999999999999999': the model has 2 encoder layers (0 to 1).",
    "-300000000": "--keep-layernorm '-300000000': the model has 2 encoder layers (0 to 1).",
    "0-"
    + "9" * 5000: "--keep-layernorm '0-9999999999...9999999999999': expected layer indices such as",  # echoed short
}


@pytest.mark.parametrize("case", [*OUT_OF_RANGE_OPTIONS, *HUGE_LAYER_RANGES], ids=lambda case: case[:30])
def test_option_values_and_layer_ranges_beyond_the_model_are_one_line_at_once(case, tiny_bert_dir, tmp_path, capsys):
    """`--option dyt_alpha_init=1e308` (finite, but infinite as a float32 weight) used to fail in torch's init with a
    raw RuntimeError, `--keep-layernorm 0-300000000` to build a list of 300 million layers (65 s, 2.5 GB): both are
    refused from the numbers, in one line, before the source is loaded."""
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\nanother text\n" * 80)
    before = tree_digest(tiny_bert_dir)
    argv = ["convert", str(tiny_bert_dir), "--output", str(tmp_path / "out"), "--calibration-data", str(texts)]
    if case in OUT_OF_RANGE_OPTIONS:
        argv += ["--norm-type", case.split("_")[0], "--option", case]
    else:
        argv += ["--norm-type", "dyt", f"--keep-layernorm={case}"]
    started = time.perf_counter()
    status, err = run(argv, capsys)
    assert_refused(status, err, {**OUT_OF_RANGE_OPTIONS, **HUGE_LAYER_RANGES}[case])
    assert len(err) < 300
    assert time.perf_counter() - started < 5
    assert tree_digest(tiny_bert_dir) == before and not (tmp_path / "out").exists()


def test_a_norm_option_beyond_the_models_dtype_is_refused_by_the_config(tiny_bert_dir, tmp_path, capsys):
    """The config bounds each float option by its own dtype (a float16 model's weights hold at most 65504), in Python
    and through `finetune --config_overrides`."""
    from hf_norms.models.bert.configuration_bert_norm import BertNormConfig

    assert BertNormConfig(norm_type="dyt", dyt_alpha_init=6e4, dtype="float16").dyt_alpha_init == 6e4
    with pytest.raises(StrictDataclassError, match=re.escape("dyt_alpha_init=70000.0 does not fit a float16 weight")):
        BertNormConfig(norm_type="dyt", dyt_alpha_init=7e4, dtype="float16")
    with pytest.raises(StrictDataclassError, match=re.escape("derf_shift_init=1e+300 does not fit a float32 weight")):
        BertNormConfig(norm_type="derf", derf_shift_init=1e300)
    tiny = {"float32": 1e-320, "float16": 1e-8}  # > 0, but 0 once stored in a weight of that dtype
    for dtype, value in tiny.items():
        said = f"dyt_alpha_init={value!r} does not fit a {dtype} weight: dyt_alpha_init must be a finite number > 0"
        with pytest.raises(StrictDataclassError, match=re.escape(said)):
            BertNormConfig(norm_type="dyt", dyt_alpha_init=value, dtype=dtype)
    assert BertNormConfig(norm_type="dyt", dyt_alpha_init=1e-6, dtype="float16").dyt_alpha_init == 1e-6
    data = tmp_path / "news.csv"
    data.write_text("text,label\n" + "".join(f"text number {i},{i % 2}\n" for i in range(8)))
    status, err = run(["finetune", "--model_name_or_path", str(tiny_bert_dir), "--dataset", str(data),
                       "--norm_type", "dyt", "--config_overrides", "dyt_alpha_init=1e308",
                       "--output_dir", str(tmp_path / "ft"), "--use_cpu"], capsys)  # fmt: skip
    assert_refused(status, err, "dyt_alpha_init=1e+308 does not fit a float32 weight")
    assert not (tmp_path / "ft").exists()


BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_a_card_that_is_an_alias_bomb_or_broken_yaml_is_one_line_naming_its_line(tiny_bert_dir, tmp_path, capsys):
    """A billion-laughs README (9**9 values from 500 bytes) grew `push` to gigabytes; a README whose YAML does not
    parse ended it in a raw ScannerError (exit 1). Both are one line naming the card and its line, at once."""
    converted = tmp_path / "converted"
    assert run(["convert", str(tiny_bert_dir), "--norm-type", "lape", "--output", str(converted)], capsys)[0] == 0
    card = converted / "README.md"
    for metadata, line, expected in ((BILLION_LAUGHS, 3, "anchors and aliases are not accepted"),
                                     ("tags: [a, b\nlanguage: en\n", 4, "not YAML that hf-norms reads")):  # fmt: skip
        card.write_text(f"---\nlicense: mit\n{metadata}---\n# A model\n")
        started = time.perf_counter()
        status, err = run(["push", "org/tiny", str(converted), "--dry-run"], capsys)
        error = err.splitlines()[-1]  # (push names the card of the snapshot it publishes)
        assert status == 2 and error.startswith("hf-norms push: error: ") and "Traceback" not in err, err
        assert f"README.md, line {line}: " in error and expected in error and time.perf_counter() - started < 20


def test_convert_refuses_a_deep_or_wide_data_line_anywhere_and_leaves_no_arrow_cache(tiny_bert_dir, tmp_path):
    """`convert --calibration-data` of a JSON Lines file whose second line nests 20,000 deep was a segmentation fault
    inside pyarrow (exit 139); of a good CSV it left datasets' Arrow cache (481 MB in one run) in $HF_HOME/datasets.
    Run as a user runs it, in its own process with HF_HOME in a temporary folder."""
    home = tmp_path / "hf-home"
    environment = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    deep, news = tmp_path / "deep.jsonl", tmp_path / "news.csv"
    deep.write_text('{"text": "a text"}\n{"text": ' + "[" * 20_000 + "]" * 20_000 + "}\n")
    news.write_text("text,label\n" + "".join(f'"article {i}, about the markets",{i % 3}\n' for i in range(64)))
    results = {}
    for data in (deep, news):
        argv = ["convert", str(tiny_bert_dir), "--norm-type", "dyt", "--calibration-data", str(data),
                "--calibration-samples", "16", "--output", str(tmp_path / data.stem)]  # fmt: skip
        code = "import sys; from hf_norms.cli import main; sys.exit(main(sys.argv[1:]))"
        results[data] = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                                       env=environment, timeout=300)  # fmt: skip
    refused = results[deep]
    assert_refused(refused.returncode, refused.stderr, f"{deep}, line 2 is nested too deeply (more than 64 levels)")
    assert not (tmp_path / "deep").exists()
    assert results[news].returncode == 0, results[news].stderr
    assert not (home / "datasets").exists() or not any((home / "datasets").rglob("*.arrow"))
