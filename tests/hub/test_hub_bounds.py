"""The loopback Hub's bounds, on a real server on 127.0.0.1: card metadata read as the Hub reads it (YAML 1.2's core
schema, numbers of bounded digits) with bounded work, a stored card that cannot be read served as having no card
data, large bodies read a few at a time, and `hf-norms hub` options checked before anything is created.

Every answer is checked for its status (never a 500), its exact content, and the time it took.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import HF_NORMS_SCRIPT
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
    store_state,
)

from hf_norms import cli
from hf_norms.errors import InputError
from hf_norms.hub.server import HubServer
from hf_norms.hub.server import http as hub_http

TOKEN = "bounds-test-token"
HUGE_BINARY = "0b" + "1" * 100_000  # 30,103 decimal digits: past Python's 4,300 for int -> str
HUGE_HEX = "0x" + "f" * 50_000
SEXAGESIMAL = ":".join(["59"] * 20_000)  # YAML 1.1 reads it as one integer of 35,000 digits
HUGE_DECIMAL = "9" * 5_000

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def hub(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN]) as server:
        HfApi(endpoint=server.url, token=TOKEN).create_repo("org/plain-card")
        commit_card(server, "org/plain-card", "license: mit\ntags: [plain]")
        yield server


def commit_card(hub: HubServer, repo_id: str, metadata: str) -> None:
    """Store a README.md holding `metadata` in `repo_id` by a raw commit (huggingface_hub would first ask
    /api/validate-yaml, which refuses some of these cards; another client need not ask)."""
    card = file_line("README.md", f"---\n{metadata}\n---\n# card\n".encode())
    response, body, _ = raw_exchange(hub, post_request(f"/api/models/{repo_id}/commit/main", commit_lines(card), TOKEN))
    assert response.status == 200, body


def get_json(hub: HubServer, target: str) -> tuple[int, object, float]:
    response, body, elapsed = raw_exchange(hub, get(hub, target))
    return response.status, json.loads(body), elapsed


def validate_yaml(hub: HubServer, metadata: str) -> tuple[int, dict, float]:
    body = json.dumps({"content": f"---\n{metadata}\n---\n# card\n", "repoType": "model"}).encode()
    response, answer, elapsed = raw_exchange(hub, request_bytes("POST", "/api/validate-yaml", body, TOKEN))
    return response.status, json.loads(answer), elapsed


# --------------------------------------------------------------------------------------------------------------------
# Numbers as the Hub reads them
# --------------------------------------------------------------------------------------------------------------------

NUMBERS = {
    "binary": (HUGE_BINARY, HUGE_BINARY),  # YAML 1.2 has no binary integers: text
    "sexagesimal": (SEXAGESIMAL, SEXAGESIMAL),  # nor base 60
    "separated": ("1_000", "1_000"),
    "word": ("yes", "yes"),  # nor yes/no booleans
    "hexadecimal": (HUGE_HEX, None),  # past the float range, as the Hub's JavaScript reads it: infinite, null in JSON
    "decimal": (HUGE_DECIMAL, None),
    "long": ("9" * 70, 1e70),  # more than 64 digits: a float
    "exact": ("123456789012345678901234567890", 123456789012345678901234567890),
    "octal": ("0o17", 15),
    "small_hex": ("0xff", 255),
    "infinite": ("-.inf", None),
    "yes_bool": ("True", True),
}


def test_numbers_in_card_metadata_are_read_as_the_hub_reads_them(hub: HubServer) -> None:
    """A card holding a binary number of 100,000 digits made model_info answer 500 (its JSON could not be written)."""
    HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/numbers")
    commit_card(hub, "org/numbers", "\n".join(f"{name}: {text}" for name, (text, _) in NUMBERS.items()))
    status, info, elapsed = get_json(hub, "/api/models/org/numbers")
    assert status == 200
    assert info["cardData"] == {name: value for name, (_, value) in NUMBERS.items()}
    assert elapsed < PROMPT_SECONDS


@pytest.mark.parametrize("number", [HUGE_BINARY, HUGE_HEX, SEXAGESIMAL, HUGE_DECIMAL, "0b1", "1:20"])
@pytest.mark.parametrize("field", ["license", "pipeline_tag", "tags"])
def test_validate_yaml_refuses_a_number_where_text_belongs_with_400(hub: HubServer, field: str, number: str) -> None:
    """A license or tag written as a huge binary, hex or sexagesimal number got 500; now the field's one-line error,
    at most 500 characters long."""
    status, answer, elapsed = validate_yaml(hub, f"{field}: [{number}]" if field == "tags" else f"{field}: {number}")
    is_text = number.startswith("0b") or ":" in number  # no number in YAML 1.2: a string, fine as a tag
    if field == "tags" and is_text:
        assert (status, answer) == (200, {"errors": [], "warnings": []})
    else:
        assert status == 400
        [error] = answer["errors"]
        assert error["message"].startswith(f'"{field}" must be ')
        assert len(error["message"]) <= 500
    assert elapsed < PROMPT_SECONDS


@pytest.mark.parametrize(
    ("metadata", "value"),
    [("a: !!int 0b101", "'0b101'"), ("a: !!int 1:20", "'1:20'"), ("a: !!float 1_0.5", "'1_0.5'"),
     ("a: !!bool yes", "'yes'"), ("a: !!timestamp 99999-01-01", "'99999-01-01'"),
     ("a: !!timestamp 2024-13-45", "'2024-13-45'")],
)  # fmt: skip
def test_explicit_tags_accept_only_the_core_schema(hub: HubServer, metadata: str, value: str) -> None:
    """`!!timestamp 99999-01-01` got 500 (PyYAML's constructor failed with AttributeError)."""
    kind = metadata.split("!!")[1].split()[0]
    status, answer, _ = validate_yaml(hub, metadata)
    expected = {
        "int": "is not a core-schema int", "float": "is not a core-schema float", "bool": "is not a core-schema bool",
        "timestamp": "is not a date: month must be in 1..12" if "13" in value else "is not a timestamp",
    }[kind]  # fmt: skip
    message = f"The YAML metadata does not parse: {value} {expected}."
    assert (status, answer) == (400, {"errors": [{"message": message}], "warnings": []})


# --------------------------------------------------------------------------------------------------------------------
# Bounded work, and a stored card that cannot be read
# --------------------------------------------------------------------------------------------------------------------

TAGS_500K = "tags: [" + "a," * 499_999 + "a]"  # 1 MB
MODEL_INDEX_100K = "model-index:\n- name: m\n  results: [" + "{}," * 99_999 + "{}]"
ADVERSARIAL = {"tags-500k": TAGS_500K, "model-index-100k": MODEL_INDEX_100K}


@pytest.mark.parametrize("metadata", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_validate_yaml_reads_at_most_10000_values(hub: HubServer, metadata: str) -> None:
    """500,000 tags took 9 s of the server's CPU and 100,000 model-index results 4.3 s; reading stops at the
    10,001st value."""
    status, answer, elapsed = validate_yaml(hub, metadata)
    expected = "The YAML metadata does not parse: card metadata holds more than 10000 values."
    assert (status, answer) == (400, {"errors": [{"message": expected}], "warnings": []})
    assert elapsed < PROMPT_SECONDS


@pytest.mark.parametrize(
    "metadata",
    [TAGS_500K, "license: !!int 0b1", "a: !!timestamp 99999-01-01", f"license: {HUGE_BINARY}\nextra: {HUGE_HEX}"],
    ids=["tags-500k", "refused-tag", "bad-timestamp", "huge-numbers"],
)
def test_a_stored_card_never_breaks_model_info_or_a_listing(hub: HubServer, metadata: str) -> None:
    """The card's repo answers at once, without card data when it cannot be read, and every listing with card data
    still answers for every user, the other repos' cards included."""
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo("org/odd-card", exist_ok=True)
    commit_card(hub, "org/odd-card", metadata)
    status, info, elapsed = get_json(hub, "/api/models/org/odd-card")
    readable = metadata.startswith("license: 0b")
    assert (status, info["cardData"] is None) == (200, not readable)
    assert elapsed < PROMPT_SECONDS
    for query in ("full=true", "cardData=true", "full=true&cardData=true"):
        status, listing, elapsed = get_json(hub, f"/api/models?{query}")
        assert status == 200 and elapsed < PROMPT_SECONDS
        cards = {entry["id"]: entry["cardData"] for entry in listing}
        assert cards["org/plain-card"] == {"license": "mit", "tags": ["plain"]}
        assert (cards["org/odd-card"] is None) == (not readable)


# --------------------------------------------------------------------------------------------------------------------
# Large bodies: a few at a time
# --------------------------------------------------------------------------------------------------------------------

FILE_BYTES = 24 << 20


def _commit_large_file(url: str, token: str, seed: int) -> tuple[int, str]:
    """Create `<token's user>/big` and commit one 24 MiB file to it; the status and the file's sha256."""
    api = HfApi(endpoint=url, token=token)
    repo_id = api.create_repo("big").repo_id
    content = hashlib.sha256(str(seed).encode()).digest() * (FILE_BYTES // 32)
    body = commit_lines(file_line("weights.bin", content))
    request = post_request(f"/api/models/{repo_id}/commit/main", body, token)
    del body
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=120) as sock:
        sock.sendall(request)
        status = int(sock.makefile("rb").readline().split()[1])
    return status, hashlib.sha256(content).hexdigest()


def test_three_concurrent_large_commits_are_stored_one_at_a_time(tmp_path: Path) -> None:
    """Three tokens commit 24 MiB each (32 MiB of base64) at once to the real `hf-norms hub` started without tokens
    and with `--max-concurrent-writes 1`: all three are stored, and the server's peak resident memory grows by what
    one commit takes, not three (measured: 120 MiB; 289 MiB before the write slots)."""
    with hub_command(tmp_path / "hub", "--max-concurrent-writes", "1") as (process, url):
        tokens = [f"large-commit-token-{n}" for n in range(3)]
        HfApi(endpoint=url, token=tokens[0]).whoami()
        before = peak_memory_bytes(process.pid)
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(_commit_large_file, [url] * 3, tokens, range(3)))
        grown = peak_memory_bytes(process.pid) - before
        for token, (status, digest) in zip(tokens, results, strict=True):
            api = HfApi(endpoint=url, token=token)
            repo_id = f"{api.whoami()['name']}/big"
            assert status == 200
            stored = Path(api.hf_hub_download(repo_id, "weights.bin", cache_dir=tmp_path / "cache"))
            assert hashlib.sha256(stored.read_bytes()).hexdigest() == digest
    print(f"peak resident memory grew by {grown / 2**20:.0f} MiB for three 24 MiB commits")
    assert grown < 6 * FILE_BYTES, f"peak memory grew by {grown / 2**20:.0f} MiB"


def test_a_large_body_waits_for_a_write_slot_then_gets_503(
    hub_online: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one write slot held by a slow upload, a second large body waits `WRITE_WAIT_SECONDS`, gets 503 and is not
    stored; a small one is answered at once; the slow upload, once sent, is stored."""
    monkeypatch.setattr(hub_http, "WRITE_WAIT_SECONDS", 0.5)
    with HubServer(tmp_path / "hub", tokens=[TOKEN], max_concurrent_writes=1) as hub:
        HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/slots")
        target = "/api/models/org/slots/commit/main"
        slow = post_request(target, commit_lines(file_line("slow.bin", bytes(2 << 20))), TOKEN)
        with socket.create_connection(("127.0.0.1", port_of(hub.url)), timeout=10) as holder:
            holder.sendall(slow[: len(slow) // 2])
            time.sleep(0.2)  # the server is reading the slow body, holding the only slot
            before = store_state(hub)
            large = post_request(target, commit_lines(file_line("large.bin", bytes(2 << 20))), TOKEN)
            response, body, elapsed = raw_exchange(hub, large)
            assert response.status == 503 and 0.5 <= elapsed < PROMPT_SECONDS
            assert json.loads(body) == {
                "error": "The hub is busy storing other large uploads (1 at a time): retry later"
            }
            assert store_state(hub) == before
            small = post_request(target, commit_lines(file_line("small.txt", b"s")), TOKEN)
            assert raw_exchange(hub, small)[0].status == 200
            holder.sendall(slow[len(slow) // 2 :])
            assert holder.makefile("rb").readline().split()[1] == b"200"
        files = HfApi(endpoint=hub.url, token=TOKEN).list_repo_files("org/slots")
    assert sorted(files) == [".gitattributes", "slow.bin", "small.txt"]


# --------------------------------------------------------------------------------------------------------------------
# hf-norms hub: options checked before anything is created
# --------------------------------------------------------------------------------------------------------------------


def test_hub_with_a_file_as_root_is_one_line_with_status_2(tmp_path: Path) -> None:
    """`hub --root FILE` was a raw FileExistsError with status 1."""
    file = tmp_path / "notes.txt"
    file.write_bytes(b"mine")
    result = subprocess.run(
        [str(HF_NORMS_SCRIPT), "hub", "--root", str(file), "--port", "0"], capture_output=True, text=True, timeout=120
    )
    expected = (
        f"hf-norms hub: error: --root '{file}' is not a folder: give a folder, new or holding this hub's repos.\n"
    )
    assert (result.returncode, result.stdout, result.stderr) == (2, "", expected)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and file.read_bytes() == b"mine"


def test_hub_on_a_port_in_use_is_one_line_and_makes_no_root(tmp_path: Path) -> None:
    """`hub --port` of a port another program listens on was a raw OSError (exit 1), after the root was made."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([str(HF_NORMS_SCRIPT), "hub", "--root", str(tmp_path / "repos"), "--port", str(port)],
                                capture_output=True, text=True, timeout=120)  # fmt: skip
    expected = f"hf-norms hub: error: Cannot listen on 127.0.0.1:{port} (Address already in use): choose another "
    assert (result.returncode, result.stdout) == (2, "") and result.stderr.startswith(expected), result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "repos").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--user", "../evil"], "--user must be a user name"),
        (["--user", "a/b"], "--user must be a user name"),
        (["--user", ""], "--user must be a user name"),
        (["--user", "x" * 97], "--user must be a user name"),
        (["--user", "a..b"], "--user must be a user name"),
        (["--root", "FILE"], "is not a folder"),
        (["--root", "FILE/sub"], "is inside"),
        (["--root", "LINK"], "is not a folder"),
        (["--max-concurrent-writes", "0"], "--max-concurrent-writes (max_concurrent_writes) must be a positive"),
    ],
)
def test_hub_options_no_server_can_use_are_refused_before_anything_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    """`hub --user ../evil` was accepted (and named the repos' folder); each is now one line with status 2."""
    (tmp_path / "FILE").write_bytes(b"mine")
    (tmp_path / "LINK").symlink_to(tmp_path / "nowhere")
    root = [] if "--root" in arguments else ["--root", str(tmp_path / "hub")]
    arguments = [str(tmp_path / a) if a.startswith(("FILE", "LINK")) else a for a in arguments]
    before = sorted(os.listdir(tmp_path))
    assert cli.main(["hub", *root, "--port", "0", "--token", TOKEN, *arguments]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("hf-norms hub: error: ") and message in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == before


def test_hub_server_refuses_the_same_in_python(tmp_path: Path) -> None:
    (tmp_path / "FILE").write_bytes(b"mine")
    with pytest.raises(InputError, match="is not a folder"):
        HubServer(tmp_path / "FILE")
    with pytest.raises(InputError, match="--user must be a user name"):
        HubServer(tmp_path / "hub", tokens=[TOKEN], user="../evil")
    assert sorted(os.listdir(tmp_path)) == ["FILE"]


def test_a_valid_user_names_the_tokens_user(tmp_path: Path) -> None:
    with HubServer(tmp_path / "hub", tokens=[TOKEN], user="Alice.Org-1") as hub:
        assert HfApi(endpoint=hub.url, token=TOKEN).whoami()["name"] == "Alice.Org-1"
        assert HfApi(endpoint=hub.url, token=TOKEN).create_repo("m").repo_id == "Alice.Org-1/m"


def test_a_body_that_stops_arriving_gets_408_and_frees_its_write_slot(
    hub_online: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends half of a large commit and stops held the hub's only write slot for as long as it kept
    the connection open; it now gets 408 at its deadline (30 s plus 1 MiB/s; here 0.5 s) and the next large commit
    is stored."""
    monkeypatch.setattr(hub_http, "BODY_GRACE_SECONDS", 0.5)
    monkeypatch.setattr(hub_http, "MIN_BODY_RATE", 1 << 40)
    with HubServer(tmp_path / "hub", tokens=[TOKEN], max_concurrent_writes=1) as hub:
        HfApi(endpoint=hub.url, token=TOKEN).create_repo("org/stalled")
        target = "/api/models/org/stalled/commit/main"
        stalled = post_request(target, commit_lines(file_line("stalled.bin", bytes(2 << 20))), TOKEN)
        with socket.create_connection(("127.0.0.1", port_of(hub.url)), timeout=10) as holder:
            started = time.monotonic()
            holder.sendall(stalled[: len(stalled) // 2])
            answer = holder.makefile("rb").read()
            assert 0.5 <= time.monotonic() - started < PROMPT_SECONDS
        assert answer.split(b"\r\n")[0] == b"HTTP/1.1 408 Request Timeout"
        expected = {"error": "The request body did not arrive in time: send it at 1 MiB/s or faster"}
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == expected
        large = post_request(target, commit_lines(file_line("large.bin", bytes(2 << 20))), TOKEN)
        assert raw_exchange(hub, large)[0].status == 200
        files = HfApi(endpoint=hub.url, token=TOKEN).list_repo_files("org/stalled")
    assert sorted(files) == [".gitattributes", "large.bin"]
