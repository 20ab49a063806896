"""Refuse to run on a transformers release this code was not written for.

The model files lean on transformers internals that change between minor releases (the 5.x `vit.layers` layout,
`transformers.initialization`, `capture_outputs`, the checkpoint conversion mapping). A checkpoint's remote-code copy
of those files on another release would fail deep inside an import, or worse, load and compute something else. Each
entry file imports this module before anything from transformers, and the import runs the check:

    from .version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401  # isort: split

Copied next to saved checkpoints for `trust_remote_code` (it is reached by that single-dot relative import), so it
imports nothing from `hf_norms`. Set `HF_NORMS_ALLOW_ANY_TRANSFORMERS=1` to try another release at your own risk.
"""

from __future__ import annotations

import os

import transformers
from packaging.specifiers import SpecifierSet
from packaging.version import Version

SUPPORTED_TRANSFORMERS = ">=5.23.0,<5.24.0"
OVERRIDE_VARIABLE = "HF_NORMS_ALLOW_ANY_TRANSFORMERS"


def check_transformers_version(installed: str | None = None, supported: str = SUPPORTED_TRANSFORMERS) -> None:
    """Raise ImportError naming both versions unless `installed` (default: the imported transformers) is `supported`.

    Pre-releases and dev builds of a supported release (e.g. `5.23.1.dev0`) are accepted.
    """
    installed = transformers.__version__ if installed is None else installed
    if SpecifierSet(supported).contains(Version(installed), prereleases=True):
        return
    if os.environ.get(OVERRIDE_VARIABLE) == "1":
        return
    raise ImportError(
        f"This hf-norms model code was written for transformers{supported}, but transformers {installed} is "
        f"installed. Install a supported release (`pip install 'transformers{supported}'`), or set "
        f"{OVERRIDE_VARIABLE}=1 to try this one at your own risk."
    )


check_transformers_version()
