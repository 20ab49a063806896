"""The loopback Hub's protocol edges, on a real server on 127.0.0.1: request bodies of the wrong types, byte ranges,
a file and a folder of one name, card and weights metadata that does not parse, and many clients at once.

Each refusal is a 4xx (never a 500) and leaves every file under the hub's root unchanged.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import pytest
from huggingface_hub import HfApi
from raw_http import (
    PROMPT_SECONDS,
    commit_lines,
    file_line,
    get,
    port_of,
    post_request,
    raw_exchange,
    request_bytes,
    store_state,
)

from hf_norms.hub.server import HubServer

TOKEN = "protocol-test-token"
DIGITS = b"0123456789"

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """`org/target` holds `digits.txt` (10 bytes), `empty.txt` and `sub/inner.txt`; it has a branch `dev`."""
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN]) as server:
        api = HfApi(endpoint=server.url, token=TOKEN)
        api.create_repo("org/target")
        for path, content in (("digits.txt", DIGITS), ("empty.txt", b""), ("sub/inner.txt", b"i")):
            api.upload_file(path_or_fileobj=content, path_in_repo=path, repo_id="org/target")
        api.create_branch("org/target", branch="dev")
        yield server


# --------------------------------------------------------------------------------------------------------------------
# JSON bodies and query parameters of the wrong types: 400, never 500
# --------------------------------------------------------------------------------------------------------------------

REPO = "/api/models/org/target"


@pytest.mark.parametrize(
    ("method", "target", "body"),
    [
        ("POST", f"{REPO}/paths-info/main", {"paths": [5]}),
        ("POST", f"{REPO}/paths-info/main", {"paths": [None, "digits.txt"]}),
        ("POST", f"{REPO}/paths-info/main", {"paths": [["digits.txt"]]}),
        ("POST", f"{REPO}/paths-info/main", {"paths": "digits.txt"}),  # a string, not a list of them
        ("POST", f"{REPO}/paths-info/main", {"paths": {"digits.txt": 1}}),
        ("POST", f"{REPO}/paths-info/main", {"paths": ["digits.txt"], "expand": "yes"}),
        ("POST", f"{REPO}/preupload/main", {"files": 5}),
        ("POST", f"{REPO}/preupload/main", {"files": [5]}),
        ("POST", f"{REPO}/preupload/main", {"files": [{"path": 5}]}),
        ("POST", f"{REPO}/preupload/main", {"files": [{}]}),
        ("POST", f"{REPO}/preupload/main", {}),
        ("POST", f"{REPO}/branch/new", {"startingPoint": 5}),
        ("POST", f"{REPO}/branch/new", {"startingPoint": ["main"]}),
        ("POST", f"{REPO}/tag/main", {"tag": 5}),
        ("POST", f"{REPO}/tag/main", {"tag": "t", "message": ["m"]}),
        ("POST", f"{REPO}/tag/main", {}),
        ("POST", "/api/repos/create", {"name": "x", "organization": 5}),
        ("POST", "/api/repos/create", {"name": "x", "private": "yes"}),
        ("POST", "/api/repos/create", {"name": "x", "visibility": 5}),
        ("POST", "/api/repos/create", {"name": "x", "type": ["model"]}),
        ("PUT", f"{REPO}/settings", {"private": "yes"}),
        ("PUT", f"{REPO}/settings", {"visibility": 5}),
        ("PUT", f"{REPO}/settings", {"visibility": "secret"}),
        ("PUT", f"{REPO}/settings", {"gated": "sometimes"}),
        ("PUT", f"{REPO}/settings", {}),  # nothing to change
        ("POST", "/api/repos/move", {"fromRepo": 5, "toRepo": "org/moved"}),
        ("POST", "/api/repos/move", {"fromRepo": "org/target", "toRepo": ["org/moved"]}),
        ("POST", "/api/repos/move", {"fromRepo": "org/target", "toRepo": "moved"}),  # no namespace
        ("POST", "/api/repos/move", {"fromRepo": "org/target", "toRepo": "org/moved", "type": 5}),
        ("DELETE", "/api/repos/delete", {"name": 5}),
        ("DELETE", "/api/repos/delete", {"name": "target", "organization": ["org"]}),
        ("DELETE", "/api/repos/delete", {"name": "target", "organization": "org", "type": "kernel"}),
        ("DELETE", "/api/repos/delete", [1]),
    ],
)
def test_json_bodies_of_the_wrong_types_are_refused_with_400(
    hub: HubServer, method: str, target: str, body: object
) -> None:
    before = store_state(hub)
    response, answer, _ = raw_exchange(hub, request_bytes(method, target, json.dumps(body).encode(), TOKEN))
    assert response.status == 400, answer
    assert json.loads(answer)["error"]
    assert store_state(hub) == before


@pytest.mark.parametrize(
    "target",
    [
        "/api/models?limit=abc",
        "/api/models?limit=-1",
        f"{REPO}/tree/main?recursive=maybe",
        f"{REPO}/tree/main?expand=often",
    ],
)
def test_query_parameters_of_the_wrong_types_are_refused_with_400(hub: HubServer, target: str) -> None:
    response, answer, _ = raw_exchange(hub, get(hub, target, Authorization=f"Bearer {TOKEN}"))
    assert response.status == 400, answer


# --------------------------------------------------------------------------------------------------------------------
# Byte ranges
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("range_header", "status", "content", "content_range"),
    [
        ("bytes=2-4", 206, b"234", "bytes 2-4/10"),
        ("bytes=3-3", 206, b"3", "bytes 3-3/10"),
        ("bytes=5-", 206, b"56789", "bytes 5-9/10"),
        ("bytes=5-100", 206, b"56789", "bytes 5-9/10"),  # past the end: up to the end
        ("bytes=-3", 206, b"789", "bytes 7-9/10"),  # the last 3 bytes
        ("bytes=-20", 206, DIGITS, "bytes 0-9/10"),  # a suffix longer than the file: all of it
        ("bytes=5-2", 416, None, "bytes */10"),  # last before first
        ("bytes=10-", 416, None, "bytes */10"),  # starts at the end
        ("bytes=10-12", 416, None, "bytes */10"),
        ("bytes=-0", 416, None, "bytes */10"),  # an empty suffix
        ("bytes=0-1,4-5", 200, DIGITS, None),  # several ranges: the whole file, as RFC 9110 allows
        ("bytes=abc", 200, DIGITS, None),  # not a byte range: ignored
        ("items=0-1", 200, DIGITS, None),
        ("bytes=-", 200, DIGITS, None),
    ],
)
def test_byte_ranges(
    hub: HubServer, range_header: str, status: int, content: bytes | None, content_range: str | None
) -> None:
    response, body, _ = raw_exchange(hub, get(hub, "/org/target/resolve/main/digits.txt", Range=range_header))
    assert response.status == status
    assert response.getheader("Content-Range") == content_range
    if content is not None:
        assert body == content
    else:
        assert json.loads(body)["error"]


def test_a_range_of_an_empty_file_gets_the_empty_file(hub: HubServer) -> None:
    response, body, _ = raw_exchange(hub, get(hub, "/org/target/resolve/main/empty.txt", Range="bytes=0-"))
    assert (response.status, body) == (200, b"")


# --------------------------------------------------------------------------------------------------------------------
# A file and a folder of the same name
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        (file_line("clash"), file_line("clash/inside.txt")),  # both in one commit
        (file_line("deep/a/b.txt"), file_line("deep/a")),
        (file_line("digits.txt/inside.txt"),),  # a folder where a file is
        (file_line("sub"),),  # a file where a folder is
    ],
)
def test_a_file_and_a_folder_of_the_same_name_are_refused(hub: HubServer, lines: tuple) -> None:
    before = store_state(hub)
    for revision in ("main", "main?create_pr=1"):
        response, body, _ = raw_exchange(hub, post_request(f"{REPO}/commit/{revision}", commit_lines(*lines), TOKEN))
        assert response.status == 400 and "both a file and a folder" in json.loads(body)["error"], body
    assert store_state(hub) == before


def test_a_folder_replaced_by_a_file_in_one_commit_is_stored(hub: HubServer) -> None:
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.upload_file(path_or_fileobj=b"x", path_in_repo="swap/x.txt", repo_id="org/target", revision="dev")
    delete = {"key": "deletedFolder", "value": {"path": "swap/"}}
    response, body, _ = raw_exchange(
        hub, post_request(f"{REPO}/commit/dev", commit_lines(delete, file_line("swap")), TOKEN)
    )
    assert response.status == 200, body
    assert "swap" in api.list_repo_files("org/target", revision="dev")


# --------------------------------------------------------------------------------------------------------------------
# Card and weights metadata that does not parse: model_info still answers, without it
# --------------------------------------------------------------------------------------------------------------------

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    "front_matter",
    [
        "pipeline_tag: [unclosed",  # not YAML
        "- a list\n- not a mapping",
        "!!python/object/apply:os.system ['echo pwned']",  # a tag the safe loader refuses
        LAUGHS,  # billion laughs: 9**9 strings once expanded
        "[" * 10_000,  # nested deeper than the parser recurses
    ],
    ids=["invalid", "list", "python-tag", "aliases", "deep"],
)
def test_card_metadata_that_does_not_parse_is_ignored(hub: HubServer, front_matter: str) -> None:
    api = HfApi(endpoint=hub.url, token=TOKEN)
    repo_id = "org/odd-card"
    api.create_repo(repo_id, exist_ok=True)
    # huggingface_hub refuses to upload such a card (/api/validate-yaml says why); another client need not ask
    card = file_line("README.md", f"---\n{front_matter}\n---\n# card\n".encode())
    response, _, _ = raw_exchange(hub, post_request(f"/api/models/{repo_id}/commit/main", commit_lines(card), TOKEN))
    assert response.status == 200
    started = time.monotonic()
    info = api.model_info(repo_id)
    assert time.monotonic() - started < PROMPT_SECONDS
    assert info.card_data is None and info.pipeline_tag is None and info.tags == []


def test_card_values_yaml_reads_as_other_types_come_back_as_json(hub: HubServer) -> None:
    api = HfApi(endpoint=hub.url, token=TOKEN)
    card = b"---\ndate: 2024-05-01\nscores: !!set {a: null}\nblob: !!binary aGk=\nnan: .nan\n1: one\n---\n"
    api.create_repo("org/typed-card")
    api.upload_file(path_or_fileobj=card, path_in_repo="README.md", repo_id="org/typed-card")
    response, body, _ = raw_exchange(hub, get(hub, "/api/models/org/typed-card"))
    assert response.status == 200
    expected = {"date": "2024-05-01", "scores": ["a"], "blob": "aGk=", "nan": None, "1": "one"}
    assert json.loads(body)["cardData"] == expected  # strict JSON: no NaN


def with_header(header: bytes) -> bytes:
    """A safetensors file holding `header` and no tensor bytes."""
    return len(header).to_bytes(8, "little") + header


@pytest.mark.parametrize(
    "weights",
    [
        b"",
        b"\x00" * 7,
        (10**12).to_bytes(8, "little") + b"{}",  # a header length past the end of the file
        with_header(b"[]"),  # a header that is not an object
        with_header(b"not json"),
        with_header(b'{"w": {"dtype": "F32", "shape": 3}}'),  # a shape that is not a list
        with_header(b'{"w": {"dtype": "F32", "shape": [-3, 1]}}'),
        with_header(b'{"w": {"dtype": 5, "shape": [3]}}'),
        with_header(b'{"w": [1, 2]}'),
    ],
)
def test_safetensors_headers_that_do_not_parse_are_ignored(hub: HubServer, weights: bytes) -> None:
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo("org/odd-weights", exist_ok=True)
    api.upload_file(path_or_fileobj=weights, path_in_repo="model.safetensors", repo_id="org/odd-weights")
    assert api.model_info("org/odd-weights").safetensors is None


# --------------------------------------------------------------------------------------------------------------------
# Many clients at once
# --------------------------------------------------------------------------------------------------------------------


def test_many_clients_connecting_at_once_are_all_accepted_and_their_commits_stored(hub: HubServer) -> None:
    """64 connections opened in one burst: each is accepted by the kernel at once (a listen backlog of 5 drops the
    rest, which then retry after a second or are reset), then each sends a commit and gets 200."""
    sockets = []
    for _ in range(64):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port_of(hub.url)))
        sockets.append(sock)
    try:
        deadline, pending = time.monotonic() + 0.5, list(sockets)
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], pending, [], max(0.0, deadline - time.monotonic()))
            pending = [sock for sock in pending if sock not in writable]
        assert not pending, f"{len(pending)} of 64 connections not accepted within 0.5 s"
        assert all(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for sock in sockets)
        for number, sock in enumerate(sockets):
            sock.setblocking(True)
            sock.sendall(post_request(f"{REPO}/commit/dev", commit_lines(file_line(f"burst/{number}.txt")), TOKEN))
        statuses = [sock.makefile("rb").readline().split()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert statuses == [b"200"] * 64
    files = HfApi(endpoint=hub.url, token=TOKEN).list_repo_files("org/target", revision="dev")
    assert {f"burst/{number}.txt" for number in range(64)} <= set(files)
