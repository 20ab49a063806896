"""`hf-norms push` reads what it publishes: the token in any common encoding (in a file's bytes, its path, the card, the
commit message) refuses the push; private keys, credentials, pickles and archives are skipped whatever their names;
and the real model files are never taken for either."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import logging
import pickle
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import torch
from conftest import tiny_config
from huggingface_hub import HfApi, snapshot_download
from transformers import ViTImageProcessorPil

import hf_norms
from hf_norms.hub.content_checks import SCAN_CHUNK, scan_file, token_forms
from hf_norms.hub.publish import CheckpointRefused, push_to_hub
from hf_norms.hub.server import HubServer
from hf_norms.hub.upload_files import screen_files

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"  # the shape of a real Hub token: hf_ and 34 letters and digits
OTHER_HF_TOKEN = "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa76543210"

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoint") / "vit"
    hf_norms.ViTNormModel(tiny_config("vit", "layernorm")).save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture
def checkpoint(saved_checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_checkpoint, tmp_path / "vit"))


@pytest.fixture(scope="module")
def api(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HfApi]:
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN]) as server:
        yield HfApi(endpoint=server.url, token=TOKEN)


def dry_run(folder: Path, **push_args) -> list[str]:
    return push_to_hub(folder, "org/contents", token=TOKEN, dry_run=True, **push_args)


def assert_refused_without_the_token(folder: Path, match: str, **push_args) -> str:
    """The dry run is refused, naming `match`; the message holds no form of the token."""
    with pytest.raises(CheckpointRefused, match=match) as excinfo:
        dry_run(folder, **push_args)
    message = str(excinfo.value)
    assert not [form for form in token_forms(TOKEN) if form.decode("latin-1") in message]
    return message


# --------------------------------------------------------------------------------------------------------------------
# The token in any common encoding
# --------------------------------------------------------------------------------------------------------------------

RAW = TOKEN.encode()


def base64_inside(offset: int, altchars: bytes | None = None) -> bytes:
    """The token at byte `offset` of a longer text, base64'd as a whole (so the token is at that alignment)."""
    return base64.b64encode(b"{" * offset + b'"login": "' + RAW + b'", "user": "me"}', altchars=altchars)


ENCODINGS: dict[str, Callable[[], bytes]] = {
    "utf-16-le": lambda: f"log in with {TOKEN}\n".encode("utf-16-le"),
    "utf-16-be with BOM": lambda: f"log in with {TOKEN}\n".encode("utf-16"),
    "utf-32-be": lambda: f"{TOKEN}".encode("utf-32-be"),
    "base64 alignment 0": lambda: base64_inside(0),
    "base64 alignment 1": lambda: base64_inside(1),
    "base64 alignment 2": lambda: base64_inside(2),
    "base64 url-safe alignment 1": lambda: base64_inside(1, altchars=b"-_"),
    "base64 of the token alone": lambda: base64.b64encode(RAW),
    "hex": lambda: b"digest " + RAW.hex().encode(),
    "HEX": lambda: RAW.hex().upper().encode(),
    "\\x escapes": lambda: "".join(f"\\x{byte:02x}" for byte in RAW).encode(),
    "percent-encoded, every byte": lambda: ("https://example.org/?t=" + "".join(f"%{b:02X}" for b in RAW)).encode(),
    "percent-encoded, lower case": lambda: "".join(f"%{b:02x}" for b in RAW).encode(),
    "json \\u escapes": lambda: ('{"t": "' + "".join(f"\\u{ord(c):04x}" for c in TOKEN) + '"}').encode(),
    "hex across a read boundary": lambda: b"\0" * (SCAN_CHUNK - 30) + RAW.hex().encode(),
}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_token_in_any_common_encoding_is_refused(encoding: str, checkpoint: Path) -> None:
    (checkpoint / "run_log.dat").write_bytes(ENCODINGS[encoding]())
    assert_refused_without_the_token(checkpoint, r"run_log\.dat")


