"""The loopback Hub's endpoints that read: who am I, repo info and listings, trees, refs, commits and downloads.

A private repo is visible to its owner only (404 for anyone else, in listings too). `model_info` and `list_models`
carry what the Hub derives from a model's card and weights (`metadata.model_facts`).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlencode

from ...errors import HubError
from .messages import Request, Response, error_response
from .metadata import model_facts
from .payloads import MAX_PATH_CHARACTERS, bad_request, json_field, json_strings, query_count
from .store import DEFAULT_BRANCH, RepoRef
from .trees import Entry

PAGE_ENTRIES = 1000  # a page of a tree listing, of a repo's commits and of a repo listing, as the Hub pages them
MAX_PATHS_PER_REQUEST = 1000  # paths one paths-info request may ask about
_BYTE_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*")


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


def repo_summary(request: Request, repo: RepoRef, meta: dict[str, Any], revision: str) -> dict[str, Any]:
    """What `model_info`/`dataset_info`/`space_info` answer for `repo` at `revision`, and `list_models` for each
    repo at its default branch: with `?blobs=true`, sizes and blob ids of the files."""
    store = request.hub.store
    sha = store.resolve(repo, revision)
    record, tree_oid = store.commit_record(repo, sha), store.commit_tree(repo, sha)
    with_blobs = request.flag("blobs")
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
        "siblings": [
            {"rfilename": path, **({"size": size, "blobId": oid} if with_blobs else {})}
            for path, oid, size in store.trees.files(tree_oid)
        ],
    }
    if repo.type == "model":
        root = {name: {"oid": e[1], "size": e[2]} for name, e in store.trees.read(tree_oid).items() if e[0] == "file"}
        info.update(modelId=repo.id, **model_facts(root, store.blob_path))
    return info


def paged(
    request: Request, items: Iterable[Any], cursor_of: Callable[[Any], str], headers: dict | None = None
) -> Response:
    """The first `PAGE_ENTRIES` of `items` (or `?limit=` of them), with a `Link: <url>; rel="next"` header, as the Hub
    sends it, naming the next page when there are more: the same URL with `cursor` the `cursor_of` this page's last
    item."""
    size = min(query_count(request.query, "limit") or PAGE_ENTRIES, PAGE_ENTRIES)
    page, headers = list(itertools.islice(items, size + 1)), dict(headers or {})
    if len(page) > size:
        page = page[:size]
        query = urlencode({**request.query, "cursor": [cursor_of(page[-1])]}, doseq=True)
        headers["Link"] = f'<{request.hub.url}{request.path}?{query}>; rel="next"'
    return Response(payload=page, headers=headers)


def cursor(request: Request) -> str | None:
    """The `cursor` of a page after the first (what `paged` put in the next page's URL)."""
    return request.query.get("cursor", [None])[0]


def expanded(request: Request, info: dict[str, Any]) -> dict[str, Any]:
    """`info` reduced to `id` and the fields named by `?expand=...` when there are any (unknown names are skipped)."""
    names = request.query.get("expand")
    return {"id": info["id"], **{name: info[name] for name in names if name in info}} if names else info


def repo_info(request: Request) -> Response:
    repo, meta = request.repo()
    return Response(
        payload=expanded(request, repo_summary(request, repo, meta, request.params.get("rev", DEFAULT_BRANCH)))
    )


def list_repos(request: Request) -> Response:
    """`GET /api/{models,datasets,spaces}`: the repos the caller may see, sorted by id, filtered by `author` (the
    namespace, any case), `search` (part of the id, any case), `filter` (tags every repo must carry) and
    `pipeline_tag`, at most `limit` of them a page (`paged`). `full` adds the files, `cardData` the card metadata."""
    repo_type = request.params["repo_type"].removesuffix("s")
    author, search = (request.query.get(name, [""])[0].lower() for name in ("author", "search"))
    required_tags = set(request.query.get("filter", [])) | set(request.query.get("pipeline_tag", []))
    full, with_card, after, caller = request.flag("full"), request.flag("cardData"), cursor(request), request.caller()

    def visible() -> Iterable[dict[str, Any]]:
        for repo, meta in request.hub.store.repos(repo_type):
            if (meta["private"] and meta["author"] != caller) or (author and repo.namespace.lower() != author):
                continue
            if search not in repo.id.lower() or (after is not None and repo.id <= after):
                continue
            info = repo_summary(request, repo, meta, DEFAULT_BRANCH)
            if not required_tags <= set(info["tags"]):
                continue
            if not full:
                info.pop("siblings")
            if not (full or with_card):
                info.pop("cardData", None)
            yield expanded(request, info)

    return paged(request, visible(), lambda info: info["id"])


def tree_entry(path: str, entry: Entry) -> dict[str, Any]:
    """A tree listing's entry: a file with its blob id and size, or a folder with its tree id."""
    if entry[0] == "file":
        return {"type": "file", "oid": entry[1], "size": entry[2], "path": path}
    return {"type": "directory", "oid": entry[1], "size": 0, "path": path}


def tree(request: Request) -> Response:
    """`GET .../tree/{rev}[/{path}]`: the files and folders in a folder (`recursive`: and below), each folder before
    what it holds, one page at a time (`paged`, the cursor the last path listed)."""
    repo = request.readable_repo()
    request.flag("expand")  # checked like every flag; the last commits it asks for are not served
    sha, root = request.commit_tree(repo, request.params["rev"])
    prefix = request.params.get("path", "").strip("/")
    folder = request.hub.store.trees.lookup(root, prefix) if prefix else ["directory", root]
    if folder is None or folder[0] != "directory":
        raise HubError(404, f"Folder not found: {prefix}", "EntryNotFound")
    base, after = f"{prefix}/" if prefix else "", cursor(request)
    if after is not None and not after.startswith(base):
        raise bad_request(f"The cursor {after[:MAX_PATH_CHARACTERS]!r} is not a path in {prefix or 'the repo'!r}")
    walk = request.hub.store.trees.walk(
        folder[1], base, request.flag("recursive"), after and after[len(base) :].split("/")
    )
    entries = (tree_entry(path, entry) for path, entry in walk)
    return paged(request, entries, lambda entry: entry["path"], {"X-Repo-Commit": sha})


def paths_info(request: Request) -> Response:
    """`POST .../paths-info/{rev}`: the entries of `paths` (a JSON body `{"paths": [...], "expand": bool}`, or a form
    body `paths=...&paths=...`) that exist; at most `MAX_PATHS_PER_REQUEST` paths (400 for more)."""
    repo = request.readable_repo()
    if "json" in (request.headers.get("Content-Type") or ""):
        body = request.json_body()
        paths = json_strings(body, "paths")
        json_field(body, "expand", bool)  # accepted, not served
    else:
        try:
            paths = parse_qs(request.body.decode(), strict_parsing=bool(request.body)).get("paths", [])
        except ValueError as err:  # not UTF-8, or not a form
            raise bad_request(f"The request body is neither JSON nor a form: {err}") from None
    if len(paths) > MAX_PATHS_PER_REQUEST:
        raise bad_request(f"Ask about at most {MAX_PATHS_PER_REQUEST} paths at once, not {len(paths)}")
    _, root = request.commit_tree(repo, request.params["rev"])
    found = ((path.strip("/"), request.hub.store.trees.lookup(root, path.strip("/"))) for path in paths)
    return Response(payload=[tree_entry(path, entry) for path, entry in found if path and entry is not None])


def list_refs(request: Request) -> Response:
    refs = request.hub.store.refs(request.readable_repo())

    def listing(kind: str, prefix: str) -> list[dict[str, str]]:
        return [{"name": n, "ref": f"{prefix}{n}", "targetCommit": s} for n, s in sorted(refs[kind].items())]

    pulls = sorted(refs["pulls"].items(), key=lambda item: int(item[0]))
    return Response(
        payload={
            "branches": listing("branches", "refs/heads/"),
            "tags": listing("tags", "refs/tags/"),
            "converts": [],
            "pullRequests": [{"name": f"refs/pr/{n}", "ref": f"refs/pr/{n}", "targetCommit": s} for n, s in pulls],
        }
    )


def list_commits(request: Request) -> Response:
    """`GET .../commits/{rev}`: the commits from `rev` back to the first one, one page at a time (`paged`, the cursor
    the last commit listed, the next page starting at its parent)."""
    repo = request.readable_repo()
    store = request.hub.store
    after = cursor(request)
    start = store.resolve(repo, request.params["rev"] if after is None else after)
    history = itertools.islice(store.history(repo, start), 0 if after is None else 1, None)
    commits = (
        {
            "id": c["id"],
            "title": c["title"],
            "message": c["message"],
            "date": c["date"],
            "authors": [{"user": c["author"]}],
        }
        for c in history
    )
    return paged(request, commits, lambda commit: commit["id"])


def resolve(request: Request) -> Response:
    repo = request.readable_repo()
    sha, root = request.commit_tree(repo, request.params["rev"])
    entry = request.hub.store.trees.lookup(root, request.params["path"])
    if entry is None or entry[0] != "file":
        error = HubError(404, f"Entry not found: {request.params['path']}", "EntryNotFound")
        return error_response(error, {"X-Repo-Commit": sha})
    headers = {"X-Repo-Commit": sha, "ETag": f'"{entry[1]}"', "Accept-Ranges": "bytes"}
    blob, size = request.hub.store.blob_path(entry[1]), entry[2]
    try:
        span = byte_range(request.headers.get("Range") if request.method == "GET" else None, size)
    except HubError as err:
        return error_response(err, {**headers, "Content-Range": f"bytes */{size}"})
    if span is None:
        return Response(headers=headers, file=blob, span=(0, size - 1))
    headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{size}"
    return Response(206, headers=headers, file=blob, span=span)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte span `Range: bytes=a-b`, `bytes=a-` or `bytes=-n` (the last n bytes) asks for, clipped to
    the file; None to send the whole file: no Range, one this server ignores as RFC 9110 allows (several ranges, a
    unit other than bytes, a malformed value), or an empty file. 416 when the span holds none of the file's bytes
    (`a` past the end, `b` before `a`, `bytes=-0`)."""
    match = _BYTE_RANGE.fullmatch(header or "")
    if match is None or not any(match.groups()) or size == 0:
        return None
    first, last = match.groups()
    if not first:
        start, end = max(0, size - int(last)), size - 1
        if int(last) == 0:
            raise HubError(416, f"Range not satisfiable: {header} (an empty suffix)")
    else:
        start, end = int(first), min(size - 1, int(last)) if last else size - 1
        if start >= size or (last and int(last) < start):
            raise HubError(416, f"Range not satisfiable: {header} (the file has {size} bytes)")
    return start, end
