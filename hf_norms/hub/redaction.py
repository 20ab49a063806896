"""Keep Hub tokens out of everything hf-norms prints while it talks to a Hub: log lines, warnings and error messages.

Inside `tokens_redacted(token, ...)`, every log record of every logger (hf-norms', huggingface_hub's, httpx's,
transformers', from any thread) is made with each text form of the tokens (`content_checks.text_token_forms`: the
token itself, its URL, hex, base64 and JSON-escaped forms) replaced by `<token>`: in the message, in the formatted
exception and in the stack. The record factory of the `logging` module does it, so no handler, level or logger
configured before or during the block can print an unredacted record. Warnings shown by `warnings.showwarning` are
redacted the same way, and an exception leaving the block has its message (and those of the exceptions it was raised
from) redacted, so the command line's error line cannot print the token either. Blocks nest and may run in several
threads at once; the redaction ends when the last one exits.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator

from .content_checks import text_token_forms

REPLACEMENT = "<token>"

_lock = threading.Lock()
_active: Counter[str] = Counter()  # token -> number of open blocks that redact it
_forms: tuple[str, ...] = ()  # the text forms of the active tokens, longest first
_original_factory = None
_original_showwarning = None


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
