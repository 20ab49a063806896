"""The loopback Hub's endpoints: which URL runs which function, and what each answers.

Each endpoint takes a parsed `Request` (method, URL path parameters, query, headers, body and the server it came to)
and returns a `Response`; `http.py` turns HTTP into one and the other back into HTTP. The API is the part of the Hub's
that `huggingface_hub` and `transformers` call:

- write: `POST /api/repos/create`, `POST /api/validate-yaml`, `POST /api/{type}s/{id}/preupload/{rev}`,
  `POST /api/{type}s/{id}/commit/{rev}` (ndjson), `POST /api/{type}s/{id}/branch/{branch}`,
  `POST /api/{type}s/{id}/tag/{rev}`;
- read: `GET /api/whoami-v2`, `GET /api/agent-harnesses` (an empty registry),
  `GET /api/{type}s/{id}[/revision/{rev}]`, `GET /api/{type}s/{id}/tree/{rev}[/{path}]`,
  `POST /api/{type}s/{id}/paths-info/{rev}`, `GET /api/{type}s/{id}/refs`, `GET /api/{type}s/{id}/commits/{rev}`,
  `HEAD`/`GET /[{type}s/]{id}/resolve/{rev}/{path}`.

Preupload always answers `uploadMode: "regular"`, so file bytes arrive base64-encoded inside the commit.

Who may do what (the token's user comes from `HubServer.user_for`): reading a public repo needs no token; a private
repo exists only for its owner (anyone else gets 404, as on the Hub); writing (commit, branch, tag) needs the owner's
token (401 without a valid token, 403 for another user's repo); `create_repo` works in the caller's own namespace and in
any namespace that has no repo yet, which the caller then owns, like an organisation it created (403 elsewhere).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

from .store import (
    DEFAULT_BRANCH,
    REPO_TYPES,
    HubError,
    RepoRef,
    check_name,
    load_json_object,
    parse_commit_payload,
    path_entry,
    repo_not_found,
    repo_ref,
    tree_entries,
)

if TYPE_CHECKING:
    from .http import HubServer

logger = logging.getLogger(__name__)


@dataclass
class Request:
    """One request, parsed: `params` are the URL-decoded path parameters of its route."""

    method: str
    params: dict[str, str]
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    body: bytes
    hub: HubServer

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[0].lower() in ("1", "true")

    def json_body(self) -> dict[str, Any]:
        """The body as a JSON object (`{}` when empty); 400 when it is not one."""
        return load_json_object(self.body or b"{}", "The request body")

    def token(self) -> str | None:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return token.strip()

    def user(self) -> str:
        """The user name of a valid token; 401 otherwise (the token itself never appears in the answer)."""
        token = self.token()
        if token is None:
            raise HubError(401, "Authentication required: send 'Authorization: Bearer <token>'")
        user = self.hub.user_for(token)
        if user is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        return user

    def repo(self) -> tuple[RepoRef, dict[str, Any]]:
        """The request's repo and its metadata; 404 when it does not exist, or is private and not the caller's."""
        repo = repo_ref(self.params.get("repo_type", ""), self.params["ns"], self.params["name"])
        meta = self.hub.store.meta(repo)
        if meta["private"]:
            token = self.token()
            if token is None or self.hub.user_for(token) != meta["author"]:
                raise repo_not_found(repo)
        return repo, meta

    def readable_repo(self) -> RepoRef:
        """The request's repo, if it exists and the caller may read it (a private repo only its owner)."""
        return self.repo()[0]

    def writable_repo(self) -> tuple[RepoRef, str]:
        """The request's repo and the writing user, its owner; 401 without a valid token, 403 for another user's
        repo, 404 when the repo does not exist or is another user's private repo."""
        user = self.user()
        repo, meta = self.repo()
        if meta["author"] != user:
            raise HubError(403, f"You cannot write to {repo.id}: it belongs to another user")
        return repo, user

    def commit_files(self, repo: RepoRef, revision: str) -> tuple[str, dict[str, dict[str, Any]]]:
        """The commit sha `revision` resolves to, and that commit's `{path: {oid, size}}` tree."""
        sha = self.hub.store.resolve(repo, revision)
        return sha, self.hub.store.commit_record(repo, sha)["files"]


@dataclass
class Response:
    """An answer: JSON (`payload`) or raw bytes (`content`), with extra headers; `size` answers a HEAD."""

    status: int = 200
    payload: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    size: int | None = None


