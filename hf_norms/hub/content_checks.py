"""What push cannot read in full, it does not publish: a file is published only when a reader of a known format read
all of it, and neither the token nor a secret pattern occurs in what it read.

`scan_file(path, token_needles)` reads a file once and returns its `Findings`:

- `holds_token`: a form of the token (`hf_norms.redaction.token_forms`) occurs in its bytes or in what they unpack to;
- `secret`: a format of `CREDENTIALS` (private keys, access tokens, JSON Web Tokens, secret settings, logins), found
  in its text, the text of a base64 run, the header of a safetensors file, the text chunks of an image, the members
  of an archive; the reason names where (a line, a JSON key, an archive member);
- `unread`: why push cannot read all of it, or None when it could. The known formats: UTF-8 text (JSON parsed in full
  when the file is `.json`, and when a text parses as JSON its strings are searched unescaped too; YAML, Markdown,
  CSV, vocabularies and merges as text; base64 runs decoded), UTF-16/32 text with a byte-order
  mark, safetensors, PNG, JPEG, NumPy arrays, protocol buffers (sentencepiece's `tokenizer.model`), zip and tar
  archives and gzip, bzip2, xz, lzma and zlib streams it can unpack to the end within `UNPACK_LIMIT` bytes and
  `MAX_DEPTH` levels (`hf_norms.hub.file_formats`). Anything else (a pickle, an unknown or opaque format, a decode
  error, bytes after a format's end) is unread: a decode error is never clean.

Every scan runs in time linear in what it reads: the patterns start at literal bytes or boundaries, take no
unbounded run twice (possessive quantifiers), and the secret setting is searched with every run of more than
`LONG_RUN` value bytes cut to its tail (no setting's value is that long).
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import os
import pickletools
import re
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..readers import JSON_LIMIT
from .file_formats import (
    PICKLE_REASON,
    PNG_SIGNATURE,
    Parts,
    Unreadable,
    decompressor_of,
    is_tar,
    jpeg_parts,
    npy_parts,
    png_parts,
    protobuf_parts,
    safetensors_header,
    tar_members,
    zip_members,
)

SNIFF_BYTES = 1 << 16  # the file header read for its format
SCAN_CHUNK = 1 << 22
CHUNK_OVERLAP = 1024  # longer than any token form, so none is missed at a chunk boundary
UNPACK_LIMIT = 1 << 26  # bytes read from one file, all members and levels together
MAX_DEPTH = 4
NEWLINE = b"\n"
LONG_RUN = 240  # bytes kept of a run of value characters before the secret setting is searched

# a setting's value that is not a secret: a Python type or constant
NOT_A_VALUE = rb"(?!(?:str|bytes|bool|int|none|null|true|false|optional)\b)"
VALUE_CHARACTERS = rb"[^\"'\s,;()\[\]{}<>`]"
# nor a checkpoint's file name: a sharded model's index maps `embeddings.cls_token` to `model-00001-of-00011.safetensors`
NOT_A_FILE_NAME = rb"(?![^\"'\s]{0,200}\.(?:safetensors|bin|json|txt|model|onnx|pt|pth)(?=[\"'\s,;}\]]|$))"
# (reason, patterns of lower-cased text); each starts with literal bytes (a fast search), and no unbounded run can be
# taken again from a later start
CREDENTIALS = tuple(
    (reason, tuple(re.compile(pattern) for pattern in patterns))
    for reason, *patterns in (
        ("holds a private key", rb"-----begin (?:[a-z0-9]{1,20} ){0,6}private key", rb"putty-user-key-file-\d"),
        (
            "holds an access token (Hugging Face, GitHub, AWS, OpenAI, Slack, Google, npm, PyPI or GitLab)",
            *(rb"hf_[a-z0-9]{30}", rb"gh[pousr]_[a-z0-9]{36}", rb"github_pat_\w{50}", rb"akia[0-9a-z]{16}"),
            *(rb"asia[0-9a-z]{16}", rb"sk-(?<![\w-]sk-)(?=[\w-]{0,80}\d)[\w-]{20}", rb"xox[abprs]-[a-z0-9-]{10}"),
            *(rb"aiza[\w-]{35}", rb"npm_[a-z0-9]{36}", rb"pypi-age[\w-]{20}", rb"glpat-[\w-]{20}"),
        ),
        ("holds a JSON Web Token (as kubeconfig and cloud logins do)", rb"eyj(?<![\w-]eyj)[\w-]{8,}+\.eyj[\w-]{8,}+\."),
        (  # a value with a digit or symbol (not a word, nor code: `token=args.token`), not a special token ([PAD])
            "holds a secret setting (a password, secret, token, key or auth value)",
            rb"(?:passw(?:or)?d|secret|token|(?:secret|api|access|private|auth)_?key|auth|credentials?)[\"']?[ \t]*+"
            rb"[:=][ \t]*+[\"']?(?![\[<])"
            + NOT_A_VALUE
            + NOT_A_FILE_NAME
            + rb"(?=[^\"'\s]{0,200}[\d+/=~!@#$%^&*-])"
            + VALUE_CHARACTERS
            + rb"{8,200}+(?=[\"'\s,;}\]]|$)",
        ),
        ("holds a .netrc login", rb"machine[ \t\r\n]++\S++\s++(?:login\s++\S++\s++)?password\s"),
        ("holds a .pgpass line", rb"(?m)^[^:\s#]++:(?:\d++|\*):[^:\s]++:[^:\s]++:[^:\s]++\r?$"),
        ("holds a URL with a password", rb"://[^\s/:@]++:[^\s/@]++@"),
    )
)
LONG_VALUE_RUN = re.compile(
    rb"(?<!%s)%s{%d,}+" % (VALUE_CHARACTERS, VALUE_CHARACTERS, LONG_RUN + 1)
)  # from a run's start
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first member, or the end record of an empty one
BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{24,}+={0,2}")  # an AWS key id (20 characters) is 28 in base64
CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")  # characters no text file holds
BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\0\0", "utf-32"), (b"\0\0\xfe\xff", "utf-32"),
        (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))  # fmt: skip


TOKEN_REASON = "holds the Hub token (or an encoding of it: base64, hex, UTF-16, ...)"
# what a reader of a text decodes: JSON and YAML backslash escapes, a double-quoted YAML line continuation
ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[ \t]*\r?\n[ \t]*)")
FOLD = re.compile(r"\r?\n[ \t]++")  # a line break before an indented continuation line


def secret_patterns(token_needles: tuple[bytes, ...]) -> tuple[tuple[str, tuple[re.Pattern, ...]], ...]:
    """The one list of what push never publishes, as patterns of lower-cased bytes: the formats of `CREDENTIALS`, then
    the forms of the user's own token (`hf_norms.redaction.token_forms`)."""
    return (*CREDENTIALS, (TOKEN_REASON, (Literals(token_needles),))) if token_needles else CREDENTIALS


