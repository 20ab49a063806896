"""`hf-norms env`: what a bug report needs to know about this machine, as `transformers env` prints it.

Versions are read from the installed packages' metadata, so a broken or missing package is reported, not imported;
torch is imported only to say which accelerator it sees.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from importlib import metadata
from urllib.parse import urlsplit

from .models.version_guard import NEWEST_TESTED_TRANSFORMERS, OLDEST_TRANSFORMERS, SUPPORTED_TRANSFORMERS
from .version import VERSION

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


def endpoint_without_credentials(endpoint: str | None) -> str:
    """`HF_ENDPOINT` as a report may show it: without a `user:password@` part."""
    if not endpoint:
        return "not set (https://huggingface.co)"
    parts = urlsplit(endpoint)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else endpoint


def environment_report() -> dict[str, str]:
    """{what: value} for a bug report: hf-norms, Python, the platform, each of `LIBRARIES`, the transformers range
    hf-norms is tested on, the accelerator and the Hub endpoint (never a token)."""
    return {
        "hf-norms": VERSION,
        "Python": platform.python_version(),
        "Platform": platform.platform(),
        **{package: installed_version(package) for package in LIBRARIES},
        "tested transformers": f"{OLDEST_TRANSFORMERS} to {NEWEST_TESTED_TRANSFORMERS} ({SUPPORTED_TRANSFORMERS})",
        "accelerator": accelerator(),
        "HF_ENDPOINT": endpoint_without_credentials(os.environ.get("HF_ENDPOINT")),
    }


def run_env(arguments: EnvArguments) -> int:
    print("Copy-and-paste the text below in your bug report.\n")
    for name, value in environment_report().items():
        print(f"- {name}: {value}")
    return 0
