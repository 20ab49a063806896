"""The loopback Hub's endpoints that write: repos (create, delete, move, visibility), commits and pull requests,
branches and tags.

Each checks who is asking from the headers before it reads the body (`messages.Request`): 401 without a valid token,
404 for a repo the caller cannot see, 403 for another user's repo. Then it checks every field of the body
(`payloads`), 400 for a wrong one, before the store changes. `create_repo` and `move_repo` work in the caller's own
namespace and in any namespace that has no repo yet, which the caller then owns, like an organisation it created (403
elsewhere). Preupload always answers `uploadMode: "regular"`, so file bytes arrive base64-encoded inside the commit.
"""

from __future__ import annotations

from .card_rules import card_problems
from .messages import Request, Response
from .payloads import (
    bad_request,
    check_name,
    json_field,
    json_objects,
    parse_commit_payload,
    split_repo_id,
)
from .read_endpoints import MAX_PATHS_PER_REQUEST
from .store import DEFAULT_BRANCH, REPO_TYPES, RepoRef, forbidden

VISIBILITIES = ("public", "private")
MAX_YAML_MESSAGES = 100  # errors (and warnings) /api/validate-yaml lists at most
MAX_MESSAGE_CHARACTERS = 500


def validate_yaml(request: Request) -> Response:
    """Check a card's metadata as the Hub does (`card_rules`): 400 listing the errors (the first `MAX_YAML_MESSAGES`,
    each cut to `MAX_MESSAGE_CHARACTERS`), else 200 with the warnings. huggingface_hub sends each README.md it uploads
    here first and refuses the upload on a 400."""
    body = request.json_body()
    content = json_field(body, "content", str, required=True)
    repo_type = _repo_type(body, "repoType")
    errors, warnings = card_problems(content, repo_type)
    payload = {name: [{"message": _bounded(m)} for m in messages[:MAX_YAML_MESSAGES]]
               for name, messages in (("errors", errors), ("warnings", warnings))}  # fmt: skip
    return Response(400 if errors else 200, payload)


def _bounded(message: str) -> str:
    """A message cut to `MAX_MESSAGE_CHARACTERS` (one may quote a whole field's value)."""
    return message if len(message) <= MAX_MESSAGE_CHARACTERS else message[: MAX_MESSAGE_CHARACTERS - 3] + "..."


def _repo_type(body: dict, name: str = "type") -> str:
    repo_type = json_field(body, name, str) or "model"
    if repo_type not in REPO_TYPES:
        raise bad_request(f"Unsupported repo type: {repo_type!r} (this hub holds {', '.join(REPO_TYPES)})")
    return repo_type


def _check_namespace(request: Request, namespace: str, user: str, action: str) -> None:
    """403 when `namespace` is another user's own namespace (`HubServer.personal_namespace_owner`)."""
    owner = request.hub.personal_namespace_owner(namespace)
    if owner not in (None, user):
        raise forbidden(user, f"{action} in {namespace!r}", owner)


def _named_repo(body: dict, user: str) -> RepoRef:
    """The repo a `create`/`delete` body names: `type`, `organization` (default: the caller's namespace) and `name`."""
    namespace = check_name(json_field(body, "organization", str) or user, "namespace")
    return RepoRef(_repo_type(body), namespace, check_name(json_field(body, "name", str, required=True), "repo name"))


def create_repo(request: Request) -> Response:
    user = request.user()
    body = request.json_body()
    ref = _named_repo(body, user)
    private, visibility = json_field(body, "private", bool), json_field(body, "visibility", str)
    if visibility not in (None, *VISIBILITIES):
        raise bad_request(f"'visibility' must be one of {', '.join(VISIBILITIES)}, not {visibility!r}")
    _check_namespace(request, ref.namespace, user, "create repos")
    is_private = bool(private) or visibility == "private"
    repo, created = request.hub.store.create_repo(ref, private=is_private, author=user)
    url = f"{request.hub.url}/{repo.web_path}"
    if not created:
        return Response(409, {"error": f"You already created this {ref.type} repo", "url": url})
    return Response(payload={"url": url, "name": repo.id, "id": repo.id})


def delete_repo(request: Request) -> Response:
    """`DELETE /api/repos/delete` with `{"name", "organization", "type"}`: the owner only."""
    user = request.user()  # authorised from the headers, before the body is read
    repo, _ = request.owned_repo(_named_repo(request.json_body(), user), "delete")
    request.hub.store.delete_repo(repo)
    return Response(payload={})