class Literals:
    """Byte strings, searched as a compiled pattern is (`search(text).start()`), lower-cased, with `bytes.find`: a
    regular expression of alternatives tries each at every position."""

    def __init__(self, needles: tuple[bytes, ...]) -> None:
        self.needles = tuple(dict.fromkeys(needle.lower() for needle in needles))

    def search(self, text: bytes) -> LiteralMatch | None:
        found = [at for needle in self.needles if (at := text.find(needle)) >= 0]
        return LiteralMatch(min(found)) if found else None


class LiteralMatch:
    """Where `Literals.search` found the first of its byte strings."""

    def __init__(self, at: int) -> None:
        self.at = at

    def start(self) -> int:
        return self.at


def text_views(text: str, folded: bool = True) -> list[str]:
    """`text` and what readers of it decode it to, where that differs: with its backslash escapes resolved (JSON's and
    YAML's `\\uXXXX`, YAML's `\\xXX`, `\\UXXXXXXXX` and line continuations), percent-decoded (twice, for a double
    encoding), HTML entities resolved; each also with its indented continuation lines joined to the line before
    (`folded`: a YAML plain or folded scalar split across lines, a Markdown list item)."""
    views = [text, FOLD.sub("", text)] if folded and ("\n " in text or "\n\t" in text) else [text]
    for view in list(views):
        unescaped = ESCAPE.sub(unescape, view) if "\\" in view else view
        views += [unescaped, unquote(unquote(view)), html.unescape(view), html.unescape(unquote(unquote(unescaped)))]
    return list(dict.fromkeys(views))


def unescape(match: re.Match) -> str:
    """The character a backslash escape stands for ("" for a line continuation)."""
    escape = match[0]
    code = int(escape[2:], 16) if escape[1] in "uUx" else None
    return "" if code is None or code > sys.maxunicode else chr(code)


