"""Which files of a checkpoint folder are published, and the check that the Hub token is in none of them.

A push uploads what a checkpoint is made of (`CHECKPOINT_FILES`, the files of the sentence-transformers modules that
modules.json names when they describe the model, its remote code) and lists every other file as not uploaded,
whatever its name or content. `include` patterns add files and `exclude` patterns remove any, matched as `hf upload`
matches them (fnmatch on the path inside the folder, `*` crossing `/`, `sub/` a folder); an include pattern that
matches nothing is an error. The folder's README.md is never uploaded: the rendered card takes its place. A symbolic
link that would be uploaded must lead to a regular file inside the folder (it is uploaded with that file's bytes),
else it refuses the push; links are never followed out of the folder, nor into folders. Every file to upload is read
once (`screen_files`): one whose content hf-norms never publishes (`content_checks`) is left out and listed; the
token in any of its forms, in a file's bytes or path or in a text the push publishes, refuses the push; so does a
token too short to be told from chance.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

from ..conversion.sources import sentence_transformers_files
from ..errors import CheckpointRefused
from ..redaction import redact, text_holds_token, token_forms
from .card_facts import REPORT_NAME, TRAINER_STATE_NAME
from .content_checks import scan_file

CARD_NAME = "README.md"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                   "added_tokens.json", "tokenizer.model")  # fmt: skip
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# what a checkpoint is made of, as fnmatch patterns on the names of its top folder (publish adds the remote code)
CHECKPOINT_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "model-[0-9]*-of-[0-9]*.safetensors", *TOKENIZER_FILES, *PROCESSOR_FILES, REPORT_NAME, "conversion_report.md",
    "conversion_report.png", TRAINER_STATE_NAME, "*_results.json",
)  # fmt: skip
MIN_TOKEN_LENGTH = 8  # Hub tokens are 37 characters (`hf_` and 34 more)


def patterns(value: str | Sequence[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or ())


def excluded(relative_path: str, exclude: str | Sequence[str] | None) -> bool:
    """Whether `exclude` (or huggingface_hub's own ignore list: `.git/`, ...) removes `relative_path` from a push."""
    ignore = [*patterns(exclude), *DEFAULT_IGNORE_PATTERNS]
    return not any(filter_repo_objects([relative_path], ignore_patterns=ignore))


def select_upload_files(
    folder: Path,
    files: Iterable[str] = (),
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    with_head: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(files to upload, {file left out: why}), as paths relative to `folder` with `/` separators, sorted: what the
    checkpoint is made of (`CHECKPOINT_FILES`, its sentence-transformers module files, and `files`), what `include`
    adds, less what `exclude` removes. A symbolic link that would be uploaded must lead to a regular file inside
    `folder` (`link_target`), else CheckpointRefused; so is an include pattern that matches no file.

    `with_head` names the head class of a checkpoint whose sentence-transformers files no longer describe it
    (`card_facts.sentence_transformers_model`): they are then left out unless `include` names them, since
    `SentenceTransformer(repo_id)` would load such a repo and drop its head."""
    folder = folder.resolve()
    entries = sorted(path.relative_to(folder).as_posix() for path in folder_entries(folder))
    modules = [name for name in sentence_transformers_files(folder) if not name.startswith(".")]
    module_files = {name for name in entries if name in modules or str(PurePosixPath(name).parent) in modules}
    chosen = {*files, *(() if with_head else module_files)}
    chosen |= {
        name for name in entries if "/" not in name and any(fnmatch.fnmatchcase(name, p) for p in CHECKPOINT_FILES)
    }
    for pattern in patterns(include):
        added = set(filter_repo_objects(entries, allow_patterns=[pattern]))
        if not added:
            raise CheckpointRefused(
                f"--include {pattern!r} matches no file in {folder}; give a path inside the folder or a pattern such "
                "as '*.onnx' or 'sub/'. Nothing was uploaded."
            )
        chosen |= added
    selected, left_out = [], {}
    for relative in entries:
        path = folder / relative
        if relative == CARD_NAME:
            left_out[relative] = "replaced by the rendered model card"
        elif relative not in chosen and relative in module_files:
            left_out[relative] = (
                f"a sentence-transformers file, which does not describe a {with_head} (SentenceTransformer would drop "
                f"its head; add it with --include {relative})"
            )
        elif relative not in chosen:
            left_out[relative] = f"not a file of an hf-norms checkpoint (add it with --include {relative})"
        elif not excluded(relative, exclude) and (path.is_file() or path.is_symlink()):
            selected.append(relative)
            if path.is_symlink():
                link_target(folder, path)
        elif not excluded(relative, exclude):
            left_out[relative] = "not a regular file"
    return selected, left_out


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
    folder: Path, files: Sequence[str], token: str | None, texts: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(the files to upload, {file left out for its content: why}), reading each file once (`scan_file`). Raises
    CheckpointRefused, naming the files and texts (never the token), when a form of `token` occurs in the path or bytes
    of a file that is not left out (read through symbolic links, as it is uploaded) or in one of `texts`."""
    check_token_length(token)
    needles = token_forms(token) if token else ()
    kept, left_out, leaks = [], {}, []
    for name in files:
        findings = scan_file(folder / name, needles)
        if findings.secret is not None:
            left_out[name] = findings.secret
        else:
            (leaks if findings.holds_token or text_holds_token(name, needles) else kept).append(name)
    refuse_leaks(leaks + [what for what, text in (texts or {}).items() if text_holds_token(text, needles)], token)
    return kept, left_out


def refuse_token_leaks(folder: Path, files: Sequence[str], token: str | None) -> None:
    """Raise CheckpointRefused when a form of `token` occurs in the path or bytes of one of `files`, whatever their
    content (what the stock Trainer would upload)."""
    check_token_length(token)
    needles = token_forms(token) if token else ()
    leaks = [name for name in files if text_holds_token(name, needles) or scan_file(folder / name, needles).holds_token]
    refuse_leaks(leaks, token)


def refuse_leaks(leaks: list[str], token: str | None) -> None:
    if leaks:
        raise CheckpointRefused(
            redact(
                f"The Hub token (or an encoding of it: base64, hex, UTF-16, ...) occurs in {leaks}; nothing was "
                "uploaded. Remove it from those files, names or texts (a TrainingArguments(hub_token=...) is pickled "
                "into training_args.bin: use HF_TOKEN or `hf auth login`).",
                token,
            )
        )


def trainer_upload_files(output_dir: Path) -> list[str]:
    """The files `Trainer.push_to_hub` uploads from its output folder (all but `_*` and `checkpoint-*`)."""
    files = []
    for path in sorted(output_dir.rglob("*")):
        relative = path.relative_to(output_dir).as_posix()
        if path.is_file() and not any(fnmatch.fnmatch(relative, p) for p in ("_*", "checkpoint-*", "*/checkpoint-*")):
            files.append(relative)
    return files
