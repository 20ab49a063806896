"""A real HTTP proxy on 127.0.0.1 in front of a Hub that drops the connection in the middle of a file's body, as a
Hub connection lost mid-download does: every GET whose path ends with one of `cut_suffixes` gets the upstream's status
line and headers (its full Content-Length) and then half of the body before the socket closes, and each later GET of
the same path (a resumed download) none of it. Everything else passes through whole. One request per connection (the proxy asks the upstream to close after each)."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


def read_request(client: socket.socket) -> bytes:
    """The request's head and body (by its Content-Length) as sent."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
    while len(body) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def closing(request: bytes) -> bytes:
    """`request` with `Connection: close` instead of whatever it asked for."""
    head, _, body = request.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body


class CuttingProxy:
    """`with CuttingProxy(upstream_port, (".safetensors",)) as url:` serves until the block ends; `cuts` counts the
    responses it cut."""

    def __init__(self, upstream_port: int, cut_suffixes: tuple[str, ...]) -> None:
        self.upstream_port, self.cut_suffixes, self.cuts = upstream_port, cut_suffixes, 0
        self.cut_paths: set[bytes] = set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self.serve, daemon=True)

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the block ended
                return
            threading.Thread(target=self.answer, args=(client,), daemon=True).start()

    def answer(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
            request = read_request(client)
            method, target = request.split(b" ", 2)[:2]
            upstream.sendall(closing(request))
            response = b""
            while chunk := upstream.recv(65536):
                response += chunk
            path = target.split(b"?")[0]
            if method == b"GET" and path.decode().endswith(self.cut_suffixes):
                head, _, body = response.partition(b"\r\n\r\n")
                response = head + b"\r\n\r\n" + (b"" if path in self.cut_paths else body[: len(body) // 2])
                self.cut_paths.add(path)
                self.cuts += 1
            client.sendall(response)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.listener.close()
        self.thread.join(timeout=5)
