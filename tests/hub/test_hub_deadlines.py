"""The loopback Hub bounds every connection and every request, on a real server on 127.0.0.1 (raw sockets for the
clients huggingface_hub would not be): slow headers are cut at their deadline and hold no write slot, a download the
client does not read is cut and held in no memory, a `Range` reads only its bytes, path depth and length, paths per
request and listings are capped or paged with a clear 400, and a commit stores only the folders it changes.

Every load is bounded in count and time and stops by itself.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from raw_http import (
    PROMPT_SECONDS,
    commit_lines,
    file_line,
    get,
    hub_command,
    peak_memory_bytes,
    port_of,
    post_request,
    raw_exchange,
    request_bytes,
)

from hf_norms.hub.server import HubServer
from hf_norms.hub.server import http as hub_http

TOKEN = "deadline-test-token"
BLOB_BYTES = 64 << 20

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN]) as server:
        HfApi(endpoint=server.url, token=TOKEN).create_repo("org/target")
        yield server


def commit(hub: HubServer | str, repo_id: str, *lines: object) -> tuple[int, dict]:
    """A raw commit of ndjson `lines` (a file is written and synced to disk in about 6 ms: a large one takes seconds)."""
    url = hub if isinstance(hub, str) else hub.url
    request = post_request(f"/api/models/{repo_id}/commit/main", commit_lines(*lines), TOKEN)
    response, body, _ = raw_exchange(url, request, timeout=60)
    return response.status, json.loads(body)


def trickle(sock: socket.socket, data: bytes, seconds: float) -> float | None:
    """Send `data` a byte every 0.2 s for at most `seconds`; the seconds until the server cut the connection, or None
    when it did not."""
    started = time.monotonic()
    try:
        for byte in data:
            if time.monotonic() - started > seconds:
                return None
            sock.sendall(bytes([byte]))
            time.sleep(0.2)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    return time.monotonic() - started
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
    except OSError:
        return time.monotonic() - started
    return None


def test_slow_headers_are_cut_at_their_deadline_and_hold_no_write_slot(
    hub_online: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clients trickle their headers a byte every 0.2 s (http.server kept such a client for as long as it sent):
    with the only write slot free, a large commit is stored at once meanwhile, and both are cut at the header deadline
    (here 1 s)."""
    monkeypatch.setattr(hub_http, "HEADER_SECONDS", 1.0, raising=False)  # http.server had none
    with HubServer(tmp_path / "hub", tokens=[TOKEN], max_concurrent_writes=1) as hub:
        HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/slow")
        head = post_request("/api/models/org/slow/commit/main", b"", TOKEN, **{"Content-Length": "4000000"})
        slow = [socket.create_connection(("127.0.0.1", port_of(hub.url)), timeout=5) for _ in range(2)]
        try:
            for sock in slow:
                sock.sendall(head[:20])
            started = time.monotonic()
            status, _ = commit(hub, "org/slow", file_line("large.bin", bytes(2 << 20)))  # needs the write slot
            assert status == 200 and time.monotonic() - started < PROMPT_SECONDS
            cut = [trickle(sock, head[20:], seconds=5.0) for sock in slow]
        finally:
            for sock in slow:
                sock.close()
    assert all(seconds is not None and seconds < 1.0 + PROMPT_SECONDS for seconds in cut), cut


def test_a_download_the_client_does_not_read_is_cut(
    hub_online: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that asks for a 16 MiB file and reads none of it is cut at the send deadline (here 0.5 s plus 16 MiB
    at 1 TiB/s): the server neither waits on it forever nor holds the file for it."""
    monkeypatch.setattr(hub_http, "BODY_GRACE_SECONDS", 0.5)
    monkeypatch.setattr(hub_http, "MIN_BODY_RATE", 1 << 40)
    with HubServer(tmp_path / "hub", tokens=[TOKEN]) as hub:
        HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/unread")
        assert commit(hub, "org/unread", file_line("big.bin", bytes(16 << 20)))[0] == 200
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
            sock.settimeout(5)
            sock.connect(("127.0.0.1", port_of(hub.url)))
            sock.sendall(get(hub, "/org/unread/resolve/main/big.bin"))
            time.sleep(1.5)  # past the deadline, reading nothing
            received = 0
            try:
                while chunk := sock.recv(1 << 20):
                    received += len(chunk)
            except ConnectionResetError:
                pass
    assert received < 16 << 20, "the whole file was sent to a client that read none of it in time"


@pytest.fixture(scope="module")
def big_file_root(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub folder whose `org/big` holds `big.bin` (64 MiB), written by a hub in this process, so that the hub
    process of a test starts without the upload in its peak memory."""
    root = tmp_path_factory.mktemp("big") / "hub"
    with HubServer(root, tokens=[TOKEN]) as hub:
        HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/big")
        content = bytes(range(256)) * (BLOB_BYTES // 256)
        assert commit(hub, "org/big", file_line("big.bin", content))[0] == 200
    return root


def test_downloads_and_ranges_are_streamed_from_disk(big_file_root: Path) -> None:
    """Eight `Range` requests of a 64 MiB file and four clients that ask for all of it and read only 1 MiB, to the
    real `hf-norms hub` process: each range is the right bytes with 206, and its peak resident memory grows by less
    than 16 MiB (http.server's read the whole blob for each: 64 MiB and more)."""
    with hub_command(big_file_root, "--token", TOKEN) as (process, url):
        before = peak_memory_bytes(process.pid)
        for start in range(0, BLOB_BYTES, BLOB_BYTES // 8):
            response, body, _ = raw_exchange(
                url, get(None, "/org/big/resolve/main/big.bin", Range=f"bytes={start}-{start + 9}")
            )
            assert (response.status, body) == (206, bytes((start + i) % 256 for i in range(10)))
            assert response.getheader("Content-Range") == f"bytes {start}-{start + 9}/{BLOB_BYTES}"
        readers = [socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) for _ in range(4)]
        try:
            for sock in readers:
                sock.sendall(get(None, "/org/big/resolve/main/big.bin"))
            for sock in readers:
                got = 0
                while got < 1 << 20:
                    got += len(sock.recv(1 << 16))
            time.sleep(1.0)
            grown = peak_memory_bytes(process.pid) - before
        finally:
            for sock in readers:
                sock.close()
    assert grown < 16 << 20, f"peak memory grew by {grown / 2**20:.0f} MiB"


# --------------------------------------------------------------------------------------------------------------------
# Paths, paths per request, listings, storage per commit
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "accepted"),
    [
        ("/".join(["d"] * 31) + "/f.txt", True),  # 32 segments
        ("/".join(["d"] * 32) + "/f.txt", False),
        ("a" * 1000, True),
        ("a" * 1001, False),
    ],
)
def test_path_depth_and_length_are_capped(hub: HubServer, path: str, accepted: bool) -> None:
    status, answer = commit(hub, "org/target", file_line(path))
    if accepted:
        assert status == 200
    else:
        assert status == 400 and "longer than 1000 characters or deeper than 32 folders" in answer["error"]


