"""The loopback Hub's HTTP layer and the `HubServer` that runs it on 127.0.0.1, standard library only.

`HubServer` serves the endpoints of `routes.py` from a `store.RepoStore` folder, so uploads and
`from_pretrained("org/name")` can be exercised without a network::

    with HubServer(tokens=["test-token"]) as hub:
        env = {**os.environ, **hub.client_env("test-token")}  # HF_ENDPOINT must be set before huggingface_hub loads
        subprocess.run([sys.executable, "-c", code], env=env, check=True)

or standalone: `hf-norms hub --root DIR --port 8000 --token test-token`.

Users: with `tokens` given, each of them authenticates as `user` and every other token is refused (401). Without
`tokens`, every distinct non-empty token is its own user, named `user-` and the first 16 hex digits of the token's
sha256 (`token_user`), so two clients with different tokens cannot read each other's private repos or write to each
other's namespaces; such names (in any letter case) are reserved for the tokens they come from. `messages.py` says who
may read and write.

Requests are checked from their request line and headers before any endpoint runs, and refused with 400: a request
target (path, revision, query) or a header that holds a control character (CR, LF, NUL, ...) after URL-decoding; a
`Content-Length` that is not one decimal number, or is larger than the endpoint's limit (`max_body_bytes`, 1 GiB unless
set, for a commit; 16 MiB for a JSON body); a `Transfer-Encoding` that is not one `chunked`, or comes with a
`Content-Length`. The body is read only when the endpoint asks for it, after it has checked who is asking: a request
refused for its framing or for authorisation (401, 403, 404) is answered from its headers alone. A connection whose
body was not read is then closed: the server stops writing and discards whatever the client still sends for at most
`LINGER_SECONDS`, so the client can read the answer, and nothing of it is kept. Every response header value is written
with its control and non-ASCII characters escaped, so no text from a request can split a header. URLs in answers are
built from the address the server is bound to, never from the request's `Host` header. The listen backlog is
`LISTEN_BACKLOG`, so a burst of clients is queued by the kernel, not reset. A body larger than `SMALL_BODY_BYTES` (or
chunked) is read only while it holds one of `max_concurrent_writes` write slots, until its endpoint has answered, so
memory holds that many large bodies at most; a body that waits longer than `WRITE_WAIT_SECONDS` gets 503, unread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ...errors import HubError, InputError
from .arguments import HubArguments
from .messages import Request, Response, error_response
from .payloads import CONTROL_CHARACTERS, check_text
from .routes import JSON_BODY_BYTES, route
from .store import DEFAULT_USER, RepoStore

logger = logging.getLogger(__name__)

LINGER_SECONDS = 2.0  # how long input is discarded after answering a request whose body was not read
LISTEN_BACKLOG = 128  # connections the kernel accepts before the server thread takes them (socketserver's is 5)
SMALL_BODY_BYTES = 1 << 20  # a body up to this size is read at once; a larger one waits for a write slot
WRITE_WAIT_SECONDS = 120.0  # how long a large body waits for a write slot before it gets 503
BODY_GRACE_SECONDS = 30.0  # a body must arrive within this time plus its size at MIN_BODY_RATE, else 408
MIN_BODY_RATE = 1 << 20  # bytes per second
_PIECE_BYTES = 1 << 20  # how much of a body one read asks for
_DISCARD_BYTES = 1 << 16
_MAX_LINE = 65536  # the longest chunk-size or trailer line read
_DECIMAL = re.compile(r"[0-9]{1,19}")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOKEN_USER = re.compile(r"user-[0-9a-f]{16}")


def token_user(token: str) -> str:
    """The user a token is on a server started without tokens: `user-` and 16 hex digits of the token's sha256."""
    return "user-" + hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass
class _Failure:
    """An injected failure: the next `count` requests whose path starts with `prefix` get `status`."""

    prefix: str
    status: int
    count: int
    method: str | None


@dataclass(frozen=True)
class _Framing:
    """How a request's body is delimited, from its headers: `length` bytes, chunked, or no body (length 0)."""

    length: int = 0
    chunked: bool = False


