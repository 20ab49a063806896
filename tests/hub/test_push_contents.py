"""`hf-norms push` publishes what a checkpoint is made of and reads all of it: every other file stays local unless
`include` names it, and what is published or included is read for the token in any common encoding (in its bytes,
decompressed or unpacked, its path, the card, the commit message) and for content hf-norms never publishes (private
keys and credentials in any text encoding, base64'd or compressed; pickles of any protocol, size or compression;
archives it cannot open); the real model files are never taken for either."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import logging
import lzma
import pickle
import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import joblib
import numpy as np
import pytest
import torch
from huggingface_hub import HfApi, snapshot_download

import hf_norms
from hf_norms.hub.card_facts import head_of
from hf_norms.hub.content_checks import SCAN_CHUNK, UNPACK_LIMIT, scan_file
from hf_norms.hub.model_card import model_card_for_folder
from hf_norms.hub.publish import CheckpointRefused, push_to_hub
from hf_norms.hub.server import HubServer
from hf_norms.hub.upload_files import screen_files
from hf_norms.models.checkpoint_code import code_file_names
from hf_norms.models.family_registry import MODEL_CLASSES
from hf_norms.redaction import text_token_forms, token_forms

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"  # the shape of a real Hub token: hf_ and 34 letters and digits
ENDPOINT_TOKEN = "private-endpoint-token-0815-abcdef"  # a token of another Hub endpoint: no known credential format
OTHER_HF_TOKEN = "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa76543210"
# what save_pretrained and the image processor write for the tiny ViT of `saved_checkpoint`, and the card: the
# remote code is its two generated files
REMOTE_CODE = set(code_file_names("vit_norm"))
CHECKPOINT = sorted(["README.md", "config.json", "model.safetensors", "preprocessor_config.json", *REMOTE_CODE])

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture
def checkpoint(saved_checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_checkpoint, tmp_path / "vit"))


@pytest.fixture(scope="module")
def api(hub_online: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HfApi]:
    with HubServer(tmp_path_factory.mktemp("hub"), tokens=[TOKEN, ENDPOINT_TOKEN]) as server:
        yield HfApi(endpoint=server.url, token=TOKEN)


def dry_run(folder: Path, token: str = TOKEN, **push_args) -> list[str]:
    return push_to_hub(folder, "org/contents", token=token, dry_run=True, **push_args)


def assert_refused_without_the_token(folder: Path, match: str, token: str = TOKEN, **push_args) -> str:
    """The dry run is refused, naming `match`; the message holds no form of the token."""
    with pytest.raises(CheckpointRefused, match=match) as excinfo:
        dry_run(folder, token, **push_args)
    message = str(excinfo.value)
    assert not [form for form in token_forms(token) if form.decode("latin-1") in message]
    return message


def left_out(caplog: pytest.LogCaptureFixture, name: str) -> str:
    """The reason of the one "Not uploading NAME: ..." line logged."""
    (line,) = [line for line in caplog.text.splitlines() if f"Not uploading {name}: " in line]
    return line.split(f"Not uploading {name}: ", 1)[1]


# --------------------------------------------------------------------------------------------------------------------
# The token in any common encoding, compressed or nested
# --------------------------------------------------------------------------------------------------------------------


def base64_inside(token: str, offset: int, altchars: bytes | None = None) -> bytes:
    """The token at byte `offset` of a longer text, base64'd as a whole (so the token is at that alignment)."""
    return base64.b64encode(b"{" * offset + b'"login": "' + token.encode() + b'", "user": "me"}', altchars=altchars)