def test_paths_info_takes_at_most_1000_paths(hub: HubServer) -> None:
    """Anonymous paths-info with 20,000 paths took 89 s; 1,000 are answered at once, more get 400."""
    target = "/api/models/org/target/paths-info/main"
    for count, status in ((1000, 200), (1001, 400), (20_000, 400)):
        body = json.dumps({"paths": [f"missing/{n}.txt" for n in range(count - 1)] + [".gitattributes"]}).encode()
        response, answer, elapsed = raw_exchange(hub, request_bytes("POST", target, body, None))
        assert (response.status, elapsed < PROMPT_SECONDS) == (status, True), answer[:200]
        if status == 200:
            assert [entry["path"] for entry in json.loads(answer)] == [".gitattributes"]
        else:
            assert json.loads(answer)["error"] == f"Ask about at most 1000 paths at once, not {count}"


def test_a_recursive_listing_is_paged_as_the_hub_pages_it(hub: HubServer) -> None:
    """1,050 files in 10 folders: the first page holds 1,000 entries and links the next; huggingface_hub follows the
    links and lists every file and folder once (the whole listing was one answer, 402 MB for deep trees)."""
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo("org/wide")
    paths = [f"part-{n // 105:02d}/sub/{n}.txt" for n in range(1050)]
    assert commit(hub, "org/wide", *(file_line(path, path.encode()) for path in paths))[0] == 200
    response, body, _ = raw_exchange(hub, get(hub, "/api/models/org/wide/tree/main?recursive=true"))
    assert response.status == 200 and len(json.loads(body)) == 1000
    assert response.getheader("Link").startswith(f"<{hub.url}/api/models/org/wide/tree/main?recursive=true&cursor=")
    listed = [entry.path for entry in api.list_repo_tree("org/wide", recursive=True)]
    folders = [f"part-{n:02d}" for n in range(10)] + [f"part-{n:02d}/sub" for n in range(10)]
    assert sorted(listed) == sorted([".gitattributes", *paths, *folders])
    assert len(listed) == len(set(listed))
    assert sorted(api.list_repo_files("org/wide")) == sorted([".gitattributes", *paths])


def test_a_commit_stores_only_the_folders_it_changes(hub: HubServer) -> None:
    """A repo of 500 files in `data/`, then 100 commits of one small file each: the commits and folders they add
    take less than 1 KiB each (a manifest of every file per commit took 44 KiB each here)."""
    HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/many-commits")
    data = [file_line(f"data/shard-{n:04d}.bin", b"%d" % n) for n in range(500)]
    assert commit(hub, "org/many-commits", *data)[0] == 200

    def metadata_bytes() -> int:
        folders = [hub.root / "trees", hub.root / "repos"]
        return sum(p.stat().st_size for folder in folders for p in folder.rglob("*") if p.is_file())

    before = metadata_bytes()
    for n in range(100):
        assert commit(hub, "org/many-commits", file_line("notes.txt", b"note %d" % n))[0] == 200
    per_commit = (metadata_bytes() - before) / 100
    assert per_commit < 1024, f"{per_commit:.0f} bytes of commits and folders per commit"
    files = HfApi(endpoint=hub.url, token=TOKEN).list_repo_files("org/many-commits")
    assert len(files) == 502 and "notes.txt" in files
    assert raw_exchange(hub, get(hub, "/org/many-commits/resolve/main/notes.txt"))[1] == b"note 99"
