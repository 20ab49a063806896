"""A Hugging Face Hub-compatible HTTP server for 127.0.0.1, standard library only.

It implements the part of the Hub API that `huggingface_hub` and `transformers` call to create repos, commit files
and read them back, so uploads and `from_pretrained("org/name")` can be exercised without a network:

- write: `POST /api/repos/create`, `POST /api/validate-yaml`, `POST /api/{type}s/{id}/preupload/{rev}`,
  `POST /api/{type}s/{id}/commit/{rev}` (ndjson), `POST /api/{type}s/{id}/branch/{branch}`,
  `POST /api/{type}s/{id}/tag/{rev}`;
- read: `GET /api/whoami-v2`, `GET /api/agent-harnesses` (an empty registry),
  `GET /api/{type}s/{id}[/revision/{rev}]`, `GET /api/{type}s/{id}/tree/{rev}[/{path}]`,
  `POST /api/{type}s/{id}/paths-info/{rev}`, `GET /api/{type}s/{id}/refs`, `GET /api/{type}s/{id}/commits/{rev}`,
  `HEAD`/`GET /[{type}s/]{id}/resolve/{rev}/{path}`.

Every file is a regular (non-LFS) git blob: the preupload answer is always `uploadMode: "regular"`, so file bytes
arrive base64-encoded inside the commit. Storage is a folder of content-addressed blobs (keyed by their git blob
sha1), one JSON manifest per commit and one JSON file of refs per repo, each written to a temporary file and moved
into place, refs last: a crash mid-commit leaves the previous state intact.

Usage::

    with HubServer(tokens=["test-token"]) as hub:
        env = {**os.environ, **hub.client_env("test-token")}  # HF_ENDPOINT must be set before huggingface_hub loads
        subprocess.run([sys.executable, "-c", code], env=env, check=True)

or standalone: `python -m hf_norms.hub_server --root DIR --port 8000 --token test-token`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

logger = logging.getLogger(__name__)

__all__ = ["HubError", "HubServer", "add_cli_command"]

REPO_TYPES = ("model", "dataset", "space")
DEFAULT_BRANCH = "main"
DEFAULT_USER = "hf-norms-tester"
INITIAL_GITATTRIBUTES = (
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
)
_SHA_RE = re.compile(r"[0-9a-f]{40}")
_SHORT_SHA_RE = re.compile(r"[0-9a-f]{7,39}")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


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


def _now() -> str:
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


def _check_repo_path(path: str) -> str:
    """Validate a file path inside a repo (relative, POSIX, no `..`) and return it."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise HubError(400, f"Invalid path in repo: {path!r}", "BadRequest")
    return path


def _check_name(value: str, what: str) -> str:
    if not _NAME_RE.fullmatch(value) or ".." in value:
        raise HubError(400, f"Invalid {what}: {value!r}", "BadRequest")
    return value


def _repo_ref(type_plural: str, namespace: str, name: str) -> RepoRef:
    """A validated `RepoRef` from URL parts (`models`/`datasets`/`spaces`, or `""` for a model)."""
    repo_type = type_plural.removesuffix("s") if type_plural else "model"
    return RepoRef(repo_type, _check_name(namespace, "namespace"), _check_name(name, "repo name"))


