"""What the family publishing tests share: a folder's sha256 digest, and loading a repo from the loopback Hub by id in
a fresh interpreter (without hf_norms: by remote code) through a script template of the test's own."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hf_norms.demo import BLOCK_HF_NORMS


def tree_digest(folder: Path) -> dict[str, str]:
    """`{relative path: sha256}` of every file below `folder`."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def load_by_id(hub, token: str, script: str, repo_id: str, reference: Path, cwd: Path, with_hf_norms: bool) -> dict:
    """Run `script` (its `IMPORT_LINE`, `KWARGS`, `REFERENCE` and `REPO` filled in) in a fresh interpreter against the
    loopback Hub with `token`; returns the JSON its last line prints."""
    code = (
        script.replace("IMPORT_LINE", "import hf_norms" if with_hf_norms else "")
        .replace("KWARGS", "{}" if with_hf_norms else "{'trust_remote_code': True}")
        .replace("REFERENCE", repr(str(reference)))
        .replace("REPO", repr(repo_id))
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "HF_HOME": str(cwd / "hf_home"), **hub.client_env(token)}
    env.update({key: os.environ[key] for key in ("PYTHONPATH",) if key in os.environ})
    prefix = "" if with_hf_norms else BLOCK_HF_NORMS
    done = subprocess.run([sys.executable, "-c", prefix + textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
