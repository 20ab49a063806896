"""A Hugging Face Hub-compatible HTTP server for 127.0.0.1: what clients send, checked (`payloads`); storage
(`store`); the card and weights facts of `model_info` (`metadata`); requests and who may make them (`messages`); the
endpoints (`read_endpoints`, `write_endpoints`) and their URLs (`routes`); the HTTP layer with `HubServer` (`http`).
Standard library only, and PyYAML (a dependency of huggingface_hub) once a model card's metadata is read."""

from importlib import import_module

from ...errors import HubError

__all__ = ["HubError", "HubServer", "serve_forever"]


def __getattr__(name: str):
    """`HubServer` and `serve_forever`, imported from `http` when first used: the command line reads the options'
    checks (`payloads`, `card_rules`) from this package without the HTTP layer."""
    if name not in ("HubServer", "serve_forever"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(".http", __name__), name)