def test_every_encoding_of_a_short_token_form_is_searched_too() -> None:
    """The forms exist for any token (not only hf_ ones), and each is long enough not to be found by chance."""
    for token in (TOKEN, "my-private-endpoint-token", "a+b/c=d?e&f"):
        forms = token_forms(token)
        assert token.encode() in forms and quote(token, safe="").encode() in forms and min(map(len, forms)) >= 8
        for offset in range(3):
            encoded = base64.b64encode(b"x" * offset + token.encode() + b"y")
            assert any(form in encoded for form in forms), (token, offset)


@pytest.mark.parametrize(
    "path",
    [f"logs/{TOKEN}.txt", f"runs/{TOKEN}/notes.txt", f"run-{RAW.hex()}.json", f"{quote(TOKEN)}-x/a.txt"],
)
def test_the_token_in_a_file_path_is_refused(path: str, checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    (checkpoint / path).parent.mkdir(parents=True, exist_ok=True)
    (checkpoint / path).write_text("harmless")
    message = assert_refused_without_the_token(checkpoint, "<token>")
    assert TOKEN not in caplog.text and RAW.hex() not in caplog.text and TOKEN not in message


def test_a_hidden_file_named_with_the_token_is_skipped_and_its_name_not_logged(
    checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    (checkpoint / f".{TOKEN}").write_text("harmless")  # never uploaded, so it refuses nothing
    assert f".{TOKEN}" not in dry_run(checkpoint)
    assert "Not uploading .<token>: a hidden file" in caplog.text and TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("push_args", "where"),
    [
        ({"notes": [f"login {base64.b64encode(RAW).decode()}"]}, "README.md"),
        ({"commit_message": f"pushed with {RAW.hex()}"}, "the commit message"),
        ({"datasets": ["".join(f"%{b:02X}" for b in RAW)]}, "README.md"),
        ({"notes": ["".join(f"\\u{ord(c):04X}" for c in TOKEN)]}, "README.md"),
    ],
)
def test_the_token_encoded_in_the_card_or_commit_message_is_refused(
    push_args: dict, where: str, checkpoint: Path
) -> None:
    assert_refused_without_the_token(checkpoint, where, **push_args)


def test_a_file_holding_the_raw_token_is_skipped_and_refused_once_named(
    checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    (checkpoint / "env.txt").write_text(f"HF_TOKEN={TOKEN}\n")  # a Hugging Face token: a credential by its format
    assert "env.txt" not in dry_run(checkpoint)
    assert "Not uploading env.txt: holds a Hugging Face token" in caplog.text and TOKEN not in caplog.text
    assert_refused_without_the_token(checkpoint, r"env\.txt", include_skipped=["env.txt"])


# --------------------------------------------------------------------------------------------------------------------
# Secrets, pickles and archives by content, whatever their names
# --------------------------------------------------------------------------------------------------------------------


def pem(kind: str) -> bytes:
    return f"-----BEGIN {kind}-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END {kind}-----\n".encode()


def torch_archive() -> bytes:
    buffer = io.BytesIO()
    torch.save({"step": 5}, buffer)
    return buffer.getvalue()


def numpy_objects(compressed: bool | None) -> bytes:
    buffer = io.BytesIO()
    array = np.array([{"a": 1}, None], dtype=object)
    if compressed is None:
        np.save(buffer, array, allow_pickle=True)
    else:
        (np.savez_compressed if compressed else np.savez)(buffer, a=array)
    return buffer.getvalue()


def tar_of_notes() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("notes.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"notes"))
    return buffer.getvalue()


def zip_of_notes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "notes")
    return buffer.getvalue()


AWS_ID, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
CONTENT_SECRETS: dict[str, tuple[str, Callable[[], bytes], str]] = {
    # case: (file name, content, reason fragment)
    "RSA key": ("notes.txt", lambda: pem("RSA PRIVATE KEY"), "private key"),
    "OpenSSH key without a name": ("deploy", lambda: pem("OPENSSH PRIVATE KEY"), "private key"),
    "encrypted PKCS#8 key": ("backup.dat", lambda: pem("ENCRYPTED PRIVATE KEY"), "private key"),
    "EC key in JSON": ("server.json", lambda: json.dumps({"key": pem("EC PRIVATE KEY").decode()}).encode(), "private key"),
    "PGP key": ("keys.asc", lambda: pem("PGP PRIVATE KEY BLOCK"), "private key"),
    "PuTTY key": ("putty.txt", lambda: b"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n", "PuTTY"),
    "pickle protocol 2": ("state.dat", lambda: pickle.dumps({"step": 5}, protocol=2), "pickle"),
    "pickle protocol 4": ("state.data", lambda: pickle.dumps(list(range(100)), protocol=4), "pickle"),
    "pickle protocol 5": ("optimizer", lambda: pickle.dumps({"lr": 0.1}, protocol=5), "pickle"),
    "pickle protocol 0": ("cfg.txt", lambda: pickle.dumps({"lr": 0.1}, protocol=0), "pickle"),
    "torch.save archive": ("weights.data", torch_archive, "PyTorch archive"),
    "NumPy object array": ("stats.npy", lambda: numpy_objects(None), "pickle"),
    "npz of objects": ("stats.npz", lambda: numpy_objects(False), "pickle"),
    "compressed npz of objects": ("stats2.npz", lambda: numpy_objects(True), "pickle"),
    "gzip-compressed pickle": ("state.gz", lambda: gzip.compress(pickle.dumps({"a": 1}, protocol=4)), "gzip-compressed pickle"),
    "bzip2-compressed pickle": ("state.bz", lambda: bz2.compress(pickle.dumps({"a": 1}, protocol=3)), "bzip2-compressed pickle"),
    "zip archive": ("extras.zip", zip_of_notes, "zip archive"),
    "tar archive": ("extras.tar", tar_of_notes, "tar archive"),
    "AWS credentials file": ("aws.ini", lambda: f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\n".encode(), "AWS secret"),
    "AWS key pair in a CSV": ("keys.csv", lambda: f"Access key ID,Secret access key\n{AWS_ID},{AWS_SECRET}\n".encode(), "AWS access key id"),
    "GCP service account": ("sa.json", lambda: json.dumps({"type": "service_account", "project_id": "p", "private_key_id": "1", "private_key": "MIIE"}).encode(), "service-account"),
    "another Hugging Face token": ("ci.yml", lambda: f"env:\n  HF: {OTHER_HF_TOKEN}\n".encode(), "Hugging Face token"),
    "GitHub token": ("gh.txt", lambda: b"ghp_" + b"a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "GitHub token"),
    "GitHub fine-grained token": ("gh2.txt", lambda: b"github_pat_" + b"11ABCDEFG0" * 8, "GitHub token"),
    "npm token": ("npm-config", lambda: b"//registry.npmjs.org/:_authToken=npm_abcdef0123456789\n", "npm"),
    "pypirc": ("pypi-config", lambda: b"[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmc\n", "password"),
    "netrc": ("hosts", lambda: b"machine api.example.org login me password s3cr3t\n", ".netrc"),
}  # fmt: skip


@pytest.mark.parametrize("case", CONTENT_SECRETS)
def test_secrets_pickles_and_archives_are_skipped_by_content(
    case: str, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name, content, reason = CONTENT_SECRETS[case]
    (checkpoint / name).write_bytes(content())
    caplog.set_level(logging.INFO)
    assert name not in dry_run(checkpoint)
    line = next(line for line in caplog.text.splitlines() if f"Not uploading {name}:" in line)
    assert reason in line
    assert name in dry_run(checkpoint, include_skipped=[name])  # named, it is uploaded (the token check reads it)


@pytest.mark.parametrize(
    "name",
    ["credentials", "vault.kdbx", "release.jks", "app.keystore", "id_ecdsa", "id_dsa.pub", "key.ppk",
     "terraform.tfstate", "model.joblib", "features.pkl.gz", "state.dill", "fn.cloudpickle", "exported.pt2"],
)  # fmt: skip
def test_secret_and_pickle_names_are_skipped(name: str, checkpoint: Path) -> None:
    (checkpoint / name).write_text("not a secret by its content")
    assert name not in dry_run(checkpoint) and name in dry_run(checkpoint, include_skipped=[name])


def test_a_named_pickle_holding_the_token_is_still_refused(checkpoint: Path) -> None:
    (checkpoint / "state.dat").write_bytes(pickle.dumps({"hub_token": TOKEN}, protocol=4))
    assert "state.dat" not in dry_run(checkpoint)
    assert_refused_without_the_token(checkpoint, r"state\.dat", include_skipped=["state.dat"])


def test_real_model_files_are_never_taken_for_secrets(minilm_dir: Path, checkpoint: Path, tmp_path: Path) -> None:
    """The packaged MiniLM (safetensors, tokenizer, vocabulary, sentence-transformers files, its README), an hf-norms
    checkpoint's remote code, config and image processor, and NumPy arrays of numbers are all uploaded."""
    np.save(checkpoint / "features.npy", np.arange(12.0).reshape(3, 4))
    for folder in (minilm_dir, checkpoint):
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        kept, skipped = screen_files(folder, files, TOKEN)
        assert skipped == {} and kept == files
    assert {"modules.json", "1_Pooling/config.json", "vocab.txt", "tokenizer.json", "model.safetensors"} <= set(
        sorted(p.relative_to(minilm_dir).as_posix() for p in minilm_dir.rglob("*"))
    )
    assert {"norms.py", "modeling_vit_norm.py", "features.npy"} <= set(dry_run(checkpoint))
    weights = tmp_path / "looks-like-pickle.safetensors"  # a safetensors header whose length starts 0x80 0x02
    weights.write_bytes((0x0280).to_bytes(8, "little") + b"{" + b" " * 0x027E + b"}" + b"\0" * 64)
    assert scan_file(weights, token_forms(TOKEN)).secret is None


def test_content_skipped_files_never_reach_the_hub(checkpoint: Path, api: HfApi) -> None:
    for case in ("OpenSSH key without a name", "pickle protocol 4", "GCP service account", "zip archive"):
        name, content, _ = CONTENT_SECRETS[case]
        (checkpoint / name).write_bytes(content())
    push_to_hub(checkpoint, "org/content-skips", endpoint=api.endpoint, token=TOKEN)
    remote = set(api.list_repo_files("org/content-skips"))
    assert {"config.json", "model.safetensors", "README.md"} <= remote
    assert not {"deploy", "state.data", "sa.json", "extras.zip"} & remote


def test_local_paths_are_not_published(checkpoint: Path, api: HfApi, tmp_path: Path) -> None:
    """The uploaded conversion report and Trainer state name local files by their last component, as the card does;
    the local files are unchanged."""
    report = {
        "source": "/home/alice/models/all-MiniLM-L6-v2",
        "source_revision": None,
        "exact": True,
        "calibration": {"data": "/home/alice/data/bbc_news-train.txt", "samples": 8, "method": "fit", "seconds": 1},
        "evaluation": {"data": "/home/alice/data/bbc_news-test-128.txt (held out)", "samples": 8},
        "stages": {"exact": {"end_to_end": {"max_abs_diff": 0.0, "mean_cosine": 1.0}}},
        "links": ["https://huggingface.co/org/model", "org/model"],
    }
    state = {"global_step": 0, "best_model_checkpoint": "/home/alice/runs/out/checkpoint-5", "log_history": []}
    (checkpoint / "conversion_report.json").write_text(json.dumps(report))
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    before = {name: (checkpoint / name).read_bytes() for name in ("conversion_report.json", "trainer_state.json")}
    push_to_hub(checkpoint, "org/no-local-paths", endpoint=api.endpoint, token=TOKEN)
    published = Path(snapshot_download("org/no-local-paths", endpoint=api.endpoint, token=TOKEN,
                                       cache_dir=tmp_path / "download"))  # fmt: skip
    texts = {path.name: path.read_text() for path in published.iterdir() if path.suffix in (".json", ".md")}
    assert [name for name, text in texts.items() if "/home/alice" in text] == []
    uploaded = json.loads(texts["conversion_report.json"])
    assert uploaded["source"] == "all-MiniLM-L6-v2" and uploaded["calibration"]["data"] == "bbc_news-train.txt"
    assert uploaded["evaluation"]["data"] == "bbc_news-test-128.txt (held out)"
    assert uploaded["links"] == report["links"] and uploaded["stages"] == report["stages"]
    assert json.loads(texts["trainer_state.json"])["best_model_checkpoint"] == "checkpoint-5"
    assert {name: (checkpoint / name).read_bytes() for name in before} == before