def _repo_not_found(repo: RepoRef) -> HubError:
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
            raise _repo_not_found(repo)
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
        record = {"parents": parents, "title": title, "message": message, "date": _now(), "author": author}
        record["files"] = dict(sorted(files.items()))
        sha = hashlib.sha1(json.dumps({"nonce": uuid.uuid4().hex, **record}, sort_keys=True).encode()).hexdigest()
        _write_json(self._repo_dir(repo) / "commits" / f"{sha}.json", {"id": sha, **record})
        return sha

    def create_repo(self, repo: RepoRef, *, private: bool, author: str) -> bool:
        """Create `repo` with an initial commit holding `.gitattributes`; False if it already exists."""
        with self._lock:
            repo_dir = self._repo_dir(repo)
            if (repo_dir / "repo.json").is_file():
                return False
            oid = self._put_blob(INITIAL_GITATTRIBUTES)
            files = {".gitattributes": {"oid": oid, "size": len(INITIAL_GITATTRIBUTES)}}
            sha = self._write_commit(repo, [], files, "initial commit", "", author)
            _write_json(repo_dir / "refs.json", {"branches": {DEFAULT_BRANCH: sha}, "tags": {}})
            _write_json(repo_dir / "repo.json", {"private": private, "createdAt": _now(), "author": author})
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
    """Parse the ndjson body of `POST .../commit/{rev}` into its header value and operations."""
    header: dict[str, Any] = {}
    operations: list[CommitOp] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        key, value = item.get("key"), item.get("value", {})
        if key == "header":
            header = value
        elif key == "file":
            operations.append(FileAdd(_check_repo_path(value["path"]), _decode_content(value)))
        elif key in ("deletedFile", "deletedFolder"):
            operations.append(FileDelete(_check_repo_path(value["path"].rstrip("/")), folder=key == "deletedFolder"))
        elif key == "lfsFile":
            raise HubError(400, "This hub stores every file inline: LFS uploads are not supported", "BadRequest")
        else:
            raise HubError(400, f"Unknown commit operation: {key!r}", "BadRequest")
    if not header.get("summary"):
        raise HubError(400, "The commit needs a header with a summary", "BadRequest")
    return header, operations


def _decode_content(value: dict[str, Any]) -> bytes:
    if value.get("encoding", "base64") == "base64":
        return base64.b64decode(value["content"])
    return str(value["content"]).encode()


def _tree_entries(files: dict[str, dict[str, Any]], prefix: str, recursive: bool) -> list[dict[str, Any]]:
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


