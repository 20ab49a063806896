"""What a file's bytes say before it is published: the Hub token in any common encoding, credentials, pickles, archives.

`scan_file(path, token_needles)` reads a file once, in chunks: every byte is searched for the token's forms
(`token_forms`) and for the credential formats of `CREDENTIAL_FORMATS`, and the first `SNIFF_BYTES` are also read as
a file header (`header_reason`: pickle streams, PyTorch and other archives, NumPy object arrays, compressed pickles).

The token's forms (`token_forms`, at least `MIN_FORM_LENGTH` bytes each):

- the raw UTF-8 bytes, UTF-16 LE/BE and UTF-32 LE/BE;
- base64, standard and URL-safe alphabets, at each of the 3 alignments a token can start at inside a longer base64
  text: the characters fully determined by the token's bytes, so a token base64'd inside a larger blob is found;
- hexadecimal, lower and upper case, with and without `\\x` before each byte;
- percent-encoding: `urllib.parse.quote` (safe characters kept) and every byte as `%XX`, lower and upper case;
- JSON string escapes: `json.dumps` of the token, and every character as `\\uXXXX`, lower and upper case.

Not covered: a token split by line breaks (MIME base64 wrapped at 76 characters), encrypted or compressed, in other
encodings (base32, ROT13, reversed), or only partly present.
"""

from __future__ import annotations

import base64
import bz2
import io
import json
import lzma
import pickletools
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

SNIFF_BYTES = 1 << 16  # the file header read for formats (pickle, archive, ...)
SCAN_CHUNK = 1 << 22
CHUNK_OVERLAP = 1024  # longer than any token form or credential match, so none is missed at a chunk boundary
MIN_FORM_LENGTH = 8

