"""The loopback Hub's HTTP layer on aiohttp's low-level server, and the `HubServer` that runs it on 127.0.0.1.

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

aiohttp parses every request (framing, chunked bodies, header sizes) and streams every answer with back-pressure; a
request it cannot parse gets a JSON 400 that quotes none of it. This module adds one deadline per phase of a request
and the write slots (docs/safety.md lists them): headers within `HEADER_SECONDS` of the connection or of the previous
answer (aiohttp's keep-alive timer, which no received byte resets); a body read only when its endpoint asks for it,
after it checked who is asking, its n-th byte due `BODY_GRACE_SECONDS` plus n bytes at `MIN_BODY_RATE` (408), and a
body over `SMALL_BODY_BYTES` read only while holding one of `max_concurrent_writes` slots (503 after
`WRITE_WAIT_SECONDS`); a download streamed from disk on the same deadline, else cut. A connection whose body was not
read to its end is half-closed after the answer and its input discarded for `LINGER_SECONDS`, so that the client reads
the answer. Header values are written escaped; URLs come from the bound address, never from `Host`.
"""

from __future__ import annotations

import asyncio
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
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from aiohttp import web

from ...errors import HubError, InputError
from .arguments import HubArguments
from .messages import Request, Response, error_response
from .payloads import CONTROL_CHARACTERS, check_text
from .routes import JSON_BODY_BYTES, route
from .store import DEFAULT_USER, RepoStore

logger = logging.getLogger(__name__)

HEADER_SECONDS = 20.0  # a request's line and headers must arrive within this, from the connection or the last answer
BODY_GRACE_SECONDS = 30.0  # the n-th byte of a body (sent or received) is due this long plus n bytes at MIN_BODY_RATE
MIN_BODY_RATE = 1 << 20  # bytes per second
WRITE_WAIT_SECONDS = 120.0  # how long a large body waits for a write slot before it gets 503
SMALL_BODY_BYTES = 1 << 20  # a body up to this size is read at once; a larger one waits for a write slot
LINGER_SECONDS = 2.0  # how long input is discarded after answering a request whose body was not read
MAX_CONNECTIONS = 256  # open connections; a further one is closed as soon as it is accepted
MAX_LINE_BYTES = 8190  # the request line and each header line (aiohttp's default)
MAX_HEADERS = 64
LISTEN_BACKLOG = 128  # connections the kernel queues before the server takes them
WORKERS = 32  # endpoints (file I/O, JSON) running at once; their requests' bodies are read on the event loop
_PIECE_BYTES = 256 << 10  # how much of a download is read from disk and written at once
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


def _answer(status: int, headers: dict[str, str], payload: Any = None, length: int | None = None) -> web.StreamResponse:
    """A JSON answer, or with `length` the head of a download of that many bytes; its header values' control and
    non-ASCII characters escaped (`\\r`, `\\n`, `\\x00`, `\\xe9`)."""
    escaped = {key: value.encode("unicode_escape").decode("ascii") for key, value in headers.items()}
    escaped["X-Request-Id"] = uuid.uuid4().hex
    if length is None:
        return web.Response(status=status, headers=escaped, body=json.dumps(payload).encode(),
                            content_type="application/json")  # fmt: skip
    answer = web.StreamResponse(status=status, headers=escaped)
    answer.content_type, answer.content_length = "application/octet-stream", length
    return answer


