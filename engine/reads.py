"""Read operations: file content with line ranges, listings and file info.

These are blocking functions on resolved paths; the engine runs each in one
worker-thread hop.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ledgerfs.journal import content_hash

from .anchored import open_dir, stat_beneath
from .diffs import is_text
from .errors import Code, LedgerError
from .fileops import TooLarge, Vet, load_entry
from .oserrors import os_error
from .paths import Resolved
from .results import DirectoryListing, DirEntry, FileContent, FileInfo

__all__ = ["file_info", "guard_os", "list_directory", "read_error", "read_file", "too_large"]

P = ParamSpec("P")
T = TypeVar("T")


def read_file(
    target: Resolved, offset: int | None, limit: int | None, max_size: int, vet: Vet | None = None
) -> FileContent:
    """A file's content (whole, or `limit` lines from line `offset`), with its hash.

    The hash is always of the whole file, so it can guard a later change.
    Binary files come back whole as base64. Raises VALIDATION for folders and files
    over the size limit.
    """
    if target.is_dir:
        raise LedgerError(
            Code.VALIDATION,
            f"{target.path} is a folder; use list_directory.",
            path=target.path,
            details={"reason": "is_a_folder"},
        )
    try:
        entry = load_entry(target.path, max_size, vet)
    except TooLarge as exc:
        raise too_large(exc) from exc
    data = entry.data
    if data is None:
        raise LedgerError(Code.NOT_FOUND, f"{target.path} does not exist.", path=target.path)
    digest = entry.hash or content_hash(data)
    if not is_text(data):
        return FileContent(
            path=target.path,
            content=base64.b64encode(data).decode("ascii"),
            encoding="base64",
            content_hash=digest,
            size=len(data),
            total_lines=None,
            offset=0,
            lines=None,
            truncated=False,
        )
    text = data.decode("utf-8")
    lines = text.splitlines(keepends=True)
    start = offset or 0
    end = len(lines) if limit is None else min(len(lines), start + limit)
    whole = start == 0 and end == len(lines)
    return FileContent(
        path=target.path,
        content=text if whole else "".join(lines[start:end]),
        encoding="utf-8",
        content_hash=digest,
        size=len(data),
        total_lines=len(lines),
        offset=start,
        lines=max(0, end - start),
        truncated=not whole,
    )


def too_large(exc: TooLarge) -> LedgerError:
    return LedgerError(
        Code.VALIDATION,
        f"{exc.path} is {exc.size} bytes, over the limit of {exc.limit} bytes.",
        path=exc.path,
        details={"reason": "file_too_large", "size": exc.size, "limit": exc.limit},
    )


def list_directory(target: Resolved) -> DirectoryListing:
    """The entries of a folder, sorted by name. Raises VALIDATION for a file."""
    if not target.is_dir:
        raise LedgerError(
            Code.VALIDATION,
            f"{target.path} is not a folder.",
            path=target.path,
            details={"reason": "not_a_folder"},
        )
    entries = []
    # Listed through a descriptor opened without following links, so a folder
    # swapped for a link after the check lists nothing outside.
    fd = open_dir(target.path)
    try:
        with os.scandir(fd) as scan:
            for item in scan:
                entries.append(_dir_entry(item))
    finally:
        os.close(fd)
    entries.sort(key=lambda e: e.name)
    return DirectoryListing(path=target.path, entries=entries)


def _dir_entry(item: os.DirEntry[str]) -> DirEntry:
    if item.is_symlink():
        return DirEntry(name=item.name, type="symlink", size=None)
    if item.is_dir(follow_symlinks=False):
        return DirEntry(name=item.name, type="directory", size=None)
    if item.is_file(follow_symlinks=False):
        return DirEntry(name=item.name, type="file", size=item.stat(follow_symlinks=False).st_size)
    return DirEntry(name=item.name, type="other", size=None)


def file_info(target: Resolved, max_size: int, vet: Vet | None = None) -> FileInfo:
    """Size, times, permissions and (for files) the content hash."""
    st = stat_beneath(target.path)
    digest = None
    if stat.S_ISREG(st.st_mode) and st.st_size <= max_size:
        digest = load_entry(target.path, max_size, vet).hash
    return FileInfo(
        path=target.path,
        type="directory" if stat.S_ISDIR(st.st_mode) else "file",
        size=st.st_size,
        modified=st.st_mtime,
        created=getattr(st, "st_birthtime", None),
        permissions=stat.filemode(st.st_mode),
        content_hash=digest,
    )


def guard_os(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` with an OSError it raises mapped by `read_error`."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            raise read_error(exc) from exc

    return run


def read_error(exc: OSError) -> LedgerError:
    """Map an OSError met before anything changed (the one boundary: `oserrors`)."""
    return os_error(exc)
