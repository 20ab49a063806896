"""Which files of a checkpoint folder are uploaded, and the check that the Hub token is in none of them.

`include` / `exclude` glob patterns pick files exactly as `hf upload --include/--exclude` do (huggingface_hub's own
filter). Of the files they pick, these are skipped unless named explicitly (`include_skipped`): files that look like
secrets (`.env`, `*.pem`, `*token*`, ...), hidden files and folders, pickles (`*.bin`, `*.pt`, ...:
`training_args.bin` holds `hub_token`), stray training checkpoints (`checkpoint-*/`), entries that are not regular
files (FIFOs, sockets) and the folder's own README.md, which the rendered card replaces. A pattern never overrides a
skip: `--include "*"` still leaves `.env` behind.

Symbolic links are never followed out of the folder. A link to a regular file inside the folder is uploaded, under the
link's name, with that file's bytes (and skipped when the target's own path would be). Any other link that would be
uploaded (to a file outside the folder, to a folder, dangling, or a loop) refuses the whole push, naming the link,
before anything is uploaded; links to folders are never walked into.

The token check reads every byte of every file to upload and every text the push publishes (the card, the commit
message, the repo id, the branch). A token shorter than `MIN_TOKEN_LENGTH` is refused as a token: it would be "found"
in ordinary bytes, so the check could not tell a leak from chance.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from huggingface_hub.utils import filter_repo_objects

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
MIN_TOKEN_LENGTH = 8  # Hub tokens are 37 characters (`hf_` and 34 more)


class CheckpointRefused(InputError):
    """The push cannot be made as asked (the folder, repo id, token or commit message); nothing was uploaded. The
    message names the problem and the fix."""


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


def matches_upload_patterns(
    relative_path: str, include: str | Sequence[str] | None = None, exclude: str | Sequence[str] | None = None
) -> bool:
    """Whether `hf upload --include INCLUDE --exclude EXCLUDE` would upload the file at `relative_path` (`/`
    separators): it matches an `include` pattern (when there are any) and no `exclude` pattern. Patterns are fnmatch
    globs on the whole relative path (`*` crosses `/`; `sub/` means everything under `sub`)."""
    return any(filter_repo_objects([relative_path], allow_patterns=include or None, ignore_patterns=exclude or None))


def select_upload_files(
    folder: Path,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    include_skipped: Iterable[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """(files to upload, {skipped file: reason}), as paths relative to `folder` with `/` separators, sorted.

    Only files the `include`/`exclude` patterns pick are considered (`matches_upload_patterns`); the others are
    neither uploaded nor listed as skipped. A file named in `include_skipped` is uploaded whatever its name; naming a
    file that is not there, or that the patterns leave out, is an error. A symbolic link that would be uploaded must
    lead to a regular file inside `folder` (`link_target`), else CheckpointRefused.
    """
    folder = folder.resolve()
    named = {PurePosixPath(name).as_posix() for name in include_skipped}
    selected, skipped = [], {}
    for path in sorted(folder_entries(folder)):
        relative = path.relative_to(folder).as_posix()
        if not matches_upload_patterns(relative, include, exclude):
            continue
        reason = None if relative in named else skip_reason(relative)
        if reason is None and path.is_symlink():
            target = link_target(folder, path)
            target_reason = None if relative in named else skip_reason(target)
            reason = None if target_reason is None else f"a link to {target}: {target_reason}"
        elif reason is None and not path.is_file():
            reason = "not a regular file"
        if reason is None:
            selected.append(relative)
        else:
            skipped[relative] = reason
    missing = sorted(named - set(selected))
    if missing:
        filtered = " that the include/exclude patterns pick" if include or exclude else ""
        raise CheckpointRefused(
            f"include_skipped (--include-skipped) names {missing}, which are not files in {folder}{filtered}; name "
            "each file by its path inside the folder."
        )
    return selected, skipped


def folder_entries(folder: Path) -> Iterator[Path]:
    """Every entry under `folder` that is not a real folder: files, symbolic links (to files or folders), FIFOs, ...
    Links to folders are listed, never walked into."""
    for directory, folders, files in os.walk(folder):
        base = Path(directory)
        yield from (base / name for name in files)
        yield from (base / name for name in folders if (base / name).is_symlink())


def link_target(folder: Path, link: Path) -> str:
    """The path, relative to `folder` (resolved), of the regular file the symbolic link `link` leads to; raises
    CheckpointRefused, naming the link, when it leads outside the folder, to a folder, or nowhere."""
    name = link.relative_to(folder).as_posix()
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling, or a loop (RuntimeError before Python 3.13)
        raise CheckpointRefused(
            f"{name} in {folder} is a symbolic link that leads nowhere (dangling or a loop); remove it, then push "
            "again. Nothing was uploaded."
        ) from None
    if not target.is_relative_to(folder):
        where = f"a file outside the folder ({target})"
    elif not target.is_file():
        where = f"a folder or special file ({target})"
    else:
        return target.relative_to(folder).as_posix()
    raise CheckpointRefused(
        f"{name} in {folder} is a symbolic link to {where}; hf-norms uploads links only to files inside the folder. "
        "Replace the link with a copy of the file, or remove it, then push again. Nothing was uploaded."
    )


def file_contains(path: Path, needle: bytes) -> bool:
    """Whether `needle` occurs in the file, read in chunks (overlapping by len(needle) - 1 bytes)."""
    overlap = b""
    with open(path, "rb") as f:
        while chunk := f.read(SCAN_CHUNK):
            if needle in overlap + chunk:
                return True
            overlap = chunk[-(len(needle) - 1) :] if len(needle) > 1 else b""
    return False


def check_token_length(token: str | None) -> None:
    """Refuse a token too short to be a Hub token: the leak check would find it in ordinary bytes by chance."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise CheckpointRefused(
            f"The Hub token is {len(token)} characters long, too short to be a Hub token (they are 37: hf_...), and too "
            "short to check the upload for leaks. Set a real token in HF_TOKEN or with `hf auth login`, then push "
            "again. Nothing was uploaded."
        )


def refuse_token_leaks(
    folder: Path, files: Sequence[str], token: str | None, texts: Mapping[str, str] | None = None
) -> None:
    """Raise CheckpointRefused naming the files and texts (never the token) that contain `token`.

    `files` are read in full (through symbolic links, as they are uploaded); `texts` maps what else is published (the
    rendered card, the commit message, ...) to its text. A token shorter than `MIN_TOKEN_LENGTH` is refused itself.
    """
    if not token:
        return
    check_token_length(token)
    leaks = [name for name in files if file_contains(folder / name, token.encode())]
    leaks += [what for what, text in (texts or {}).items() if token in text]
    if leaks:
        raise CheckpointRefused(
            f"The Hub token occurs in {leaks}; nothing was uploaded. Remove it from those files or texts (a "
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
