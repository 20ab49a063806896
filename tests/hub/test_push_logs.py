"""No output of `hf-norms push` holds the token: stdout and stderr of the real command line, with the token given by
--token, HF_TOKEN or the stored login, for pushes that succeed and pushes that fail (server 500, refused token 401 and
403, unreachable endpoint, a server whose errors echo the Authorization header), with every library's log records at
INFO and at DEBUG; and by default only hf-norms' own INFO lines show."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HF_NORMS_SCRIPT, tiny_config
from huggingface_hub import HfApi
from transformers import ViTImageProcessorPil

import hf_norms
from hf_norms.hub.server import HubServer
from hf_norms.redaction import text_token_forms


def hub_token(label: str) -> str:
    """A token of the real shape, hf_ and 34 letters and digits, distinct per label."""
    return "hf_" + (label.replace("-", "").capitalize() * 34)[:26] + "01234567"


TOKENS = {label: hub_token(label) for label in ("flag", "env", "stored", "flag-bad", "env-bad", "stored-bad", "owner")}
OUTCOMES = ("ok", "500", "401", "403", "unreachable", "echo-500", "echo-401")
# a refused token and an endpoint that does not answer are input mistakes, found before the folder is read (exit 2)
EXPECTED_STATUS = {"ok": 0, "500": 1, "401": 2, "403": 1, "unreachable": 2, "echo-500": 1, "echo-401": 2}
EXPECTED_ERROR = {
    "500": "HTTP 500",
    "401": "HTTP 401",
    "403": "HTTP 403",
    "unreachable": "Could not reach http://127.0.0.1:9",
    "echo-500": "Authorization: Bearer <token>",
    "echo-401": "HTTP 401",
}

pytestmark = pytest.mark.usefixtures("hub_online")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoint") / "vit"
    hf_norms.ViTNormModel(tiny_config("vit", "layernorm")).save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def token_forms_in(text: str) -> list[str]:
    """The labels of the tokens of which some text form occurs in `text`."""
    return [label for label, token in TOKENS.items() if any(form in text for form in text_token_forms(token))]


def clean_env(home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    path = os.pathsep.join([str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**env, "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": path}


MATRIX = r"""
import json, logging, os, sys
from pathlib import Path
import huggingface_hub, transformers
from huggingface_hub import HfApi
from echoing_server import EchoingServer
from hf_norms import cli
from hf_norms.hub.server import HubServer

folder, root, tokens, outcomes = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
token_file = Path(os.environ["HF_HOME"]) / "token"


def set_level(level):
    '''A fresh process's logging for INFO (the command line configures it), or every library at DEBUG.'''
    root_logger = logging.getLogger()
    for handler in root_logger.handlers[:]:
        root_logger.removeHandler(handler)
    root_logger.setLevel(logging.WARNING)
    debug = level == "DEBUG"
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
    (huggingface_hub.utils.logging.set_verbosity_debug if debug else huggingface_hub.utils.logging.set_verbosity_warning)()
    (transformers.logging.set_verbosity_debug if debug else transformers.logging.set_verbosity_warning)()


results = []
with HubServer(root / "hub", tokens=[tokens["flag"], tokens["env"], tokens["stored"]]) as hub, \
        HubServer(root / "hub-b") as hub_b, EchoingServer(500) as echo_500, EchoingServer(401) as echo_401:
    HfApi(endpoint=hub_b.url, token=tokens["owner"]).create_repo("taken/x")  # the namespace of another user
    endpoints = {"ok": hub.url, "500": hub.url, "401": hub.url, "403": hub_b.url, "unreachable": "http://127.0.0.1:9",
                 "echo-500": echo_500, "echo-401": echo_401}
    for level in ("INFO", "DEBUG"):
        for source in ("flag", "env", "stored"):
            for outcome in outcomes:
                used = tokens[f"{source}-bad"] if outcome == "401" else tokens[source]
                os.environ.pop("HF_TOKEN", None)
                if source == "env":
                    os.environ["HF_TOKEN"] = used
                token_file.write_text(used if source == "stored" else tokens["stored"])
                if outcome == "500":
                    hub.fail_next("/api/repos/create", status=500)
                repo = "taken/x" if outcome == "403" else f"org/{source}-{level.lower()}"
                argv = ["push", repo, folder, "--endpoint", endpoints[outcome]]
                set_level(level)
                print(f"=== {level} {source} {outcome}", file=sys.stderr, flush=True)
                print(f"=== {level} {source} {outcome}", flush=True)
                status = cli.main(argv + (["--token", used] if source == "flag" else []))
                sys.stdout.flush(), sys.stderr.flush()
                results.append([level, source, outcome, status])
