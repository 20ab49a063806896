"""What a file's bytes say before it is published: whether they hold the Hub token, and whether they are something
hf-norms never publishes: a pickle, a private key or credential, an archive it cannot check.

`scan_file(path, token_needles)` reads a file once, in chunks, and scans what it unpacks to the same way, as files of
their own: zip and tar members, zlib (joblib's compression), gzip, bzip2, xz and lzma streams, what base64 runs decode
to (a key base64'd into a YAML file), nested up to `MAX_DEPTH` levels and `UNPACK_LIMIT` bytes in all. Every byte is
searched for the token's forms (`hf_norms.redaction.token_forms`); the text, and the text of a UTF-16/32 file, for the formats
of `CREDENTIALS` (not the tensor data of a safetensors file: numbers); the first `SNIFF_BYTES` are read as a header (a
pickle of any protocol and size, a NumPy array of objects). What cannot be unpacked (zstandard, LZ4, 7-Zip, RAR, an
encrypted or corrupt member, more than the limit) cannot be checked, and is not published.

Not covered: a token or key split by line breaks, encrypted, in other encodings (base32, ROT13, reversed), only partly
present, or compressed inside a format that is not unpacked (PNG, PDF, ONNX); credentials of other formats.
"""

from __future__ import annotations

import base64
import bz2
import contextlib
import gzip
import io
import lzma
import pickletools
import re
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

SNIFF_BYTES = 1 << 16  # the file header read for formats (pickle, archive, text encoding)
SCAN_CHUNK = 1 << 22
CHUNK_OVERLAP = 1024  # longer than any token form or credential match, so none is missed at a chunk boundary
UNPACK_LIMIT = 1 << 26  # bytes unpacked from one file, all members and levels together
MAX_DEPTH = 4

# a setting's value that is not a secret: a Python type or constant
NOT_A_VALUE = rb"(?!(?:str|bytes|bool|int|none|null|true|false|optional)\b)"
# (reason, patterns of lower-cased text); each pattern starts with literal bytes (searching a large file is fast), or
# with a separator
CREDENTIALS = tuple(
    (reason, tuple(re.compile(pattern) for pattern in patterns))
    for reason, *patterns in (
        ("holds a private key", rb"-----begin (?:[a-z0-9]+ )*private key", rb"putty-user-key-file-\d"),
        (
            "holds an access token (Hugging Face, GitHub, AWS, OpenAI, Slack, Google, npm, PyPI or GitLab)",
            *(rb"hf_[a-z0-9]{30,}", rb"gh[pousr]_[a-z0-9]{36}", rb"github_pat_\w{50,}", rb"akia[0-9a-z]{16}"),
            *(rb"asia[0-9a-z]{16}", rb"sk-(?=[\w-]{0,80}\d)[\w-]{20,}", rb"xox[abprs]-[a-z0-9-]{10,}"),
            *(rb"aiza[\w-]{35}", rb"npm_[a-z0-9]{36}", rb"pypi-age[\w-]{20,}", rb"glpat-[\w-]{20}"),
        ),
        ("holds a JSON Web Token (as kubeconfig and cloud logins do)", rb"eyj[\w-]{8,}\.eyj[\w-]{8,}\."),
        (  # a value with a digit or symbol (not a word, nor code: `token=args.token`), not a special token ([PAD])
            "holds a secret setting (a password, secret, token, key or auth value)",
            rb"(?:passw(?:or)?d|secret|token|(?:secret|api|access|private|auth)_?key|auth|credentials?)[\"']?[ \t]*"
            rb"[:=][ \t]*[\"']?(?![\[<])" + NOT_A_VALUE + rb"(?=[^\"'\s]{0,200}[\d+/=~!@#$%^&*-])"
            rb"[^\"'\s,;()\[\]{}<>`]{8,}(?=[\"'\s,;}\]]|$)",
        ),
        ("holds a .netrc login", rb"machine\s+\S+\s+(?:login\s+\S+\s+)?password\s+\S"),
        ("holds a .pgpass line", rb"(?m)^[^:\s#]+:(?:\d+|\*):[^:\s]+:[^:\s]+:[^:\s]+\r?$"),
        ("holds a URL with a password", rb"://[^\s/:@]+:[^\s/@]+@"),
    )
)
BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{40,}={0,2}")
UNOPENABLE = {b"\x28\xb5\x2f\xfd": "zstandard", b"\x04\x22\x4d\x18": "LZ4", b"7z\xbc\xaf\x27\x1c": "7-Zip",
              b"Rar!\x1a\x07": "RAR"}  # fmt: skip
