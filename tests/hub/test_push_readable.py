"""What push cannot read in full it does not publish, and nothing is created before every check passes (issue 44).

A file is published only when a reader of a known format read all of it (UTF-8 text, JSON, safetensors, PNG, JPEG,
NumPy, protocol buffers, archives and compressed streams unpacked to their end) and no secret pattern occurs in what
it read, nor in its name; anything else is left out by name unless `include_skipped` names it, which the card then
states. A secret in a file the checkpoint needs refuses the whole push, naming the file and where in it. Every scanner
runs in linear time. A name the Hub refuses, and an oversized tokenizer file, are refused before anything is read or
created. A shortened path in an error line never shows part of the token."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import pickle
import re
import shutil
import struct
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import HfApi
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

import hf_norms
from hf_norms.errors import OutputFolderError
from hf_norms.hub.content_checks import scan_file
from hf_norms.hub.publish import CheckpointRefused, push_to_hub
from hf_norms.hub.upload_files import screen_files
from hf_norms.output_folders.places import resolved
from hf_norms.redaction import token_forms, tokens_redacted

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"  # the shape of a real Hub token: hf_ and 34 letters and digits
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"  # ghp_ and 36
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n"
ADVERSARIAL_BYTES = 10_000_000
# A linear scanner takes 4x the CPU for 4x the bytes, a quadratic one 16x (one took 81 s for 210 KB): the growth bound
# sits between them and does not depend on how busy the machine is. The ceiling (CPU seconds for 10 MB; 3.1-3.6 s
# alone, up to 5.1 s beside the suite's other worker) catches a scanner slow at every size.
SCAN_GROWTH = 8.0
SCAN_SECONDS = 20.0

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture
def checkpoint(saved_checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_checkpoint, tmp_path / "vit"))


def dry_run(folder: Path, **push_args) -> list[str]:
    return push_to_hub(folder, "org/readable", token=TOKEN, dry_run=True, **push_args)


def left_out(caplog: pytest.LogCaptureFixture, name: str) -> str:
    """The reason of the one "Not uploading NAME: ..." line logged."""
    (line,) = [line for line in caplog.text.splitlines() if f"Not uploading {name}: " in line]
    return line.split(f"Not uploading {name}: ", 1)[1]


def disk_state(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --------------------------------------------------------------------------------------------------------------------
# Item 1: what push cannot read in full is not published
# --------------------------------------------------------------------------------------------------------------------


def zlib_with_checksum_flipped(data: bytes) -> bytes:
    stream = bytearray(zlib.compress(data))
    stream[-1] ^= 0xFF
    return bytes(stream)


def zlib_with_dictionary(data: bytes) -> bytes:
    compressor = zlib.compressobj(zdict=b"a preset dictionary of the attacker")
    return compressor.compress(data) + compressor.flush()


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


def v7_tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    blocks = bytearray(buffer.getvalue())
    blocks[257:265] = b"\0" * 8  # no ustar magic and version: a v7 header
    blocks[148:156] = b"        "
    blocks[148:156] = f"{sum(blocks[:512]):06o}\0 ".encode()
    return bytes(blocks)


def png(text_chunk: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    data = buffer.getvalue()
    if text_chunk:
        chunk = b"tEXt" + text_chunk
        data = (
            data[:-12] + struct.pack(">I", len(text_chunk)) + chunk + struct.pack(">I", zlib.crc32(chunk)) + data[-12:]
        )
    return data


def jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (30, 200, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


def safetensors_bytes(metadata: dict[str, str] | None = None, extra: bytes = b"") -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         **({"__metadata__": metadata} if metadata else {})}).encode()  # fmt: skip
    return struct.pack("<Q", len(header)) + header + struct.pack("<2f", 1.0, 2.0) + extra


# case: (file name, content, what the line that leaves it out says); the first eight are the reproductions of issue 44
UNREAD: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "zlib stream, last checksum byte flipped": ("state.z", lambda: zlib_with_checksum_flipped(TOKEN.encode()), "does not decompress"),
    "zlib stream with a preset dictionary": ("dict.z", lambda: zlib_with_dictionary(TOKEN.encode()), "does not decompress"),
    "raw deflate": ("raw.deflate", lambda: raw_deflate(f"token={TOKEN}".encode()), "not a format push can read"),
    "UTF-16 key after a CJK line, with BOM": ("k16.txt", lambda: ("模型的说明\n" + KEY).encode("utf-16"), "private key"),
    "UTF-16 key after a CJK line, no BOM": ("k16le.txt", lambda: ("模型的说明\n" + KEY).encode("utf-16-le"), "cannot read all of it"),
    "protocol-0 pickle and a newline": ("p0.txt", lambda: pickle.dumps({"hub_token": TOKEN}, protocol=0) + b"\n", "a pickle"),
    "protocol-1 pickle and two NULs": ("p1.bin", lambda: pickle.dumps({"a": [1, 2]}, protocol=1) + b"\0\0", "a pickle"),
    "v7 tar holding a pickle": ("state.tar", lambda: v7_tar({"state.pkl": pickle.dumps({"a": 1}, protocol=4)}), "(in state.pkl)"),
    # variants of the same classes
    "gzip with its CRC flipped": ("log.gz", lambda: __import__("gzip").compress(TOKEN.encode())[:-8] + b"\0" * 8, "does not decompress"),
    "zip with bytes after its end": ("extra.zip", lambda: zip_bytes({"a.txt": b"notes"}) + TOKEN.encode()[::-1], "zip archive with bytes"),
    "PNG with bytes after IEND": ("plot-tail.png", lambda: png() + KEY.encode("utf-16"), "after its end"),
    "PNG with a broken chunk checksum": ("plot2.png", lambda: png()[:-4] + b"\0\0\0\0", "checksum is wrong"),
    "JPEG with bytes after EOI": ("photo-tail.jpg", lambda: jpeg() + b"\0" + KEY.encode(), "after its end"),
    "text with a NUL byte": ("notes.txt", lambda: b"loss 0.1\0" + raw_deflate(KEY.encode()), "cannot read all of it"),
    "safetensors with bytes after its tensors": ("extra.safetensors", lambda: safetensors_bytes(extra=raw_deflate(KEY.encode())), "do not cover its data"),
    ".json that is not JSON": ("notes.json", lambda: b'{"a": 1,', "not valid JSON"),
    "tar with bytes after its end": ("more.tar", lambda: v7_tar({"a.txt": b"x"}) + b"\1" * 600, "cannot read all of it"),
    "a key base64'd in UTF-16 text": ("k64.txt", lambda: f"key: {base64.b64encode(KEY.encode()).decode()}\n".encode("utf-16"), "private key (in a base64 text)"),
    "a GitHub token JSON-escaped": ("escaped.json", lambda: json.dumps({"note": GITHUB_TOKEN}).replace("ghp_", "\\u0067hp_").encode(), "GitLab) (at note)"),
    "a key JSON-escaped in a .txt": ("escaped.txt", lambda: json.dumps({"k": KEY}).replace("-----BEGIN", "\\u002d----BEGIN").encode(), "private key (at k)"),
    "a key in a PNG text chunk": ("chart.png", lambda: png(b"Comment\0" + KEY.encode()), "private key (its tEXt chunk)"),
    "a key hidden between zip members": ("gap.zip", lambda: zip_with_gap(KEY.encode("utf-16")), "between its members"),
    "a key in a zip comment": ("comment.zip", lambda: zip_bytes({"a.txt": b"x"}, comment=KEY.encode()), "private key (its zip headers"),
    "a key after a zip member's deflate stream": ("tail.zip", lambda: zip_with_bytes_after_stream(KEY.encode("utf-16")), "does not end where the data ends"),
    "a key in a tar member's padding": ("pad.tar", lambda: tar_with_padding(KEY.encode("utf-16")), "in their padding"),
    "a key in a tar pax header": ("pax.tar", lambda: pax_tar({"comment": KEY}), "private key (its tar headers"),
    "a secret in a zip member's name": ("names.zip", lambda: zip_bytes({f"keys/{GITHUB_TOKEN}.txt": b"x"}), "(its zip headers: names"),
}  # fmt: skip
# read in full and published
READABLE: dict[str, Callable[[], bytes]] = {
    "plot.png": png,
    "photo.jpg": jpeg,
    "notes.z": lambda: zlib.compress(b"loss 0.1 at step 5\n"),
    "说明.md": lambda: "# 模型\n损失 0.1\n".encode(),
    "notes16.txt": lambda: "loss 0.1, 模型\n".encode("utf-16"),
    "stats.npy": lambda: npy_bytes(np.arange(6.0)),
    "more.safetensors": safetensors_bytes,
    "table.csv": lambda: b"step,loss\n1,0.5\n2,0.25\n",
    "nb.md": lambda: b"N.B. a text that starts as a pickle of None would\n",
    "empty.zip": lambda: zip_bytes({}),
    "bundle.tar": lambda: v7_tar({"a.txt": b"notes", "b.json": b"{}"}),
}


def zip_bytes(members: dict[str, bytes], comment: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.comment = comment
    return buffer.getvalue()


def zip_with_bytes_after_stream(hidden: bytes) -> bytes:
    """A zip of one deflated member whose compressed size counts `hidden` after its deflate stream."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("notes.txt", b"loss 0.1 at step 5\n" * 20)
    data = buffer.getvalue()
    directory = data.rfind(b"PK\x01\x02")
    name_length, extra_length = struct.unpack("<HH", data[26:30])
    stream_end = 30 + name_length + extra_length + struct.unpack("<I", data[18:22])[0]
    out = bytearray(data[:stream_end] + hidden + data[stream_end:])
    size = struct.unpack("<I", out[18:22])[0] + len(hidden)
    out[18:22] = struct.pack("<I", size)
    directory += len(hidden)
    out[directory + 20 : directory + 24] = struct.pack("<I", size)
    end = out.rfind(b"PK\x05\x06")
    out[end + 16 : end + 20] = struct.pack("<I", directory)
    return bytes(out)


