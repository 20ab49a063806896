"""The Hub token's forms, and keeping tokens out of everything hf-norms prints.

`token_forms(token)`: the byte strings whose presence means the token is there: raw, UTF-16 and UTF-32 (LE/BE), base64
(standard and URL-safe, at each of the 3 alignments it can have inside a longer base64 text), hex (both cases, bare and
`\\x`-escaped), percent-encoded (`quote`, every byte as `%XX` in both cases), JSON-escaped (`json.dumps`, `\\uXXXX`).

`redact(text)` replaces the text forms of the tokens being redacted, and anything shaped like a Hub token (`hf_` and 30
or more letters and digits), known or not, by `<token>`. Inside `tokens_redacted(token, ...)` (blocks nest, in any
thread), every log record of every logger is made redacted by the `logging` module's record factory (message,
exception, stack), whatever handlers are configured; shown warnings are redacted, and so is an exception leaving the
block (with those it was raised from). `redacted_output(argv)`, what every command of the command line runs in, adds
the tokens it knows (`known_tokens`: `--token`/`--hub_token` values in argv, `HF_TOKEN`, the stored logins) and passes
everything written to `sys.stdout` and `sys.stderr` through `redact`: argument errors, error lines, prints, progress.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import sys
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

from huggingface_hub import constants as hub_constants

MIN_FORM_LENGTH = 8
REPLACEMENT = "<token>"
HUB_TOKEN_SHAPE = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")
TOKEN_OPTIONS = ("--token", "--hub_token", "--hub-token")
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # huggingface_hub's, in its order

_lock = threading.Lock()
_blocks = 0  # open `tokens_redacted` blocks
_active: Counter[str] = Counter()  # token -> number of open blocks that redact it
_forms: tuple[str, ...] = ()  # the text forms of the active tokens, longest first
_original_factory = None
_original_showwarning = None


def base64_cores(data: bytes, altchars: bytes | None = None) -> list[bytes]:
    """The base64 characters fully determined by `data` when it starts at byte offset k = 0, 1, 2 (mod 3) of a longer
    base64'd text: with k filler bytes before it, characters `ceil(8k / 6)` to `floor(8(k + n) / 6)` (exclusive)."""
    import base64  # here, as `json` below: the command line imports this module before it parses its arguments

    cores = []
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + data, altchars=altchars)
        cores.append(encoded[-(-8 * k // 6) : 8 * (k + len(data)) // 6])
    return cores


def token_forms(token: str) -> tuple[bytes, ...]:
    """The byte strings whose presence means the token is there (see the module docstring), longest first."""
    import json

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


def redact(text: str, tokens: str | Iterable[str | None] | None = None) -> str:
    """`text` with each text form of `tokens` (default: the tokens of the open `tokens_redacted` blocks), and anything
    shaped like a Hub token, replaced by `<token>`."""
    forms = _forms if tokens is None else forms_of([tokens] if isinstance(tokens, str) else tokens)
    for form in forms:
        if form in text:
            text = text.replace(form, REPLACEMENT)
    return HUB_TOKEN_SHAPE.sub(REPLACEMENT, text) if "hf_" in text else text


def forms_of(tokens: Iterable[str | None]) -> tuple[str, ...]:
    forms = {form for token in tokens if token for form in text_token_forms(token)}
    return tuple(sorted(forms, key=len, reverse=True))


@contextlib.contextmanager
def tokens_redacted(*tokens: str | None) -> Iterator[None]:
    """Redact `tokens` (None entries ignored), and anything shaped like a Hub token, from every log record, shown
    warning and escaping exception while the block runs (see the module docstring)."""
    tokens = tuple(dict.fromkeys(token for token in tokens if token))
    _open_block(tokens, +1)
    try:
        yield
    except BaseException as error:
        redact_exception(error, tokens)
        raise
    finally:
        _open_block(tokens, -1)


def _open_block(tokens: tuple[str, ...], step: int) -> None:
    """Open (`step` +1) or close (-1) a block: the record factory and `showwarning` redact while any block is open."""
    global _blocks, _forms, _original_factory, _original_showwarning
    with _lock:
        if _blocks == 0 and step > 0:
            _original_factory, _original_showwarning = logging.getLogRecordFactory(), warnings.showwarning
            logging.setLogRecordFactory(_redacting_factory)
            warnings.showwarning = _redacting_showwarning
        _blocks += step
        _active.update({token: step for token in tokens})
        _forms = forms_of(+_active)
        if _blocks == 0:
            _active.clear()
            logging.setLogRecordFactory(_original_factory)
            warnings.showwarning = _original_showwarning


def _redacting_factory(*args, **kwargs) -> logging.LogRecord:
    record = _original_factory(*args, **kwargs)
    redact_record(record)
    return record


def redact_record(record: logging.LogRecord) -> None:
    """Replace the token's forms in the record's message (formatted with its arguments), exception and stack."""
    try:
        message = record.getMessage()
    except Exception:  # arguments that do not fit the format: logging prints the record as given, so redact both
        record.msg = redact(str(record.msg))
        record.args = tuple(redact(str(arg)) for arg in record.args) if isinstance(record.args, tuple) else ()
    else:
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        record.exc_info = None
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


def _redacting_showwarning(message, category, filename, lineno, file=None, line=None) -> None:
    _original_showwarning(redact(str(message)), category, filename, lineno, file, line)


def redact_exception(error: BaseException, tokens: Iterable[str]) -> None:
    """Redact `tokens` in place from the message of `error` and of the exceptions in its chain: the string arguments,
    notes and what an OSError's message is made of."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        for name in ("args", "strerror", "filename", "filename2", "__notes__"):
            value = getattr(current, name, None)
            redacted = redact(value, tokens) if isinstance(value, str) else None
            if isinstance(value, (tuple, list)):
                redacted = type(value)(redact(item, tokens) if isinstance(item, str) else item for item in value)
            if redacted is not None:
                with contextlib.suppress(Exception):  # an exception type whose attributes cannot be set keeps them
                    setattr(current, name, redacted)
        pending += [current.__cause__, current.__context__]


def known_tokens(argv: Sequence[str]) -> list[str]:
    """The tokens a command knows of: the values of `--token`/`--hub_token` in `argv` (`--token T`, `--token=T`), the
    token variables of the environment and the login stored by `hf auth login`."""
    tokens = [value for option, value in itertools.pairwise(argv) if option in TOKEN_OPTIONS]
    tokens += [argument.partition("=")[2] for argument in argv if argument.partition("=")[0] in TOKEN_OPTIONS]
    tokens += [os.environ.get(name) for name in TOKEN_VARIABLES]
    with contextlib.suppress(OSError, UnicodeError):
        tokens.append(Path(hub_constants.HF_TOKEN_PATH).read_text().strip())
    return [token for token in tokens if token]


class RedactingStream:
    """A text stream that writes what it is given through `redact`; every other attribute is the stream's."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextlib.contextmanager
def redacted_output(argv: Sequence[str]) -> Iterator[None]:
    """Run a command with `known_tokens(argv)` redacted from its log records and everything it writes to
    `sys.stdout` and `sys.stderr` (see the module docstring)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    try:
        with tokens_redacted(*known_tokens(argv)):
            yield
    finally:
        sys.stdout, sys.stderr = streams