class _Handler(BaseHTTPRequestHandler):
    """One request: check its target and headers, route it, run its endpoint (which reads the body only if it gets
    that far), and write the `messages.Response` back."""

    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds an idle keep-alive connection is kept open

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Route access logs to `logging` at debug level (request line and status only, never headers)."""
        logger.debug("%s " + format, self.address_string(), *args)

    def _dispatch(self, method: str) -> None:
        self._body_pending = False  # a body was announced and is not read (yet)
        try:
            response = self._answer(method)  # a broken connection (timeout, reset) propagates: http.server closes it
        except HubError as err:
            response = error_response(err)
        except Exception:
            logger.exception("Hub server error on %s %r", method, self.path)
            response = error_response(HubError(500, "Internal server error"))
        if self._body_pending:  # answered without reading the body: where this request ends is not known
            self.close_connection = True
        self._send(response)

    def _answer(self, method: str) -> Response:
        """Check the request's framing, target and headers, route it, then run its endpoint (or an injected failure)
        with the body left unread until the endpoint asks for it: its size is checked then, after the endpoint has
        checked who is asking. The framing comes first, so that a body left unread by any refusal closes the
        connection rather than being read as the next request."""
        framing = self._framing()
        self._body_pending = framing.chunked or framing.length > 0
        check_text(unquote(self.path), "request target")
        for name, value in self.headers.items():
            if CONTROL_CHARACTERS.search(name + value.replace("\t", " ")):  # the value is not echoed: maybe a token
                raise HubError(400, f"Header {name!r} holds a control character (CR, LF, NUL, ...)", "BadRequest")
        url = urlsplit(self.path)
        found, params = route(method, url.path)
        limit = self.server.hub.max_body_bytes
        limit = limit if found.commit_body else min(limit, JSON_BODY_BYTES)
        injected = self.server.hub.take_failure(method, url.path)
        if injected is not None:
            raise HubError(injected, f"Injected failure ({injected}) for {url.path}")
        request = Request(method, params, parse_qs(url.query), self.headers, self.server.hub)
        with contextlib.ExitStack() as slot:  # a large body's write slot, held until its endpoint has answered
            request.read_body = lambda: self._read_body(framing, limit, slot)
            return found.endpoint(request)

    def _framing(self) -> _Framing:
        """The body's framing from `Content-Length` / `Transfer-Encoding`; 400 (connection closed) when there is more
        than one of either, both, a length that is not a decimal number, or an encoding other than `chunked`."""
        lengths = self.headers.get_all("Content-Length") or []
        encodings = self.headers.get_all("Transfer-Encoding") or []
        if encodings:
            if len(encodings) > 1 or encodings[0].strip().lower() != "chunked" or lengths:
                self._refuse_body("Transfer-Encoding must be one 'chunked', without a Content-Length")
            return _Framing(chunked=True)
        if not lengths:
            return _Framing()
        if len(lengths) > 1 or not _DECIMAL.fullmatch(lengths[0].strip()):
            self._refuse_body(f"Content-Length must be one decimal number of bytes, not {', '.join(lengths)!r}")
        return _Framing(length=int(lengths[0]))

    def _read_body(self, framing: _Framing, limit: int, slot: contextlib.ExitStack) -> bytearray:
        """The request body; 400 without reading it when it announces more than `limit` bytes (a chunked body, once
        it passes the limit). A body larger than `SMALL_BODY_BYTES`, or chunked, is read once it holds one of the
        hub's write slots (entered on `slot`), so only `max_concurrent_writes` of them are in memory at once. The body
        must arrive within `BODY_GRACE_SECONDS` plus its size at `MIN_BODY_RATE` (408 otherwise), so a client that
        trickles it cannot hold a slot for long."""
        if framing.length > limit:
            self._refuse_body(f"The request body ({framing.length} bytes) is larger than this endpoint's limit "
                              f"of {limit} bytes")  # fmt: skip
        if framing.chunked or framing.length > SMALL_BODY_BYTES:
            slot.enter_context(self.server.hub.write_slot())
        self._body_pending = False
        deadline = (
            time.monotonic() + BODY_GRACE_SECONDS + (limit if framing.chunked else framing.length) / MIN_BODY_RATE
        )
        try:
            body = (
                self._read_chunked(limit, deadline) if framing.chunked else self._read_exactly(framing.length, deadline)
            )
        except TimeoutError:
            self._body_pending = True
            raise HubError(408, "The request body did not arrive in time: send it at 1 MiB/s or faster") from None
        finally:
            self.connection.settimeout(self.timeout)
        if len(body) < framing.length:
            self._refuse_body(f"The body ended after {len(body)} of its {framing.length} bytes")
        return body

    def _read_exactly(self, size: int, deadline: float) -> bytearray:
        """`size` bytes of the body (fewer when the client closes first), read into one buffer; TimeoutError when they
        have not all arrived by `deadline` (a `time.monotonic()` time)."""
        data, got = bytearray(size), 0
        with memoryview(data) as view:
            while got < size:
                self.connection.settimeout(max(deadline - time.monotonic(), 0.001))  # TimeoutError at the deadline
                count = self.rfile.readinto(view[got : got + _PIECE_BYTES])
                if not count:
                    break
                got += count
        del data[got:]
        return data

    def _read_chunked(self, limit: int, deadline: float) -> bytearray:
        """A `Transfer-Encoding: chunked` body (chunk extensions and trailers are read and ignored)."""
        body = bytearray()
        while True:
            self.connection.settimeout(max(deadline - time.monotonic(), 0.001))
            size_field = self.rfile.readline(_MAX_LINE).split(b";")[0].strip()
            if not _CHUNK_SIZE.fullmatch(size_field):
                self._refuse_body(f"Bad chunk size {size_field[:40]!r}: a chunked body needs hexadecimal sizes")
            size = int(size_field, 16)
            if size == 0:
                break
            if len(body) + size > limit:
                self._refuse_body(f"The request body (over {limit} bytes) is larger than this endpoint's limit")
            chunk = self._read_exactly(size, deadline)
            body += chunk
            if len(chunk) < size or self.rfile.readline(_MAX_LINE).strip():
                self._refuse_body("A chunk is shorter than its size")
        while self.rfile.readline(_MAX_LINE).strip():  # trailers, up to the blank line
            self.connection.settimeout(max(deadline - time.monotonic(), 0.001))
        return body

    def _refuse_body(self, message: str) -> None:
        """Answer 400 without reading on: where this request's body ends is unknown, so the connection is closed."""
        self._body_pending = True
        raise HubError(400, message, "BadRequest")

    def finish(self) -> None:
        """After the last answer of a connection that closes with input unread, stop writing and discard what the
        client still sends, for at most `LINGER_SECONDS`: closing a socket with unread input resets the connection,
        and with it the answer the client has not read yet (a client that writes its whole body before reading, as
        `http.client` and `httpx` do, would see a reset instead of the 401). Nothing is kept, so memory stays flat."""
        super().finish()
        if not getattr(self, "_body_pending", False):
            return
        try:
            self.connection.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_SECONDS
            while (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(_DISCARD_BYTES):
                    break
        except OSError:  # the client is gone, or the time is up
            pass

    def _send(self, response: Response) -> None:
        if response.content is not None:
            body, content_type = response.content, "application/octet-stream"
        else:
            body, content_type = json.dumps(response.payload).encode(), "application/json; charset=utf-8"
        self.send_response(response.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if response.size is None else response.size))
        self.send_header("X-Request-Id", uuid.uuid4().hex)
        for key, value in response.headers.items():
            self.send_header(key, value.encode("unicode_escape").decode("ascii"))  # `\r`, `\n`, `\x00`, `\xe9`
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its `HubServer` and can cut its open keep-alive connections."""

    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], hub: HubServer) -> None:
        self.hub = hub
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self._connections_lock:
            self._connections.add(sock)
        return sock, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Shut down every open client connection, so handler threads end and clients see the server gone."""
        with self._connections_lock:
            connections = list(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class HubServer:
    """A Hub-compatible server on 127.0.0.1 for tests and demos.

    `HubServer(root, **options)`, `options` the fields of `HubArguments`: `root` the folder holding the repos (a
    temporary folder, removed by `stop()`, when None); `tokens` the bearer tokens accepted, all of them as `user` (the
    default namespace of `create_repo`), or None to accept any non-empty token, each as its own user (`token_user`);
    `port` 0 to pick a free one; `max_body_bytes` the largest request body accepted (a larger one is refused with 400
    before it is read); `max_concurrent_writes` how many bodies larger than `SMALL_BODY_BYTES` are read and stored at
    once (the others wait, up to `WRITE_WAIT_SECONDS`, then get 503).
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, **options: Any) -> None:
        arguments = HubArguments(root=root, **options)
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="hf-norms-hub-") if root is None else root)
        self.store = RepoStore(self.root)
        self.user = arguments.user or DEFAULT_USER
        self._tokens = None if arguments.tokens is None else frozenset(arguments.tokens)
        self.max_body_bytes = arguments.max_body_bytes
        self.max_concurrent_writes = arguments.max_concurrent_writes
        self._write_slots = threading.BoundedSemaphore(arguments.max_concurrent_writes)
        self._port = arguments.port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._failures: list[_Failure] = []
        self._failures_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> HubServer:
        """Bind 127.0.0.1 and serve in a background thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("HubServer is already running")
        try:  # bound before the root is made: a port in use leaves nothing behind
            self._httpd = _HTTPServer(("127.0.0.1", self._port), self)
        except OSError as error:
            raise InputError(
                f"Cannot listen on 127.0.0.1:{self._port} ({error.strerror}): choose another --port, or 0 for any "
                "free one."
            ) from None
        self.root.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hf-norms-hub", daemon=True
        )
        self._thread.start()
        logger.info("Hub server listening on %s (root %s)", self.url, self.root)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; removes the root folder if the server created it."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd.close_connections()
            if self._thread is not None:
                self._thread.join()
            self._httpd = self._thread = None
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`, the value for `HF_ENDPOINT` or `HfApi(endpoint=...)`."""
        if self._httpd is None:
            raise RuntimeError("HubServer is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def client_env(self, token: str | None = None) -> dict[str, str]:
        """Environment variables pointing `huggingface_hub`/`transformers` at this server (merge into os.environ)."""
        env = {
            "HF_ENDPOINT": self.url,
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    @contextlib.contextmanager
    def write_slot(self) -> Iterator[None]:
        """Hold one of the `max_concurrent_writes` slots for reading and storing a large body; 503 (retry later)
        when none frees up within `WRITE_WAIT_SECONDS`."""
        if not self._write_slots.acquire(timeout=WRITE_WAIT_SECONDS):
            limit = self.max_concurrent_writes
            raise HubError(503, f"The hub is busy storing other large uploads ({limit} at a time): retry later")
        try:
            yield
        finally:
            self._write_slots.release()

    # -- auth and failure injection -----------------------------------------------------------------------------
    def user_for(self, token: str) -> str | None:
        """The user `token` authenticates as: `user` for a listed token, `token_user(token)` for any non-empty token
        when the server was given no tokens; None when the token is refused."""
        if not token:
            return None
        if self._tokens is None:
            return token_user(token)
        return self.user if token in self._tokens else None

    def personal_namespace_owner(self, namespace: str) -> str | None:
        """The user whose own namespace `namespace` is, or None. Without tokens, a `user-<16 hex digits>` name is
        reserved for the token it comes from, in any letter case; with tokens there is only one user, so no name is
        reserved."""
        return namespace.lower() if self._tokens is None and _TOKEN_USER.fullmatch(namespace.lower()) else None

    def fail_next(self, path_prefix: str, *, status: int = 500, count: int = 1, method: str | None = None) -> None:
        """Answer `status` (with a JSON error) to the next `count` requests whose path starts with `path_prefix`.

        Example: `hub.fail_next("/api/models/org/name/commit/")` makes the next commit to `org/name` fail with a 500.
        The request body is not read (the connection is closed after the answer), so nothing is stored.
        """
        with self._failures_lock:
            self._failures.append(_Failure(path_prefix, status, count, method.upper() if method else None))

    def clear_failures(self) -> None:
        """Forget the injected failures that no request has consumed yet."""
        with self._failures_lock:
            self._failures.clear()

    def take_failure(self, method: str, path: str) -> int | None:
        """Consume one matching injected failure and return its status, or None."""
        with self._failures_lock:
            for failure in self._failures:
                if path.startswith(failure.prefix) and failure.method in (None, method):
                    failure.count -= 1
                    if failure.count <= 0:
                        self._failures.remove(failure)
                    return failure.status
        return None


def serve_forever(arguments: HubArguments) -> int:
    """`hf-norms hub`: serve a hub on 127.0.0.1 until interrupted, printing the `HF_ENDPOINT` to use."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if arguments.tokens is None and arguments.user is not None:
        logger.warning("--user applies to the tokens given with --token; without them each token is its own user")
    names = ("tokens", "port", "user", "max_body_bytes", "max_concurrent_writes")
    options = {name: getattr(arguments, name) for name in names}
    hub = HubServer(arguments.root, **options).start()
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
    return 0