def tar_with_padding(hidden: bytes) -> bytes:
    """A tar of one 3-byte member with `hidden` in the padding of its data block."""
    data = bytearray(v7_tar({"a.txt": b"abc"}))
    data[512 + 3 : 512 + 3 + len(hidden)] = hidden
    return bytes(data)


def pax_tar(headers: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("a.txt")
        info.size, info.pax_headers = 3, headers
        archive.addfile(info, io.BytesIO(b"abc"))
    return buffer.getvalue()


def zip_with_gap(hidden: bytes) -> bytes:
    """A zip of two members with `hidden` between them, every offset of its directory moved past it."""
    first = zip_bytes({"a.txt": b"notes"})
    directory = first.rfind(b"PK\x01\x02")
    local = first[:directory]
    second = zip_bytes({"a.txt": b"notes", "b.txt": b"more"})
    second_start = second.find(b"PK\x03\x04", 1)
    data = bytearray(local + hidden + second[second_start:])
    shift = len(hidden)
    position = data.find(b"PK\x01\x02")
    while position >= 0:  # each directory entry's local header offset, after the first
        offset = struct.unpack("<I", data[position + 42 : position + 46])[0]
        if offset:
            data[position + 42 : position + 46] = struct.pack("<I", offset + shift)
        position = data.find(b"PK\x01\x02", position + 4)
    end = data.rfind(b"PK\x05\x06")
    start_dir = struct.unpack("<I", data[end + 16 : end + 20])[0]
    data[end + 16 : end + 20] = struct.pack("<I", start_dir + shift)
    return bytes(data)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize("case", UNREAD)
def test_what_push_cannot_read_in_full_is_not_published(
    case: str, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    name, content, reason = UNREAD[case]
    (checkpoint / name).write_bytes(content())
    assert name not in dry_run(checkpoint, include=[name])
    assert reason in left_out(caplog, name)


def test_files_of_known_formats_are_read_and_published(checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for name, content in READABLE.items():
        (checkpoint / name).write_bytes(content())
    assert set(READABLE) <= set(dry_run(checkpoint, include=list(READABLE))), caplog.text


def test_nothing_unread_reaches_the_hub_and_the_opt_in_is_stated(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    """Every file included (`*`): the Hub gets the checkpoint and the readable files; `include_skipped` publishes an
    unreadable file, and the card names it."""
    for name, content, _ in UNREAD.values():
        (checkpoint / name).write_bytes(content())
    for name, content in READABLE.items():
        (checkpoint / name).write_bytes(content())
    push_to_hub(checkpoint, "org/unread", endpoint=api.endpoint, token=TOKEN, include=["*"])
    published = set(api.list_repo_files("org/unread"))
    assert not published & {name for name, _, _ in UNREAD.values()} and set(READABLE) <= published
    push_to_hub(checkpoint, "org/unread", endpoint=api.endpoint, token=TOKEN, include_skipped=["raw.deflate"])
    assert "raw.deflate" in api.list_repo_files("org/unread")
    card = (Path(api.hf_hub_download("org/unread", "README.md", cache_dir=tmp_path / "dl"))).read_text()
    assert "asked to publish raw.deflate even where hf-norms cannot read it in full (--include-skipped)" in card


@pytest.mark.parametrize(
    "name", [f"1_{GITHUB_TOKEN}/config.json", "aws-AKIAIOSFODNN7EXAMPLE.txt", "runs/xoxb-1234567890-abcdef/notes.txt"]
)
def test_a_secret_in_a_file_or_folder_name_is_never_published(
    name: str, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
    (checkpoint / name).write_text("{}")
    assert name not in dry_run(checkpoint, include=["*"])
    assert "holds" in left_out(caplog, name)


# --------------------------------------------------------------------------------------------------------------------
# Item 2: a secret in a file the checkpoint needs refuses the whole push, before anything is created
# --------------------------------------------------------------------------------------------------------------------


def edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value, indent=2))


def metadata_with(folder: Path, secret: str) -> None:
    tensors = load_file(folder / "model.safetensors")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt", "note": f"made by {secret}"})


ESSENTIAL_SECRETS: dict[str, tuple[Callable[[Path], None], str]] = {
    "the token in safetensors __metadata__": (lambda f: metadata_with(f, TOKEN), "model.safetensors holds an access token"),
    "a key in safetensors __metadata__": (lambda f: metadata_with(f, KEY), "model.safetensors holds a private key (its header, at __metadata__.note)"),
    "a GitHub token in a config field": (lambda f: edit_json(f / "config.json", lambda c: c.update(note=GITHUB_TOKEN)), "config.json holds an access token (Hugging Face, GitHub, AWS, OpenAI, Slack, Google, npm, PyPI or GitLab) (at note)"),
    "the token in id2label": (lambda f: edit_json(f / "config.json", lambda c: c.update(id2label={"0": TOKEN}, label2id={TOKEN: 0})), "config.json holds an access token (Hugging Face, GitHub, AWS, OpenAI, Slack, Google, npm, PyPI or GitLab) (at id2label.0)"),
    "a password in the processor config": (lambda f: edit_json(f / "preprocessor_config.json", lambda c: c.update(auth="password=hunter2-x9")), "preprocessor_config.json holds a secret setting"),
}  # fmt: skip


@pytest.mark.parametrize("case", ESSENTIAL_SECRETS)
def test_a_secret_in_a_file_the_checkpoint_needs_refuses_the_push(case: str, checkpoint: Path, api: HfApi) -> None:
    plant, expected = ESSENTIAL_SECRETS[case]
    plant(checkpoint)
    before = disk_state(checkpoint)
    with pytest.raises(CheckpointRefused) as excinfo:
        push_to_hub(checkpoint, "org/essential", endpoint=api.endpoint, token=TOKEN)
    message = str(excinfo.value)
    assert expected in message and "Nothing was created" in message and "\n" not in message
    assert (
        not [form for form in token_forms(TOKEN) if form.decode("latin-1") in message] and GITHUB_TOKEN not in message
    )
    assert not api.repo_exists("org/essential") and disk_state(checkpoint) == before


@pytest.fixture
def bert_checkpoint(tiny_bert_dir: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "bert"
    config = hf_norms.BertNormConfig.from_pretrained(tiny_bert_dir, norm_type="dyt")
    hf_norms.BertNormModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


def test_a_secret_in_the_tokenizer_vocabulary_refuses_the_push(bert_checkpoint: Path, api: HfApi) -> None:
    def plant(tokenizer: dict) -> None:
        tokenizer["model"]["vocab"][GITHUB_TOKEN] = len(tokenizer["model"]["vocab"])

    edit_json(bert_checkpoint / "tokenizer.json", plant)
    with pytest.raises(CheckpointRefused, match=r"tokenizer\.json holds an access token .*\(a key of model\.vocab\)"):
        push_to_hub(bert_checkpoint, "org/vocab", endpoint=api.endpoint, token=TOKEN)
    assert not api.repo_exists("org/vocab")


# --------------------------------------------------------------------------------------------------------------------
# Item 3: every scanner runs in linear time
# --------------------------------------------------------------------------------------------------------------------

ADVERSARIAL = [b"eyj", b"password=a1", b"auth=", b"auth=a ", b"eyJ.", b"-----begin a ", b"sk-", b"://a:", b"machine a ",
               b"hf_", b"a:1:a:a:", b'token: "', b"password=a1\n", b"secret_key=x1/", b"A", b"A" * 40 + b" ",
               b"eNo" + b"A" * 40 + b" ", b"UEsDBA" + b"A" * 40 + b"\n"]  # fmt: skip


def scan_seconds(folder: Path, content: bytes) -> tuple[float, str | None]:
    """CPU seconds of this process to scan `content` as an allow-listed report, which must be read in full, and the
    secret found in it (None: nothing)."""
    path = folder / "conversion_report.md"
    path.write_bytes(content)
    start = time.process_time()
    findings = scan_file(path, token_forms(TOKEN))
    seconds = time.process_time() - start
    assert findings.unread is None
    return seconds, findings.secret


@pytest.mark.parametrize("unit", ADVERSARIAL, ids=[unit.decode()[:16] for unit in ADVERSARIAL])
def test_every_scanner_runs_in_linear_time(unit: bytes, tmp_path: Path) -> None:
    """One adversarial unit repeated (a run no pattern ends, a keyword at every few bytes): 10 MB of it costs about 4x
    the CPU of 2.5 MB, not 16x, and stays under the ceiling."""
    (quarter, _), (whole, _) = (
        scan_seconds(tmp_path, unit * (size // len(unit))) for size in (ADVERSARIAL_BYTES // 4, ADVERSARIAL_BYTES)
    )
    print(f"{unit!r}: {quarter:.2f} s, then {whole:.2f} s for 4x the bytes")
    assert whole < SCAN_GROWTH * quarter + 0.5 and whole < SCAN_SECONDS


def test_an_adversarial_conversion_report_is_published_at_once(checkpoint: Path) -> None:
    """The allow-listed report of issue 44 (210 KB of "eyj": 81 s), 1 MB of it, read through a whole push."""
    (checkpoint / "conversion_report.md").write_bytes(b"eyj" * 350_000)
    start = time.perf_counter()
    assert "conversion_report.md" in dry_run(checkpoint)
    assert time.perf_counter() - start < SCAN_SECONDS + 5


# --------------------------------------------------------------------------------------------------------------------
# Item 5: one push is one commit or nothing; push reads tokenizer files within bounds
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["notes\n.txt", "tab\tname.txt", "back\\slash.txt", "bell\x07.txt"])
def test_a_name_the_hub_refuses_is_refused_before_anything_is_created(name: str, checkpoint: Path, api: HfApi) -> None:
    for index in range(34):
        (checkpoint / f"notes-{index:02}.txt").write_text(f"note {index}")
    (checkpoint / name).write_text("harmless")
    before = disk_state(checkpoint)
    with pytest.raises(CheckpointRefused, match="the Hub refuses") as excinfo:
        push_to_hub(checkpoint, "org/names", endpoint=api.endpoint, token=TOKEN, include=["*.txt"])
    assert repr(name) in str(excinfo.value) and "\n" not in str(excinfo.value)
    assert not api.repo_exists("org/names") and disk_state(checkpoint) == before


@pytest.mark.parametrize("size", [(64 << 20) + 1, 3 << 30], ids=["64 MiB + 1", "3 GB"])
def test_an_oversized_tokenizer_file_is_refused_before_it_is_read(size: int, bert_checkpoint: Path, api: HfApi) -> None:
    """A sparse tokenizer.json larger than 64 MiB (the bound every command applies) is refused from its size."""
    with open(bert_checkpoint / "tokenizer.json", "r+b") as stream:
        stream.truncate(size)
    start = time.perf_counter()
    with pytest.raises(CheckpointRefused, match=r"tokenizer\.json is larger than 64 MiB"):
        push_to_hub(bert_checkpoint, "org/big-tokenizer", endpoint=api.endpoint, token=TOKEN)
    assert time.perf_counter() - start < 10 and not api.repo_exists("org/big-tokenizer")


# --------------------------------------------------------------------------------------------------------------------
# Item 14: redact before shortening
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [TOKEN, "private-endpoint-token-0815-abcdef"])
@pytest.mark.parametrize("side", ["head", "tail"])
def test_a_shortened_path_shows_no_part_of_the_token(token: str, side: str) -> None:
    """A path longer than an error line shows is cut in its middle (its first and last 80 characters kept): the
    token across the cut, 30 of its characters on the kept side, is replaced first."""
    with tempfile.TemporaryDirectory(prefix="s") as base:
        if side == "head":  # base/aaa/TOKEN/loop/bbb, the token starting 30 characters before the 80th
            parts = ["a" * (80 - 30 - len(base) - 2), token, "loop", "b" * 120]
        else:  # base/aaa/TOKEN/loop/bbb, the token ending 30 characters after the 80th from the end
            parts = ["a" * 120, token, "loop", "b" * (80 - 30 - len("/loop/"))]
        folder = Path(base).joinpath(*parts[:2])
        folder.mkdir(parents=True)
        (folder / "loop").symlink_to("loop")
        with tokens_redacted(token), pytest.raises(OutputFolderError) as excinfo:
            resolved(Path(base).joinpath(*parts))
    message = str(excinfo.value)
    assert "..." in message and "<token>" in message
    assert not [token[i : i + 6] for i in range(len(token) - 5) if token[i : i + 6] in message]


@pytest.mark.parametrize("size", [1000, (64 << 20) + 1], ids=["small", "over 64 MiB"])
def test_the_one_check_finds_the_token_compressed_or_in_a_large_file(size: int, tmp_path: Path) -> None:
    """The one check of a push's snapshot searches each file for the token's forms in its bytes and in what they
    decompress to (hex, which no credential format matches), also in a file too large to read in full that the
    uploader asked to publish (`--include-skipped`)."""
    (tmp_path / "log.z").write_bytes(zlib.compress(f"token {TOKEN.encode().hex()}".encode()))
    with open(tmp_path / "big.bin", "wb") as stream:
        stream.truncate(size)
        stream.seek(size - 100)
        stream.write(TOKEN.encode()[::-1] + TOKEN.encode().hex().encode())
    for name in ("log.z", "big.bin"):
        with pytest.raises(CheckpointRefused, match=rf"occurs in \['{re.escape(name)}'\]"):
            screen_files(tmp_path, [name], TOKEN, unread_ok=[name])


def test_distinct_base64_runs_are_scanned_in_linear_time(tmp_path: Path) -> None:
    """10 MB of distinct 44-character base64 runs that decode to a zlib header (each tried, none decompressing)."""
    runs = [
        b"".join(b"eNo%040d\n" % index for index in range(size // 44))
        for size in (ADVERSARIAL_BYTES // 4, ADVERSARIAL_BYTES)
    ]
    (quarter, first_secret), (whole, secret) = (scan_seconds(tmp_path, content) for content in runs)
    print(f"distinct base64 runs: {quarter:.2f} s, then {whole:.2f} s for 4x the bytes")
    assert whole < SCAN_GROWTH * quarter + 0.5 and whole < SCAN_SECONDS and first_secret is None and secret is None


def test_a_safetensors_header_longer_than_64_mib_is_refused_unread(tmp_path: Path) -> None:
    """A file that starts like safetensors with a header length of 100 MiB is unread without reading the header."""
    import tracemalloc

    size = 100 << 20
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as stream:
        stream.write(struct.pack("<Q", size - 8) + b"{")
        stream.truncate(size)
    tracemalloc.start()
    findings = scan_file(path, token_forms(TOKEN))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert findings.unread == "a safetensors file whose header is larger than the file or than 64 MiB"
    assert peak < 32 << 20


def protobuf_field(number: int, payload: bytes | int | float) -> bytes:
    """One protocol buffer field: a varint, a 32-bit float or a length-delimited payload."""

    def varint(value: int) -> bytes:
        out = bytearray()
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        return bytes([*out, value])

    if isinstance(payload, bytes):
        return varint(number << 3 | 2) + varint(len(payload)) + payload
    if isinstance(payload, float):
        return varint(number << 3 | 5) + struct.pack("<f", payload)
    return varint(number << 3) + varint(payload)


def sentencepiece_model(pieces: list[str], tail: bytes = b"") -> bytes:
    """A sentencepiece `ModelProto`: its pieces (piece, score, type) and a trainer spec."""
    entries = [protobuf_field(1, protobuf_field(1, p.encode()) + protobuf_field(2, -1.5) + protobuf_field(3, 1))
               for p in pieces]  # fmt: skip
    return b"".join(entries) + protobuf_field(2, protobuf_field(3, 8000)) + tail


@pytest.mark.parametrize(
    ("pieces", "tail", "secret", "unread"),
    [
        (["<unk>", "▁the", "▁model"], b"", None, None),
        (["<unk>", GITHUB_TOKEN], b"", "holds an access token", None),
        (["<unk>", "▁the"], b"\x0f" + KEY.encode(), None, "protocol buffer"),
    ],
    ids=["clean", "a token as a piece", "bytes after the last field"],
)
def test_a_sentencepiece_model_is_read_to_its_last_byte(
    pieces: list[str], tail: bytes, secret: str | None, unread: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "tokenizer.model"
    path.write_bytes(sentencepiece_model(pieces, tail))
    findings = scan_file(path, token_forms(TOKEN))
    assert (findings.secret is None) == (secret is None) and (findings.unread is None) == (unread is None)
    assert secret is None or secret in findings.secret
    assert unread is None or unread in findings.unread


@pytest.mark.parametrize(
    ("plant", "match"),
    [
        (lambda f: metadata_with(f, GITHUB_TOKEN), r"model\.safetensors holds an access token .*__metadata__\.note"),
        (lambda f: (f / "notes\n.txt").write_text("x"), r"'notes\\n\.txt': a file name with a control character"),
    ],
    ids=["a secret in the weights", "a name the Hub refuses"],
)
def test_the_command_line_refuses_in_one_line_with_status_2(
    plant: Callable[[Path], None],
    match: str,
    checkpoint: Path,
    api: HfApi,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hf_norms import cli

    plant(checkpoint)
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    (checkpoint / "notes.txt").write_text("loss 0.1")
    assert cli.main(["push", "org/cli-refused", str(checkpoint), "--include", "*.txt"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.startswith("hf-norms push: error: ") and re.search(match, line), line
    assert GITHUB_TOKEN not in line and not api.repo_exists("org/cli-refused")


def test_a_sharded_vision_checkpoint_is_published_whole(tmp_path: Path) -> None:
    """A sharded ViT's `model.safetensors.index.json` maps `embeddings.cls_token` to a shard's file name, which the
    secret-setting pattern took for a token's value: every sharded ViT, DeiT and DINOv2 was refused."""
    from conftest import tiny_config
    from transformers import ViTImageProcessorPil

    folder = tmp_path / "sharded"
    hf_norms.ViTNormModel(tiny_config("vit", "dtn")).save_pretrained(folder, max_shard_size="20KB")
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    shards = sorted(path.name for path in folder.glob("model-*.safetensors"))
    assert len(shards) > 2 and "embeddings.cls_token" in (folder / "model.safetensors.index.json").read_text()
    assert set(shards) | {"model.safetensors.index.json", "config.json"} <= set(dry_run(folder))
