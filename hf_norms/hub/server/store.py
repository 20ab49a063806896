"""The loopback Hub's storage: repositories on disk as content-addressed blobs, per-commit manifests and refs.

Every file is a regular (non-LFS) git blob, keyed by its git blob sha1. Each write goes to a temporary file that is
moved into place, refs last, so a crash mid-commit leaves the previous state intact. Everything a client sends is
checked before anything is written: names, revisions and file paths (no control characters, no backslashes, no `..`),
and each line of a commit (a JSON object with the fields its kind needs, file contents in strict base64). A namespace
belongs to the user who created its first repo; each repo records that user as its `author`. Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
DEFAULT_USER = "hf-norms-tester"
INITIAL_GITATTRIBUTES = (
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
)
_SHA_RE = re.compile(r"[0-9a-f]{40}")
_SHORT_SHA_RE = re.compile(r"[0-9a-f]{7,39}")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
FORBIDDEN_FOLDERS = (".git", ".cache")  # huggingface_hub refuses to commit into these


class HubError(Exception):
    """An error answered to the client as JSON, with the `X-Error-Code` header `huggingface_hub` dispatches on."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class RepoRef(NamedTuple):
    """A repository address: its type (`model`, `dataset`, `space`), namespace and name."""

    type: str
    namespace: str
    name: str

    @property
    def id(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    @property
    def web_path(self) -> str:
        """Path of the repo's pages: `ns/name`, `datasets/ns/name`, `spaces/ns/name`."""
        return self.id if self.type == "model" else f"{self.type}s/{self.id}"


@dataclass(frozen=True)
class FileAdd:
    """A commit operation adding or overwriting `path` with `content`."""

    path: str
    content: bytes


@dataclass(frozen=True)
class FileDelete:
    """A commit operation deleting the file `path`, or every file under it when `folder` is true."""

    path: str
    folder: bool = False


CommitOp = FileAdd | FileDelete


def now() -> str:
    """The current UTC time in the Hub's format, e.g. `2024-05-01T12:00:00.123Z`."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a blob with `content` (what the Hub reports as `oid`/`ETag` for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_json(path: Path, obj: Any) -> None:
    _atomic_write(path, json.dumps(obj, indent=1, sort_keys=True).encode())


def _read_json(path: Path) -> Any:
    return json.loads(path.read_bytes())


def check_text(value: str, what: str) -> str:
    """Refuse control characters (CR, LF, NUL, ...) in `value`, so that none can reach a header, a log line or a file
    name; returns `value`."""
    if CONTROL_CHARACTERS.search(value):
        raise HubError(400, f"Invalid {what}: control characters are not allowed: {value!r}", "BadRequest")
    return value


def check_repo_path(path: Any) -> str:
    """Validate a file path inside a repo as huggingface_hub does before it uploads: a relative POSIX path with no
    empty, `.` or `..` segment, no backslash, no control character and no `.git`/`.cache` folder; returns it."""
    if not isinstance(path, str):
        raise HubError(400, f"Invalid path in repo: {path!r} is not a string", "BadRequest")
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or CONTROL_CHARACTERS.search(path)
        or any(p in ("", ".", "..", *FORBIDDEN_FOLDERS) for p in parts)
    ):
        raise HubError(400, f"Invalid path in repo: {path!r}", "BadRequest")
    return path


def check_name(value: Any, what: str) -> str:
    """Validate a namespace, repo, branch or tag name (letters, digits, `.`, `_`, `-`, no `..`); returns it."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value) or ".." in value:
        raise HubError(400, f"Invalid {what}: {value!r}", "BadRequest")
    return value


def load_json_object(data: bytes, what: str) -> dict[str, Any]:
    """`data` parsed as a JSON object; 400 (naming `what`) when it is not JSON or not an object (a list, a number)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise HubError(400, f"{what} is not valid JSON: {err}", "BadRequest") from None
    if not isinstance(value, dict):
        raise HubError(400, f"{what} must be a JSON object, not {type(value).__name__}", "BadRequest")
    return value


def repo_ref(type_plural: str, namespace: str, name: str) -> RepoRef:
    """A validated `RepoRef` from URL parts (`models`/`datasets`/`spaces`, or `""` for a model)."""
    repo_type = type_plural.removesuffix("s") if type_plural else "model"
    return RepoRef(repo_type, check_name(namespace, "namespace"), check_name(name, "repo name"))


def repo_not_found(repo: RepoRef) -> HubError:
    return HubError(404, f"Repository not found: {repo.type} {repo.id}", "RepoNotFound")


class RepoStore:
    """Repositories on disk: blobs, per-commit manifests and refs, with one lock around every write.

    Layout under `root`: `blobs/<oid[:2]>/<oid>`, and for each repo `repos/<type>s/<ns>/<name>/` holding `repo.json`
    (creation metadata), `refs.json` (`{"branches": {name: sha}, "tags": {name: sha}}`) and `commits/<sha>.json`
    (`{id, parents, title, message, date, author, files: {path: {oid, size}}}`; every commit lists its full tree).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    # -- paths and raw reads ------------------------------------------------------------------------------------
    def _repo_dir(self, repo: RepoRef) -> Path:
        return self.root / "repos" / f"{repo.type}s" / repo.namespace / repo.name

    def _blob_path(self, oid: str) -> Path:
        return self.root / "blobs" / oid[:2] / oid

    def meta(self, repo: RepoRef) -> dict[str, Any]:
        """The repo's creation metadata; raises `RepoNotFound`."""
        path = self._repo_dir(repo) / "repo.json"
        if not path.is_file():
            raise repo_not_found(repo)
        return _read_json(path)

    def refs(self, repo: RepoRef) -> dict[str, dict[str, str]]:
        """`{"branches": {...}, "tags": {...}}` mapping ref names to commit shas."""
        self.meta(repo)
        return _read_json(self._repo_dir(repo) / "refs.json")

    def commit_record(self, repo: RepoRef, sha: str) -> dict[str, Any]:
        """The stored manifest of commit `sha`."""
        return _read_json(self._repo_dir(repo) / "commits" / f"{sha}.json")

    def read_blob(self, oid: str) -> bytes:
        """The bytes of the blob with git object id `oid`."""
        return self._blob_path(oid).read_bytes()

    def resolve(self, repo: RepoRef, revision: str) -> str:
        """The commit sha a branch, tag, full or abbreviated (7+ hex digits) commit id points to."""
        refs = self.refs(repo)
        for kind in ("branches", "tags"):
            if revision in refs[kind]:
                return refs[kind][revision]
        commits_dir = self._repo_dir(repo) / "commits"
        if _SHA_RE.fullmatch(revision) and (commits_dir / f"{revision}.json").is_file():
            return revision
        if _SHORT_SHA_RE.fullmatch(revision):
            matches = [p.stem for p in commits_dir.glob(f"{revision}*.json")]
            if len(matches) == 1:
                return matches[0]
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def history(self, repo: RepoRef, sha: str) -> Iterator[dict[str, Any]]:
        """Commit records from `sha` back to the first commit, following first parents."""
        current: str | None = sha
        while current is not None:
            record = self.commit_record(repo, current)
            yield record
            current = record["parents"][0] if record["parents"] else None

    # -- writes -------------------------------------------------------------------------------------------------
    def _put_blob(self, content: bytes) -> str:
        oid = git_blob_sha1(content)
        path = self._blob_path(oid)
        if not path.exists():
            _atomic_write(path, content)
        return oid

    def _write_commit(
        self, repo: RepoRef, parents: list[str], files: dict[str, dict[str, Any]], title: str, message: str, author: str
    ) -> str:
        record = {"parents": parents, "title": title, "message": message, "date": now(), "author": author}
        record["files"] = dict(sorted(files.items()))
        sha = hashlib.sha1(json.dumps({"nonce": uuid.uuid4().hex, **record}, sort_keys=True).encode()).hexdigest()
        _write_json(self._repo_dir(repo) / "commits" / f"{sha}.json", {"id": sha, **record})
        return sha

    def namespace_owner(self, namespace: str) -> str | None:
        """The user who created the first repo in `namespace` (of any type), or None while it has none."""
        first = min(self.root.glob(f"repos/*/{namespace}/*/repo.json"), default=None)
        return None if first is None else _read_json(first)["author"]

    def create_repo(self, repo: RepoRef, *, private: bool, author: str) -> bool:
        """Create `repo` with an initial commit holding `.gitattributes`; False if it already exists. 403 when its
        namespace belongs to another user (checked under the lock, so two users cannot both claim a new namespace)."""
        with self._lock:
            if self.namespace_owner(repo.namespace) not in (None, author):
                raise HubError(403, f"You cannot create repos in {repo.namespace!r}: another user created it")
            repo_dir = self._repo_dir(repo)
            if (repo_dir / "repo.json").is_file():
                return False
            oid = self._put_blob(INITIAL_GITATTRIBUTES)
            files = {".gitattributes": {"oid": oid, "size": len(INITIAL_GITATTRIBUTES)}}
            sha = self._write_commit(repo, [], files, "initial commit", "", author)
            _write_json(repo_dir / "refs.json", {"branches": {DEFAULT_BRANCH: sha}, "tags": {}})
            _write_json(repo_dir / "repo.json", {"private": private, "createdAt": now(), "author": author})
            return True

    def commit(
        self,
        repo: RepoRef,
        branch: str,
        operations: list[CommitOp],
        *,
        title: str,
        message: str,
        author: str,
        parent_commit: str | None = None,
    ) -> str:
        """Apply `operations` on top of the head of `branch`, store the new commit, move the branch; return its sha."""
        with self._lock:
            refs = self.refs(repo)
            if branch not in refs["branches"]:
                self.resolve(repo, branch)  # raises RevisionNotFound for unknown revisions
                raise HubError(400, f"Can only commit to a branch, not to {branch!r}", "BadRequest")
            head = refs["branches"][branch]
            if parent_commit is not None and not head.startswith(parent_commit):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(self.commit_record(repo, head)["files"])
            for op in operations:
                _apply(files, op, self._put_blob)
            sha = self._write_commit(repo, [head], files, title, message, author)
            refs["branches"][branch] = sha
            _write_json(self._repo_dir(repo) / "refs.json", refs)
            return sha

    def create_ref(self, repo: RepoRef, kind: str, name: str, revision: str) -> None:
        """Create branch or tag (`kind` is `branches` or `tags`) `name` at `revision`; 409 if it exists."""
        with self._lock:
            refs = self.refs(repo)
            sha = self.resolve(repo, revision)
            if name in refs[kind]:
                raise HubError(409, f"Reference already exists: {name}")
            refs[kind][name] = sha
            _write_json(self._repo_dir(repo) / "refs.json", refs)


def _apply(files: dict[str, dict[str, Any]], op: CommitOp, put_blob: Callable[[bytes], str]) -> None:
    """Apply one commit operation to a `{path: {oid, size}}` tree in place."""
    if isinstance(op, FileAdd):
        files[op.path] = {"oid": put_blob(op.content), "size": len(op.content)}
        return
    doomed = [p for p in files if p.startswith(op.path + "/")] if op.folder else [op.path]
    if not doomed or any(p not in files for p in doomed):
        raise HubError(404, f"A file with this name doesn't exist: {op.path}", "EntryNotFound")
    for path in doomed:
        del files[path]


def parse_commit_payload(body: bytes) -> tuple[dict[str, Any], list[CommitOp]]:
    """Parse the ndjson body of `POST .../commit/{rev}` into its header value and operations; 400 for any line that is
    not a JSON object `{"key": ..., "value": {...}}` with the fields its key needs."""
    header: dict[str, Any] = {}
    operations: list[CommitOp] = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        item = load_json_object(line, f"Commit line {number}")
        key, value = item.get("key"), item.get("value")
        if not isinstance(value, dict):
            raise HubError(400, f"Commit line {number} needs an object 'value'", "BadRequest")
        if key == "header":
            header = _commit_header(value, number)
        elif key == "file":
            path = check_repo_path(value.get("path"))
            operations.append(FileAdd(path, _decode_content(value, path, number)))
        elif key in ("deletedFile", "deletedFolder"):
            path = value.get("path")
            path = check_repo_path(path.rstrip("/") if isinstance(path, str) else path)
            operations.append(FileDelete(path, folder=key == "deletedFolder"))
        elif key == "lfsFile":
            raise HubError(400, "This hub stores every file inline: LFS uploads are not supported", "BadRequest")
        else:
            raise HubError(400, f"Unknown commit operation on line {number}: {key!r}", "BadRequest")
    if not header:
        raise HubError(400, "The commit needs a header with a summary", "BadRequest")
    return header, operations


def _commit_header(value: dict[str, Any], number: int) -> dict[str, Any]:
    """The commit header: a non-empty string `summary`, and `description`/`parentCommit` strings when present."""
    if not isinstance(value.get("summary"), str) or not value["summary"]:
        raise HubError(400, f"The commit header (line {number}) needs a non-empty string 'summary'", "BadRequest")
    for name in ("description", "parentCommit"):
        if value.get(name) is not None and not isinstance(value[name], str):
            raise HubError(400, f"The commit header's {name!r} (line {number}) must be a string", "BadRequest")
    return value


def _decode_content(value: dict[str, Any], path: str, number: int) -> bytes:
    """The bytes of a `file` line: its `content` in strict base64 (any other character, or bad padding, is a 400)."""
    if value.get("encoding", "base64") != "base64":
        raise HubError(400, f"Unsupported encoding {value['encoding']!r} for {path!r}: send base64", "BadRequest")
    content = value.get("content")
    if not isinstance(content, str):
        raise HubError(400, f"The content of {path!r} (line {number}) must be a base64 string", "BadRequest")
    try:
        return base64.b64decode(content, validate=True)
    except ValueError as err:  # binascii.Error is a ValueError
        raise HubError(
            400, f"The content of {path!r} (line {number}) is not valid base64: {err}", "BadRequest"
        ) from None


def tree_entries(files: dict[str, dict[str, Any]], prefix: str, recursive: bool) -> list[dict[str, Any]]:
    """Tree listing under folder `prefix` (`""` for the root): files, and folders with a content-derived oid."""
    base = f"{prefix}/" if prefix else ""
    folders: dict[str, list[str]] = {}
    entries: list[dict[str, Any]] = []
    for path, info in sorted(files.items()):
        if not path.startswith(base):
            continue
        rest = path[len(base) :].split("/")
        for depth in range(1, len(rest) if recursive else min(2, len(rest))):
            folders.setdefault(base + "/".join(rest[:depth]), []).append(f"{path}:{info['oid']}")
        if recursive or len(rest) == 1:
            entries.append({"type": "file", "oid": info["oid"], "size": info["size"], "path": path})
    for folder, members in folders.items():
        oid = hashlib.sha1("\n".join(members).encode()).hexdigest()
        entries.append({"type": "directory", "oid": oid, "size": 0, "path": folder})
    return sorted(entries, key=lambda e: e["path"])


def path_entry(files: dict[str, dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The tree entry of one path (file or folder), or None when nothing is there."""
    if path in files:
        return {"type": "file", "oid": files[path]["oid"], "size": files[path]["size"], "path": path}
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    return next((e for e in tree_entries(files, parent, False) if e["path"] == path), None)
