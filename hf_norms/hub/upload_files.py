"""Which files of a checkpoint folder are uploaded, and the check that the Hub token is in none of them.

Skipped unless named explicitly: files that look like secrets (`.env`, `*.pem`, `*token*`, ...), hidden files and
folders, pickles (`*.bin`, `*.pt`, ...: `training_args.bin` holds `hub_token`), stray training checkpoints
(`checkpoint-*/`) and the folder's own README.md, which the rendered card replaces.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from ..errors import InputError

SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_ed25519*",
    ".netrc",
    ".git-credentials",
    "*token*",
    "*secret*",
    "*credential*",
    "*password*",
)
TOKENIZER_FILES = frozenset(
    {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.model"}
)
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt")
STRAY_FOLDER_PATTERNS = ("checkpoint-*", "__pycache__")
CARD_NAME = "README.md"
SCAN_CHUNK = 1 << 22


class CheckpointRefused(InputError):
    """The folder cannot be published as it is; nothing was uploaded. The message names the problem and the fix."""

    exit_code = 1


def skip_reason(relative_path: str) -> str | None:
    """Why a file is not uploaded unless named explicitly, or None to upload it."""
    path = PurePosixPath(relative_path)
    for part in path.parts[:-1]:
        if any(fnmatch.fnmatch(part, pattern) for pattern in STRAY_FOLDER_PATTERNS):
            return "a stray training checkpoint or cache folder"
        if part.startswith("."):
            return "inside a hidden folder"
    name = path.name.lower()
    if name not in TOKENIZER_FILES and any(fnmatch.fnmatch(name, pattern) for pattern in SECRET_PATTERNS):
        return "looks like a secret"
    if name.startswith("."):
        return "a hidden file"
    if any(fnmatch.fnmatch(name, pattern) for pattern in PICKLE_PATTERNS):
        return "a pickle (can run code when loaded, and training_args.bin holds hub_token)"
    if relative_path == CARD_NAME:
        return "replaced by the rendered model card"
    return None


def select_upload_files(folder: Path, include: Iterable[str] = ()) -> tuple[list[str], dict[str, str]]:
    """(files to upload, {skipped file: reason}), as paths relative to `folder` with `/` separators, sorted.

    A file named in `include` is uploaded whatever its name; naming a file that is not there is an error.
    """
    include = {PurePosixPath(name).as_posix() for name in include}
    selected, skipped = [], {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(folder).as_posix()
        reason = None if relative in include else skip_reason(relative)
        if reason is None:
            selected.append(relative)
        else:
            skipped[relative] = reason
    missing = sorted(include - set(selected))
    if missing:
        raise CheckpointRefused(f"include names {missing}, which are not files in {folder}.")
    return selected, skipped


def file_contains(path: Path, needle: bytes) -> bool:
    """Whether `needle` occurs in the file, read in chunks (overlapping by len(needle) - 1 bytes)."""
    overlap = b""
    with open(path, "rb") as f:
        while chunk := f.read(SCAN_CHUNK):
            if needle in overlap + chunk:
                return True
            overlap = chunk[-(len(needle) - 1) :] if len(needle) > 1 else b""
    return False


def refuse_token_leaks(folder: Path, files: Sequence[str], token: str | None, card_text: str = "") -> None:
    """Raise CheckpointRefused naming the files (never the token) that contain `token`."""
    if not token:
        return
    leaks = [name for name in files if file_contains(folder / name, token.encode())]
    if token in card_text:
        leaks.append(f"{CARD_NAME} (rendered)")
    if leaks:
        raise CheckpointRefused(
            f"The Hub token occurs in {leaks}; nothing was uploaded. Remove it from those files (a "
            "TrainingArguments(hub_token=...) is pickled into training_args.bin: use HF_TOKEN or `hf auth login`)."
        )


def trainer_upload_files(output_dir: Path) -> list[str]:
    """The files `Trainer.push_to_hub` uploads from its output folder (all but `_*` and `checkpoint-*`)."""
    files = []
    for path in sorted(output_dir.rglob("*")):
        relative = path.relative_to(output_dir).as_posix()
        if path.is_file() and not any(fnmatch.fnmatch(relative, p) for p in ("_*", "checkpoint-*", "*/checkpoint-*")):
            files.append(relative)
    return files