# a value that is not a Python type (`password: str` in code), an empty string or null
NOT_A_TYPE_OR_EMPTY = rb"(?!(?:str|bool|int|bytes|None|null|Optional|Union|Any)\b|\"\"|'')"
# (reason, patterns that must all occur in the file for it to be skipped for that reason); each pattern starts with
# literal bytes, so searching a large file is fast
CREDENTIAL_FORMATS: tuple[tuple[str, tuple[re.Pattern[bytes], ...]], ...] = tuple(
    (reason, tuple(re.compile(pattern) for pattern in patterns))
    for reason, *patterns in (
        ("holds a private key (PEM or PGP)", rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        ("holds a PuTTY private key", rb"PuTTY-User-Key-File-\d+:"),
        ("holds a Hugging Face token (hf_...)", rb"hf_[A-Za-z0-9]{34}(?![A-Za-z0-9])"),
        ("holds a GitHub token", rb"gh[pousr]_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
        ("holds a GitHub token", rb"github_pat_[A-Za-z0-9_]{50,100}"),
        *(
            ("holds an AWS secret access key", name + rb"[\"']?\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}")
            for name in (rb"aws_secret_access_key", rb"AWS_SECRET_ACCESS_KEY", rb"SecretAccessKey")
        ),
        (
            "holds an AWS access key id with its secret",
            rb"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])[\s\S]{0,300}?(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        ),
        ("is a Google Cloud service-account key", rb'"type"\s*:\s*"service_account"', rb'"private_key"\s*:'),
        ("holds an npm registry token (.npmrc)", rb"_auth(?:Token)?\s*=\s*[^\s\"']"),
        ("holds a .netrc login", rb"machine\s+\S+\s+login\s+\S+\s+password\s+\S"),
        (
            "holds a password setting (as in .pypirc)",
            rb"\n[ \t]*password[ \t]*[=:][ \t]*" + NOT_A_TYPE_OR_EMPTY + rb"\S",
        ),
    )
)

PICKLE_REASON = "a pickle (can run code when loaded; training_args.bin holds hub_token)"


@dataclass(frozen=True)
class Findings:
    """What `scan_file` found: whether a form of the token occurs, and why the file looks like a secret (or None)."""

    holds_token: bool
    secret: str | None


# --------------------------------------------------------------------------------------------------------------------
# The token's forms
# --------------------------------------------------------------------------------------------------------------------


def base64_cores(data: bytes, altchars: bytes | None = None) -> list[bytes]:
    """The base64 characters fully determined by `data` when it starts at byte offset k = 0, 1, 2 (mod 3) of a longer
    base64'd text: with k filler bytes before it, characters `ceil(8k / 6)` to `floor(8(k + n) / 6)` (exclusive)."""
    cores = []
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + data, altchars=altchars)
        cores.append(encoded[-(-8 * k // 6) : 8 * (k + len(data)) // 6])
    return cores


def token_forms(token: str) -> tuple[bytes, ...]:
    """The byte strings whose presence means the token is there (see the module docstring), longest first."""
    raw = token.encode()
    forms = [raw, *(token.encode(codec) for codec in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"))]
    forms += base64_cores(raw) + base64_cores(raw, altchars=b"-_")
    forms += [raw.hex().encode(), raw.hex().upper().encode()]
    forms += ["".join(f"\\x{byte:02{case}}" for byte in raw).encode() for case in "xX"]
    forms += [quote(token, safe="").encode(), *("".join(f"%{byte:02{case}}" for byte in raw).encode() for case in "xX")]
    forms += [json.dumps(token)[1:-1].encode()]
    forms += ["".join(f"\\u{ord(char):04{case}}" for char in token).encode() for case in "xX"]
    unique = {form for form in forms if len(form) >= MIN_FORM_LENGTH}
    return tuple(sorted(unique, key=lambda form: (-len(form), form)))


def text_token_forms(token: str) -> tuple[str, ...]:
    """The forms of `token_forms` that are ASCII text (those a name, a log line or a message could hold)."""
    return tuple(form.decode() for form in token_forms(token) if form.isascii() and b"\0" not in form)


def text_holds_token(text: str, token_needles: tuple[bytes, ...]) -> bool:
    """Whether a form of the token occurs in `text` (read as UTF-8, and as UTF-16/32 would hold it)."""
    data = text.encode("utf-8", "surrogateescape")
    return any(needle in data for needle in token_needles)


# --------------------------------------------------------------------------------------------------------------------
# One pass over a file
# --------------------------------------------------------------------------------------------------------------------


def scan_file(path: Path, token_needles: tuple[bytes, ...]) -> Findings:
    """Read `path` once: whether a token form occurs anywhere, and why it looks like a secret (its header's format,
    else a credential format), or None. Credential formats are searched in every byte, except the tensor data of a
    safetensors file (numbers; its JSON header is searched); the token's forms in every byte."""
    holds_token, header, offset = False, b"", 0
    matched: set[re.Pattern[bytes]] = set()
    tail = b"\n"  # so that a setting on the first line starts a line too
    with open(path, "rb") as f:
        credentials_end = None
        while chunk := f.read(SCAN_CHUNK):
            if not header:
                header = chunk[:SNIFF_BYTES]
                credentials_end = safetensors_header_end(header)
            window = tail + chunk
            holds_token = holds_token or any(needle in window for needle in token_needles)
            if credentials_end is None or offset < credentials_end:
                for _, patterns in CREDENTIAL_FORMATS:
                    matched.update(pattern for pattern in patterns if pattern not in matched and pattern.search(window))
            offset += len(chunk)
            tail = chunk[-CHUNK_OVERLAP:]
    secret = header_reason(header, offset)
    if secret is None:
        secret = next((reason for reason, patterns in CREDENTIAL_FORMATS if matched.issuperset(patterns)), None)
    return Findings(holds_token, secret)


def safetensors_header_end(header: bytes) -> int | None:
    """Where a safetensors file's JSON header ends (8 + its length), or None when `header` does not start one."""
    if len(header) < 9 or header[8:9] != b"{":
        return None
    return 8 + int.from_bytes(header[:8], "little")


# --------------------------------------------------------------------------------------------------------------------
# File headers
# --------------------------------------------------------------------------------------------------------------------

ARCHIVE_MAGIC = {
    b"PK\x03\x04": "zip",
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstandard",
    b"7z\xbc\xaf\x27\x1c": "7-Zip",
    b"Rar!\x1a\x07": "RAR",
}
TAR_MAGIC_OFFSET = 257


def header_reason(header: bytes, size: int) -> str | None:
    """Why a file whose first bytes are `header` (and whose length is `size`) must not be uploaded by default: a
    pickle stream, a NumPy array of Python objects (pickled), an archive (a PyTorch one holds a pickle; any other's
    contents cannot be checked for the token or secrets), a compressed pickle. None for anything else."""
    if is_pickle(header, whole_file=size <= len(header)) or numpy_object_array(header):
        return PICKLE_REASON
    kind = next((name for magic, name in ARCHIVE_MAGIC.items() if header.startswith(magic)), None)
    if kind is None and header[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == b"ustar":
        kind = "tar"
    if kind is None:
        return None
    if kind == "zip" and zip_first_member_pickled(header):
        return "a PyTorch archive (torch.save) or zip holding a pickle"
    if is_pickle(decompressed_start(header, kind), whole_file=False):
        return f"a {kind}-compressed pickle"
    return f"a {kind} archive: its contents cannot be checked for the token or secrets"


def is_pickle(data: bytes, whole_file: bool) -> bool:
    """A pickle stream: protocol 2-5 (PROTO opcode, then at least two valid opcodes), or a whole small file that
    parses as one protocol 0/1 stream ending exactly at its STOP opcode."""
    if len(data) < 2:
        return False
    protocol_header = data[0] == 0x80 and 2 <= data[1] <= 5
    if not (protocol_header or whole_file):
        return False
    stream, count = io.BytesIO(data), 0
    try:
        for opcode, _, _ in pickletools.genops(stream):
            count += 1
            if opcode.name == "STOP":
                return protocol_header or (count >= 2 and stream.tell() == len(data))
            if protocol_header and count >= 3:
                return True
    except Exception:  # not a pickle, or one cut off by the end of the header
        return protocol_header and count >= 3
    return False


def numpy_object_array(header: bytes) -> bool:
    """A `.npy` file (or data) whose dtype holds Python objects, which NumPy stores as a pickle."""
    if not header.startswith(b"\x93NUMPY"):
        return False
    description = header[10:1024]
    return b"'|O'" in description or b"'O'" in description


def zip_first_member_pickled(header: bytes) -> bool:
    """The first member of a zip file (its local header at offset 0) is `*.pkl`/`*.pickle` (torch.save writes
    `<name>/data.pkl` first) or a NumPy object array (np.savez of objects)."""
    name_length, extra_length = int.from_bytes(header[26:28], "little"), int.from_bytes(header[28:30], "little")
    name = header[30 : 30 + name_length]
    if name.endswith((b".pkl", b".pickle")):
        return True
    data = header[30 + name_length + extra_length :]
    if int.from_bytes(header[8:10], "little") == 8:  # deflated
        data = bounded_decompress(zlib.decompressobj(-zlib.MAX_WBITS), data)
    return numpy_object_array(data)


def decompressed_start(header: bytes, kind: str) -> bytes:
    """The first bytes of what a gzip, bzip2 or xz header decompresses to (empty for other kinds or on an error)."""
    decompressors = {
        "gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
        "bzip2": bz2.BZ2Decompressor,
        "xz": lzma.LZMADecompressor,
    }
    return bounded_decompress(decompressors[kind](), header) if kind in decompressors else b""


def bounded_decompress(decompressor, data: bytes, limit: int = 1024) -> bytes:
    try:
        return decompressor.decompress(data, limit)
    except Exception:  # corrupt or cut off: nothing to sniff
        return b""