def move_repo(request: Request) -> Response:
    """`POST /api/repos/move` with `{"fromRepo", "toRepo", "type"}`: the owner only, to a namespace it may create
    repos in; 409 when the target exists."""
    user = request.user()
    body = request.json_body()
    repo_type = _repo_type(body)
    source = RepoRef(repo_type, *split_repo_id(body.get("fromRepo"), "'fromRepo'"))
    target = RepoRef(repo_type, *split_repo_id(body.get("toRepo"), "'toRepo'"))
    source, _ = request.owned_repo(source, "move")
    _check_namespace(request, target.namespace, user, "move repos")
    moved = request.hub.store.move_repo(source, target, user)
    return Response(payload={"url": f"{request.hub.url}/{moved.web_path}"})


def repo_settings(request: Request) -> Response:
    """`PUT .../settings` with `visibility` (`public`/`private`) or `private` (true/false); `gated: false` is
    accepted, other gating is refused (nothing on this hub would enforce access requests)."""
    repo, _ = request.writable_repo()
    body = request.json_body()
    private, visibility = json_field(body, "private", bool), json_field(body, "visibility", str)
    if visibility not in (None, *VISIBILITIES):
        raise bad_request(f"'visibility' must be one of {', '.join(VISIBILITIES)}, not {visibility!r}")
    if body.get("gated") not in (None, False):
        raise bad_request(f"This hub does not gate repos: 'gated' can only be false, not {body['gated']!r}")
    if private is None and visibility is None and "gated" not in body:
        raise bad_request("Nothing to change: send 'visibility' ('public' or 'private') or 'private'")
    if private is not None or visibility is not None:
        request.hub.store.set_private(repo, private if private is not None else visibility == "private")
    return Response(payload={})


def preupload(request: Request) -> Response:
    repo, _ = request.writable_repo()
    files = json_objects(request.json_body(), "files", required=True)
    if len(files) > MAX_PATHS_PER_REQUEST:
        raise bad_request(f"Ask about at most {MAX_PATHS_PER_REQUEST} files at once, not {len(files)}")
    paths = [json_field(entry, "path", str, required=True) for entry in files]
    sha, root = request.commit_tree(repo, request.params["rev"])
    found = [(path, request.hub.store.trees.lookup(root, path) or [None, None]) for path in paths]
    answer = [
        {"path": path, "uploadMode": "regular", "shouldIgnore": False, "oid": entry[1] if entry[0] == "file" else None}
        for path, entry in found
    ]
    return Response(payload={"files": answer, "commitOid": sha})


def commit(request: Request) -> Response:
    """`POST .../commit/{rev}` (ndjson): a commit to a branch or a pull request (`refs/pr/N`); with `?create_pr=1`,
    a new pull request from `rev` instead, readable at `refs/pr/N`."""
    repo, user = request.writable_repo()
    create_pr = request.flag("create_pr")
    header, operations = parse_commit_payload(request.body)
    sha, pull_request = request.hub.store.commit(
        repo,
        request.params["rev"],
        operations,
        title=header["summary"],
        message=header.get("description") or "",
        author=user,
        parent_commit=header.get("parentCommit"),
        create_pr=create_pr,
    )
    web = f"{request.hub.url}/{repo.web_path}"
    return Response(
        payload={
            "success": True,
            "commitOid": sha,
            "commitUrl": f"{web}/commit/{sha}",
            "commitMessage": header["summary"],
            "hookOutput": "",
            "pullRequestUrl": f"{web}/discussions/{pull_request}" if pull_request else None,
        }
    )


def create_branch(request: Request) -> Response:
    repo, _ = request.writable_repo()
    start = json_field(request.json_body(), "startingPoint", str) or DEFAULT_BRANCH
    request.hub.store.create_ref(repo, "branches", check_name(request.params["rev"], "branch name"), start)
    return Response(payload={})


def delete_branch(request: Request) -> Response:
    repo, _ = request.writable_repo()
    request.hub.store.delete_ref(repo, "branches", request.params["rev"])
    return Response(payload={})


def create_tag(request: Request) -> Response:
    repo, _ = request.writable_repo()
    body = request.json_body()
    tag = check_name(json_field(body, "tag", str, required=True), "tag name")
    json_field(body, "message", str)  # accepted; a tag's message is not stored
    request.hub.store.create_ref(repo, "tags", tag, request.params["rev"])
    return Response(payload={})


def delete_tag(request: Request) -> Response:
    repo, _ = request.writable_repo()
    request.hub.store.delete_ref(repo, "tags", request.params["rev"])
    return Response(payload={})
