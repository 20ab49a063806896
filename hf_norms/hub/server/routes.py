"""Which URL runs which endpoint of the loopback Hub: the part of the Hub's API that `huggingface_hub` and
`transformers` call.

- read (`read_endpoints`): `GET /api/whoami-v2`, `GET /api/agent-harnesses` (an empty registry),
  `GET /api/{models,datasets,spaces}` (list), `GET /api/{type}s/{id}[/revision/{rev}]`,
  `GET /api/{type}s/{id}/tree/{rev}[/{path}]`, `POST /api/{type}s/{id}/paths-info/{rev}`, `GET /api/{type}s/{id}/refs`,
  `GET /api/{type}s/{id}/commits/{rev}`, `HEAD`/`GET /[{type}s/]{id}/resolve/{rev}/{path}`;
- write (`write_endpoints`): `POST /api/repos/create`, `DELETE /api/repos/delete`, `POST /api/repos/move`,
  `PUT /api/{type}s/{id}/settings`, `POST /api/validate-yaml`, `POST /api/{type}s/{id}/preupload/{rev}`,
  `POST /api/{type}s/{id}/commit/{rev}[?create_pr=1]` (ndjson), `POST`/`DELETE /api/{type}s/{id}/branch/{branch}`,
  `POST /api/{type}s/{id}/tag/{rev}`, `DELETE /api/{type}s/{id}/tag/{tag}`.

A revision in a URL may be a branch, a tag, a commit id (7 or more hex digits) or a pull request (`refs/pr/N`,
URL-encoded as huggingface_hub sends it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import unquote

from ...errors import HubError
from .messages import Request, Response
from .read_endpoints import (
    agent_harnesses,
    list_commits,
    list_refs,
    list_repos,
    paths_info,
    repo_info,
    resolve,
    tree,
    whoami,
)
from .write_endpoints import (
    commit,
    create_branch,
    create_repo,
    create_tag,
    delete_branch,
    delete_repo,
    delete_tag,
    move_repo,
    preupload,
    repo_settings,
    validate_yaml,
)

logger = logging.getLogger(__name__)

JSON_BODY_BYTES = 16 << 20  # the largest body read for an endpoint that takes JSON (a commit takes more)


class Route(NamedTuple):
    """An endpoint and the requests it answers; `commit_body`: its body may be as large as the hub allows."""

    method: str
    pattern: re.Pattern[str]
    endpoint: Callable[[Request], Response]
    commit_body: bool = False


REPO_API = r"/api/(?P<repo_type>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)"
RESOLVE = r"/(?:(?P<repo_type>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)"
ROUTES = [
    Route(method, re.compile(pattern), endpoint)
    for method, pattern, endpoint in [
        ("GET", r"/api/whoami-v2", whoami),
        ("GET", r"/api/agent-harnesses", agent_harnesses),
        ("GET", r"/api/(?P<repo_type>models|datasets|spaces)", list_repos),
        ("POST", r"/api/repos/create", create_repo),
        ("DELETE", r"/api/repos/delete", delete_repo),
        ("POST", r"/api/repos/move", move_repo),
        ("POST", r"/api/validate-yaml", validate_yaml),
        ("GET", REPO_API, repo_info),
        ("GET", REPO_API + r"/revision/(?P<rev>[^/]+)", repo_info),
        ("GET", REPO_API + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", tree),
        ("POST", REPO_API + r"/paths-info/(?P<rev>[^/]+)", paths_info),
        ("GET", REPO_API + r"/refs", list_refs),
        ("GET", REPO_API + r"/commits/(?P<rev>[^/]+)", list_commits),
        ("PUT", REPO_API + r"/settings", repo_settings),
        ("POST", REPO_API + r"/preupload/(?P<rev>[^/]+)", preupload),
        ("POST", REPO_API + r"/branch/(?P<rev>[^/]+)", create_branch),
        ("DELETE", REPO_API + r"/branch/(?P<rev>[^/]+)", delete_branch),
        ("POST", REPO_API + r"/tag/(?P<rev>[^/]+)", create_tag),
        ("DELETE", REPO_API + r"/tag/(?P<rev>[^/]+)", delete_tag),
        ("GET", RESOLVE, resolve),
    ]
] + [Route("POST", re.compile(REPO_API + r"/commit/(?P<rev>[^/]+)"), commit, commit_body=True)]


def route(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route of a request and its URL-decoded path parameters; 404 when no endpoint matches."""
    for candidate in ROUTES:
        match = candidate.pattern.fullmatch(path)
        allowed = (candidate.method, "HEAD") if candidate.method == "GET" else (candidate.method,)
        if match and method in allowed:
            return candidate, {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
    logger.warning("Hub server has no endpoint for %s %s", method, path)
    raise HubError(404, f"No such endpoint: {method} {path}")
