"""A Hugging Face Hub-compatible HTTP server for 127.0.0.1: what clients send, checked (`payloads`); storage
(`store`); the card and weights facts of `model_info` (`metadata`); requests and who may make them (`messages`); the
endpoints (`read_endpoints`, `write_endpoints`) and their URLs (`routes`); the HTTP layer with `HubServer` (`http`).
Standard library only, and PyYAML (a dependency of huggingface_hub) once a model card's metadata is read."""

from ...errors import HubError
from .http import HubServer, serve_forever

__all__ = ["HubError", "HubServer", "serve_forever"]