def tar_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_of(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "utf-16-le": lambda token: f"log in with {token}\n".encode("utf-16-le"),
    "utf-16-be with BOM": lambda token: f"log in with {token}\n".encode("utf-16"),
    "utf-32-be": lambda token: token.encode("utf-32-be"),
    "base64 alignment 0": lambda token: base64_inside(token, 0),
    "base64 alignment 1": lambda token: base64_inside(token, 1),
    "base64 alignment 2": lambda token: base64_inside(token, 2),
    "base64 url-safe alignment 1": lambda token: base64_inside(token, 1, altchars=b"-_"),
    "base64 of the token alone": lambda token: base64.b64encode(token.encode()),
    "hex": lambda token: b"digest " + token.encode().hex().encode(),
    "HEX": lambda token: token.encode().hex().upper().encode(),
    "\\x escapes": lambda token: "".join(f"\\x{byte:02x}" for byte in token.encode()).encode(),
    "percent-encoded, every byte": lambda token: "".join(f"%{b:02X}" for b in token.encode()).encode(),
    "percent-encoded, lower case": lambda token: "".join(f"%{b:02x}" for b in token.encode()).encode(),
    "json \\u escapes": lambda token: ('{"t": "' + "".join(f"\\u{ord(c):04x}" for c in token) + '"}').encode(),
    "hex across a read boundary": lambda token: b"\0" * (SCAN_CHUNK - 30) + token.encode().hex().encode(),
    "zlib (joblib's compression)": lambda token: zlib.compress(f"run by {token}".encode()),
    "gzip inside a tar": lambda token: tar_of({"run/log.gz": gzip.compress(token.encode())}),
    "xz inside a zip": lambda token: zip_of({"log.xz": lzma.compress(token.encode("utf-16"))}),
    "bzip2, base64'd": lambda token: base64.b64encode(bz2.compress(token.encode())),
    "a zlib-compressed joblib pickle": lambda token: joblib_bytes({"hub_token": token}, compress=True),
}


def joblib_bytes(value: object, compress: object) -> bytes:
    buffer = io.BytesIO()
    joblib.dump(value, buffer, compress=compress)
    return buffer.getvalue()


