"""Helpers of the loopback Hub's tests: raw HTTP exchanges (for requests `huggingface_hub` would not send), the state
of a hub's folder, ndjson commit bodies, and the real `hf-norms hub` command in a subprocess."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from conftest import HF_NORMS_SCRIPT

from hf_norms.hub.server import HubServer

PROMPT_SECONDS = 2.0  # an answer later than this means the server waited on the request


def store_state(hub: HubServer) -> dict[str, str]:
    """Every file under the hub's root with the sha256 of its bytes."""
    return {
        p.relative_to(hub.root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(hub.root.rglob("*"))
        if p.is_file()
    }


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def raw_exchange(
    hub: HubServer | str, request: bytes, *, expect_close: bool = False, timeout: float = PROMPT_SECONDS * 3
) -> tuple[http.client.HTTPResponse, bytes, float]:
    """Send `request` bytes to a hub (or its URL) on a fresh connection that stays open; return the parsed response,
    its body and the seconds until it was answered (within `timeout`). With `expect_close`, also assert that the
    server then closed the connection."""
    url = hub if isinstance(hub, str) else hub.url
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=timeout) as sock:
        started = time.monotonic()
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        body = response.read()
        elapsed = time.monotonic() - started
        if expect_close:
            sock.settimeout(PROMPT_SECONDS)
            assert sock.recv(1) == b"", "the server kept the connection open"
    return response, body, elapsed


def get(hub: HubServer, target: str, **headers: str) -> bytes:
    """A raw GET of `target` (sent as given, without encoding)."""
    lines = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def request_bytes(
    method: str, target: str, body: bytes, token: str | None, content_type: str = "application/json", **headers: str
) -> bytes:
    """Raw bytes of a request with `body` and a matching Content-Length, unless `headers` sets framing itself."""
    head = {"Host": "127.0.0.1", "Content-Type": content_type}
    if token:
        head["Authorization"] = f"Bearer {token}"
    if not {"Content-Length", "Transfer-Encoding"} & set(headers):
        head["Content-Length"] = str(len(body))
    head.update(headers)
    lines = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def post_request(target: str, body: bytes, token: str | None, **headers: str) -> bytes:
    """Raw bytes of an ndjson POST (a commit) with `body`."""
    return request_bytes("POST", target, body, token, "application/x-ndjson", **headers)


def assert_no_injection(response: http.client.HTTPResponse) -> None:
    """No header beyond the server's own, and no header value holding CR, LF or NUL."""
    names = {name.lower() for name, _ in response.getheaders()}
    assert "set-cookie" not in names and "x-injected" not in names
    assert not any(set(value) & {"\r", "\n", "\0"} for _, value in response.getheaders())


def commit_lines(*lines: object) -> bytes:
    """An ndjson commit body: a valid header line, then `lines` (JSON values, or raw bytes sent as they are)."""
    header = {"key": "header", "value": {"summary": "test", "description": ""}}
    encoded = [json.dumps(line).encode() if not isinstance(line, bytes) else line for line in (header, *lines)]
    return b"\n".join(encoded)


def file_line(path: str, content: bytes = b"x") -> dict:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"}}


@contextlib.contextmanager
def hub_command(
    root: Path, *arguments: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen, str]]:
    """The real `hf-norms hub --root ROOT --port 0 ARGUMENTS` in a subprocess: yields the process and its endpoint
    once it printed `HF_ENDPOINT=...`, and stops it afterwards. Its stderr goes to `ROOT.stderr`."""
    stderr_path = root.with_name(root.name + ".stderr")
    command = [str(HF_NORMS_SCRIPT), "hub", "--root", str(root), "--port", "0", *arguments]
    with (
        stderr_path.open("w") as stderr,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, **(env or {})}
        ) as process,
    ):
        try:
            line = process.stdout.readline().strip()
            assert line.startswith("HF_ENDPOINT=http://127.0.0.1:"), (line, stderr_path.read_text()[-2000:])
            yield process, line.removeprefix("HF_ENDPOINT=")
        finally:
            process.terminate()
            process.wait(timeout=30)


def peak_memory_bytes(pid: int) -> int:
    """The most resident memory process `pid` has held (`VmHWM` of /proc/PID/status, Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")
