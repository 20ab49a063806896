"""The loopback Hub's storage: repositories on disk as content-addressed blobs and folders (`trees`), commits and
refs.

Every file is a regular (non-LFS) git blob, keyed by its git blob sha1. Each write goes to a temporary file that is
moved into place, refs last, so a crash mid-commit leaves the previous state intact; a refused commit writes nothing.
Names are checked by `payloads` before they reach the store. As on the Hub, namespaces and repo names are one name
whatever their letter case: `ORG/Model` finds `org/model`, and creating or moving a repo to a name that differs from an
existing one only by case is refused. A namespace belongs to the user who created its first repo (recorded under
`namespaces/`, so it stays theirs when its repos are deleted); each repo records that user as its `author`. Standard
library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from ...errors import HubError
from .payloads import CommitOp, bad_request, check_name
from .trees import TreeStore

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
DEFAULT_USER = "hf-norms-tester"
INITIAL_GITATTRIBUTES = (
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
)
_SHA_RE = re.compile(r"[0-9a-f]{40}")
_SHORT_SHA_RE = re.compile(r"[0-9a-f]{7,39}")
_PULL_REQUEST_REF = re.compile(r"refs/pr/([1-9][0-9]{0,8})")


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


def now() -> str:
    """The current UTC time in the Hub's format, e.g. `2024-05-01T12:00:00.123Z`."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a blob with `content` (what the Hub reports as `oid`/`ETag` for non-LFS files)."""
    digest = hashlib.sha1(b"blob %d\0" % len(content))
    digest.update(content)  # not `header + content`: that would copy the content
    return digest.hexdigest()


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


def forbidden(user: str, action: str, owner: str) -> HubError:
    """The 403 of a write `user` may not do: who asked, whose it is, and what to do instead."""
    return HubError(
        403,
        f"{user} cannot {action}: it belongs to {owner}. Use a token of {owner}, or work in your own namespace "
        f"({user}/...) or in a new one",
    )


def repo_ref(type_plural: str, namespace: str, name: str) -> RepoRef:
    """A validated `RepoRef` from URL parts (`models`/`datasets`/`spaces`, or `""` for a model)."""
    repo_type = type_plural.removesuffix("s") if type_plural else "model"
    return RepoRef(repo_type, check_name(namespace, "namespace"), check_name(name, "repo name"))


def repo_not_found(repo: RepoRef) -> HubError:
    return HubError(404, f"Repository not found: {repo.type} {repo.id}", "RepoNotFound")


