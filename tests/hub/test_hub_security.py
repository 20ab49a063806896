"""The loopback Hub against hostile requests, on a real server on 127.0.0.1.

Malformed requests go through raw sockets or `http.client` (huggingface_hub refuses to send them); well-formed ones
through `huggingface_hub.HfApi`. Every refusal is checked for its status, for the absence of injected headers, for an
unchanged store, and for a server that answers at once rather than holding a thread on the request.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from hf_norms.hub.server import HubServer
from hf_norms.hub.server import http as hub_http
from hf_norms.hub.server.http import token_user
from hf_norms.hub.server.store import HubError

TOKEN = "security-test-token"
BODY_LIMIT = 1 << 16
PROMPT_SECONDS = 2.0  # an answer later than this means the server waited on the request

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN], max_body_bytes=BODY_LIMIT) as server:
        api = HfApi(endpoint=server.url, token=TOKEN)
        api.create_repo("org/target")
        api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="org/target")
        yield server


@pytest.fixture(scope="module")
def open_hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """A hub started without tokens: every distinct token is its own user."""
    with HubServer(tmp_path_factory.mktemp("open-hub")) as server:
        yield server


# --------------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------------


def store_state(hub: HubServer) -> dict[str, str]:
    """Every file under the hub's root with the sha256 of its bytes."""
    return {
        p.relative_to(hub.root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(hub.root.rglob("*"))
        if p.is_file()
    }


def raw_exchange(
    hub: HubServer, request: bytes, *, expect_close: bool = False
) -> tuple[http.client.HTTPResponse, bytes, float]:
    """Send `request` bytes on a fresh connection that stays open; return the parsed response, its body and the
    seconds until it was answered. With `expect_close`, also assert that the server then closed the connection."""
    port = int(hub.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=PROMPT_SECONDS * 3) as sock:
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


def post_request(target: str, body: bytes, token: str | None = TOKEN, **headers: str) -> bytes:
    """Raw bytes of a POST with `body` and a matching Content-Length, unless `headers` sets framing itself."""
    head = {"Host": "127.0.0.1", "Content-Type": "application/x-ndjson"}
    if token:
        head["Authorization"] = f"Bearer {token}"
    if not {"Content-Length", "Transfer-Encoding"} & set(headers):
        head["Content-Length"] = str(len(body))
    head.update(headers)
    lines = [f"POST {target} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


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


def assert_answers_promptly(hub: HubServer) -> None:
    """The next ordinary request gets its answer at once."""
    started = time.monotonic()
    assert HfApi(endpoint=hub.url, token=TOKEN).model_info("org/target").id == "org/target"
    assert time.monotonic() - started < PROMPT_SECONDS


# --------------------------------------------------------------------------------------------------------------------
# CR, LF, NUL in paths, revisions and headers
# --------------------------------------------------------------------------------------------------------------------

INJECTION = "%0d%0aSet-Cookie:%20stolen=1%0d%0aX-Injected:%201"


@pytest.mark.parametrize(
    "target",
    [
        f"/org/target/resolve/main{INJECTION}/config.json",  # revision of a download
        f"/org/target/resolve/main/config.json{INJECTION}",  # file path of a download
        f"/api/models/org/target/revision/main{INJECTION}",  # revision of repo info
        f"/api/models/org/target/tree/main/sub{INJECTION}",  # folder of a tree listing
        f"/api/models/org/target/tree/main?cursor=1{INJECTION}",  # query string
        "/org/target/resolve/main/config.json%00",  # NUL, encoded
        "/org/target/resolve/main/con\x00fig.json",  # NUL, raw
        "/org/target/resolve/main/config.json%09",  # TAB, or any other control character
    ],
)
def test_control_characters_in_the_request_target_are_refused(hub: HubServer, target: str) -> None:
    response, body, elapsed = raw_exchange(hub, get(hub, target, Authorization=f"Bearer {TOKEN}"))
    assert response.status == 400 and "control characters" in json.loads(body)["error"]
    assert_no_injection(response)
    assert elapsed < PROMPT_SECONDS


def test_control_characters_in_a_commit_revision_are_refused_and_nothing_is_stored(hub: HubServer) -> None:
    before = store_state(hub)
    request = post_request(f"/api/models/org/target/commit/main{INJECTION}", commit_lines(file_line("new.txt")))
    response, _, _ = raw_exchange(hub, request)
    assert response.status == 400
    assert_no_injection(response)
    assert store_state(hub) == before


@pytest.mark.parametrize(
    "header",
    [
        b"X-Note: a\x00b",  # NUL
        b"X-Note: one\r\n two",  # an obsolete folded line: CR LF inside the value
        b"Authorization: Bearer secret\x01token",  # a control character in a token, which is never echoed
    ],
)
def test_control_characters_in_header_values_are_refused(hub: HubServer, header: bytes) -> None:
    request = b"GET /api/models/org/target HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n\r\n"
    response, body, _ = raw_exchange(hub, request)
    assert response.status == 400 and "control character" in json.loads(body)["error"]
    assert b"secret" not in body and "secret" not in str(response.getheaders())
    assert_no_injection(response)


def test_error_messages_are_escaped_in_headers(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a message that holds CR and LF (none can reach one now) cannot split the X-Error-Message header."""

    def hostile_route(method: str, path: str) -> None:
        raise HubError(404, "gone\r\nSet-Cookie: stolen=1\r\nX-Injected: 1\x00", "EntryNotFound")

    monkeypatch.setattr(hub_http, "route", hostile_route)
    response, body, _ = raw_exchange(hub, get(hub, "/api/models/org/target"))
    assert response.status == 404
    assert_no_injection(response)
    assert response.getheader("X-Error-Message") == r"gone\r\nSet-Cookie: stolen=1\r\nX-Injected: 1\x00"
    assert json.loads(body)["error"].startswith("gone\r\n")  # the JSON body carries it intact


def test_urls_come_from_the_configured_address_not_the_host_header(hub: HubServer) -> None:
    headers = {"Host": "evil.example", "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connection = http.client.HTTPConnection("127.0.0.1", int(hub.url.rsplit(":", 1)[1]), timeout=10)
    connection.request("POST", "/api/repos/create", body=json.dumps({"name": "hosted", "organization": "org"}),
                       headers=headers)  # fmt: skip
    created = json.loads(connection.getresponse().read())
    headers["Content-Type"] = "application/x-ndjson"
    connection.request("POST", "/api/models/org/hosted/commit/main", body=commit_lines(file_line("a.txt")),
                       headers=headers)  # fmt: skip
    committed = json.loads(connection.getresponse().read())
    connection.close()
    assert created["url"] == f"{hub.url}/org/hosted"
    assert committed["commitUrl"] == f"{hub.url}/org/hosted/commit/{committed['commitOid']}"
    assert "evil" not in json.dumps([created, committed])


# --------------------------------------------------------------------------------------------------------------------
# Request bodies: framing, base64, commit lines
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "framing",
    [
        {"Content-Length": "-5"},
        {"Content-Length": "abc"},
        {"Content-Length": "0x10"},
        {"Content-Length": "0\r\nContent-Length: 5"},  # two of them
        {"Content-Length": str(BODY_LIMIT + 1)},
        {"Transfer-Encoding": "chunked", "Content-Length": "5"},
        {"Transfer-Encoding": "gzip"},
    ],
)
def test_bad_framing_is_answered_at_once_without_reading_the_body(hub: HubServer, framing: dict[str, str]) -> None:
    before = store_state(hub)
    request = post_request("/api/models/org/target/commit/main", b"", **framing)  # no body follows
    response, body, elapsed = raw_exchange(hub, request, expect_close=True)
    assert response.status == 400 and json.loads(body)["error"]
    assert elapsed < PROMPT_SECONDS  # answered without waiting for the body it announced
    assert store_state(hub) == before
    assert_answers_promptly(hub)


@pytest.mark.parametrize("chunk_size", [b"-5", b"zz", b"1" * 20, b""])
def test_bad_chunk_sizes_are_refused(hub: HubServer, chunk_size: bytes) -> None:
    before = store_state(hub)
    request = post_request(
        "/api/models/org/target/commit/main", chunk_size + b"\r\n", **{"Transfer-Encoding": "chunked"}
    )
    response, _, elapsed = raw_exchange(hub, request, expect_close=True)
    assert response.status == 400 and elapsed < PROMPT_SECONDS
    assert store_state(hub) == before
    assert_answers_promptly(hub)


def test_a_valid_chunked_commit_is_stored(hub: HubServer) -> None:
    body = commit_lines(file_line("chunked.txt", b"chunky"))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    request = post_request("/api/models/org/target/commit/main", chunked, **{"Transfer-Encoding": "chunked"})
    response, _, _ = raw_exchange(hub, request)
    assert response.status == 200
    assert "chunked.txt" in HfApi(endpoint=hub.url, token=TOKEN).list_repo_files("org/target")


@pytest.mark.parametrize(
    "lines",
    [
        (b"[1, 2]",),  # a JSON list
        (b"42",),  # a number
        (b'"file"',),  # a string
        (b"{not json",),
        (b"[" * 100_000,),  # nested too deep to parse
        ({"key": "file"},),  # no value
        ({"key": "file", "value": "a.txt"},),  # value not an object
        ({"key": "file", "value": {"content": "eA=="}},),  # no path
        ({"key": "file", "value": {"path": "a.txt"}},),  # no content
        ({"key": "file", "value": {"path": "a.txt", "content": 5}},),  # content not a string
        ({"key": "file", "value": {"path": "a.txt", "content": "eA==", "encoding": "utf-8"}},),
        ({"key": "file", "value": {"path": "a.txt", "content": "not base64!"}},),
        ({"key": "file", "value": {"path": "a.txt", "content": "eA="}},),  # bad padding
        ({"key": "file", "value": {"path": "a.txt", "content": "é"}},),  # not ASCII
        ({"key": "deletedFile", "value": {"path": ["config.json"]}},),
        ({"key": "nonsense", "value": {}},),
    ],
)
def test_malformed_commit_lines_are_refused_with_400(hub: HubServer, lines: tuple) -> None:
    before = store_state(hub)
    response, body, _ = raw_exchange(hub, post_request("/api/models/org/target/commit/main", commit_lines(*lines)))
    assert response.status == 400, body
    assert store_state(hub) == before


@pytest.mark.parametrize(
    "header",
    [
        {"key": "header", "value": {}},  # no summary
        {"key": "header", "value": {"summary": ["a"]}},
        {"key": "header", "value": {"summary": "s", "parentCommit": 5}},
        {"key": "header", "value": "summary"},
    ],
)
def test_malformed_commit_headers_are_refused_with_400(hub: HubServer, header: dict) -> None:
    before = store_state(hub)
    body = b"\n".join(json.dumps(line).encode() for line in (header, file_line("a.txt")))
    response, _, _ = raw_exchange(hub, post_request("/api/models/org/target/commit/main", body))
    assert response.status == 400
    assert store_state(hub) == before


@pytest.mark.parametrize("body", [b"[1]", b"7", b'"org"', b"{bad", b'{"name": ["x"]}'])
def test_a_create_repo_body_that_is_not_an_object_is_refused_with_400(hub: HubServer, body: bytes) -> None:
    before = store_state(hub)
    request = post_request("/api/repos/create", body, **{"Content-Type": "application/json"})
    response, _, _ = raw_exchange(hub, request)
    assert response.status == 400
    assert store_state(hub) == before


@pytest.mark.parametrize(
    "path",
    ["a\x00b.txt", "a\\b.txt", "a\r\nb.txt", "a\tb.txt", "../x.txt", "a/../b.txt", "/abs.txt", "a//b.txt", "a/",
     "./a.txt", ".git/config", "sub/.cache/x", ""],
)  # fmt: skip
def test_file_names_a_hub_client_would_refuse_are_refused_at_upload(hub: HubServer, path: str) -> None:
    before = store_state(hub)
    response, body, _ = raw_exchange(
        hub, post_request("/api/models/org/target/commit/main", commit_lines(file_line(path)))
    )
    assert response.status == 400 and "Invalid path in repo" in json.loads(body)["error"]
    assert_no_injection(response)
    assert store_state(hub) == before


# --------------------------------------------------------------------------------------------------------------------
# Users, namespaces and private repos
# --------------------------------------------------------------------------------------------------------------------


def test_without_tokens_each_token_is_its_own_user(open_hub: HubServer) -> None:
    alice, bob = HfApi(endpoint=open_hub.url, token="alice-token-1"), HfApi(endpoint=open_hub.url, token="bob-token-2")
    assert alice.whoami()["name"] == token_user("alice-token-1") != bob.whoami()["name"]
    assert alice.create_repo("mine").repo_id == f"{token_user('alice-token-1')}/mine"
    alice.create_repo("alice-org/secret", private=True)
    alice.create_repo("alice-org/public")
    alice.upload_file(path_or_fileobj=b"s", path_in_repo="s.txt", repo_id="alice-org/secret")
    before = store_state(open_hub)

    for reader in (bob, HfApi(endpoint=open_hub.url, token=False)):  # another user, and no token at all
        with pytest.raises(RepositoryNotFoundError):
            reader.model_info("alice-org/secret")
        with pytest.raises(RepositoryNotFoundError):
            reader.list_repo_files("alice-org/secret")
    assert alice.list_repo_files("alice-org/secret") == [".gitattributes", "s.txt"]

    writes = [
        lambda: bob.create_repo("alice-org/another"),  # a namespace alice created first
        lambda: bob.create_repo(f"{token_user('alice-token-1')}/x"),  # alice's own namespace
        lambda: bob.create_repo(f"{token_user('carol-token-3')}/x"),  # carol's, though she has no repo yet
        lambda: bob.upload_file(path_or_fileobj=b"b", path_in_repo="b.txt", repo_id="alice-org/public"),
        lambda: bob.create_branch("alice-org/public", branch="bob"),
        lambda: bob.create_tag("alice-org/public", tag="bob"),
    ]
    for write in writes:
        with pytest.raises(HfHubHTTPError) as excinfo:
            write()
        assert excinfo.value.response.status_code == 403
    with pytest.raises(RepositoryNotFoundError):  # a private repo is not even acknowledged to a writer
        bob.upload_file(path_or_fileobj=b"b", path_in_repo="b.txt", repo_id="alice-org/secret")
    assert store_state(open_hub) == before

    assert bob.create_repo("bob-org/model").repo_id == "bob-org/model"  # a new namespace is bob's to claim
    bob.upload_file(path_or_fileobj=b"b", path_in_repo="b.txt", repo_id="bob-org/model")


def test_with_tokens_every_listed_token_is_the_configured_user(tmp_path: Path) -> None:
    with HubServer(tmp_path, tokens=["first-token", "second-token"], user="carol") as hub:
        first, second = (HfApi(endpoint=hub.url, token=t) for t in ("first-token", "second-token"))
        assert first.whoami()["name"] == second.whoami()["name"] == "carol"
        first.create_repo("org/shared", private=True)
        second.upload_file(path_or_fileobj=b"2", path_in_repo="two.txt", repo_id="org/shared")
        assert "two.txt" in first.list_repo_files("org/shared")
        with pytest.raises(HfHubHTTPError) as excinfo:
            HfApi(endpoint=hub.url, token="other-token").create_repo("org/other")
        assert excinfo.value.response.status_code == 401
