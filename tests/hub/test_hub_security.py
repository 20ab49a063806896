"""The loopback Hub against hostile requests, on a real server on 127.0.0.1.

Malformed requests go through raw sockets or `http.client` (huggingface_hub refuses to send them); well-formed ones
through `huggingface_hub.HfApi`. Every refusal is checked for its status, for the absence of injected headers, for an
unchanged store, and for a server that answers at once rather than holding a thread on the request.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from raw_http import (
    PROMPT_SECONDS,
    assert_no_injection,
    commit_lines,
    file_line,
    get,
    hub_command,
    peak_memory_bytes,
    port_of,
    post_request,
    raw_exchange,
    request_bytes,
    store_state,
)

from hf_norms.hub.server import HubError, HubServer
from hf_norms.hub.server import http as hub_http
from hf_norms.hub.server.http import token_user

TOKEN = "security-test-token"
BODY_LIMIT = 1 << 16

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
    request = post_request(f"/api/models/org/target/commit/main{INJECTION}", commit_lines(file_line("new.txt")), TOKEN)
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
        {"Transfer-Encoding": "chunked\r\nTransfer-Encoding: chunked"},  # two of them
        {"Transfer-Encoding": "chunked, chunked"},
        {"Transfer-Encoding": "identity"},
        {"Transfer-Encoding": ""},
    ],
)
def test_bad_framing_is_answered_at_once_without_reading_the_body(hub: HubServer, framing: dict[str, str]) -> None:
    before = store_state(hub)
    request = post_request("/api/models/org/target/commit/main", b"", TOKEN, **framing)  # no body follows
    response, body, elapsed = raw_exchange(hub, request, expect_close=True)
    assert response.status == 400 and json.loads(body)["error"]
    assert elapsed < PROMPT_SECONDS  # answered without waiting for the body it announced
    assert store_state(hub) == before
    assert_answers_promptly(hub)


@pytest.mark.parametrize("chunk_size", [b"-5", b"zz", b"1" * 20, b""])
def test_bad_chunk_sizes_are_refused(hub: HubServer, chunk_size: bytes) -> None:
    before = store_state(hub)
    request = post_request(
        "/api/models/org/target/commit/main", chunk_size + b"\r\n", TOKEN, **{"Transfer-Encoding": "chunked"}
    )
    response, _, elapsed = raw_exchange(hub, request, expect_close=True)
    assert response.status == 400 and elapsed < PROMPT_SECONDS
    assert store_state(hub) == before
    assert_answers_promptly(hub)


def test_a_valid_chunked_commit_is_stored(hub: HubServer) -> None:
    body = commit_lines(file_line("chunked.txt", b"chunky"))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    request = post_request("/api/models/org/target/commit/main", chunked, TOKEN, **{"Transfer-Encoding": "chunked"})
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
    response, body, _ = raw_exchange(
        hub, post_request("/api/models/org/target/commit/main", commit_lines(*lines), TOKEN)
    )
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
    response, _, _ = raw_exchange(hub, post_request("/api/models/org/target/commit/main", body, TOKEN))
    assert response.status == 400
    assert store_state(hub) == before


@pytest.mark.parametrize("body", [b"[1]", b"7", b'"org"', b"{bad", b'{"name": ["x"]}'])
def test_a_create_repo_body_that_is_not_an_object_is_refused_with_400(hub: HubServer, body: bytes) -> None:
    before = store_state(hub)
    request = post_request("/api/repos/create", body, TOKEN, **{"Content-Type": "application/json"})
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
        hub, post_request("/api/models/org/target/commit/main", commit_lines(file_line(path)), TOKEN)
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


# --------------------------------------------------------------------------------------------------------------------
# Refusals from the headers: no body is read for a request that cannot be authorised
# --------------------------------------------------------------------------------------------------------------------

ALICE, BOB = "alice-token-owner", "bob-token-other"
PUBLIC = "alice-org/public"
ANNOUNCED_BYTES = 200 * 1024 * 1024  # announced by the requests below, which send a few bytes of it


@pytest.fixture(scope="module")
def owned_hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """A hub without tokens (each token its own user) and with the default body limit, where alice owns `alice-org`:
    `alice-org/public` (a file, a branch `dev`, a tag `v1`) and `alice-org/secret` (private); bob owns `bob-org/own`."""
    with HubServer(tmp_path_factory.mktemp("owned-hub")) as server:
        alice, bob = HfApi(endpoint=server.url, token=ALICE), HfApi(endpoint=server.url, token=BOB)
        alice.create_repo("alice-org/public")
        alice.upload_file(path_or_fileobj=b"a", path_in_repo="a.txt", repo_id="alice-org/public")
        alice.create_branch("alice-org/public", branch="dev")
        alice.create_tag("alice-org/public", tag="v1")
        alice.create_repo("alice-org/secret", private=True)
        bob.create_repo("bob-org/own")
        yield server


@pytest.mark.parametrize(
    ("method", "target", "token", "status"),
    [
        ("POST", "/api/models/alice-org/public/commit/main", None, 401),
        ("POST", "/api/models/alice-org/public/commit/main", BOB, 403),
        ("POST", "/api/models/alice-org/secret/commit/main", BOB, 404),
        ("POST", "/api/models/alice-org/public/commit/main?create_pr=1", BOB, 403),
        ("POST", "/api/models/alice-org/public/preupload/main", BOB, 403),
        ("POST", "/api/models/alice-org/public/branch/bob", BOB, 403),
        ("POST", "/api/models/alice-org/public/tag/main", None, 401),
        ("DELETE", "/api/models/alice-org/public/branch/dev", BOB, 403),
        ("DELETE", "/api/models/alice-org/public/tag/v1", BOB, 403),
        ("PUT", "/api/models/alice-org/public/settings", BOB, 403),
        ("PUT", "/api/models/alice-org/secret/settings", BOB, 404),
        ("POST", "/api/repos/create", None, 401),
        ("DELETE", "/api/repos/delete", None, 401),
        ("POST", "/api/repos/move", None, 401),
    ],
)
def test_a_request_refused_for_authorisation_is_answered_from_its_headers(
    owned_hub: HubServer, method: str, target: str, token: str | None, status: int
) -> None:
    """200 MB announced, 16 bytes sent: the answer comes at once, without waiting for (or holding) the body."""
    before = store_state(owned_hub)
    request = request_bytes(method, target, b'{"name": "x", "a', token, **{"Content-Length": str(ANNOUNCED_BYTES)})
    response, body, elapsed = raw_exchange(owned_hub, request, expect_close=True)
    assert response.status == status, body
    assert elapsed < PROMPT_SECONDS
    assert store_state(owned_hub) == before


SMUGGLED = b"GET /api/whoami-v2 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + ALICE.encode() + b"\r\n\r\n"


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        ("POST", "/api/no-such-endpoint", 404),
        ("POST", "/api/models/alice-org/public/commit/main%0d%0a", 400),  # a control character in the target
        ("GET", "/api/models/alice-org/public", 200),  # an endpoint that takes no body
        ("DELETE", "/api/models/alice-org/public/tag/v1", 401),
    ],
)
def test_a_body_left_unread_is_never_taken_for_the_next_request(
    owned_hub: HubServer, method: str, target: str, status: int
) -> None:
    """A body holding a whole request, sent with a request answered without reading it: the connection is closed
    after the one answer, so the request inside the body is never answered (or run)."""
    before = store_state(owned_hub)
    response, _, _ = raw_exchange(owned_hub, request_bytes(method, target, SMUGGLED, None), expect_close=True)
    assert response.status == status
    assert store_state(owned_hub) == before


def test_an_invalid_token_is_refused_before_the_body(hub_online: None, tmp_path: Path) -> None:
    with HubServer(tmp_path, tokens=[TOKEN]) as guarded:
        HfApi(endpoint=guarded.url, token=TOKEN).create_repo("org/kept")
        before = store_state(guarded)
        request = post_request(
            "/api/models/org/kept/commit/main", b"{}", "not-the-token", **{"Content-Length": str(ANNOUNCED_BYTES)}
        )
        response, body, elapsed = raw_exchange(guarded, request, expect_close=True)
        assert response.status == 401 and json.loads(body)["error"] == "Invalid credentials in Authorization header"
        assert elapsed < PROMPT_SECONDS
        assert store_state(guarded) == before


def test_a_client_that_sends_the_whole_refused_body_still_reads_the_answer(owned_hub: HubServer) -> None:
    """The server answers before the body arrives and then discards what still comes, so a client that writes its
    whole request before reading (as `http.client` and `httpx` do) gets the 403 rather than a reset connection."""
    before = store_state(owned_hub)
    connection = http.client.HTTPConnection("127.0.0.1", port_of(owned_hub.url), timeout=10)
    body = commit_lines(file_line("big.bin", bytes(6 << 20)))
    headers = {"Authorization": f"Bearer {BOB}", "Content-Type": "application/x-ndjson"}
    connection.request("POST", "/api/models/alice-org/public/commit/main", body=body, headers=headers)
    response = connection.getresponse()
    assert response.status == 403 and response.getheader("Connection") == "close"
    connection.close()
    assert store_state(owned_hub) == before


def _upload_without_a_token(url: str, sent_bytes: int) -> int | None:
    """Announce a 200 MB commit without a token, send `sent_bytes` of it, stop sending; the status, or None when the
    server closed the connection before the answer could be read."""
    head = post_request("/api/models/alice-org/big/commit/main", b"", None, **{"Content-Length": str(ANNOUNCED_BYTES)})
    chunk = bytes(1 << 20)
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=20) as sock:
        try:
            sock.sendall(head)
            for _ in range(sent_bytes // len(chunk)):
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)
            response = http.client.HTTPResponse(sock)
            response.begin()
            return response.status
        except OSError:
            return None


def test_unauthenticated_uploads_do_not_grow_the_server_memory(hub_online: None, tmp_path: Path) -> None:
    """Three concurrent uploads without a token, each announcing 200 MB and sending 64 MB, to the real `hf-norms hub`
    process: its peak resident memory (VmHWM) grows by less than 16 MB (reading the bodies would take 192 MB)."""
    with hub_command(tmp_path / "hub") as (process, url):
        HfApi(endpoint=url, token=ALICE).create_repo("alice-org/big")
        before = peak_memory_bytes(process.pid)
        with ThreadPoolExecutor(max_workers=3) as pool:
            statuses = list(pool.map(lambda _: _upload_without_a_token(url, 64 << 20), range(3)))
        grown = peak_memory_bytes(process.pid) - before
        assert HfApi(endpoint=url, token=ALICE).list_repo_files("alice-org/big") == [".gitattributes"]
    assert set(statuses) <= {401, None}, statuses
    assert grown < 16 << 20, f"peak memory grew by {grown / 2**20:.0f} MiB"


# --------------------------------------------------------------------------------------------------------------------
# Owner-only writes through the new endpoints; names that differ only by case; refusals that say why
# --------------------------------------------------------------------------------------------------------------------


def _refused_writes(bob: HfApi, anonymous: HfApi) -> list[tuple[int, Callable[[], object]]]:
    """Each write bob (or no token) may not do to alice's repos, with the status it gets."""
    return [
        (403, lambda: bob.delete_repo("alice-org/public")),
        (401, lambda: anonymous.delete_repo("alice-org/public")),
        (404, lambda: bob.delete_repo("alice-org/secret")),
        (403, lambda: bob.update_repo_settings("alice-org/public", private=True)),
        (404, lambda: bob.update_repo_settings("alice-org/secret", private=False)),
        (403, lambda: bob.move_repo("alice-org/public", "bob-org/public")),
        (403, lambda: bob.move_repo("bob-org/own", "alice-org/own")),  # into alice's namespace
        (404, lambda: bob.move_repo("alice-org/secret", "bob-org/secret")),
        (403, lambda: bob.delete_branch("alice-org/public", branch="dev")),
        (403, lambda: bob.delete_tag("alice-org/public", tag="v1")),
        (403, lambda: bob.upload_file(path_or_fileobj=b"b", path_in_repo="b", repo_id=PUBLIC, create_pr=True)),
        (403, lambda: bob.create_repo("ALICE-ORG/x")),  # alice's namespace, in other letters
        (403, lambda: bob.create_repo("Alice-Org/x")),
        (403, lambda: bob.create_repo(f"{token_user(ALICE).upper()}/x")),  # alice's own namespace, upper case
        (403, lambda: bob.move_repo("bob-org/own", "Alice-ORG/own")),
    ]