# what push cannot read in full (a pickle, text without a byte-order mark that is not UTF-8, binary bytes): left out
UNREADABLE_ENCODINGS = {"utf-16-le", "utf-32-be", "hex across a read boundary", "a zlib-compressed joblib pickle"}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_token_in_any_common_encoding_is_refused(encoding: str, checkpoint: Path) -> None:
    """A token of no known credential format (another endpoint's) in an included file refuses the push, however it is
    encoded, compressed or nested; a file push cannot read in full is left out, and refuses the push when the user
    asks to publish it anyway (`include_skipped`); in a file that is not included it refuses nothing."""
    (checkpoint / "run_log.dat").write_bytes(ENCODINGS[encoding](ENDPOINT_TOKEN))
    assert dry_run(checkpoint, ENDPOINT_TOKEN) == CHECKPOINT
    if encoding in UNREADABLE_ENCODINGS:
        assert "run_log.dat" not in dry_run(checkpoint, ENDPOINT_TOKEN, include=["run_log.dat"])
        assert_refused_without_the_token(checkpoint, r"run_log\.dat", ENDPOINT_TOKEN, include_skipped=["run_log.dat"])
    else:
        assert_refused_without_the_token(checkpoint, r"run_log\.dat", ENDPOINT_TOKEN, include=["run_log.dat"])


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_hub_token_in_any_common_encoding_is_never_published(
    encoding: str, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Hub token (hf_ and 34) is a credential by its format: an included file holding it, however encoded, is left
    out for its content or refuses the push; it is never uploaded and never printed."""
    caplog.set_level(logging.INFO)
    (checkpoint / "run_log.dat").write_bytes(ENCODINGS[encoding](TOKEN))
    try:
        assert "run_log.dat" not in dry_run(checkpoint, include=["run_log.dat"])
        assert left_out(caplog, "run_log.dat")
    except CheckpointRefused as refusal:
        assert "run_log.dat" in str(refusal)
    assert not [form for form in text_token_forms(TOKEN) if form in caplog.text]


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
    [f"logs/{TOKEN}.txt", f"runs/{TOKEN}/notes.txt", f"run-{TOKEN.encode().hex()}.json", f"{quote(TOKEN)}-x/a.txt"],
)
def test_the_token_in_a_file_path_is_refused(path: str, checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Included, the file's path refuses the push; not included, the file stays local and its name is logged without
    the token."""
    caplog.set_level(logging.DEBUG)
    (checkpoint / path).parent.mkdir(parents=True, exist_ok=True)
    (checkpoint / path).write_text("harmless")
    assert dry_run(checkpoint) == CHECKPOINT and "<token>" in caplog.text
    message = assert_refused_without_the_token(checkpoint, "<token>", include=["*"])
    assert TOKEN not in caplog.text and TOKEN.encode().hex() not in caplog.text and TOKEN not in message


@pytest.mark.parametrize(
    ("push_args", "where"),
    [
        ({"notes": [f"login {base64.b64encode(TOKEN.encode()).decode()}"]}, "README.md"),
        ({"commit_message": f"pushed with {TOKEN.encode().hex()}"}, "the commit message"),
        ({"datasets": ["".join(f"%{b:02X}" for b in TOKEN.encode())]}, "README.md"),
        ({"notes": ["".join(f"\\u{ord(c):04X}" for c in TOKEN)]}, "README.md"),
    ],
)
def test_the_token_encoded_in_the_card_or_commit_message_is_refused(
    push_args: dict, where: str, checkpoint: Path
) -> None:
    assert_refused_without_the_token(checkpoint, where, **push_args)


def test_the_token_in_a_checkpoint_file_is_refused(checkpoint: Path) -> None:
    """A file the checkpoint is made of is read like any other: the token in its bytes refuses the push."""
    (checkpoint / "generation_config.json").write_text(json.dumps({"comment": f"made by {ENDPOINT_TOKEN}"}))
    assert_refused_without_the_token(checkpoint, r"generation_config\.json", ENDPOINT_TOKEN)


# --------------------------------------------------------------------------------------------------------------------
# Keys, credentials, pickles and archives: left out by default, and by their content when included
# --------------------------------------------------------------------------------------------------------------------


def pem(kind: str) -> str:
    return f"-----BEGIN {kind}-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END {kind}-----\n"


def kubeconfig(user: str) -> bytes:
    return f"apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://k8s.example.org\n  name: prod\nusers:\n- name: admin\n  user:\n{user}".encode()


def torch_archive() -> bytes:
    buffer = io.BytesIO()
    torch.save({"step": 5}, buffer)
    return buffer.getvalue()


def numpy_objects(save: Callable) -> bytes:
    buffer = io.BytesIO()
    save(buffer, np.array([{"a": 1}, None], dtype=object))
    return buffer.getvalue()


KEY_B64 = base64.b64encode(pem("RSA PRIVATE KEY").encode()).decode()
AWS_ID, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
# case: (file name, content, what the line that leaves it out says). The first nine are the reproductions of issue 30
# (each was listed for upload, or published, by hf-norms 0.2); the others are variants of the same classes.
ATTACKS: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "zlib-compressed token": ("state.z", lambda: zlib.compress(f"HF_TOKEN={TOKEN}\n".encode()), "access token"),
    "OpenSSH key saved as UTF-16": ("deploy_key.txt", lambda: pem("OPENSSH PRIVATE KEY").encode("utf-16"), "private key"),
    "PEM key base64'd in a Kubernetes YAML": ("kube.yaml", lambda: kubeconfig(f"    client-key-data: {KEY_B64}\n"), "private key (in a base64 text)"),
    "compressed joblib pickle": ("model.joblib", lambda: joblib_bytes({"w": np.arange(3)}, compress=True), "a pickle"),
    "Docker config auths": ("docker.json", lambda: json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": base64.b64encode(b"me:hunter22").decode()}}}).encode(), "secret setting"),
    "kubeconfig token": ("ci-kubeconfig", lambda: kubeconfig("    token: 9f8e7d6c5b4a39281706f5e4d3c2b1a0\n"), "secret setting"),
    "OPENAI_API_KEY line": ("settings.sh", lambda: b"export OPENAI_API_KEY=sk-proj-AbCdEf0123456789GhIjKl\n", "access token"),
    ".pgpass": (".pgpass", lambda: b"db.example.org:5432:prod:alice:s3cr3t-pass\n", ".pgpass"),
    "large protocol-0 pickle": ("cache.dat", lambda: pickle.dumps(list(range(30000)), protocol=0), "a pickle"),
    # the same classes, as an attacker varies them
    "OpenSSH key in UTF-16 without a byte-order mark": ("key.txt", lambda: pem("OPENSSH PRIVATE KEY").encode("utf-16-le"), "cannot read all of it"),
    "EC key in UTF-32": ("key32.txt", lambda: pem("EC PRIVATE KEY").encode("utf-32"), "private key"),
    "PGP key, bzip2'd and base64'd in JSON": ("backup.json", lambda: json.dumps({"blob": base64.b64encode(bz2.compress(pem("PGP PRIVATE KEY BLOCK").encode())).decode()}).encode(), "private key"),
    "PuTTY key in a zip in a tar": ("keys.tar", lambda: tar_of({"keys.zip": zip_of({"k.ppk": b"PuTTY-User-Key-File-3: ssh-ed25519\n"})}), "private key"),
    "GCP service account": ("sa.json", lambda: json.dumps({"type": "service_account", "private_key": pem("PRIVATE KEY")}).encode(), "private key"),
    "joblib pickle compressed with gzip": ("m.gz", lambda: joblib_bytes({"a": 1}, ("gzip", 3)), "a pickle"),
    "joblib pickle compressed with lzma": ("m.lzma", lambda: joblib_bytes({"a": 1}, ("lzma", 3)), "a pickle"),
    "joblib pickle compressed with xz": ("m.xz", lambda: joblib_bytes({"a": 1}, ("xz", 3)), "a pickle"),
    "joblib pickle compressed with bzip2": ("m.bz2", lambda: joblib_bytes({"a": 1}, ("bz2", 3)), "a pickle"),
    "large protocol-1 pickle": ("cache1.dat", lambda: pickle.dumps(list(range(30000)), protocol=1), "a pickle"),
    "protocol-0 pickle, xz'd in a zip": ("opt.zip", lambda: zip_of({"opt.xz": lzma.compress(pickle.dumps({"lr": 0.1}, protocol=0))}), "a pickle"),
    "pickle in a tar, gzip'd": ("state.tgz", lambda: gzip.compress(tar_of({"state.pkl": pickle.dumps({"a": 1}, protocol=4)})), "a pickle"),
    "torch.save archive": ("weights.data", torch_archive, "a pickle"),
    "compressed npz of objects": ("stats.npz", lambda: numpy_objects(lambda f, a: np.savez_compressed(f, a=a)), "a pickle"),
    "NumPy object array": ("stats.npy", lambda: numpy_objects(lambda f, a: np.save(f, a, allow_pickle=True)), "a pickle"),
    "Docker identity token": ("auth.json", lambda: json.dumps({"auths": {"r.io": {"identitytoken": "a1b2c3d4e5f6g7h8i9"}}}).encode(), "secret setting"),
    "kubeconfig JWT": ("kube2.yaml", lambda: kubeconfig("    token: eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjaSJ9.c2lnbmF0dXJl\n"), "JSON Web Token"),
    ".env with a secret": (".env.production", lambda: b"DJANGO_SECRET_KEY='x9#k2-secret-value-123'\nDEBUG=0\n", "secret setting"),
    "API key in YAML": ("config.yaml", lambda: b"service:\n  api_key: 3f9a8b7c6d5e4f3a2b1c\n", "secret setting"),
    "another Hugging Face token": ("ci.yml", lambda: f"env:\n  HF: {OTHER_HF_TOKEN}\n".encode(), "access token"),
    "GitHub token in a git credential URL": (".git-credentials", lambda: b"https://me:ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8@github.com\n", "access token"),
    "database URL with a password": ("db.txt", lambda: b"postgres://alice:s3cr3t@db.example.org/prod\n", "URL with a password"),
    "AWS credentials": ("aws.ini", lambda: f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\n".encode(), "access token"),
    "netrc": ("hosts", lambda: b"machine api.example.org login me password s3cr3t\n", ".netrc"),
    "pypirc": ("pypi-config", lambda: b"[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmcCJGI2ZDA5YjM4LWE1NzItNDY\n", "access token"),
    "zstandard archive": ("extras.zst", lambda: b"\x28\xb5\x2f\xfd" + bytes(range(64)), "cannot read all of it"),
    "corrupt gzip": ("broken.gz", lambda: gzip.compress(b"x" * 1000)[:12] + b"\xff" * 20, "cannot read all of it"),
    "zip bomb": ("bomb.zip", lambda: zip_of({"zeros": b"\0" * (UNPACK_LIMIT + 1)}), "cannot read all of it"),
}  # fmt: skip
# included and uploaded: content that holds nothing of the above
HARMLESS: dict[str, Callable[[], bytes]] = {
    "notes.txt": lambda: b"loss 0.1 at step 5\n",
    "formula.txt": lambda: b"x^2 + y^2 = 1 (starts like a zlib header)\n",
    "features.npy": lambda: numpy_objects(lambda f, a: np.save(f, np.arange(12.0).reshape(3, 4))),
    "arrays.npz": lambda: numpy_objects(lambda f, a: np.savez_compressed(f, a=np.arange(10.0))),
    "extras.zip": lambda: zip_of({"notes.txt": b"notes", "more/data.csv": b"a,b\n1,2\n"}),
    "extras.tar": lambda: tar_of({"notes.txt": b"notes"}),
    "tokenizer-notes.md": lambda: b'Set `"pad_token": "[PAD]"` and `token_type_ids`; call `get_token()`.\n',
}


@pytest.fixture
def attacked(checkpoint: Path) -> Path:
    """The checkpoint with every file of `ATTACKS` and `HARMLESS` beside it, and a link to the first key."""
    for name, content, _ in ATTACKS.values():
        (checkpoint / name).write_bytes(content())
    for name, content in HARMLESS.items():
        (checkpoint / name).write_bytes(content())
    (checkpoint / "key-link.txt").symlink_to("deploy_key.txt")
    return checkpoint


def test_only_the_checkpoint_is_uploaded_by_default(attacked: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert dry_run(attacked) == CHECKPOINT
    for name in [*(name for name, _, _ in ATTACKS.values()), *HARMLESS, "key-link.txt"]:
        assert left_out(caplog, name) == f"not a file of an hf-norms checkpoint (add it with --include {name})"


@pytest.mark.parametrize("case", ATTACKS)
def test_secrets_pickles_and_archives_are_skipped_by_content(
    case: str, attacked: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    name, _, reason = ATTACKS[case]
    assert dry_run(attacked, include=[name]) == CHECKPOINT
    assert reason in left_out(caplog, name)


@pytest.mark.parametrize(
    "name",
    ["credentials", "id_rsa", ".env", "vault.kdbx", "server.pem", "training_args.bin", "model.joblib",
     "features.pkl.gz", "hf_token.txt", ".ssh/config", "checkpoint-5/notes.txt"],
)  # fmt: skip
def test_secret_and_pickle_names_are_skipped(name: str, checkpoint: Path) -> None:
    """A file outside the checkpoint stays local whatever its name; included, its content decides, not its name."""
    (checkpoint / name).parent.mkdir(exist_ok=True)
    (checkpoint / name).write_text("not a secret by its content")
    assert dry_run(checkpoint) == CHECKPOINT
    assert dry_run(checkpoint, include=[name]) == sorted([*CHECKPOINT, name])


def test_a_link_is_read_as_the_file_it_leads_to(attacked: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert dry_run(attacked, include=["key-link.txt"]) == CHECKPOINT
    assert "private key" in left_out(caplog, "key-link.txt")


def test_harmless_included_files_and_archives_are_uploaded(attacked: Path) -> None:
    assert dry_run(attacked, include=list(HARMLESS)) == sorted([*CHECKPOINT, *HARMLESS])


def test_nothing_left_out_reaches_the_hub(attacked: Path, api: HfApi) -> None:
    """Every file of the folder included (`*`): the Hub gets the checkpoint and the harmless files, nothing else."""
    push_to_hub(attacked, "org/content-checks", endpoint=api.endpoint, token=TOKEN, include=["*"])
    assert sorted(api.list_repo_files("org/content-checks")) == sorted([*CHECKPOINT, *HARMLESS, ".gitattributes"])


def test_real_model_files_are_never_taken_for_secrets(minilm_dir: Path, checkpoint: Path, tmp_path: Path) -> None:
    """Every file of the packaged MiniLM (safetensors, tokenizer, vocabulary, sentence-transformers files, its README)
    and of an hf-norms checkpoint (remote code, config, image processor) passes the content checks."""
    files = {}
    for folder in (minilm_dir, checkpoint):
        files[folder] = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        kept, skipped = screen_files(folder, files[folder], TOKEN)
        assert skipped == {} and kept == files[folder]
    assert {"modules.json", "1_Pooling/config.json", "vocab.txt", "tokenizer.json", "model.safetensors"} <= set(
        files[minilm_dir]
    )
    weights = tmp_path / "looks-like-pickle.safetensors"  # a safetensors header whose length starts 0x80 0x02
    weights.write_bytes((0x0280).to_bytes(8, "little") + b"{" + b" " * 0x027E + b"}" + b"\0" * 64)
    assert scan_file(weights, token_forms(TOKEN)).secret is None


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


BERT_HEADS = sorted(name for name in MODEL_CLASSES if name.startswith("BertNorm"))


@pytest.fixture(scope="module")
def sentence_transformers_heads(tiny_bert_dir: Path, minilm_dir: Path, tmp_path_factory) -> dict[str, Path]:
    """A tiny hf-norms BERT of every head, each saved with MiniLM's sentence-transformers files beside it (as a folder
    fine-tuned from a sentence-transformers checkpoint had them when finetune copied them)."""
    from conftest import tiny_sentence_transformer
    from transformers import AutoTokenizer

    root, folders = tmp_path_factory.mktemp("heads"), {}
    source = tiny_sentence_transformer(tiny_bert_dir, minilm_dir, root / "source")
    config = hf_norms.BertNormConfig.from_pretrained(source, norm_type="dyt")
    for name in BERT_HEADS:
        folders[name] = root / name
        MODEL_CLASSES[name](config).save_pretrained(folders[name])
        AutoTokenizer.from_pretrained(source).save_pretrained(folders[name])
        for part in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling"):
            copy = shutil.copytree if (source / part).is_dir() else shutil.copyfile
            copy(source / part, folders[name] / part)
    return folders


@pytest.mark.parametrize("head", BERT_HEADS)
def test_the_card_and_the_upload_follow_the_head(head: str, sentence_transformers_heads: dict[str, Path]) -> None:
    """The sentence-transformers files describe a bare model and the pre-training heads sentence-transformers
    checkpoints are saved with; every task's head is published as transformers' model of its task, without them
    (SentenceTransformer would load the encoder and drop the head)."""
    folder = sentence_transformers_heads[head]
    files = dry_run(folder)
    card = model_card_for_folder(folder, "org/head").data.to_dict()
    sentence_transformers_files = {"modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                                   "1_Pooling/config.json"}  # fmt: skip
    if head in ("BertNormModel", "BertNormForMaskedLM", "BertNormForPreTraining"):  # how ST checkpoints are saved
        assert sentence_transformers_files <= set(files)
        assert (card["library_name"], card["pipeline_tag"]) == ("sentence-transformers", "sentence-similarity")
    else:
        assert not sentence_transformers_files & set(files)
        assert card["library_name"] == "transformers" and "sentence-transformers" not in card["tags"]
        assert card.get("pipeline_tag") == head_of(head)[1]
    with_them = dry_run(folder, include=["modules.json"])
    assert "modules.json" in with_them  # named by --include: the user's choice