def text_secret(text: str, patterns: tuple = CREDENTIALS) -> str | None:
    """The reason of the first of `patterns` (`secret_patterns`) found in the text `text` (a name, a commit message)
    or in what it decodes to (`text_views`), the token's (`TOKEN_REASON`) before any other; None when there is none."""
    views = [lower_bytes(view) for view in text_views(text)]
    found = [
        reason for reason, formats in patterns if any(found_at(reason, formats, view) is not None for view in views)
    ]
    return TOKEN_REASON if TOKEN_REASON in found else next(iter(found), None)


def lower_bytes(text: str) -> bytes:
    """`text` lower-cased, as UTF-8 (a lone surrogate, from an escape or an undecodable name, kept as its code)."""
    return text.lower().encode("utf-8", "surrogatepass")


class Found(Exception):
    """A secret in what was read; the message says which and where."""


class Findings:
    """One file's scan (see the module docstring): `holds_token`, `secret` and `unread`; `budget` is the bytes left
    to read."""

    def __init__(self, needles: tuple[bytes, ...]) -> None:
        self.needles, self.holds_token, self.budget = needles, False, UNPACK_LIMIT
        self.patterns = secret_patterns(needles)
        self.secret: str | None = None
        self.unread: str | None = None

    def search_token(self, stream: io.BufferedIOBase) -> None:
        """Search every byte of `stream` for the token's forms, in chunks."""
        tail = b""
        while chunk := stream.read(SCAN_CHUNK):
            window = tail + chunk
            self.holds_token = self.holds_token or any(needle in window for needle in self.needles)
            tail = chunk[-CHUNK_OVERLAP:]

    def read_file(self, stream: io.BufferedIOBase, size: int, name: str) -> None:
        """Read the file `stream` of `size` bytes with the reader of its format."""
        header = stream.read(SNIFF_BYTES)
        if is_safetensors(header, size):  # the header is text; the tensor data, numbers, is searched for the token
            stream.seek(0)
            length = int.from_bytes(header[:8], "little")  # one longer than JSON_LIMIT is refused unread
            header_bytes = safetensors_header(header if length > JSON_LIMIT else stream.read(8 + length), size)
            self.read_text_of("its header", header_bytes, json_value=True)
        else:
            self.read_bytes(header + stream.read(), name, 0)

    def read_bytes(self, data: bytes, name: str, depth: int) -> None:
        """Read `data` (a file, or what one unpacks to `depth` levels deep) with the reader of its format."""
        text = text_of(data)
        members = self.unpacked(data, text is not None)
        for member, content in members or ():
            self.read_member(member, content, depth)
        if members is not None:
            return
        if text is not None:
            if is_pickle(data):
                raise Unreadable(PICKLE_REASON)
            self.read_text_of("", data, json_value=name.endswith(".json"), text=text)
            return
        for where, part in self.parts(data, name):
            self.holds_token = self.holds_token or any(needle in part for needle in self.needles)
            self.search_secrets(part, where)

    def unpacked(self, data: bytes, is_text: bool) -> Parts | None:
        """What an archive or compressed stream `data` unpacks to; None when it is neither (text that starts like a
        zlib header, `x^2`, and does not decompress is text)."""
        if data[:4] in ZIP_MAGIC:
            members, headers = zip_members(data, self.budget)
            self.search_secrets(headers, "its zip headers: names, extra fields and comments")
            return members
        if not is_text and len(data) >= 512 and is_tar(data):
            members, headers = tar_members(data, self.budget)
            self.search_secrets(headers, "its tar headers: names, pax and GNU headers")
            return members
        decompress = decompressor_of(data[:16])
        try:
            return None if decompress is None else [("", decompress(data, self.budget))]
        except Unreadable:
            if is_text:
                return None
            raise

    def parts(self, data: bytes, name: str) -> Parts:
        """The parts of the binary `data` to search for secrets, read by the reader of its format; Unreadable for any
        other."""
        if data.startswith(PNG_SIGNATURE):
            return png_parts(data, self.budget)
        if data.startswith(b"\xff\xd8\xff"):
            return jpeg_parts(data)
        if data.startswith(b"\x93NUMPY"):
            return npy_parts(data)
        if name.endswith(".model"):
            return protobuf_parts(data)
        if is_pickle(data) or is_pickle(data[:SNIFF_BYTES], cut=True):
            raise Unreadable(PICKLE_REASON)
        raise Unreadable(
            "not a format push can read in full (not UTF-8 text, JSON, safetensors, an image or an archive)"
        )

    def read_member(self, name: str, data: bytes, depth: int) -> None:
        """Read `data`, unpacked from a file `depth` levels deep; a secret or an unread part in it names it."""
        self.budget -= len(data)
        if self.budget < 0 or depth >= MAX_DEPTH:
            raise Unreadable(f"more than {UNPACK_LIMIT >> 20} MiB once unpacked, or nested more than {MAX_DEPTH} deep")
        self.holds_token = self.holds_token or any(needle in data for needle in self.needles)
        self.search_secrets(name.encode("utf-8", "surrogateescape"), f"the name of {name}")
        try:
            self.read_bytes(data, name, depth + 1)
        except (Found, Unreadable) as error:
            raise type(error)(f"{error} (in {name})" if name else str(error)) from None

    def read_text_of(self, where: str, data: bytes, json_value: bool, text: str | None = None) -> None:
        """Search the text `data` (decoded as `text`) for secrets; a JSON document must parse, and a secret in it is
        named by its key."""
        text = data.decode("utf-8", "strict") if text is None else text
        value = None
        if json_value or text.lstrip()[:1] in ("{", "["):  # a JSON document: its strings unescaped are searched too
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                if json_value:
                    raise Unreadable(f"{where or 'a .json file'} that is not valid JSON") from None
        encoded = text.encode("utf-8", "surrogateescape")  # UTF-8 whatever the file's encoding
        strings = "\n".join(snippet for _, snippet in json_strings(value, "")) if value is not None else ""
        views = text_views(text) if value is None else [text, *text_views(strings, folded=False)]
        reason = next((reason for view in views if (reason := credential_in(lower_bytes(view), self.patterns))), None)
        if reason is not None:
            raise Found(f"{reason} ({', '.join(filter(None, (where, located(text, value, reason, self.patterns))))})")
        runs = dict.fromkeys(BASE64_RUN.findall(encoded))
        self.read_base64([base64.b64decode(run[: len(run) // 4 * 4], b"-_") for run in runs])

    def read_base64(self, decoded: list[bytes]) -> None:
        """Search what the base64 runs of a text decode to: each that starts like an archive or compressed stream and
        unpacks, unpacked; the others together, as text, in one search (most runs are no base64: words, digests)."""
        texts = []
        for blob in decoded:
            members, decompress = None, decompressor_of(blob[:16])
            with contextlib.suppress(Unreadable):
                if blob[:4] in ZIP_MAGIC:
                    members = self.unpacked(blob, is_text=False)
                elif decompress is not None:
                    members = [("", decompress(blob, self.budget))]
            for name, data in members or ():
                self.read_member(name or "a base64 text", data, MAX_DEPTH - 2)
            if members is None:
                texts.append(blob.lower())
        reason = credential_in(b"\n".join(texts), self.patterns) if texts else None
        if reason is not None:
            raise Found(f"{reason} (in a base64 text)")

    def search_secrets(self, data: bytes, where: str) -> None:
        """Search bytes that are not text of a known encoding (an image chunk, a header, a member's name)."""
        reason = credential_in(data.lower(), self.patterns)
        if reason is not None:
            raise Found(f"{reason} ({where})")


def scan_file(path: Path, token_needles: tuple[bytes, ...]) -> Findings:
    """Read `path` once, and what it unpacks (see the module docstring). A file larger than `UNPACK_LIMIT` that is
    not safetensors is unread at once, and its bytes are not searched for the token (`holds_token` does)."""
    findings = Findings(token_needles)
    with open(path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > UNPACK_LIMIT and not is_safetensors(stream.read(SNIFF_BYTES), size):
            findings.unread = f"a file of {size:,} bytes, not safetensors: push reads at most {UNPACK_LIMIT >> 20} MiB"
            return findings
        stream.seek(0)
        findings.search_token(stream)
        stream.seek(0)
        try:
            findings.read_file(stream, size, path.name)
        except Found as error:
            token = str(error).startswith(TOKEN_REASON)  # the token found decoded: as if found in its bytes
            findings.secret, findings.holds_token = None if token else str(error), findings.holds_token or token
        except Unreadable as error:
            findings.unread = str(error)
    return findings


def holds_token(path: Path, token_needles: tuple[bytes, ...]) -> bool:
    """Whether a form of the token occurs in the bytes of `path` (all of them, as they are)."""
    findings = Findings(token_needles)
    with open(path, "rb") as stream:
        findings.search_token(stream)
    return findings.holds_token


def is_safetensors(header: bytes, size: int) -> bool:
    """Whether a file of `size` bytes starting with `header` starts like a safetensors file (a header length, then a
    JSON object)."""
    return len(header) >= 9 and header[8:9] == b"{" and 8 + int.from_bytes(header[:8], "little") <= size


def text_of(data: bytes) -> str | None:
    """`data` as text: UTF-8 (a byte-order mark allowed), or UTF-16/32 with a byte-order mark, decoded in full, with
    no control character but tabs, line and page breaks; None for anything else."""
    encoding = next((codec for bom, codec in BOMS if data.startswith(bom)), "utf-8")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        return None
    return None if CONTROL.search(text) else text


def credential_in(text: bytes, patterns: tuple = CREDENTIALS) -> str | None:
    """The reason of the first of `patterns` (`secret_patterns`) found in the lower-cased `text`; None when there is
    none."""
    return next((reason for reason, formats in patterns if found_at(reason, formats, text) is not None), None)


def found_at(reason: str, patterns: tuple[re.Pattern, ...], text: bytes) -> int | None:
    """Where the first of `patterns` (the formats of `reason`) occurs in the lower-cased `text`, or None; for the
    secret setting, in `text` with each run of more than `LONG_RUN` value characters cut to its tail, which keeps
    every line break (so a line number found in it holds in `text`)."""
    if "setting" in reason:
        text = LONG_VALUE_RUN.sub(lambda run: b" " + run[0][-LONG_RUN:], text)
    return min((match.start() for pattern in patterns if (match := pattern.search(text))), default=None)


def located(text: str, value: Any, reason: str, patterns: tuple = CREDENTIALS) -> str:
    """Where in `text` (whose JSON value is `value`, or None) the first secret of `reason` (one of `patterns`) is: the
    JSON key that holds it, else its line (where it is found only decoded: the first line)."""
    patterns = next(formats for name, formats in patterns if name == reason)
    for path, snippet in json_strings(value, ""):
        if found_at(reason, patterns, snippet.lower().encode("utf-8", "surrogateescape")) is not None:
            return path if path.startswith("a key of") else f"at {path or 'the top'}"
    data = text.lower().encode("utf-8", "surrogateescape")
    if "setting" in reason:
        data = LONG_VALUE_RUN.sub(lambda run: b" " + run[0][-LONG_RUN:], data)
    return f"line {data.count(NEWLINE, 0, found_at(reason, patterns, data) or 0) + 1}"


def json_strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(JSON path, text) of every key (named by its object's path), string and `"key": value` pair of `value`, level
    by level in document order."""
    pending = deque([(path, value)])
    while pending:
        at, item = pending.popleft()
        if isinstance(item, dict):
            for key, child in item.items():
                where = f"{at}.{key}" if at else str(key)
                yield f"a key of {at or 'the top'}", str(key)
                if not isinstance(child, (dict, list)):
                    yield where, f"{json.dumps(key)}: {json.dumps(child)}"
                pending.append((where, child))
        elif isinstance(item, list):
            pending.extend((f"{at}[{index}]", child) for index, child in enumerate(item))
        elif isinstance(item, str):
            yield at, item


def is_pickle(data: bytes, cut: bool = False) -> bool:
    """Whether `data` starts with a pickle: three or more opcodes that parse, with a consistent stack, to a STOP
    (whatever follows it, which pickle.load ignores); `cut` (the first bytes of a larger file): a protocol 2-5 header and two more
    opcodes that parse."""
    if cut:
        if not (len(data) > 1 and data[0] == 0x80 and 2 <= data[1] <= 5):
            return False
        try:
            return sum(1 for _ in zip(range(3), pickletools.genops(io.BytesIO(data)), strict=False)) == 3
        except Exception:  # opcodes that do not parse
            return False
    try:
        pickletools.dis(io.BytesIO(data), out=io.StringIO())
        opcodes = sum(1 for _ in pickletools.genops(io.BytesIO(data)))
    except Exception:  # not a pickle: an opcode that does not parse, a stack that does not add up, no STOP
        return False
    return opcodes >= 3  # `N.` (None) and `I1\n.` (1), as a text may start, load no code
