"""Which files of a checkpoint folder are published, the private snapshot they are published from, and the one check
of that snapshot.

A push uploads what a checkpoint is made of (`CHECKPOINT_FILES`, the files of the sentence-transformers modules that
modules.json names when they describe the model, its remote code) and lists every other file as not uploaded,
whatever its name or content. `include` patterns add files and `exclude` patterns remove any, matched as `hf upload`
matches them (fnmatch on the path inside the folder, `*` crossing `/`, `sub/` a folder); an include pattern that
matches nothing is an error. The folder's README.md is never uploaded: the rendered card takes its place. A symbolic
link that would be uploaded must lead to a regular file inside the folder (it is uploaded with that file's bytes),
else it refuses the push; links are never followed out of the folder, nor into folders.

What is published is first copied into a `Snapshot` (a private folder of this push: regular files only, opened
without following links, each read once), the rendered card written there, and the snapshot checked as a whole by one
function with one list of patterns (`screen_files`): one file whose content hf-norms never publishes
(`content_checks`) is left out and listed; a secret in the card, the commit message or a file the checkpoint needs,
and the token in any of its forms anywhere, refuses the push; so does a token too short to be told from chance. The
upload sends the snapshot's bytes and nothing else, so a file changed in the folder during a push is never published.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

from ..conversion.sources import sentence_transformers_files
from ..errors import CheckpointRefused
from ..readers import JSON_LIMIT
from ..redaction import redact, token_forms
from .arguments import CardArguments
from .card_facts import REPORT_NAME, TRAINER_RESULT_NAMES, TRAINER_STATE_NAME, without_local_paths
from .content_checks import TOKEN_REASON, holds_token, scan_file, secret_patterns, text_secret

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
# the files a checkpoint needs to load: a secret or an unreadable part in one refuses the whole push
ESSENTIAL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
                   "model-[0-9]*-of-[0-9]*.safetensors", *TOKENIZER_FILES, *PROCESSOR_FILES)  # fmt: skip
# what a card is made of besides the files published (`card_facts.gather_card_facts` reads them)
CARD_INPUTS = (CARD_NAME, "config.json", REPORT_NAME, TRAINER_STATE_NAME, *TRAINER_RESULT_NAMES, "modules.json",
               "sentence_bert_config.json", "model.safetensors", "model.safetensors.index.json")  # fmt: skip
# JSON files that record local absolute paths (a conversion's source and data, the Trainer's best checkpoint): they are
# published with each such path cut to its last component
PATH_BEARING_FILES = (REPORT_NAME, TRAINER_STATE_NAME)
CARD_SOURCES = (
    "the model card (README.md, made from the card options, the folder's README.md metadata, its conversion report "
    "and Trainer results, and the source's card)"
)
BAD_NAME = re.compile(r"[\x00-\x1f\x7f\\\udc80-\udcff]")  # control characters, backslashes, undecodable bytes
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


class Snapshot:
    """A private folder (`tempfile.mkdtemp`: mode 0700, this push's own) holding what a push reads and publishes, so
    that what is checked is what is uploaded, whatever happens to the checkpoint folder meanwhile:

    - `source`: a copy of `files`, the files of the folder to publish, and of those of `read_also` that are regular
      files (what the checkpoint and its card are made of: the load checks and the card read them), each a regular
      file opened without following a symbolic link at any step of its path (`O_NOFOLLOW`; a link chosen for upload
      is read as the file inside the folder it leads to), read once;
    - `published`: the files the commit adds: those of `files` (hard links), the path-bearing JSON files without
      their local paths (`without_local_paths`), and the rendered card (`write`).

    As a context manager, it is removed on leaving the block, after an error too."""

    def __init__(self, folder: Path, files: Sequence[str], read_also: Iterable[str] = ()) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="hf-norms-publish-"))
        self.source, self.published = self.root / "source", self.root / "published"
        try:
            copy_files(folder, self.source, files, sorted(set(read_also) - set(files)))
            for name in files:
                (self.published / name).parent.mkdir(parents=True, exist_ok=True)
                if name in PATH_BEARING_FILES:  # a copy without the local folders it names (the user's home, ...)
                    self.write(name, without_local_paths_in(self.source / name))
                else:
                    os.link(self.source / name, self.published / name)
        except BaseException:
            self.remove()
            raise

    def write(self, name: str, data: bytes) -> None:
        (self.published / name).write_bytes(data)

    def drop(self, names: Iterable[str]) -> None:
        """Take `names` (files the check left out) out of what is published."""
        for name in names:
            (self.published / name).unlink()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exception: object) -> None:
        self.remove()


def copy_files(folder: Path, target: Path, names: Sequence[str], optional: Sequence[str]) -> None:
    """Copy each of `names` (a link among them: the file inside `folder` it leads to) and each of `optional` that is
    a regular file from `folder` to `target`; CheckpointRefused when one of `names` changed since it was chosen (is
    now a link, a special file, or gone), or when a tokenizer or processor file is larger than `JSON_LIMIT` (64 MiB,
    the bound every command reads such files with: it is refused from its size, not copied)."""
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name, required in [*((name, True) for name in names), *((name, False) for name in optional)]:
            path = folder / name
            limit = JSON_LIMIT if name in (*TOKENIZER_FILES, *PROCESSOR_FILES) else None
            try:
                copy_file(directory, link_target(folder, path) if path.is_symlink() else name, target / name, limit)
            except FileTooLarge as err:
                raise CheckpointRefused(
                    f"{path} is larger than {JSON_LIMIT >> 20} MiB ({err.size:,} bytes), more than a tokenizer or "
                    "processor file holds; save the tokenizer or processor again (`save_pretrained(folder)`). "
                    "Nothing was created or uploaded."
                ) from None
            except OSError:  # of `optional`: none, or no regular file; the checks and the card read the copy without it
                if required:
                    raise CheckpointRefused(
                        f"{name} in {folder} changed while it was being published (it is now a symbolic link, a "
                        "special file or gone); hf-norms publishes only files it copied and checked. Push again once "
                        "nothing writes to the folder. Nothing was uploaded."
                    ) from None
    finally:
        os.close(directory)


class FileTooLarge(ValueError):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def copy_file(directory: int, relative: str, target: Path, limit: int | None = None) -> None:
    """Copy the regular file `relative` of the folder open as `directory` to `target`, opening each part of its path
    without following a symbolic link; OSError when one is a link, is missing or is no regular file (a FIFO never
    blocks: it is opened non-blocking and refused by its type); FileTooLarge when it holds more than `limit` bytes
    (by its size, or while it is read, should it grow)."""
    *parents, name = relative.split("/")
    opened = [directory]
    try:
        for part in parents:
            opened.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=opened[-1]))
        if not stat.S_ISREG(os.stat(name, dir_fd=opened[-1], follow_symlinks=False).st_mode):
            raise OSError(f"{relative} is no regular file")
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=opened[-1])
    finally:
        for descriptor_of_folder in opened[1:]:
            os.close(descriptor_of_folder)
    with open(descriptor, "rb") as stream:
        status = os.fstat(stream.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"{relative} is no regular file")
        if limit is not None and status.st_size > limit:
            raise FileTooLarge(status.st_size)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as copy:
            if limit is None:
                shutil.copyfileobj(stream, copy, 1 << 22)
                return
            data = stream.read(limit + 1)
            if len(data) > limit:
                raise FileTooLarge(len(data))
            copy.write(data)


def without_local_paths_in(path: Path) -> bytes:
    """The JSON file `path` with each local absolute path in it cut to its last component; its bytes as they are when
    it is not JSON (the check then finds it unreadable)."""
    data = path.read_bytes()
    try:
        value = json.loads(data) if len(data) <= JSON_LIMIT else None
    except (ValueError, RecursionError):
        value = None
    if value is None:
        return data
    return json.dumps(without_local_paths(value), indent=1).encode("utf-8")


def check_token_length(token: str | None) -> None:
    """Refuse a token too short to be a Hub token: the leak check would find it in ordinary bytes by chance."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise CheckpointRefused(
            f"The Hub token is {len(token)} characters long, too short to be a Hub token (they are 37: hf_...), and too "
            "short to check the upload for leaks. Set a real token in HF_TOKEN or with `hf auth login`, then push "
            "again. Nothing was uploaded."
        )


