"""Holding back transformers' log records that are wrong for the loads hf-norms makes on purpose (`held_back`), and
the matchers of those records: the notice that a stock config is read as an hf-norms config (`model_type_notice`) and
a model's load report (`load_report_of`).

Imports only the standard library, so a config class costs no modeling code (`import transformers.modeling_utils`,
seconds). Package-only: a checkpoint's remote code leaves it out.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator


def model_type_notice(stock_model_type: str, model_type: str) -> Callable[[str], bool]:
    """Matches transformers' notice that a `stock_model_type` config is read as `model_type`."""
    start = f"You are using a model of type `{stock_model_type}` to instantiate a model of type `{model_type}`."
    return lambda message: message.startswith(start)


def load_report_of(model_class: type) -> Callable[[str], bool]:
    """Matches transformers' load report of a `model_class` model."""
    return lambda message: f"{model_class.__name__} LOAD REPORT" in message


@contextlib.contextmanager
def held_back(target: logging.Logger, matches: Callable[[str], bool]) -> Iterator[list[logging.LogRecord]]:
    """Keep the records of `target` whose message `matches` from being logged while the block runs, and yield them
    (the caller may emit them later with `target.handle(record)`). If the block raises, they are emitted before the
    error propagates."""
    records: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        if matches(record.getMessage()):
            records.append(record)
            return False
        return True

    target.addFilter(hold)
    failed = True
    try:
        yield records
        failed = False
    finally:
        target.removeFilter(hold)
        if failed:
            for record in records:
                target.handle(record)
