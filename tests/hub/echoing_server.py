"""A careless Hub endpoint for tests: it answers every request with an error whose message echoes the request's URL and
its Authorization header (in the JSON body and in `X-Error-Message`), as a misconfigured proxy or server might."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class EchoingHandler(BaseHTTPRequestHandler):
    status = 500

    def answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        message = f"cannot serve {self.path} for Authorization: {self.headers.get('Authorization')}"
        body = json.dumps({"error": message}).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_HEAD = answer

    def log_message(self, format: str, *args) -> None:  # quiet: BaseHTTPRequestHandler logs every request
        pass


class EchoingServer:
    """`with EchoingServer(status) as url:` serves on 127.0.0.1 until the block ends."""

    def __init__(self, status: int) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), EchoingHandler)
        self.httpd.status = status
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