def screen_files(
    root: Path,
    files: Sequence[str],
    token: str | None,
    texts: Mapping[str, str] | None = None,
    unread_ok: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The one check of what a push publishes: (the files to upload, {file left out for its content or name: why}),
    for `files` of `root` (a push's `Snapshot`, the card included) and `texts` (the commit message, the repo id, the
    branch name), each searched with one list of patterns (`content_checks.secret_patterns`: every credential format
    and the forms of `token`), each file read once (`scan_file`), each name and text as it is and decoded.

    What push cannot read in full is left out unless `unread_ok` names it, and so is a file that holds a secret.
    Raises CheckpointRefused, before anything is created, naming the files and texts (never the secret): when the
    card, or a file the checkpoint needs (`essential_files`), holds a secret or cannot be read; when a name holds a
    character the Hub refuses; when a form of `token` occurs in a file or name that is not left out, or a secret in
    one of `texts`."""
    check_token_length(token)
    check_names(files)
    needles = token_forms(token) if token else ()
    patterns = secret_patterns(needles)
    essential = {CARD_NAME, *essential_files(root, files)}
    kept, left_out, leaks, refusals = [], {}, [], []
    for name in files:
        reason = text_secret(name, patterns)
        if reason is not None and reason.startswith(TOKEN_REASON):
            leaks.append(name)
            continue
        findings = scan_file(root / name, needles)
        reason = reason or findings.secret
        if reason is None and findings.unread is not None and name not in unread_ok:
            reason = (
                f"{findings.unread}: push cannot read all of it (publish it anyway with --include-skipped {name}; "
                "the card then names it)"
            )
        if reason is None and findings.unread is not None:  # asked for: its bytes as they are
            findings.holds_token = findings.holds_token or holds_token(root / name, needles)
        if reason is not None and name in essential:
            refusals.append(f"{CARD_SOURCES if name == CARD_NAME else name} {reason}")
        elif reason is not None:
            left_out[name] = reason
        else:
            (leaks if findings.holds_token else kept).append(name)
    for what, text in (texts or {}).items():
        reason = text_secret(text, patterns)
        if reason is not None and reason.startswith(TOKEN_REASON):
            leaks.append(what)
        elif reason is not None:
            refusals.append(f"{what} {reason}")
    refuse_leaks(leaks, token)
    if refusals:
        raise CheckpointRefused(
            redact(
                f"The checkpoint cannot be published as it is: {'; '.join(refusals)}. Remove the secret (or save the "
                "model again), then push again. Nothing was created or uploaded.",
                token,
            )
        )
    return kept, left_out


def essential_files(folder: Path, files: Sequence[str]) -> set[str]:
    """The files of `files` a checkpoint needs to load: config, weights, tokenizer and processor files, and its
    sentence-transformers files."""
    modules = sentence_transformers_files(folder)
    return {
        name
        for name in files
        if ("/" not in name and any(fnmatch.fnmatchcase(name, p) for p in ESSENTIAL_FILES))
        or name in modules
        or str(PurePosixPath(name).parent) in modules
    }


def stating_unread(card: CardArguments, names: Sequence[str] | None) -> CardArguments:
    """The card's arguments, with a note naming the files the uploader asked to publish even where push cannot read
    them in full (`--include-skipped`)."""
    if names:
        card.notes = [
            *(card.notes or []),
            f"The uploader asked to publish {', '.join(names)} even where hf-norms cannot read it in full "
            "(--include-skipped): what hf-norms could not read was not checked for secrets.",
        ]
    return card


def check_names(files: Sequence[str]) -> None:
    """Refuse names the Hub refuses (control characters, backslashes, bytes that are not UTF-8) before anything is
    created, so a push is one commit or nothing."""
    bad = [name for name in files if BAD_NAME.search(name)]
    if bad:
        raise CheckpointRefused(
            f"{', '.join(map(repr, bad))}: a file name with a control character, a backslash or bytes that are not "
            "UTF-8, which the Hub refuses; rename the file or leave it out (--exclude), then push again. Nothing was "
            "created or uploaded."
        )


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