print("RESULTS " + json.dumps(results))
"""


def sections(text: str) -> dict[str, str]:
    """The output of each scenario, keyed by `LEVEL SOURCE OUTCOME`."""
    parts, key = {}, None
    for line in text.splitlines():
        if line.startswith("=== "):
            key = line[4:]
            parts[key] = ""
        elif key is not None:
            parts[key] += line + "\n"
    return parts


def test_the_command_line_never_prints_the_token(checkpoint: Path, tmp_path: Path) -> None:
    """The real command line (`hf_norms.cli.main`, 42 pushes in one process): 2 log levels x 3 token sources x 7
    outcomes. The token appears in no line of stdout or stderr, in any of its text forms."""
    home = tmp_path / "hf-home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", MATRIX, str(checkpoint), str(tmp_path), json.dumps(TOKENS), json.dumps(OUTCOMES)],
        env=clean_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert token_forms_in(done.stdout + done.stderr) == []
    results = json.loads(done.stdout.splitlines()[-1].removeprefix("RESULTS "))
    assert len(results) == 2 * 3 * len(OUTCOMES)
    errors, printed = sections(done.stderr), sections(done.stdout)
    for level, source, outcome, status in results:
        key = f"{level} {source} {outcome}"
        assert status == EXPECTED_STATUS[outcome], (key, errors[key][-2000:])
        if outcome == "ok":
            assert "Pushed " in printed[key] and "INFO Uploading " in errors[key], key
        else:
            (error_line,) = [line for line in errors[key].splitlines() if line.startswith("hf-norms push: error: ")]
            assert EXPECTED_ERROR[outcome] in error_line, (key, error_line)
        if level == "INFO":  # only hf-norms' own INFO lines: no request log of httpx
            assert "HTTP Request:" not in errors[key] and "DEBUG" not in errors[key], key
        else:
            assert "DEBUG" in errors[key], key  # the libraries did log at DEBUG


def test_the_hf_norms_script_prints_no_token_and_no_request_lines(checkpoint: Path, tmp_path: Path) -> None:
    """The installed `hf-norms push` script in a process of its own, as a user runs it: the stored login, a folder
    whose path holds the token; its output shows hf-norms' INFO lines, no request lines, and `<token>` for the token."""
    home = tmp_path / "hf-home"
    home.mkdir()
    token = TOKENS["stored"]
    (home / "token").write_text(token)
    folder = shutil.copytree(checkpoint, tmp_path / f"run-{token}")
    with HubServer(tmp_path / "hub", tokens=[token]) as hub:
        pushed = subprocess.run(
            [str(HF_NORMS_SCRIPT), "push", "org/script", str(folder), "--endpoint", hub.url],
            env=clean_env(home), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        assert "model.safetensors" in HfApi(endpoint=hub.url, token=token).list_repo_files("org/script")
    assert token_forms_in(pushed.stdout) == [] and token_forms_in(pushed.stderr) == []
    assert f"Pushed {tmp_path}/run-<token> to org/script" in pushed.stdout
    assert re.search(rf"INFO Uploading \d+ files from {re.escape(str(tmp_path))}/run-<token> to", pushed.stderr)
    assert "HTTP Request:" not in pushed.stderr
