"""The Hub token's forms, and keeping them out of everything hf-norms prints while it talks to a Hub: log lines, warnings
and error messages.

`token_forms(token)`: the byte strings whose presence means the token is there: raw, UTF-16 and UTF-32 (LE/BE), base64
(standard and URL-safe, at each of the 3 alignments it can have inside a longer base64 text), hex (both cases, bare and
`\\x`-escaped), percent-encoded (`quote`, every byte as `%XX` in both cases), JSON-escaped (`json.dumps`, `\\uXXXX`).

Inside `tokens_redacted(token, ...)`, every log record of every logger (hf-norms', huggingface_hub's, httpx's,
transformers', from any thread) is made with each text form of the tokens (`text_token_forms`: the
token itself, its URL, hex, base64 and JSON-escaped forms) replaced by `<token>`: in the message, in the formatted
exception and in the stack. The record factory of the `logging` module does it, so no handler, level or logger
configured before or during the block can print an unredacted record. Warnings shown by `warnings.showwarning` are
redacted the same way, and an exception leaving the block has its message (and those of the exceptions it was raised
from) redacted, so the command line's error line cannot print the token either. Blocks nest and may run in several
threads at once; the redaction ends when the last one exits.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from urllib.parse import quote

MIN_FORM_LENGTH = 8
REPLACEMENT = "<token>"

_lock = threading.Lock()
_active: Counter[str] = Counter()  # token -> number of open blocks that redact it
_forms: tuple[str, ...] = ()  # the text forms of the active tokens, longest first
_original_factory = None
_original_showwarning = None


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


def redact(text: str, tokens: str | Iterable[str | None] | None = None) -> str:
    """`text` with each text form of `tokens` (default: the tokens of the open `tokens_redacted` blocks) replaced by
    `<token>`."""
    if tokens is None:
        forms = _forms
    else:
        forms = forms_of([tokens] if isinstance(tokens, str) else tokens)
    for form in forms:
        if form in text:
            text = text.replace(form, REPLACEMENT)
    return text


def forms_of(tokens: Iterable[str | None]) -> tuple[str, ...]:
    forms = {form for token in tokens if token for form in text_token_forms(token)}
    return tuple(sorted(forms, key=len, reverse=True))


@contextlib.contextmanager
def tokens_redacted(*tokens: str | None) -> Iterator[None]:
    """Redact `tokens` (None entries ignored) from every log record, shown warning and escaping exception while the
    block runs (see the module docstring)."""
    tokens = tuple(dict.fromkeys(token for token in tokens if token))
    _activate(tokens)
    try:
        yield
    except BaseException as error:
        redact_exception(error, tokens)
        raise
    finally:
        _deactivate(tokens)


def _activate(tokens: tuple[str, ...]) -> None:
    global _forms, _original_factory, _original_showwarning
    with _lock:
        if not _active and tokens:
            _original_factory = logging.getLogRecordFactory()
            _original_showwarning = warnings.showwarning
            logging.setLogRecordFactory(_redacting_factory)
            warnings.showwarning = _redacting_showwarning
        _active.update(tokens)
        _forms = forms_of(_active)


def _deactivate(tokens: tuple[str, ...]) -> None:
    global _forms, _original_factory, _original_showwarning
    with _lock:
        _active.subtract(tokens)
        for token in [token for token, count in _active.items() if count <= 0]:
            del _active[token]
        _forms = forms_of(_active)
        if not _active and _original_factory is not None:
            logging.setLogRecordFactory(_original_factory)
            warnings.showwarning = _original_showwarning
            _original_factory = _original_showwarning = None


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
    """Redact `tokens` in place from the string arguments and notes of `error` and of the exceptions in its chain."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        with contextlib.suppress(Exception):  # an exception type whose args cannot be set keeps them
            current.args = tuple(redact(arg, tokens) if isinstance(arg, str) else arg for arg in current.args)
        for name in ("strerror", "filename", "filename2", "__notes__"):  # what an OSError's message is made of
            value = getattr(current, name, None)
            if value:
                with contextlib.suppress(Exception):
                    setattr(
                        current,
                        name,
                        redact(value, tokens) if isinstance(value, str) else [redact(str(v), tokens) for v in value],
                    )
        pending += [current.__cause__, current.__context__]
