"""What clients send to the loopback Hub, checked before anything is stored: names, revisions and file paths, JSON
bodies and their fields, query flags, and the ndjson lines of a commit; `HubError` is how a refusal is answered.

Every check refuses with a 400 that names the field and what it must be, so a body of the wrong shape never reaches
code that would fail on it (a 500). Standard library only.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...errors import HubError

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
FORBIDDEN_FOLDERS = (".git", ".cache")  # huggingface_hub refuses to commit into these
MAX_PATH_CHARACTERS = 1000  # a file path in a repo
MAX_PATH_DEPTH = 32  # segments of a file path: folders in folders
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_FLAG_VALUES = {"1": True, "true": True, "0": False, "false": False}
_KIND_NAMES = {str: "a string", bool: "true or false", list: "a list", dict: "an object", int: "a whole number"}


def bad_request(message: str) -> HubError:
    return HubError(400, message, "BadRequest")


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


# --------------------------------------------------------------------------------------------------------------------
# Names, paths and text
# --------------------------------------------------------------------------------------------------------------------


def check_text(value: str, what: str) -> str:
    """Refuse control characters (CR, LF, NUL, ...) in `value`, so that none can reach a header, a log line or a file
    name; returns `value`."""
    if CONTROL_CHARACTERS.search(value):
        raise bad_request(f"Invalid {what}: control characters are not allowed: {value!r}")
    return value


def check_repo_path(path: Any) -> str:
    """Validate a file path inside a repo as huggingface_hub does before it uploads: a relative POSIX path with no
    empty, `.` or `..` segment, no backslash, no control character and no `.git`/`.cache` folder; and, as this hub
    bounds them, at most `MAX_PATH_CHARACTERS` characters in at most `MAX_PATH_DEPTH` segments; returns it."""
    if not isinstance(path, str):
        raise bad_request(f"Invalid path in repo: {path!r} is not a string")
    if len(path) > MAX_PATH_CHARACTERS or path.count("/") >= MAX_PATH_DEPTH:
        raise bad_request(f"Invalid path in repo: {path[:80]!r}... is longer than {MAX_PATH_CHARACTERS} characters "
                          f"or deeper than {MAX_PATH_DEPTH} folders")  # fmt: skip
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or CONTROL_CHARACTERS.search(path)
        or any(p in ("", ".", "..", *FORBIDDEN_FOLDERS) for p in parts)
    ):
        raise bad_request(f"Invalid path in repo: {path!r}")
    return path


def valid_name(value: Any) -> bool:
    """A namespace, user, repo, branch or tag name: letters, digits, `.`, `_`, `-`, starting with a letter or a digit,
    at most 96 characters, no `..`."""
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None and ".." not in value


def check_name(value: Any, what: str) -> str:
    """Validate a namespace, repo, branch or tag name (`valid_name`); returns it."""
    if not valid_name(value):
        raise bad_request(f"Invalid {what}: {value!r}")
    return value


def split_repo_id(value: Any, what: str) -> tuple[str, str]:
    """`namespace/name` checked and split (`what` names the field in the refusal)."""
    if not isinstance(value, str) or value.count("/") != 1:
        raise bad_request(f"{what} must be a string 'namespace/name', not {value!r}")
    namespace, name = value.split("/")
    return check_name(namespace, "namespace"), check_name(name, "repo name")


# --------------------------------------------------------------------------------------------------------------------
# JSON bodies and query parameters
# --------------------------------------------------------------------------------------------------------------------


def load_json_object(data: bytes | str, what: str) -> dict[str, Any]:
    """`data` parsed as a JSON object; 400 (naming `what`) when it is not JSON or not an object (a list, a number)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise bad_request(f"{what} is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise bad_request(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def json_field(body: dict[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    """`body[name]` when it is a `kind` (str, bool, list, dict, int); None when absent or null (400 if `required`);
    400 for any other type."""
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request(f"The request body needs {name!r} ({_KIND_NAMES[kind]})")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise bad_request(f"{name!r} must be {_KIND_NAMES[kind]}, not {json.dumps(value)[:80]}")
    return value


def json_strings(body: dict[str, Any], name: str, *, required: bool = False) -> list[str]:
    """`body[name]` as a list of strings (`[]` when absent); 400 for anything else."""
    values = json_field(body, name, list, required=required) or []
    if not all(isinstance(value, str) for value in values):
        raise bad_request(f"{name!r} must be a list of strings, not {json.dumps(values)[:80]}")
    return values


def json_objects(body: dict[str, Any], name: str, *, required: bool = False) -> list[dict[str, Any]]:
    """`body[name]` as a list of JSON objects (`[]` when absent); 400 for anything else."""
    values = json_field(body, name, list, required=required) or []
    if not all(isinstance(value, dict) for value in values):
        raise bad_request(f"{name!r} must be a list of objects, not {json.dumps(values)[:80]}")
    return values


def query_flag(query: dict[str, list[str]], name: str) -> bool:
    """A boolean query parameter: `1`/`true` or `0`/`false` (any case); False when absent, 400 otherwise."""
    value = query.get(name, ["false"])[0].lower()
    if value not in _FLAG_VALUES:
        raise bad_request(f"The query parameter {name!r} must be true or false, not {value!r}")
    return _FLAG_VALUES[value]


def query_count(query: dict[str, list[str]], name: str) -> int | None:
    """A non-negative whole-number query parameter; None when absent, 400 otherwise."""
    if name not in query:
        return None
    value = query[name][0]
    if not value.isdecimal() or len(value) > 9:
        raise bad_request(f"The query parameter {name!r} must be a whole number, not {value!r}")
    return int(value)


# --------------------------------------------------------------------------------------------------------------------
# Commits
# --------------------------------------------------------------------------------------------------------------------


def parse_commit_payload(body: bytes) -> tuple[dict[str, Any], list[CommitOp]]:
    """Parse the ndjson body of `POST .../commit/{rev}` into its header value and operations; 400 for any line that is
    not a JSON object `{"key": ..., "value": {...}}` with the fields its key needs. Lines are parsed one at a time and
    each file's base64 text is dropped once decoded, so the body is held once, beside the decoded files."""
    header: dict[str, Any] = {}
    operations: list[CommitOp] = []
    for number, item in _commit_items(body):
        key, value = item.pop("key", None), item.pop("value", None)
        if not isinstance(value, dict):
            raise bad_request(f"Commit line {number} needs an object 'value'")
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
            raise bad_request("This hub stores every file inline: LFS uploads are not supported")
        else:
            raise bad_request(f"Unknown commit operation on line {number}: {key!r}")
    if not header:
        raise bad_request("The commit needs a header with a summary")
    return header, operations


def _commit_items(body: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """The line numbers and JSON objects of an ndjson body's non-blank lines, each line decoded straight from the
    body (no copy of its bytes) and freed once parsed."""
    view, start, number = memoryview(body), 0, 0
    while start < len(body):
        end = body.find(b"\n", start)
        end = len(body) if end < 0 else end
        number += 1
        try:
            line = str(view[start:end], "utf-8")
        except UnicodeDecodeError as err:
            raise bad_request(f"Commit line {number} is not valid JSON: {err}") from None
        start = end + 1
        if line.strip():
            item = load_json_object(line, f"Commit line {number}")
            del line  # not held while the caller decodes the file in it
            yield number, item


def _commit_header(value: dict[str, Any], number: int) -> dict[str, Any]:
    """The commit header: a non-empty string `summary`, and `description`/`parentCommit` strings when present."""
    if not isinstance(value.get("summary"), str) or not value["summary"]:
        raise bad_request(f"The commit header (line {number}) needs a non-empty string 'summary'")
    for name in ("description", "parentCommit"):
        if value.get(name) is not None and not isinstance(value[name], str):
            raise bad_request(f"The commit header's {name!r} (line {number}) must be a string")
    return value


def _decode_content(value: dict[str, Any], path: str, number: int) -> bytes:
    """The bytes of a `file` line: its `content` in strict base64 (any other character, or bad padding, is a 400),
    taken out of `value` so that the text is freed once decoded."""
    if value.get("encoding", "base64") != "base64":
        raise bad_request(f"Unsupported encoding {value['encoding']!r} for {path!r}: send base64")
    content = value.pop("content", None)
    if not isinstance(content, str):
        raise bad_request(f"The content of {path!r} (line {number}) must be a base64 string")
    try:  # base64.b64decode(validate=True), without its ASCII copy of the text
        if not _BASE64.fullmatch(content):
            raise binascii.Error("Non-base64 digit found")
        return binascii.a2b_base64(content)
    except ValueError as err:  # binascii.Error is a ValueError
        raise bad_request(f"The content of {path!r} (line {number}) is not valid base64: {err}") from None