class _Refused(asyncio.Protocol):
    """A connection past `MAX_CONNECTIONS`: closed as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Connection(web.RequestHandler):
    """aiohttp's connection handler, with the hub's answer to a request that aiohttp cannot parse."""

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """A JSON error that names the fault without quoting the request (a header may hold a token), logged without
        it either; the connection is closed."""
        if status == 400:
            fault = (message or "").split(":", 1)[0].strip()[:100] or "malformed request"
            text = f"Malformed request ({fault}): send HTTP/1.1 with valid framing and no control characters"
        else:
            text = "Internal server error"
        logger.debug("Hub server refused a request it could not parse: %s", text)
        answer = _answer(status, {"X-Error-Message": text}, {"error": text})
        answer.force_close()
        return answer


class _Transport:
    """What one served hub runs on: aiohttp's low-level server on an event loop in a thread, and the worker threads
    that run the endpoints (synchronous file and JSON work) while their bodies are read on the loop."""

    def __init__(self, hub: HubServer, sock: socket.socket) -> None:
        self.hub = hub
        self.loop = asyncio.new_event_loop()
        self.workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="hf-norms-hub")
        self.settings = {"keepalive_timeout": HEADER_SECONDS, "lingering_time": LINGER_SECONDS, "access_log": None,
                         "max_line_size": MAX_LINE_BYTES, "max_field_size": MAX_LINE_BYTES, "max_headers": MAX_HEADERS}  # fmt: skip
        self.server = web.Server(self.handle, loop=self.loop)
        self.listener = self.loop.run_until_complete(self.loop.create_server(self.connection, sock=sock))
        self.thread = threading.Thread(target=self.loop.run_forever, name="hf-norms-hub", daemon=True)
        self.thread.start()

    def connection(self) -> asyncio.Protocol:
        """The protocol of a new connection: aiohttp's, or `_Refused` when `MAX_CONNECTIONS` are open."""
        if len(self.server.connections) >= MAX_CONNECTIONS:
            return _Refused()
        return _Connection(self.server, loop=self.loop, **self.settings)

    def close(self) -> None:
        """Stop listening, cut every connection, stop the loop and let running endpoints finish."""

        async def shut() -> None:
            self.listener.close()
            self.server.pre_shutdown()  # idle connections close now; a running endpoint gets a second
            await self.server.shutdown(1.0)
            rest = asyncio.all_tasks() - {asyncio.current_task()}  # connections that were still opening
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.workers.shutdown(wait=False, cancel_futures=True)
        self.loop.close()

    async def handle(self, web_request: web.BaseRequest) -> web.StreamResponse:
        """Run the request's endpoint in a worker thread, then send its answer. A connection whose body was not read
        to its end is closed after the answer, half-closed first so that the client reads it."""
        if web_request.headers.get("Transfer-Encoding", "chunked").strip().lower() != "chunked":  # aiohttp: no body
            error = HubError(400, "Transfer-Encoding must be one 'chunked', without a Content-Length", "BadRequest")
            response, unread = error_response(error), True
        else:
            response = await self.loop.run_in_executor(self.workers, self.answer, web_request)
            unread = not web_request.content.at_eof()
        length = None if response.file is None else response.span[1] + 1 - response.span[0]
        answer = _answer(response.status, response.headers, response.payload, length)
        if unread:
            answer.force_close()
        started = self.loop.time()
        await answer.prepare(web_request)
        try:
            if response.file is not None and web_request.method != "HEAD":
                await self.send_file(answer, response.file, response.span, started)
            await answer.write_eof()
        except (asyncio.TimeoutError, ConnectionError):  # the client does not take the answer, or is gone
            if web_request.transport is not None:
                web_request.transport.abort()
            return answer
        if unread and web_request.transport is not None:
            web_request.transport.write_eof()
        return answer

    async def send_file(self, answer: web.StreamResponse, blob: Path, span: tuple[int, int], started: float) -> None:
        """Stream the bytes `span` (inclusive) of `blob` from disk, its n-th byte due at `started` plus
        `BODY_GRACE_SECONDS` plus n bytes at `MIN_BODY_RATE`."""
        start, end = span
        with blob.open("rb") as file:
            file.seek(start)
            for offset in range(start, end + 1, _PIECE_BYTES):
                piece = file.read(min(_PIECE_BYTES, end + 1 - offset))
                due = started + BODY_GRACE_SECONDS + (offset + len(piece) - start) / MIN_BODY_RATE
                await asyncio.wait_for(answer.write(piece), due - self.loop.time())

    def answer(self, web_request: web.BaseRequest) -> Response:
        """The endpoint's answer to the request (in a worker thread), or the error that refused it."""
        try:
            return self.run_endpoint(web_request)
        except HubError as err:
            return error_response(err)
        except Exception:
            logger.exception("Hub server error on %s %r", web_request.method, web_request.raw_path)
            return error_response(HubError(500, "Internal server error"))

    def run_endpoint(self, web_request: web.BaseRequest) -> Response:
        """Check the request's target and headers, route it, then run its endpoint (or an injected failure) with the
        body left unread until the endpoint asks for it, after it has checked who is asking."""
        check_text(unquote(web_request.raw_path), "request target")
        for name, value in web_request.headers.items():
            if CONTROL_CHARACTERS.search(name + value.replace("\t", " ")):  # the value is not echoed: maybe a token
                raise HubError(400, f"Header {name!r} holds a control character (CR, LF, NUL, ...)", "BadRequest")
        url = urlsplit(web_request.raw_path)
        found, params = route(web_request.method, url.path)
        limit = self.hub.max_body_bytes if found.commit_body else min(self.hub.max_body_bytes, JSON_BODY_BYTES)
        injected = self.hub.take_failure(web_request.method, url.path)
        if injected is not None:
            raise HubError(injected, f"Injected failure ({injected}) for {url.path}")
        request = Request(web_request.method, params, parse_qs(url.query), web_request.headers, self.hub, url.path)
        with contextlib.ExitStack() as slot:  # a large body's write slot, held until its endpoint has answered
            request.read_body = lambda: self.read_body(web_request, limit, slot)
            return found.endpoint(request)

    def read_body(self, web_request: web.BaseRequest, limit: int, slot: contextlib.ExitStack) -> bytearray:
        """The request body (from a worker thread); 400 without reading it when it announces more than `limit` bytes
        (a chunked body, once it passes the limit). A large or chunked body is read once it holds a write slot."""
        length = web_request.content_length
        if length is not None and length > limit:
            raise HubError(400, f"The request body ({length} bytes) is larger than this endpoint's limit of {limit} "
                                "bytes", "BadRequest")  # fmt: skip
        if length is None or length > SMALL_BODY_BYTES:
            slot.enter_context(self.hub.write_slot())
        return asyncio.run_coroutine_threadsafe(self.receive(web_request, length, limit), self.loop).result()

    async def receive(self, web_request: web.BaseRequest, length: int | None, limit: int) -> bytearray:
        """Read the body into one buffer, its n-th byte due `BODY_GRACE_SECONDS` plus n bytes at `MIN_BODY_RATE`
        from now (408); 400 when it passes `limit`, ends early or its chunked framing is malformed."""
        started, body, content = self.loop.time(), bytearray(length or 0), web_request.content
        got = 0
        while not content.at_eof():
            due = started + BODY_GRACE_SECONDS + (got + 1) / MIN_BODY_RATE
            try:
                piece = await asyncio.wait_for(content.readany(), due - self.loop.time())
            except asyncio.TimeoutError:
                raise HubError(408, "The request body did not arrive in time: send it at 1 MiB/s or faster") from None
            except (ConnectionError, web.RequestPayloadError):
                raise HubError(400, "The request body ended early, or its chunked framing is malformed",
                               "BadRequest") from None  # fmt: skip
            if got + len(piece) > limit:
                raise HubError(400, f"The request body is larger than this endpoint's limit of {limit} bytes",
                               "BadRequest")  # fmt: skip
            body[got : got + len(piece)] = piece  # within the announced length: in place, else appended
            got += len(piece)
        if length is not None and got < length:
            raise HubError(400, f"The body ended after {got} of its {length} bytes", "BadRequest")
        return body


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
        self._transport: _Transport | None = None
        self._address: tuple[str, int] | None = None
        self._failures: list[_Failure] = []
        self._failures_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> HubServer:
        """Bind 127.0.0.1 and serve in a background thread; returns self."""
        if self._transport is not None:
            raise RuntimeError("HubServer is already running")
        try:  # bound before the root is made: a port in use leaves nothing behind
            sock = socket.create_server(("127.0.0.1", self._port), backlog=LISTEN_BACKLOG)
        except OSError as error:
            raise InputError(
                f"Cannot listen on 127.0.0.1:{self._port} ({os.strerror(error.errno)}): choose another --port, or 0 for any "
                "free one."
            ) from None
        self._address = sock.getsockname()
        self.root.mkdir(parents=True, exist_ok=True)
        self._transport = _Transport(self, sock)
        logger.info("Hub server listening on %s (root %s)", self.url, self.root)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; removes the root folder if the server created it."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`, the value for `HF_ENDPOINT` or `HfApi(endpoint=...)`."""
        if self._transport is None or self._address is None:
            raise RuntimeError("HubServer is not running")
        return f"http://127.0.0.1:{self._address[1]}"

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
