"""Which files of a checkpoint folder are uploaded, and the check that the Hub token is in none of them.

`include` / `exclude` glob patterns pick files exactly as `hf upload --include/--exclude` do (huggingface_hub's own
filter). Of the files they pick, these are skipped unless named explicitly (`include_skipped`); a pattern never
overrides a skip (`--include "*"` still leaves `.env` behind):

- by name (`skip_reason`): names that look like secrets (`SECRET_PATTERNS`: `.env`, `*.pem`, `*.key`, `*.kdbx`,
  `*.jks`, `*.keystore`, `id_rsa*`, `credentials`, `*token*`, `*secret*`, ...; the tokenizer files excepted), pickles
  (`PICKLE_PATTERNS`: `*.bin`, `*.pt`, `*.pkl`, `*.pkl.gz`, `*.joblib`, `*.dill`, `*.pt2`, ...: `training_args.bin`
  holds `hub_token`), hidden files and everything in hidden folders (`.ssh/`, `.aws/`, ...), stray training
  checkpoints and caches (`checkpoint-*/`, `__pycache__/`), entries that are not regular files (FIFOs, sockets) and the
  folder's own README.md, which the rendered card replaces;
- by content (`content_checks.scan_file`, in the same single read as the token check): pickle streams, PyTorch
  archives and NumPy object arrays, compressed pickles and any other archive (zip, tar, gzip, ...: its contents
  cannot be checked), private keys (PEM, PGP, PuTTY), and credentials of known formats (Hugging Face, GitHub, AWS,
  Google Cloud service accounts, npm, .netrc, `password =` settings), whatever the file's name.

Symbolic links are never followed out of the folder. A link to a regular file inside the folder is uploaded, under the
link's name, with that file's bytes (and skipped when the target's own path would be). Any other link that would be
uploaded (to a file outside the folder, to a folder, dangling, or a loop) refuses the whole push, naming the link,
before anything is uploaded; links to folders are never walked into.

The token check (`screen_files`) reads every byte of every file to upload, its path, and every text the push publishes
(the card, the commit message, the repo id, the branch), looking for the token in each of its encodings
(`content_checks.token_forms`). A file skipped for its content that holds the token refuses nothing, since it is not
uploaded; named with `include_skipped`, it refuses the push. A token shorter than `MIN_TOKEN_LENGTH` is refused as a token: it would be
"found" in ordinary bytes, so the check could not tell a leak from chance.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from huggingface_hub.utils import filter_repo_objects

from ..errors import InputError
from .content_checks import scan_file, text_holds_token, token_forms
from .redaction import redact

SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.ppk",
    "*.kdbx",
    "*.jks",
    "*.keystore",
    "*.tfstate",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "credentials",
    "*token*",
    "*secret*",
    "*credential*",
    "*password*",
    "*htpasswd*",
)
TOKENIZER_FILES = frozenset(
    {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.model"}
)
PICKLE_PATTERNS = (
    "*.bin",
    "*.pt",
    "*.pth",
    "*.pt2",
    "*.pkl",
    "*.pkl.*",
    "*.pickle",
    "*.pickle.*",
    "*.ckpt",
    "*.joblib",
    "*.dill",
    "*.cloudpickle",
)
STRAY_FOLDER_PATTERNS = ("checkpoint-*", "__pycache__")
CARD_NAME = "README.md"
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


def check_token_length(token: str | None) -> None:
    """Refuse a token too short to be a Hub token: the leak check would find it in ordinary bytes by chance."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise CheckpointRefused(
            f"The Hub token is {len(token)} characters long, too short to be a Hub token (they are 37: hf_...), and too "
            "short to check the upload for leaks. Set a real token in HF_TOKEN or with `hf auth login`, then push "
            "again. Nothing was uploaded."
        )


def screen_files(
    folder: Path,
    files: Sequence[str],
    token: str | None,
    named: Iterable[str] = (),
    texts: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(the files to upload, {file skipped for its content: reason}), reading each file once (`scan_file`).

    Raises CheckpointRefused, naming the files and texts (never the token), when a form of `token`
    (`content_checks.token_forms`) occurs in a file's path or bytes (read through symbolic links, as they are
    uploaded) or in one of `texts` (what else is published: the rendered card, the commit message, ...). A file whose
    content looks like a secret, a pickle or an archive is skipped unless it is in `named`; a skipped file is never
    uploaded, so its holding the token refuses nothing. A token shorter than `MIN_TOKEN_LENGTH` is refused itself.
    """
    check_token_length(token)
    needles = token_forms(token) if token else ()
    named = set(named)
    kept, skipped, leaks = [], {}, []
    for name in files:
        findings = scan_file(folder / name, needles)
        if findings.secret is not None and name not in named:
            skipped[name] = findings.secret
        elif findings.holds_token or text_holds_token(name, needles):
            leaks.append(name)
        else:
            kept.append(name)
    leaks += [what for what, text in (texts or {}).items() if text_holds_token(text, needles)]
    if leaks:
        raise CheckpointRefused(
            redact(
                f"The Hub token (or an encoding of it: base64, hex, UTF-16, ...) occurs in {leaks}; nothing was "
                "uploaded. Remove it from those files, names or texts (a TrainingArguments(hub_token=...) is pickled "
                "into training_args.bin: use HF_TOKEN or `hf auth login`).",
                token,
            )
        )
    return kept, skipped


def refuse_token_leaks(folder: Path, files: Sequence[str], token: str | None) -> None:
    """Raise CheckpointRefused when a form of `token` occurs in the path or bytes of one of `files` (see
    `screen_files`; here every file is read for the token, whatever its content)."""
    screen_files(folder, files, token, named=files)


def trainer_upload_files(output_dir: Path) -> list[str]:
    """The files `Trainer.push_to_hub` uploads from its output folder (all but `_*` and `checkpoint-*`)."""
    files = []
    for path in sorted(output_dir.rglob("*")):
        relative = path.relative_to(output_dir).as_posix()
        if path.is_file() and not any(fnmatch.fnmatch(relative, p) for p in ("_*", "checkpoint-*", "*/checkpoint-*")):
            files.append(relative)
    return files
