"""The loopback Hub's folders as content-addressed trees, as git keeps them: one JSON object per folder, naming each
entry's kind and id (`["file", blob oid, size]` or `["directory", tree oid]`), stored once under `trees/` whatever the
number of commits and repos that hold it. A commit writes only the folders along the paths it changes, so storage per
commit is proportional to what changed; a lookup reads one folder per path segment; a listing walks the folders in
order from a cursor, so a page costs what it holds. Standard library only.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import HubError
from .payloads import CommitOp, FileAdd, bad_request

Entry = list[Any]  # ["file", oid, size] or ["directory", oid]
Node = dict[str, Any]  # a folder being changed: name -> Entry, or the Node of a subfolder read for the change


def tree_oid(entries: dict[str, Entry]) -> str:
    """The id of a folder: the sha1 of its canonical JSON, prefixed as git prefixes its objects."""
    text = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha1(b"tree %d\0" % len(text) + text).hexdigest()


class TreeStore:
    """Folders under `root/trees/<oid[:2]>/<oid>.json`, written with `write_file(path, bytes)` (atomic)."""

    def __init__(self, root: Path, write_file: Callable[[Path, bytes], None]) -> None:
        self.root = root / "trees"
        self._write_file = write_file
        self.read = functools.lru_cache(maxsize=4096)(self._read)  # a tree's id is its content: never stale

    def _path(self, oid: str) -> Path:
        return self.root / oid[:2] / f"{oid}.json"

    def _read(self, oid: str) -> dict[str, Entry]:
        return json.loads(self._path(oid).read_bytes())

    def write(self, entries: dict[str, Entry]) -> str:
        """Store a folder (unless stored already); its oid."""
        oid = tree_oid(entries)
        path = self._path(oid)
        if not path.exists():
            self._write_file(path, json.dumps(entries, sort_keys=True, separators=(",", ":")).encode())
        return oid

    # -- reads --------------------------------------------------------------------------------------------------
    def lookup(self, root: str, path: str) -> Entry | None:
        """The entry at `path` (a file or a folder) in the tree `root`, or None."""
        entry: Entry = ["directory", root]
        for name in path.split("/"):
            if entry[0] != "directory":
                return None
            entry = self.read(entry[1]).get(name)
            if entry is None:
                return None
        return entry

    def walk(self, oid: str, base: str, recursive: bool, after: list[str] | None = None) -> Iterator[tuple[str, Entry]]:
        """`(path, entry)` under the folder `oid` (whose path is `base`, `""` or ending in `/`), each folder before
        what it holds, names in sorted order, starting after the path whose segments are `after`."""
        entries = self.read(oid)
        names = sorted(entries)
        first = after[0] if after else None
        for name in names[bisect.bisect_left(names, first) if first else 0 :]:
            entry = entries[name]
            if name != first:
                yield base + name, entry
            if recursive and entry[0] == "directory":
                rest = after[1:] if name == first and after else None
                yield from self.walk(entry[1], f"{base}{name}/", recursive, rest or None)

    def files(self, root: str) -> Iterator[tuple[str, str, int]]:
        """`(path, oid, size)` of every file in the tree `root`."""
        for path, entry in self.walk(root, "", True):
            if entry[0] == "file":
                yield path, entry[1], entry[2]

    def from_files(self, files: dict[str, dict[str, Any]]) -> str:
        """Write the folders of a `{path: {oid, size}}` list of files; the root's oid."""
        node: Node = {}
        for path, info in files.items():
            *folders, name = path.split("/")
            self._folder(node, folders, path, create=True)[name] = ["file", info["oid"], info["size"]]
        return self._write_node(node) or self.write({})

    # -- a commit's changes -------------------------------------------------------------------------------------
    def apply(self, root: str, operations: list[CommitOp], blobs: dict[str, bytes], oid_of: Callable) -> str:
        """The tree `root` with `operations` applied in order, its changed folders written; new file contents are
        collected in `blobs` (by oid, `oid_of(bytes)`). 400 for a path that would be both a file and a folder, 404
        for a deletion of nothing; nothing is written then."""
        node: Node = dict(self.read(root))
        for op in operations:
            *folders, name = op.path.split("/")
            parent = self._folder(node, folders, op.path, create=isinstance(op, FileAdd))
            if isinstance(op, FileAdd):
                if isinstance(parent.get(name), dict) or (parent.get(name) or ["file"])[0] == "directory":
                    raise _clash(op.path)
                oid = oid_of(op.content)
                blobs[oid] = op.content
                parent[name] = ["file", oid, len(op.content)]
                continue
            entry = parent.get(name) if parent is not None else None
            is_folder = isinstance(entry, dict) or (entry is not None and entry[0] == "directory")
            if entry is None or is_folder != op.folder:
                raise HubError(404, f"A file with this name doesn't exist: {op.path}", "EntryNotFound")
            del parent[name]
        return self._write_node(node) or self.write({})

    def _folder(self, node: Node, names: list[str], path: str, *, create: bool) -> Node | None:
        """The changeable folder `names` below `node`, read (or, with `create`, made) on the way; None when it is
        missing and not made, or one of `names` is a file (400 with `create`)."""
        for name in names:
            entry = node.get(name)
            if entry is None:
                if not create:
                    return None
                entry = node[name] = {}
            elif not isinstance(entry, dict):
                if entry[0] == "file":
                    if create:
                        raise _clash(path)
                    return None
                entry = node[name] = dict(self.read(entry[1]))
            node = entry
        return node

    def _write_node(self, node: Node) -> str | None:
        """Write the changed folders of `node`, innermost first, dropping folders left empty; its oid (None when
        it is empty: git keeps no empty folder)."""
        entries: dict[str, Entry] = {}
        for name, entry in node.items():
            if isinstance(entry, dict):
                oid = self._write_node(entry)
                if oid is None:
                    continue
                entry = ["directory", oid]
            entries[name] = entry
        return self.write(entries) if entries else None


def _clash(path: str) -> HubError:
    return bad_request(f"{path!r} would be both a file and a folder: delete the one before adding the other")