def test_writes_to_another_users_repos_are_refused_and_change_nothing(owned_hub: HubServer) -> None:
    bob, anonymous = HfApi(endpoint=owned_hub.url, token=BOB), HfApi(endpoint=owned_hub.url, token=False)
    before = store_state(owned_hub)
    for status, write in _refused_writes(bob, anonymous):
        with pytest.raises(HfHubHTTPError) as excinfo:
            write()
        assert excinfo.value.response.status_code == status, excinfo.value
        assert store_state(owned_hub) == before


def test_a_403_names_the_caller_the_owner_and_what_to_do(owned_hub: HubServer) -> None:
    bob, anonymous = HfApi(endpoint=owned_hub.url, token=BOB), HfApi(endpoint=owned_hub.url, token=False)
    writes = [write for status, write in _refused_writes(bob, anonymous) if status == 403]
    writes += [
        lambda: bob.upload_file(path_or_fileobj=b"b", path_in_repo="b.txt", repo_id="alice-org/public"),
        lambda: bob.create_branch("alice-org/public", branch="bob"),
        lambda: bob.create_repo("alice-org/another"),
    ]
    for write in writes:
        with pytest.raises(HfHubHTTPError) as excinfo:
            write()
        message = excinfo.value.response.headers["X-Error-Message"]
        assert token_user(BOB) in message and token_user(ALICE) in message, message
        assert "token" in message.split(":", 1)[1], message  # what to do: use the owner's token, or your namespace


def test_repo_names_that_differ_only_by_case_are_one_repo(owned_hub: HubServer) -> None:
    alice = HfApi(endpoint=owned_hub.url, token=ALICE)
    alice.create_repo("alice-org/Mixed")
    before = store_state(owned_hub)
    for repo_id in ("alice-org/mixed", "ALICE-ORG/MIXED", "Alice-Org/Mixed"):
        with pytest.raises(HfHubHTTPError) as excinfo:
            alice.create_repo(repo_id)
        assert excinfo.value.response.status_code == 409
    with pytest.raises(HfHubHTTPError) as excinfo:
        alice.move_repo("alice-org/public", "alice-org/MIXED")
    assert excinfo.value.response.status_code == 409
    assert store_state(owned_hub) == before