def error_response(error: HubError, headers: dict[str, str] | None = None) -> Response:
    """The JSON error answer, with the `X-Error-Code` header `huggingface_hub` dispatches on."""
    extra = {"X-Error-Message": error.message, **(headers or {})}  # http.py escapes every header value
    if error.code:
        extra["X-Error-Code"] = error.code
    return Response(error.status, {"error": error.message}, headers=extra)


# --------------------------------------------------------------------------------------------------------------------
# Endpoints
# --------------------------------------------------------------------------------------------------------------------


def whoami(request: Request) -> Response:
    user = request.user()
    return Response(
        payload={
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


def agent_harnesses(request: Request) -> Response:
    """huggingface_hub fetches this registry once a day to tag requests; a local hub has no harnesses to list."""
    return Response(payload={"standardEnvVars": [], "harnesses": {}})


def validate_yaml(request: Request) -> Response:
    return Response(payload={"errors": [], "warnings": []})


def create_repo(request: Request) -> Response:
    user = request.user()
    payload = request.json_body()
    repo_type = payload.get("type") or "model"
    if repo_type not in REPO_TYPES:
        raise HubError(400, f"Unsupported repo type: {repo_type!r}", "BadRequest")
    namespace = check_name(payload.get("organization") or user, "namespace")
    if request.hub.personal_namespace_owner(namespace) not in (None, user):
        raise HubError(403, f"You cannot create repos in {namespace!r}: it is another user's own namespace")
    repo = RepoRef(repo_type, namespace, check_name(payload.get("name"), "repo name"))
    private = bool(payload.get("private")) or payload.get("visibility") == "private"
    url = f"{request.hub.url}/{repo.web_path}"
    if not request.hub.store.create_repo(repo, private=private, author=user):
        return Response(409, {"error": f"You already created this {repo_type} repo", "url": url})
    return Response(payload={"url": url, "name": repo.id, "id": repo.id})


def repo_info(request: Request) -> Response:
    repo = request.readable_repo()
    store = request.hub.store
    sha = store.resolve(repo, request.params.get("rev", DEFAULT_BRANCH))
    record = store.commit_record(repo, sha)
    meta = store.meta(repo)
    with_blobs = request.flag("blobs")
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
    return Response(payload=info)


def tree(request: Request) -> Response:
    repo = request.readable_repo()
    sha, files = request.commit_files(repo, request.params["rev"])
    prefix = request.params.get("path", "").strip("/")
    entries = tree_entries(files, prefix, request.flag("recursive"))
    if prefix and not entries:
        raise HubError(404, f"Folder not found: {prefix}", "EntryNotFound")
    return Response(payload=entries, headers={"X-Repo-Commit": sha})


def paths_info(request: Request) -> Response:
    repo = request.readable_repo()
    _, files = request.commit_files(repo, request.params["rev"])
    if "json" in (request.headers.get("Content-Type") or ""):
        paths = request.json_body().get("paths", [])
    else:
        paths = parse_qs(request.body.decode()).get("paths", [])
    entries = [path_entry(files, path.strip("/")) for path in paths]
    return Response(payload=[entry for entry in entries if entry is not None])


def list_refs(request: Request) -> Response:
    refs = request.hub.store.refs(request.readable_repo())

    def listing(kind: str, prefix: str) -> list[dict[str, str]]:
        return [{"name": n, "ref": f"{prefix}{n}", "targetCommit": s} for n, s in sorted(refs[kind].items())]

    return Response(
        payload={
            "branches": listing("branches", "refs/heads/"),
            "tags": listing("tags", "refs/tags/"),
            "converts": [],
            "pullRequests": [],
        }
    )


def list_commits(request: Request) -> Response:
    repo = request.readable_repo()
    store = request.hub.store
    history = store.history(repo, store.resolve(repo, request.params["rev"]))
    return Response(
        payload=[
            {
                "id": c["id"],
                "title": c["title"],
                "message": c["message"],
                "date": c["date"],
                "authors": [{"user": c["author"]}],
            }
            for c in history
        ]
    )


def preupload(request: Request) -> Response:
    repo, _ = request.writable_repo()
    sha, files = request.commit_files(repo, request.params["rev"])
    answer = [
        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": files.get(f["path"], {}).get("oid")}
        for f in request.json_body()["files"]
    ]
    return Response(payload={"files": answer, "commitOid": sha})


def commit(request: Request) -> Response:
    repo, user = request.writable_repo()
    if request.query.get("create_pr", ["0"])[0] not in ("0", "false"):
        raise HubError(400, "Pull requests are not supported by this hub", "BadRequest")
    header, operations = parse_commit_payload(request.body)
    sha = request.hub.store.commit(
        repo,
        request.params["rev"],
        operations,
        title=header["summary"],
        message=header.get("description") or "",
        author=user,
        parent_commit=header.get("parentCommit"),
    )
    return Response(
        payload={
            "success": True,
            "commitOid": sha,
            "commitUrl": f"{request.hub.url}/{repo.web_path}/commit/{sha}",
            "commitMessage": header["summary"],
            "hookOutput": "",
            "pullRequestUrl": None,
        }
    )


def create_branch(request: Request) -> Response:
    repo, _ = request.writable_repo()
    start = request.json_body().get("startingPoint") or DEFAULT_BRANCH
    request.hub.store.create_ref(repo, "branches", check_name(request.params["rev"], "branch name"), start)
    return Response(payload={})


def create_tag(request: Request) -> Response:
    repo, _ = request.writable_repo()
    tag = check_name(request.json_body()["tag"], "tag name")
    request.hub.store.create_ref(repo, "tags", tag, request.params["rev"])
    return Response(payload={})


def resolve(request: Request) -> Response:
    repo = request.readable_repo()
    sha, files = request.commit_files(repo, request.params["rev"])
    info = files.get(request.params["path"])
    if info is None:
        error = HubError(404, f"Entry not found: {request.params['path']}", "EntryNotFound")
        return error_response(error, {"X-Repo-Commit": sha})
    headers = {"X-Repo-Commit": sha, "ETag": f'"{info["oid"]}"', "Accept-Ranges": "bytes"}
    if request.method == "HEAD":
        return Response(headers=headers, size=info["size"])
    content = request.hub.store.read_blob(info["oid"])
    span = parse_range(request.headers.get("Range"), info["size"])
    if span is None:
        return Response(content=content, headers=headers)
    start, end = span
    headers["Content-Range"] = f"bytes {start}-{end}/{info['size']}"
    return Response(206, content=content[start : end + 1], headers=headers)


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
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


# --------------------------------------------------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------------------------------------------------

REPO_API = r"/api/(?P<repo_type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
RESOLVE = r"/(?:(?P<repo_type>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)"
ROUTES: list[tuple[str, re.Pattern[str], Callable[[Request], Response]]] = [
    (method, re.compile(pattern), endpoint)
    for method, pattern, endpoint in [
        ("GET", r"/api/whoami-v2", whoami),
        ("GET", r"/api/agent-harnesses", agent_harnesses),
        ("POST", r"/api/repos/create", create_repo),
        ("POST", r"/api/validate-yaml", validate_yaml),
        ("GET", REPO_API, repo_info),
        ("GET", REPO_API + r"/revision/(?P<rev>[^/]+)", repo_info),
        ("GET", REPO_API + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", tree),
        ("POST", REPO_API + r"/paths-info/(?P<rev>[^/]+)", paths_info),
        ("GET", REPO_API + r"/refs", list_refs),
        ("GET", REPO_API + r"/commits/(?P<rev>[^/]+)", list_commits),
        ("POST", REPO_API + r"/preupload/(?P<rev>[^/]+)", preupload),
        ("POST", REPO_API + r"/commit/(?P<rev>[^/]+)", commit),
        ("POST", REPO_API + r"/branch/(?P<rev>[^/]+)", create_branch),
        ("POST", REPO_API + r"/tag/(?P<rev>[^/]+)", create_tag),
        ("GET", RESOLVE, resolve),
    ]
]


def route(method: str, path: str) -> tuple[Callable[[Request], Response], dict[str, str]]:
    """The endpoint and the URL-decoded path parameters of a request; 404 when no endpoint matches."""
    for route_method, pattern, endpoint in ROUTES:
        match = pattern.fullmatch(path)
        allowed = (route_method, "HEAD") if route_method == "GET" else (route_method,)
        if match and method in allowed:
            return endpoint, {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
    logger.warning("Hub server has no endpoint for %s %s", method, path)
    raise HubError(404, f"No such endpoint: {method} {path}")