PICKLE_REASON = "a pickle (can run code when loaded; training_args.bin holds hub_token)"


class Unreadable(Exception):
    """Something in the file cannot be unpacked to be checked; the message says what."""


class Findings:
    """One file's scan: whether a form of the token occurs (`holds_token`), and why the file is not published
    (`secret`, or None); `budget` is the bytes left to unpack."""

    def __init__(self, needles: tuple[bytes, ...]) -> None:
        self.needles, self.holds_token, self.secret, self.budget = needles, False, None, UNPACK_LIMIT

    def scan(self, stream: BinaryIO, depth: int = 0) -> None:
        """Scan `stream` (unpacked `depth` levels deep), what its base64 runs decode to and what it unpacks to."""
        header, offset, tail, text_end = b"", 0, b"", None
        while chunk := stream.read(SCAN_CHUNK):
            if not header:
                header, text_end = chunk[:SNIFF_BYTES], safetensors_header_end(chunk)
            window = tail + chunk
            self.holds_token = self.holds_token or any(needle in window for needle in self.needles)
            if self.secret is None and (text_end is None or offset < text_end):
                self.secret = credential_in(window, text_encoding(header))
                for run in BASE64_RUN.findall(window):
                    self.scan_member("a base64 text", base64.b64decode(run[: len(run) // 4 * 4], b"-_"), depth)
            offset += len(chunk)
            tail = chunk[-CHUNK_OVERLAP:]
        self.secret = self.secret or header_reason(header, whole=offset <= len(header))
        for name, data in members(stream, header, self.budget) if self.secret is None else ():
            self.scan_member(name, data, depth)

    def scan_member(self, name: str, data: bytes, depth: int) -> None:
        """Scan `data`, unpacked from a stream `depth` levels deep, unless a reason was found; a reason found in it
        names it."""
        self.budget -= len(data)
        if self.secret is None and (self.budget < 0 or depth >= MAX_DEPTH):
            raise Unreadable(f"more than {UNPACK_LIMIT >> 20} MiB once unpacked, or nested more than {MAX_DEPTH} deep")
        if self.secret is None:
            self.scan(io.BytesIO(data), depth + 1)
            self.secret = f"{self.secret} (in {name})" if self.secret and name else self.secret


def scan_file(path: Path, token_needles: tuple[bytes, ...]) -> Findings:
    """Read `path` once, and what it unpacks (see the module docstring)."""
    findings = Findings(token_needles)
    with open(path, "rb") as stream:
        try:
            findings.scan(stream)
        except Unreadable as error:
            findings.secret = f"{error}: its contents cannot be checked"
    return findings


def credential_in(window: bytes, encoding: str | None) -> str | None:
    """The reason of the first credential format found in `window`, as bytes or as text of `encoding` (a UTF-16/32
    file), both lower-cased; None when there is none."""
    views = [window.lower(), window.decode(encoding, "ignore").encode().lower() if encoding else b""]
    return next((reason for reason, patterns in CREDENTIALS for p in patterns for v in views if p.search(v)), None)


def text_encoding(header: bytes) -> str | None:
    """The UTF-16 or UTF-32 encoding of a text file, told by the NUL bytes of its first characters after any
    byte-order mark (ASCII `AB` is `A\\0B\\0` in UTF-16 LE); None for anything else."""
    start = header[4:68]
    for codec, width, at in (("utf-32-le", 4, 0), ("utf-32-be", 4, 3), ("utf-16-le", 2, 0), ("utf-16-be", 2, 1)):
        if len(start) >= 8 and all(start[at::width]) and not any(b for i, b in enumerate(start) if i % width != at):
            return codec
    return None


def safetensors_header_end(header: bytes) -> int | None:
    """Where a safetensors file's JSON header ends (8 + its length), or None when `header` does not start one."""
    if len(header) < 9 or header[8:9] != b"{":
        return None
    return 8 + int.from_bytes(header[:8], "little")


def header_reason(header: bytes, whole: bool) -> str | None:
    """Why a file whose first bytes are `header` (all of it when `whole`) is not published: a pickle stream, a NumPy
    array of Python objects (a pickle), an archive hf-norms cannot open. None for anything else."""
    if is_pickle(header, whole) or numpy_object_array(header):
        return PICKLE_REASON
    kind = next((name for magic, name in UNOPENABLE.items() if header.startswith(magic)), None)
    return f"a {kind} archive, which hf-norms cannot open: its contents cannot be checked" if kind else None


def is_pickle(data: bytes, whole: bool) -> bool:
    """A pickle stream: protocol 2-5 (PROTO, then two more valid opcodes), or protocol 0/1 opcodes that parse to a STOP
    at the very end of a whole file, or, in the header of a larger one, to the end of the header."""
    protocol_header, stream, count = len(data) > 1 and data[0] == 0x80 and 2 <= data[1] <= 5, io.BytesIO(data), 0
    try:
        for opcode, _, _ in pickletools.genops(stream):
            count += 1
            if protocol_header and count >= 3:
                return True
            if opcode.name == "STOP":
                return count >= 2 and stream.tell() == len(data)
    except Exception:  # not a pickle, or one cut off by the end of the header
        return (protocol_header or not whole) and count >= 2 and stream.tell() == len(data)
    return False


def numpy_object_array(header: bytes) -> bool:
    """A `.npy` file (or archive member) whose dtype holds Python objects, which NumPy stores as a pickle."""
    description = header[10:1024] if header.startswith(b"\x93NUMPY") else b""
    return b"'|O'" in description or b"'O'" in description


def members(stream: BinaryIO, header: bytes, budget: int) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of what `stream` unpacks to: its zip or tar members, or its decompressed stream (named ""); each
    at most one byte more than `budget`; nothing when it is none of these. Raises Unreadable for data that does not
    unpack."""
    stream.seek(0)
    try:
        zipped = zipfile.is_zipfile(stream)
        stream.seek(0)
        if zipped:
            with zipfile.ZipFile(stream) as archive:
                for info in (info for info in archive.infolist() if not info.is_dir()):
                    with archive.open(info) as member:
                        yield info.filename, member.read(budget + 1)
        elif header[257:262] == b"ustar":
            with tarfile.open(fileobj=stream, mode="r:") as archive:
                for info in (info for info in archive if info.isfile()):
                    yield info.name, archive.extractfile(info).read(budget + 1)
        elif (reader := decompressing_reader(stream, header)) is not None:
            yield "", reader(budget + 1)
    except Exception as error:  # any failure to unpack: what is inside cannot be checked
        raise Unreadable(f"an archive or compressed stream that does not unpack ({error})") from None


def decompressing_reader(stream: BinaryIO, header: bytes):
    """`read(n)` of what a gzip, bzip2, xz, lzma or zlib stream decompresses to, or None when the header starts none."""
    if header.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=stream).read
    if header.startswith(b"BZh") and header[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):  # a block, or the end of the stream
        return bz2.BZ2File(stream).read
    if header.startswith((b"\xfd7zXZ\x00", b"\x5d\x00\x00")):
        return lzma.LZMAFile(stream).read
    if len(header) > 1 and header[0] & 0x0F == 8 and int.from_bytes(header[:2], "big") % 31 == 0:  # zlib's header
        return lambda n: zlib_read(stream, n)
    return None


def zlib_read(stream: BinaryIO, size: int) -> bytes:
    """At most `size` bytes of what the zlib stream in `stream` decompresses to, up to an error (text can start like a
    zlib header; it was scanned as it is, and so are bytes after the stream's end)."""
    decompressor, out, data = zlib.decompressobj(), bytearray(), b""
    with contextlib.suppress(zlib.error):
        while len(out) < size and not decompressor.eof and (data := data or stream.read(SCAN_CHUNK)):
            out += decompressor.decompress(data, size - len(out))
            data = decompressor.unconsumed_tail
    return bytes(out)
