"""A Hugging Face Hub-compatible HTTP server for 127.0.0.1, standard library only: storage (`store`), endpoints
(`routes`) and the HTTP layer with `HubServer` (`http`)."""

from .http import HubServer, serve_forever
from .store import HubError

__all__ = ["HubError", "HubServer", "serve_forever"]