class RepoStore:
    """Repositories on disk: blobs, folders, commits and refs, with one lock around every write.

    Layout under `root`: `blobs/<oid[:2]>/<oid>`; `trees/<oid[:2]>/<oid>.json` (one folder, `trees.TreeStore`);
    `namespaces/<name in lower case>.json` (`{name, owner}`); and for each repo `repos/<type>s/<ns>/<name>/` holding
    `repo.json` (`{private, createdAt, author}`), `refs.json` (`{"branches": {name: sha}, "tags": {name: sha},
    "pulls": {number: sha}}`) and `commits/<sha>.json` (`{id, parents, title, message, date, author, tree}`, `tree`
    the oid of its root folder; stores written before trees list every file instead, `files: {path: {oid, size}}`).
    Methods that take a `RepoRef` expect the stored spelling that `find` returns.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trees = TreeStore(root, lambda path, data: _atomic_write(path, data))
        self._lock = threading.Lock()

    # -- paths and raw reads ------------------------------------------------------------------------------------
    def _repo_dir(self, repo: RepoRef) -> Path:
        return self.root / "repos" / f"{repo.type}s" / repo.namespace / repo.name

    def blob_path(self, oid: str) -> Path:
        """Where the blob with git object id `oid` is stored."""
        return self.root / "blobs" / oid[:2] / oid

    def find(self, repo: RepoRef) -> RepoRef | None:
        """The stored repo whose namespace and name equal `repo`'s ignoring case, in its stored spelling; or None."""
        if (self._repo_dir(repo) / "repo.json").is_file():
            return repo
        type_dir = self.root / "repos" / f"{repo.type}s"
        for namespace in _folders_named(type_dir, repo.namespace):
            for name in _folders_named(namespace, repo.name):
                if (name / "repo.json").is_file():
                    return RepoRef(repo.type, namespace.name, name.name)
        return None

    def existing(self, repo: RepoRef) -> RepoRef:
        """`find(repo)`, or `RepoNotFound`."""
        found = self.find(repo)
        if found is None:
            raise repo_not_found(repo)
        return found

    def meta(self, repo: RepoRef) -> dict[str, Any]:
        """The repo's metadata (`private`, `createdAt`, `author`); raises `RepoNotFound`."""
        try:
            return _read_json(self._repo_dir(repo) / "repo.json")
        except FileNotFoundError:  # never created, or deleted or moved since it was found
            raise repo_not_found(repo) from None

    def refs(self, repo: RepoRef) -> dict[str, dict[str, str]]:
        """`{"branches": {...}, "tags": {...}, "pulls": {...}}` mapping ref names to commit shas."""
        try:
            refs = _read_json(self._repo_dir(repo) / "refs.json")
        except FileNotFoundError:
            raise repo_not_found(repo) from None
        refs.setdefault("pulls", {})  # stores written before pull requests
        return refs

    def commit_record(self, repo: RepoRef, sha: str) -> dict[str, Any]:
        """The stored manifest of commit `sha`."""
        return _read_json(self._repo_dir(repo) / "commits" / f"{sha}.json")

    def commit_tree(self, repo: RepoRef, sha: str) -> str:
        """The oid of commit `sha`'s root folder (written from its list of files for a commit stored before trees)."""
        record = self.commit_record(repo, sha)
        return record["tree"] if "tree" in record else self.trees.from_files(record["files"])

    def resolve(self, repo: RepoRef, revision: str) -> str:
        """The commit sha a branch, tag, pull request (`refs/pr/N`), full or abbreviated (7+ hex digits) commit id
        points to."""
        refs = self.refs(repo)
        pull_request = _PULL_REQUEST_REF.fullmatch(revision)
        if pull_request and pull_request[1] in refs["pulls"]:
            return refs["pulls"][pull_request[1]]
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

    def repos(self, repo_type: str) -> Iterator[tuple[RepoRef, dict[str, Any]]]:
        """Every repo of `repo_type` with its metadata, sorted by id."""
        for meta_path in sorted(self.root.glob(f"repos/{repo_type}s/*/*/repo.json")):
            yield RepoRef(repo_type, meta_path.parent.parent.name, meta_path.parent.name), _read_json(meta_path)

    def namespace_owner(self, namespace: str) -> tuple[str, str] | None:
        """The stored spelling of `namespace` (any letter case) and the user who owns it, or None while it has no
        repo and never had one."""
        record = self.root / "namespaces" / f"{namespace.lower()}.json"
        if record.is_file():
            claim = _read_json(record)
            return claim["name"], claim["owner"]
        first = min((p for p in self.root.glob("repos/*/*/*/repo.json") if p.parts[-3].lower() == namespace.lower()),
                    default=None)  # fmt: skip
        return None if first is None else (first.parts[-3], _read_json(first)["author"])

    # -- writes -------------------------------------------------------------------------------------------------
    def _put_blob(self, content: bytes, oid: str | None = None) -> str:
        oid = oid or git_blob_sha1(content)
        path = self.blob_path(oid)
        if not path.exists():
            _atomic_write(path, content)
        return oid

    def _write_commit(self, repo: RepoRef, parents: list[str], tree: str, title: str, message: str, author: str) -> str:
        record = {"parents": parents, "title": title, "message": message, "date": now(), "author": author, "tree": tree}
        sha = hashlib.sha1(json.dumps({"nonce": uuid.uuid4().hex, **record}, sort_keys=True).encode()).hexdigest()
        _write_json(self._repo_dir(repo) / "commits" / f"{sha}.json", {"id": sha, **record})
        return sha

    def _claim(self, repo: RepoRef, user: str, action: str) -> tuple[RepoRef, bool]:
        """`repo` in its stored spelling (of the repo if it exists, else of its namespace), and whether it exists;
        its namespace is recorded as `user`'s if nobody owned it. 403 when another user owns the namespace. Call
        under the lock."""
        owned = self.namespace_owner(repo.namespace)
        if owned is not None and owned[1] != user:
            raise forbidden(user, f"{action} in {repo.namespace!r}", owned[1])
        repo = repo._replace(namespace=owned[0] if owned else repo.namespace)
        record = self.root / "namespaces" / f"{repo.namespace.lower()}.json"
        if not record.is_file():
            _write_json(record, {"name": repo.namespace, "owner": user})
        existing = self.find(repo)
        return existing or repo, existing is not None

    def create_repo(self, repo: RepoRef, *, private: bool, author: str) -> tuple[RepoRef, bool]:
        """Create `repo` with an initial commit holding `.gitattributes`. Returns it in its stored spelling, and
        False when it existed already. 403 when its namespace belongs to another user (checked under the lock, so
        two users cannot both claim a new namespace)."""
        with self._lock:
            repo, exists = self._claim(repo, author, "create repos")
            if exists:
                return repo, False
            repo_dir = self._repo_dir(repo)
            oid = self._put_blob(INITIAL_GITATTRIBUTES)
            tree = self.trees.write({".gitattributes": ["file", oid, len(INITIAL_GITATTRIBUTES)]})
            sha = self._write_commit(repo, [], tree, "initial commit", "", author)
            _write_json(repo_dir / "refs.json", {"branches": {DEFAULT_BRANCH: sha}, "tags": {}, "pulls": {}})
            _write_json(repo_dir / "repo.json", {"private": private, "createdAt": now(), "author": author})
            return repo, True

    def delete_repo(self, repo: RepoRef) -> None:
        """Remove `repo`, its refs and commits (its blobs stay: other repos may hold the same bytes)."""
        with self._lock:
            self.meta(repo)
            trash = self.root / "trash" / uuid.uuid4().hex
            trash.parent.mkdir(exist_ok=True)
            os.replace(self._repo_dir(repo), trash)  # one step: the repo is there, or gone
            shutil.rmtree(trash, ignore_errors=True)

    def move_repo(self, repo: RepoRef, target: RepoRef, user: str) -> RepoRef:
        """Move `repo` to `target` (same type); returns the target in its stored spelling. 403 when the target's
        namespace belongs to another user, 409 when a repo of that name exists."""
        with self._lock:
            self.meta(repo)
            target, exists = self._claim(target, user, "move repos")
            if exists:
                raise HubError(409, f"A {target.type} repo named {target.id} exists already")
            target_dir = self._repo_dir(target)
            target_dir.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._repo_dir(repo), target_dir)
            return target

    def set_private(self, repo: RepoRef, private: bool) -> None:
        with self._lock:
            _write_json(self._repo_dir(repo) / "repo.json", {**self.meta(repo), "private": private})

    def commit(
        self,
        repo: RepoRef,
        revision: str,
        operations: list[CommitOp],
        *,
        title: str,
        message: str,
        author: str,
        parent_commit: str | None = None,
        create_pr: bool = False,
    ) -> tuple[str, int | None]:
        """Apply `operations` on top of the head of branch or pull request `revision` and store the new commit; move
        that ref to it, or with `create_pr` open a pull request `refs/pr/N` at it instead (from `parent_commit` when
        given). Returns the commit's sha and the new pull request's number (None without `create_pr`)."""
        with self._lock:
            refs = self.refs(repo)
            kind, name = self._commit_target(repo, refs, revision)
            head = refs[kind][name]
            if parent_commit is not None and create_pr:
                head = self.resolve(repo, parent_commit)
            elif parent_commit is not None and not head.startswith(parent_commit):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            blobs: dict[str, bytes] = {}
            tree = self.trees.apply(self.commit_tree(repo, head), operations, blobs, git_blob_sha1)
            for oid, content in blobs.items():
                self._put_blob(content, oid)
            sha = self._write_commit(repo, [head], tree, title, message, author)
            if create_pr:
                kind, name = "pulls", str(1 + max(map(int, refs["pulls"]), default=0))
            refs[kind][name] = sha
            _write_json(self._repo_dir(repo) / "refs.json", refs)
            return sha, int(name) if kind == "pulls" else None

    def _commit_target(self, repo: RepoRef, refs: dict[str, dict[str, str]], revision: str) -> tuple[str, str]:
        """The ref a commit to `revision` moves: `("branches", name)` or `("pulls", number)`."""
        if revision in refs["branches"]:
            return "branches", revision
        pull_request = _PULL_REQUEST_REF.fullmatch(revision)
        if pull_request and pull_request[1] in refs["pulls"]:
            return "pulls", pull_request[1]
        self.resolve(repo, revision)  # raises RevisionNotFound for unknown revisions
        raise bad_request(f"Can only commit to a branch or a pull request, not to {revision!r}")

    def create_ref(self, repo: RepoRef, kind: str, name: str, revision: str) -> None:
        """Create branch or tag (`kind` is `branches` or `tags`) `name` at `revision`; 409 if it exists."""
        with self._lock:
            refs = self.refs(repo)
            sha = self.resolve(repo, revision)
            if name in refs[kind]:
                raise HubError(409, f"Reference already exists: {name}")
            refs[kind][name] = sha
            _write_json(self._repo_dir(repo) / "refs.json", refs)

    def delete_ref(self, repo: RepoRef, kind: str, name: str) -> None:
        """Delete branch or tag `name`; 404 if there is none, 400 for the default branch."""
        with self._lock:
            refs = self.refs(repo)
            if kind == "branches" and name == DEFAULT_BRANCH:
                raise bad_request(f"The default branch {DEFAULT_BRANCH!r} cannot be deleted")
            if name not in refs[kind]:
                raise HubError(404, f"Reference not found: {name}", "RevisionNotFound")
            del refs[kind][name]
            _write_json(self._repo_dir(repo) / "refs.json", refs)


def _folders_named(parent: Path, name: str) -> list[Path]:
    """The folders in `parent` whose name is `name` in any letter case."""
    try:
        return [child for child in parent.iterdir() if child.name.lower() == name.lower() and child.is_dir()]
    except FileNotFoundError:
        return []