def _path_entry(files: dict[str, dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The tree entry of one path (file or folder), or None when nothing is there."""
    if path in files:
        return {"type": "file", "oid": files[path]["oid"], "size": files[path]["size"], "path": path}
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    return next((e for e in _tree_entries(files, parent, False) if e["path"] == path), None)


# ---------------------------------------------------------------------------------------------------------------------
# HTTP layer
# ---------------------------------------------------------------------------------------------------------------------
_REPO_API = r"/api/(?P<repo_type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern), handler)
    for method, pattern, handler in [
        ("GET", r"/api/whoami-v2", "whoami"),
        ("GET", r"/api/agent-harnesses", "agent_harnesses"),
        ("POST", r"/api/repos/create", "create_repo"),
        ("POST", r"/api/validate-yaml", "validate_yaml"),
        ("GET", _REPO_API, "repo_info"),
        ("GET", _REPO_API + r"/revision/(?P<rev>[^/]+)", "repo_info"),
        ("GET", _REPO_API + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", "tree"),
        ("POST", _REPO_API + r"/paths-info/(?P<rev>[^/]+)", "paths_info"),
        ("GET", _REPO_API + r"/refs", "list_refs"),
        ("GET", _REPO_API + r"/commits/(?P<rev>[^/]+)", "list_commits"),
        ("POST", _REPO_API + r"/preupload/(?P<rev>[^/]+)", "preupload"),
        ("POST", _REPO_API + r"/commit/(?P<rev>[^/]+)", "commit"),
        ("POST", _REPO_API + r"/branch/(?P<rev>[^/]+)", "create_branch"),
        ("POST", _REPO_API + r"/tag/(?P<rev>[^/]+)", "create_tag"),
        (
            "GET",
            r"/(?:(?P<repo_type>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)",
            "resolve",
        ),
    ]
]


def _route(method: str, path: str) -> tuple[str, dict[str, str]]:
    """The endpoint name and the URL-decoded path parameters of a request; 404 when no endpoint matches."""
    for route_method, pattern, name in _ROUTES:
        match = pattern.fullmatch(path)
        allowed = (route_method, "HEAD") if route_method == "GET" else (route_method,)
        if match and method in allowed:
            return name, {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
    logger.warning("Hub server has no endpoint for %s %s", method, path)
    raise HubError(404, f"No such endpoint: {method} {path}")


@dataclass
class _Failure:
    """An injected failure: the next `count` requests whose path starts with `prefix` get `status`."""

    prefix: str
    status: int
    count: int
    method: str | None


class _Handler(BaseHTTPRequestHandler):
    """One request: route it, run it against the server's store, answer JSON or bytes."""

    server: _HTTPServer
    query: dict[str, list[str]]
    body: bytes
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds an idle keep-alive connection is kept open

    # -- plumbing -----------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:
        """Route access logs to `logging` at debug level (request line and status only, never headers)."""
        logger.debug("%s " + format, self.address_string(), *args)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        self.body = self._read_body()
        try:
            injected = self.server.hub.take_failure(method, url.path)
            if injected is not None:
                raise HubError(injected, f"Injected failure ({injected}) for {url.path}")
            name, params = _route(method, url.path)
            getattr(self, f"_api_{name}")(**params)
        except HubError as err:
            self._send_error(err)
        except (ValueError, KeyError, TypeError) as err:
            self._send_error(HubError(400, f"Bad request: {type(err).__name__}: {err}", "BadRequest"))
        except Exception:
            logger.exception("Hub server error on %s %s", method, url.path)
            self._send_error(HubError(500, "Internal server error"))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, up to the blank line
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Request-Id", uuid.uuid4().hex)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json; charset=utf-8", headers)

    def _send_error(self, err: HubError, headers: dict[str, str] | None = None) -> None:
        extra = {"X-Error-Message": err.message.encode("ascii", "backslashreplace").decode(), **(headers or {})}
        if err.code:
            extra["X-Error-Code"] = err.code
        self._send_json({"error": err.message}, err.status, extra)

    def _json_body(self) -> dict[str, Any]:
        return json.loads(self.body or b"{}")

    def _base_url(self) -> str:
        return f"http://{self.headers.get('Host') or self.server.hub.url.removeprefix('http://')}"

    # -- auth ---------------------------------------------------------------------------------------------------
    def _token(self) -> str | None:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return token.strip()

    def _require_write(self) -> str:
        """The user name of a valid token; 401 otherwise (the token itself never appears in the answer)."""
        token = self._token()
        if token is None:
            raise HubError(401, "Authentication required: send 'Authorization: Bearer <token>'")
        if not self.server.hub.accepts(token):
            raise HubError(401, "Invalid credentials in Authorization header")
        return self.server.hub.user

    def _readable_repo(self, repo_type: str, ns: str, name: str) -> RepoRef:
        """The repo, if it exists and the caller may read it (private repos need a valid token)."""
        repo = _repo_ref(repo_type, ns, name)
        if self.server.hub.store.meta(repo)["private"]:
            token = self._token()
            if token is None or not self.server.hub.accepts(token):
                raise _repo_not_found(repo)
        return repo

    def _writable_repo(self, repo_type: str, ns: str, name: str) -> tuple[RepoRef, str]:
        user = self._require_write()
        repo = _repo_ref(repo_type, ns, name)
        self.server.hub.store.meta(repo)
        return repo, user

    # -- endpoints ----------------------------------------------------------------------------------------------
    def _api_whoami(self) -> None:
        user = self._require_write()
        self._send_json(
            {
                "type": "user",
                "id": hashlib.sha1(user.encode()).hexdigest()[:24],
                "name": user,
                "fullname": user,
                "email": None,
                "emailVerified": False,
                "canPay": False,
                "isPro": False,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "loopback", "role": "write"}},
            }
        )

    def _api_create_repo(self) -> None:
        user = self._require_write()
        payload = self._json_body()
        repo_type = payload.get("type") or "model"
        if repo_type not in REPO_TYPES:
            raise HubError(400, f"Unsupported repo type: {repo_type!r}", "BadRequest")
        namespace = _check_name(payload.get("organization") or user, "namespace")
        repo = RepoRef(repo_type, namespace, _check_name(payload["name"], "repo name"))
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        url = f"{self._base_url()}/{repo.web_path}"
        if not self.server.hub.store.create_repo(repo, private=private, author=user):
            self._send_json({"error": f"You already created this {repo_type} repo", "url": url}, 409)
            return
        self._send_json({"url": url, "name": repo.id, "id": repo.id}, 200)

    def _api_agent_harnesses(self) -> None:
        """huggingface_hub fetches this registry once a day to tag requests; a local hub has no harnesses to list."""
        self._send_json({"standardEnvVars": [], "harnesses": {}})

    def _api_validate_yaml(self) -> None:
        self._send_json({"errors": [], "warnings": []})

    def _api_repo_info(self, repo_type: str, ns: str, name: str, rev: str = DEFAULT_BRANCH) -> None:
        repo = self._readable_repo(repo_type, ns, name)
        store = self.server.hub.store
        sha = store.resolve(repo, rev)
        record = store.commit_record(repo, sha)
        meta = store.meta(repo)
        with_blobs = self.query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = [
            {"rfilename": path, **({"size": f["size"], "blobId": f["oid"]} if with_blobs else {})}
            for path, f in record["files"].items()
        ]
        info = {
            "_id": hashlib.sha1(repo.web_path.encode()).hexdigest()[:24],
            "id": repo.id,
            "author": repo.namespace,
            "sha": sha,
            "lastModified": record["date"],
            "createdAt": meta["createdAt"],
            "private": meta["private"],
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
        }
        if repo.type == "model":
            info["modelId"] = repo.id
        self._send_json(info)

    def _api_tree(self, repo_type: str, ns: str, name: str, rev: str, path: str = "") -> None:
        repo = self._readable_repo(repo_type, ns, name)
        store = self.server.hub.store
        sha = store.resolve(repo, rev)
        files = store.commit_record(repo, sha)["files"]
        prefix = path.strip("/")
        recursive = self.query.get("recursive", ["false"])[0].lower() in ("1", "true")
        entries = _tree_entries(files, prefix, recursive)
        if prefix and not entries:
            raise HubError(404, f"Folder not found: {prefix}", "EntryNotFound")
        self._send_json(entries, headers={"X-Repo-Commit": sha})

    def _api_paths_info(self, repo_type: str, ns: str, name: str, rev: str) -> None:
        repo = self._readable_repo(repo_type, ns, name)
        store = self.server.hub.store
        files = store.commit_record(repo, store.resolve(repo, rev))["files"]
        if "json" in (self.headers.get("Content-Type") or ""):
            paths = self._json_body().get("paths", [])
        else:
            paths = parse_qs(self.body.decode()).get("paths", [])
        entries = [_path_entry(files, p.strip("/")) for p in paths]
        self._send_json([e for e in entries if e is not None])

    def _api_list_refs(self, repo_type: str, ns: str, name: str) -> None:
        repo = self._readable_repo(repo_type, ns, name)
        refs = self.server.hub.store.refs(repo)

        def listing(kind: str, prefix: str) -> list[dict[str, str]]:
            return [{"name": n, "ref": f"{prefix}{n}", "targetCommit": s} for n, s in sorted(refs[kind].items())]

        self._send_json(
            {
                "branches": listing("branches", "refs/heads/"),
                "tags": listing("tags", "refs/tags/"),
                "converts": [],
                "pullRequests": [],
            }
        )

    def _api_list_commits(self, repo_type: str, ns: str, name: str, rev: str) -> None:
        repo = self._readable_repo(repo_type, ns, name)
        store = self.server.hub.store
        commits = [
            {
                "id": c["id"],
                "title": c["title"],
                "message": c["message"],
                "date": c["date"],
                "authors": [{"user": c["author"]}],
            }
            for c in store.history(repo, store.resolve(repo, rev))
        ]
        self._send_json(commits)

    def _api_preupload(self, repo_type: str, ns: str, name: str, rev: str) -> None:
        repo, _ = self._writable_repo(repo_type, ns, name)
        store = self.server.hub.store
        sha = store.resolve(repo, rev)
        files = store.commit_record(repo, sha)["files"]
        answer = [
            {
                "path": f["path"],
                "uploadMode": "regular",
                "shouldIgnore": False,
                "oid": files.get(f["path"], {}).get("oid"),
            }
            for f in self._json_body()["files"]
        ]
        self._send_json({"files": answer, "commitOid": sha})

    def _api_commit(self, repo_type: str, ns: str, name: str, rev: str) -> None:
        repo, user = self._writable_repo(repo_type, ns, name)
        if self.query.get("create_pr", ["0"])[0] not in ("0", "false"):
            raise HubError(400, "Pull requests are not supported by this hub", "BadRequest")
        header, operations = parse_commit_payload(self.body)
        sha = self.server.hub.store.commit(
            repo,
            rev,
            operations,
            title=header["summary"],
            message=header.get("description") or "",
            author=user,
            parent_commit=header.get("parentCommit"),
        )
        self._send_json(
            {
                "success": True,
                "commitOid": sha,
                "commitUrl": f"{self._base_url()}/{repo.web_path}/commit/{sha}",
                "commitMessage": header["summary"],
                "hookOutput": "",
                "pullRequestUrl": None,
            }
        )

    def _api_create_branch(self, repo_type: str, ns: str, name: str, rev: str) -> None:
        repo, _ = self._writable_repo(repo_type, ns, name)
        start = self._json_body().get("startingPoint") or DEFAULT_BRANCH
        self.server.hub.store.create_ref(repo, "branches", _check_name(rev, "branch name"), start)
        self._send_json({})

    def _api_create_tag(self, repo_type: str, ns: str, name: str, rev: str) -> None:
        repo, _ = self._writable_repo(repo_type, ns, name)
        tag = _check_name(self._json_body()["tag"], "tag name")
        self.server.hub.store.create_ref(repo, "tags", tag, rev)
        self._send_json({})

    def _api_resolve(self, ns: str, name: str, rev: str, path: str, repo_type: str = "") -> None:
        repo = self._readable_repo(repo_type, ns, name)
        store = self.server.hub.store
        sha = store.resolve(repo, rev)
        info = store.commit_record(repo, sha)["files"].get(path)
        if info is None:
            self._send_error(HubError(404, f"Entry not found: {path}", "EntryNotFound"), {"X-Repo-Commit": sha})
            return
        headers = {"X-Repo-Commit": sha, "ETag": f'"{info["oid"]}"', "Accept-Ranges": "bytes"}
        if self.command == "HEAD":
            self._send_head(info["size"], headers)
            return
        content = store.read_blob(info["oid"])
        span = _parse_range(self.headers.get("Range"), info["size"])
        if span is None:
            self._send(200, content, "application/octet-stream", headers)
            return
        start, end = span
        headers["Content-Range"] = f"bytes {start}-{end}/{info['size']}"
        self._send(206, content[start : end + 1], "application/octet-stream", headers)

    def _send_head(self, size: int, headers: dict[str, str]) -> None:
        """The headers a GET of the whole file would get (its real Content-Length), without a body."""
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte span of a single `Range: bytes=a-b` header, or None to send the whole file."""
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header or "")
    if match is None or not any(match.groups()) or size == 0:
        return None
    first, last = match.groups()
    if not first:
        return max(0, size - int(last)), size - 1
    start = int(first)
    if start >= size:
        raise HubError(416, f"Range not satisfiable: {header}")
    return start, min(size - 1, int(last)) if last else size - 1


class _HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its `HubServer` and can cut its open keep-alive connections."""

    def __init__(self, address: tuple[str, int], hub: HubServer) -> None:
        self.hub = hub
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self._connections_lock:
            self._connections.add(sock)
        return sock, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Shut down every open client connection, so handler threads end and clients see the server gone."""
        with self._connections_lock:
            connections = list(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class HubServer:
    """A Hub-compatible server on 127.0.0.1 for tests and demos.

    Args:
        root: folder holding the repos; a temporary folder (removed by `stop()`) when None.
        tokens: bearer tokens accepted for writes, `whoami` and private reads. None accepts any non-empty token.
        port: port to bind; 0 picks a free one.
        user: the user name every accepted token authenticates as (the default namespace of `create_repo`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        tokens: Iterable[str] | None = None,
        port: int = 0,
        user: str = DEFAULT_USER,
    ) -> None:
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="hf-norms-hub-") if root is None else root)
        self.store = RepoStore(self.root)
        self.user = user
        self._tokens = None if tokens is None else frozenset(tokens)
        self._port = port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._failures: list[_Failure] = []
        self._failures_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> HubServer:
        """Bind 127.0.0.1 and serve in a background thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("HubServer is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        self._httpd = _HTTPServer(("127.0.0.1", self._port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hf-norms-hub", daemon=True
        )
        self._thread.start()
        logger.info("Hub server listening on %s (root %s)", self.url, self.root)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; removes the root folder if the server created it."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd.close_connections()
            if self._thread is not None:
                self._thread.join()
            self._httpd = self._thread = None
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`, the value for `HF_ENDPOINT` or `HfApi(endpoint=...)`."""
        if self._httpd is None:
            raise RuntimeError("HubServer is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def client_env(self, token: str | None = None) -> dict[str, str]:
        """Environment variables pointing `huggingface_hub`/`transformers` at this server (merge into os.environ)."""
        env = {
            "HF_ENDPOINT": self.url,
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    # -- auth and failure injection -----------------------------------------------------------------------------
    def accepts(self, token: str) -> bool:
        """Whether `token` authenticates (any non-empty token when the server was given no token set)."""
        return bool(token) and (self._tokens is None or token in self._tokens)

    def fail_next(self, path_prefix: str, *, status: int = 500, count: int = 1, method: str | None = None) -> None:
        """Answer `status` (with a JSON error) to the next `count` requests whose path starts with `path_prefix`.

        Example: `hub.fail_next("/api/models/org/name/commit/")` makes the next commit to `org/name` fail with a 500.
        The request body is read and discarded, so nothing is stored.
        """
        with self._failures_lock:
            self._failures.append(_Failure(path_prefix, status, count, method.upper() if method else None))

    def take_failure(self, method: str, path: str) -> int | None:
        """Consume one matching injected failure and return its status, or None."""
        with self._failures_lock:
            for failure in self._failures:
                if path.startswith(failure.prefix) and failure.method in (None, method):
                    failure.count -= 1
                    if failure.count <= 0:
                        self._failures.remove(failure)
                    return failure.status
        return None


def add_cli_command(subparsers: argparse._SubParsersAction) -> None:
    """`hf-norms hub --root DIR [--port N] [--token T ...]`: serve a standalone hub on 127.0.0.1."""
    parser = subparsers.add_parser("hub", help="serve a Hugging Face Hub-compatible API on 127.0.0.1")
    parser.add_argument("--root", required=True, help="folder holding the repos (created if missing)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--token", action="append", help="accepted bearer token (repeatable; default: any token)")
    parser.add_argument("--user", default=DEFAULT_USER, help="user name the tokens authenticate as")
    parser.set_defaults(run=serve_forever)


def serve_forever(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    hub = HubServer(args.root, tokens=args.token, port=args.port, user=args.user).start()
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
    return 0
