"""A request to the loopback Hub and its answer, as the endpoints see them, and who the request may act as.

`http.py` builds each `Request` from the request line and headers only: the body is read the first time an endpoint
asks for `request.body`. Every endpoint checks who is asking (`user`, `readable_repo`, `writable_repo`) before it
reads the body, so a request refused for authorisation is answered from its headers and its body is never read.

Who may do what (the token's user comes from `HubServer.user_for`): reading a public repo needs no token; a private
repo exists only for its owner (anyone else gets 404, as on the Hub); writing needs the owner's token (401 without a
valid token, 403 for another user's repo, naming both users and what to do).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ...errors import HubError
from .payloads import load_json_object, query_flag
from .store import RepoRef, RepoStore, forbidden, repo_not_found, repo_ref


class Hub(Protocol):
    """What the endpoints need of the server (`http.HubServer`): its repos, its address, and who a token is."""

    store: RepoStore
    url: str

    def user_for(self, token: str) -> str | None: ...

    def personal_namespace_owner(self, namespace: str) -> str | None: ...


@dataclass
class Request:
    """One request, parsed: `params` are the URL-decoded path parameters of its route, `path` the URL's path as sent;
    `read_body` reads the body (once, when `body` is first asked for)."""

    method: str
    params: dict[str, str]
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    hub: Hub
    path: str = ""  # the URL's path, as sent
    read_body: Callable[[], bytes] = bytes
    _body: bytes | None = field(default=None, init=False, repr=False)

    @property
    def body(self) -> bytes:
        if self._body is None:
            self._body = self.read_body()
        return self._body

    def flag(self, name: str) -> bool:
        return query_flag(self.query, name)

    def json_body(self) -> dict[str, Any]:
        """The body as a JSON object (`{}` when empty); 400 when it is not one."""
        return load_json_object(self.body or b"{}", "The request body")

    def token(self) -> str | None:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return token.strip()

    def caller(self) -> str | None:
        """The user of a valid token, or None (no token, or one this hub refuses)."""
        token = self.token()
        return None if token is None else self.hub.user_for(token)

    def user(self) -> str:
        """The user name of a valid token; 401 otherwise (the token itself never appears in the answer)."""
        if self.token() is None:
            raise HubError(401, "Authentication required: send 'Authorization: Bearer <token>'")
        user = self.caller()
        if user is None:
            raise HubError(401, "Invalid credentials in Authorization header")
        return user

    def visible_repo(self, repo: RepoRef) -> tuple[RepoRef, dict[str, Any]]:
        """`repo` in its stored spelling and its metadata; 404 when it does not exist, or is private and not the
        caller's."""
        repo = self.hub.store.existing(repo)
        meta = self.hub.store.meta(repo)
        if meta["private"] and self.caller() != meta["author"]:
            raise repo_not_found(repo)
        return repo, meta

    def repo(self) -> tuple[RepoRef, dict[str, Any]]:
        """The repo of the request's URL and its metadata, as `visible_repo`."""
        return self.visible_repo(repo_ref(self.params.get("repo_type", ""), self.params["ns"], self.params["name"]))

    def readable_repo(self) -> RepoRef:
        """The request's repo, if it exists and the caller may read it (a private repo only its owner)."""
        return self.repo()[0]

    def owned_repo(self, repo: RepoRef, action: str) -> tuple[RepoRef, str]:
        """`repo` (stored spelling) and the caller, its owner: 401 without a valid token, 404 when it does not exist
        or is another user's private repo, 403 when it is another user's (`action` says what was refused)."""
        user = self.user()
        repo, meta = self.visible_repo(repo)
        if meta["author"] != user:
            raise forbidden(user, f"{action} {repo.id}", meta["author"])
        return repo, user

    def writable_repo(self) -> tuple[RepoRef, str]:
        """The repo of the request's URL and the writing user, as `owned_repo`."""
        repo = repo_ref(self.params.get("repo_type", ""), self.params["ns"], self.params["name"])
        return self.owned_repo(repo, "write to")

    def commit_tree(self, repo: RepoRef, revision: str) -> tuple[str, str]:
        """The commit sha `revision` resolves to, and the oid of that commit's root folder (`trees`)."""
        sha = self.hub.store.resolve(repo, revision)
        return sha, self.hub.store.commit_tree(repo, sha)


@dataclass
class Response:
    """An answer: JSON (`payload`), or the bytes `span` (first and last, inclusive) of the file `file`, streamed from
    disk; with extra headers."""

    status: int = 200
    payload: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    file: Path | None = None
    span: tuple[int, int] = (0, -1)


def error_response(error: HubError, headers: dict[str, str] | None = None) -> Response:
    """The JSON error answer, with the `X-Error-Code` header `huggingface_hub` dispatches on."""
    extra = {"X-Error-Message": error.message, **(headers or {})}  # http.py escapes every header value
    if error.code:
        extra["X-Error-Code"] = error.code
    return Response(error.status, {"error": error.message}, headers=extra)
