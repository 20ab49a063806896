"""Copies of checkpoint folders that never follow a link out of the folder."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..errors import OutputFolderError
from .markers import MARKER_NAME
from .places import resolved


def checkpoint_files(source: Path, names: Iterable[str] | None = None) -> list[tuple[Path, str]]:
    """(file to read, path relative to `source`) of every file of `names` (files or folders; default: everything but
    the marker), a link to a regular file inside `link_root(source)` standing for that file; any other link (outside,
    to a folder, dangling, a loop) is refused, naming it (`readable_inside`), and so is a name that leads out of
    `source` (`..`, an absolute path, a folder reached through a link: `inside`)."""
    source = resolved(source, "Source")
    root = link_root(source)
    files = []
    for name in names if names is not None else [entry.name for entry in source.iterdir() if entry.name != MARKER_NAME]:
        start = inside(source, name)
        walked = [start] if not start.is_dir() or start.is_symlink() else [
            Path(d) / f for d, folders, found in os.walk(start)
            for f in found + [x for x in folders if (Path(d) / x).is_symlink()]
        ]  # fmt: skip
        for path in walked:
            if not path.name.startswith(MARKER_NAME):
                files.append((readable_inside(root, path), path.relative_to(source).as_posix()))
    return files


def copy_checkpoint_files(source: Path, target: Path, names: Iterable[str] | None = None) -> list[str]:
    """Copy `names` of `source` into `target` (`checkpoint_files`: never through a link out of it, never from or to a
    path outside either folder, every path checked before anything is copied); returns the relative paths copied."""
    files = checkpoint_files(source, names)
    target = resolved(target)
    destinations = [inside(target, relative) for _, relative in files]
    for (path, _), destination in zip(files, destinations, strict=True):
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination, follow_symlinks=False)
    return [relative for _, relative in files]


def inside(folder: Path, name: str | os.PathLike) -> Path:
    """`folder / name`, refused unless it lies inside `folder` (resolved): `name` relative, without `..`, and no link
    on the way leading out (the last component itself may be a link: copies check where links lead)."""
    relative = Path(name)
    path = folder / relative
    try:
        within = path.parent.resolve().is_relative_to(folder)  # links on the way resolved, missing parts kept as named
    except (OSError, RuntimeError):  # a link loop
        within = False
    if relative.is_absolute() or ".." in relative.parts or not relative.parts or not within:
        raise OutputFolderError(
            f"{str(name)!r} is not a path inside {folder}; hf-norms copies only within the folders a run reads and "
            "writes. Correct the file that names it."
        )
    return path


def readable_inside(folder: Path, path: Path) -> Path:
    """`path` itself, or, for a symbolic link, the regular file inside `folder` it leads to; anything else is refused."""
    if not path.is_symlink():
        if not path.is_file():
            raise OutputFolderError(f"{path} is not a regular file; hf-norms copies only files out of {folder}.")
        return path
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        target = None
    if target is None or not target.is_relative_to(folder) or not target.is_file():
        where = "nowhere (dangling or a loop)" if target is None else str(target)
        raise OutputFolderError(
            f"{path} is a symbolic link to {where}; hf-norms never copies a link out of a checkpoint folder. Replace it "
            "with a copy of the file, or remove it."
        )
    return target


def link_root(folder: Path) -> Path:
    """The folder a checkpoint's links may lead into: the checkpoint itself, or, for a Hub download in the
    huggingface_hub cache (`models--org--name/snapshots/<commit>/`, whose files are links to `../../blobs/`), its repo's
    cache folder."""
    folder = resolved(folder, "Source")
    in_cache = folder.parent.name == "snapshots" and folder.parents[1].name.startswith(("models--", "datasets--"))
    return folder.parents[1] if in_cache else folder
