"""Check that `pip install hf-norms` into an environment with the newest supported transformers and torch changes
neither: a fresh virtual environment gets torch and transformers at the versions of constraints/newest.txt, then pip
resolves this package into it (`--dry-run --report`) and must plan to install neither again nor another version.

Run by .ci/run; needs the package index (PyPI) and the CPU torch wheel pip finds here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ("torch", "transformers")


def pinned(name: str) -> str:
    for line in (ROOT / "constraints" / "newest.txt").read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line
    raise SystemExit(f"constraints/newest.txt pins no {name}")


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        venv.create(folder, with_pip=True)
        python = str(Path(folder) / "bin" / "python")
        pip = [python, "-m", "pip", "install", "-q"]
        subprocess.run([*pip, pinned("torch")], check=True)
        subprocess.run([*pip, pinned("transformers")], check=True)
        report = Path(folder) / "report.json"
        subprocess.run([*pip, "--dry-run", "--report", str(report), str(ROOT)], check=True)
        planned = {
            item["metadata"]["name"].lower(): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]
        }
    changed = {name: planned[name] for name in KEPT if name in planned}
    if changed:
        print(f"pip install hf-norms would replace {changed} in an environment with {[pinned(n) for n in KEPT]}")
        return 1
    print(f"pip install hf-norms keeps {', '.join(pinned(n) for n in KEPT)}; it adds {len(planned) - 1} other packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
