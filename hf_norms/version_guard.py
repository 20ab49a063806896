"""The transformers releases this model code is tested on, and what happens on the others.

The model classes inherit the stock classes and replace only their norm modules (`norm_placement`), through public
API, so a newer transformers release is expected to work: on one newer than the tested range, the first import warns
once and runs. An older release than the range's oldest lacks API this code uses (refused with one line naming both
versions; `HF_NORMS_ALLOW_ANY_TRANSFORMERS=1` tries it anyway). Each entry file imports this module before anything
from transformers:

    from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401  # isort: split

It leads the configuration file of every checkpoint's generated remote code, and imports nothing from `hf_norms`; it
reads the installed release from the package metadata and imports only the
standard library and packaging, so `import hf_norms` runs it without importing transformers.
"""

from __future__ import annotations

import logging
import os
from importlib import metadata

from packaging.version import Version

# The range CI tests: the oldest release on the one side, the newest on the other (`.ci/run`, constraints/).
OLDEST_TRANSFORMERS = "5.20.0"
NEWEST_TESTED_TRANSFORMERS = "5.25.0"
SUPPORTED_TRANSFORMERS = f">={OLDEST_TRANSFORMERS},<5.26.0"
OVERRIDE_VARIABLE = "HF_NORMS_ALLOW_ANY_TRANSFORMERS"

# one logger for every copy of this file (the package's and each checkpoint's remote code): it carries the releases
# already warned about, so that each is warned about once per process
logger = logging.getLogger("hf_norms")


def too_old_message(installed: str) -> str | None:
    """The one-line refusal for a transformers release older than the oldest supported one, or None."""
    if Version(installed).release >= Version(OLDEST_TRANSFORMERS).release:
        return None
    return (
        f"hf-norms needs transformers>={OLDEST_TRANSFORMERS} (tested up to {NEWEST_TESTED_TRANSFORMERS}), but "
        f"transformers {installed} is installed: `pip install -U 'transformers{SUPPORTED_TRANSFORMERS}'` (or set "
        f"{OVERRIDE_VARIABLE}=1 to try this one at your own risk)."
    )


def check_transformers_version(installed: str | None = None) -> None:
    """Raise ImportError (one line) for a release older than `OLDEST_TRANSFORMERS`; warn once for one newer than the
    tested range, and run. Pre-releases and dev builds count as their release (`5.26.0.dev0` is 5.26)."""
    installed = metadata.version("transformers") if installed is None else installed
    message = too_old_message(installed)
    if message is not None and os.environ.get(OVERRIDE_VARIABLE) != "1":
        raise ImportError(message)
    warned = logger.__dict__.setdefault("newer_transformers_warned", set())
    if Version(installed).release[:2] > Version(NEWEST_TESTED_TRANSFORMERS).release[:2] and installed not in warned:
        warned.add(installed)
        logger.warning(
            f"hf-norms is tested with transformers {OLDEST_TRANSFORMERS} to {NEWEST_TESTED_TRANSFORMERS}; "
            f"transformers {installed} is newer: running anyway (please report what breaks)."
        )


check_transformers_version()
