"""`hf-norms env`: what a bug report needs to know about this machine, as `transformers env` prints it.

Versions are read from the installed packages' metadata, so a broken or missing package is reported, not imported;
torch is imported only to say which accelerator it sees.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from importlib import metadata

from .version import VERSION
from .version_guard import NEWEST_TESTED_TRANSFORMERS, OLDEST_TRANSFORMERS, SUPPORTED_TRANSFORMERS

# The libraries hf-norms runs with, in the order a report lists them
LIBRARIES = (
    "torch",
    "transformers",
    "huggingface_hub",
    "safetensors",
    "accelerate",
    "datasets",
    "evaluate",
    "tokenizers",
    "sentence-transformers",
    "peft",
    "onnxruntime",
    "numpy",
)


@dataclass(kw_only=True)
class EnvArguments:
    """`hf-norms env` takes no options."""


def installed_version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def accelerator() -> str:
    """The accelerator torch sees: `cuda (N x NAME)`, `mps`, or `none (CPU only)`."""
    import torch

    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda})"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "none (CPU only)"


# The variables that name where HTTP requests go, each shown as it is set (requests and httpx read both cases)
PROXY_VARIABLES = tuple(
    spelling for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY") for spelling in (name, name.lower())
)
# A URL's user information: everything between the scheme (or the start) and the value's last `@`
USERINFO = re.compile(r"^(\s*(?:[A-Za-z][A-Za-z0-9+.-]*://)?).*@", re.DOTALL)


def without_userinfo(value: str) -> str:
    """`value` with a URL's user and password shown as `***`: `http://user:pw@proxy:3128` -> `http://***@proxy:3128`.
    The cut goes to the value's last `@`, so a password holding `/`, `:`, `,`, a space or `@` is hidden whole, with or
    without a scheme (of a list, as `NO_PROXY` may be, the part up to its last `@` is hidden too)."""
    return USERINFO.sub(r"\1***@", value)


def endpoint_without_credentials(endpoint: str | None) -> str:
    """`HF_ENDPOINT` as a report may show it: without a `user:password@` part."""
    return without_userinfo(endpoint) if endpoint else "not set (https://huggingface.co)"


def environment_report() -> dict[str, str]:
    """{what: value} for a bug report: hf-norms, Python, the platform, each of `LIBRARIES`, the transformers range
    hf-norms is tested on, the accelerator, the Hub endpoint and the proxy variables that are set (never a token,
    never a URL's user or password)."""
    return {
        "hf-norms": VERSION,
        "Python": platform.python_version(),
        "Platform": platform.platform(),
        **{package: installed_version(package) for package in LIBRARIES},
        "tested transformers": f"{OLDEST_TRANSFORMERS} to {NEWEST_TESTED_TRANSFORMERS} ({SUPPORTED_TRANSFORMERS})",
        "accelerator": accelerator(),
        "HF_ENDPOINT": endpoint_without_credentials(os.environ.get("HF_ENDPOINT")),
        **{name: without_userinfo(os.environ[name]) for name in PROXY_VARIABLES if os.environ.get(name)},
    }


def run_env(arguments: EnvArguments) -> int:
    print("Copy-and-paste the text below in your bug report.\n")
    for name, value in environment_report().items():
        print(f"- {name}: {value}")
    return 0
