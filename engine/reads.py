"""Read operations: file content with line ranges, listings and file info.

These are blocking functions on resolved paths; the engine runs each in one
worker-thread hop.
"""

from __future__ import annotations

import base64
import bisect
import functools
import mimetypes
import os
import stat
import time
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Literal, ParamSpec, TypeVar

import msgspec

from ..journal import content_hash
from .encodings import TextForm, found_form, line_endings, text_views
from .errors import Code, LedgerError, not_a_folder
from .fileops import TooLarge, Vet, check_opened, load_entry, read_to_end
from .nofollow import open_beneath, open_dir, stat_beneath
from .oserrors import os_error
from .pages import Fetch, Identity, LineIndex, LineIndexes, Lines, index_of
from .paths import Resolved
from .results import DirectoryListing, DirEntry, FileContent, FileInfo, MediaFile, MediaInfo

__all__ = [
    "DEFAULT_LINES",
    "MAX_MEDIA_BYTES",
    "MAX_TEXT_BYTES",
    "LineWindow",
    "file_info",
    "guard_os",
    "list_directory",
    "read_content",
    "read_error",
    "read_file_kept",
    "read_media",
    "too_large",
]

P = ParamSpec("P")
T = TypeVar("T")


#: Without a limit, read_file returns at most this many lines ...
DEFAULT_LINES = 2000
#: ... and, whatever the limit, at most this many bytes of text.
MAX_TEXT_BYTES = 256 * 1024


def read_content(target: Resolved, max_size: int, vet: Vet | None = None) -> tuple[bytes, str]:
    """The bytes of a resolved file and their hash: every read of a whole file's
    content comes here (read_file's pages come from `read_file_kept`), through the
    no-follow opener, checked by `vet` (Workspace.vet).

    Raises VALIDATION for a folder or a file over `max_size`, NOT_FOUND for a file
    gone since it was resolved, what `vet` raises, and OSError for the caller's
    boundary to map.
    """
    _refuse_folder(target)
    try:
        entry = load_entry(target.path, max_size, vet)
    except TooLarge as exc:
        raise too_large(exc) from exc
    if entry.data is None:
        raise LedgerError(Code.NOT_FOUND, f"{target.path} does not exist.", path=target.path)
    return entry.data, entry.hash or content_hash(entry.data)


def read_file_kept(
    target: Resolved,
    window: LineWindow,
    max_size: int,
    vet: Vet | None = None,
    indexes: LineIndexes | None = None,
    encoding: str | None = None,
) -> tuple[FileContent, bytes | None]:
    """A file's content (a window of its lines), with the hash of the whole file,
    and the whole file's bytes (the version the hash names), or None when the
    page came from `indexes` without reading the whole file.

    The hash is always of the whole file, so it can guard a later change. Binary
    files come back as base64, at most MAX_TEXT_BYTES bytes from byte `offset`.
    Without a limit at most DEFAULT_LINES lines
    are returned, and never more than MAX_TEXT_BYTES of text. `truncated` means
    "there is more after this page", for lines and bytes alike: `next_offset` is
    then where to go on, and the last page is not truncated (a `tail` or an
    `offset` that reaches the end included), so a reader that loops while
    `truncated` stops. With `indexes`, a file whose identity names a version
    read before is read a page at a time (engine/pages.py says when that holds).

    Text is decoded as engine/encodings.py finds it (or in `encoding`, a codec
    name): `content` is the text without its BOM, and the result says the
    encoding, the BOM and the line endings. Plain UTF-8 (and binary) files are
    paged from their line index; text in another encoding, or with a BOM, is
    decoded whole for each page. Raises VALIDATION for folders, files over the
    size limit and bytes not valid in a named encoding (`invalid_bytes`),
    NOT_FOUND for a file gone, what `vet` raises, and OSError for the caller's
    boundary to map.
    """
    if encoding is not None:
        indexes = None  # a named encoding is decoded whole, as asked
    _refuse_folder(target)
    try:
        # O_NONBLOCK: a fifo swapped in after the sandbox check must not hang us.
        fd = open_beneath(target.path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise LedgerError(
            Code.NOT_FOUND, f"{target.path} does not exist.", path=target.path
        ) from exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):  # a folder put there since it was resolved
            raise LedgerError(Code.NOT_FOUND, f"{target.path} does not exist.", path=target.path)
        try:
            check_opened(target.path, st, max_size, vet)
        except TooLarge as exc:
            raise too_large(exc) from exc
        identity = Identity.of(st)
        known = None if indexes is None else indexes.by_identity(identity)
        if known is not None:
            page = _indexed_page(target.path, known, window, fd)
            # A write while the page was read changes the identity: read it all.
            if page is not None and Identity.of(os.fstat(fd)) == identity:
                return page, None
        started = time.time_ns() if indexes is None else indexes.clock()
        data = read_to_end(fd, st.st_size)
        unchanged = Identity.of(os.fstat(fd)) == identity
    finally:
        os.close(fd)
    if vet is not None:
        vet(target.path, st, data)
    digest = content_hash(data)
    found = text_views(data) if encoding is None else found_form(data, encoding, target.path)
    if found is not None and (found[0].encoding != "utf-8" or found[0].bom):
        return _decoded_page(target.path, data, digest, found, window), data
    index = None if indexes is None else indexes.by_hash(digest)
    if index is None:
        index = index_of(data, digest)
    if indexes is not None:
        indexes.remember(index, identity if unchanged else None, started)
    return _page(target.path, index, window, functools.partial(_slice, data)), data


def _indexed_page(path: str, index: LineIndex, window: LineWindow, fd: int) -> FileContent | None:
    """The page of the version `index` describes, read from `fd` a piece at a time;
    None if what it read is not that version's text (written to meanwhile)."""
    try:
        return _page(path, index, window, functools.partial(_read_at, fd))
    except UnicodeDecodeError:
        return None


def _refuse_folder(target: Resolved) -> None:
    if target.is_dir:
        raise LedgerError(
            Code.VALIDATION,
            f"{target.path} is a folder; use list_directory.",
            path=target.path,
            details={"reason": "is_a_folder"},
        )


def _page(path: str, index: LineIndex, window: LineWindow, fetch: Fetch) -> FileContent:
    """The page `window` names of the version `index` describes, its bytes from `fetch`."""
    if not index.text:
        # Binary: at most MAX_TEXT_BYTES bytes from byte `offset` (lines mean nothing).
        start = min(window.offset or 0, index.size)
        end = min(index.size, start + MAX_TEXT_BYTES)
        following = end if end < index.size else None
        return FileContent(
            path=path,
            content=base64.b64encode(fetch(start, end)).decode("ascii"),
            encoding="base64",
            content_hash=index.hash,
            size=index.size,
            total_lines=None,
            offset=start,
            lines=None,
            truncated=following is not None,
            next_offset=following,
        )
    starts = _Starts(index, fetch)
    total = index.lines
    start, end = window.bounds(total)
    if not (start == 0 and end == total and index.size <= MAX_TEXT_BYTES):
        end = _within_bytes(starts, start, end)
    following = end if end < total else None
    return FileContent(
        path=path,
        content=fetch(starts[start], starts[end]).decode("utf-8"),
        encoding="utf-8",
        line_endings=index.endings,
        content_hash=index.hash,
        size=index.size,
        total_lines=total,
        offset=start,
        lines=max(0, end - start),
        truncated=following is not None,
        next_offset=following,
    )


def _decoded_page(
    path: str, data: bytes, digest: str, found: tuple[TextForm, bytes], window: LineWindow
) -> FileContent:
    """The page `window` names of text in another encoding than plain UTF-8 (or with
    a BOM), decoded whole: `view` is its text as UTF-8, without the BOM."""
    form, view = found
    lines = view.decode("utf-8").splitlines(keepends=True)
    starts = list(accumulate((len(line.encode("utf-8")) for line in lines), initial=0))
    start, end = window.bounds(len(lines))
    if not (start == 0 and end == len(lines) and len(view) <= MAX_TEXT_BYTES):
        end = _within_bytes(starts, start, end)
    following = end if end < len(lines) else None
    return FileContent(
        path=path,
        content="".join(lines[start:end]),
        encoding=form.encoding,
        bom=form.bom,
        line_endings=line_endings(view),
        content_hash=digest,
        size=len(data),
        total_lines=len(lines),
        offset=start,
        lines=max(0, end - start),
        truncated=following is not None,
        next_offset=following,
    )


class _Starts(Lines[int]):
    """Where each line of a version starts, as a sequence (for bisect), each
    found by its index with bytes from `fetch`, remembered for one page."""

    def __init__(self, index: LineIndex, fetch: Fetch) -> None:
        self._index, self._fetch = index, fetch
        self._found: dict[int, int] = {}

    def __len__(self) -> int:
        return self._index.lines + 1

    def line(self, index: int) -> int:
        found = self._found.get(index)
        if found is None:
            found = self._found[index] = self._index.start(index, self._fetch)
        return found


def _slice(data: bytes, start: int, end: int) -> bytes:
    return data[start:end]


def _read_at(fd: int, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file `fd` is open on (short only at its end)."""
    chunks = []
    while start < end and (chunk := os.pread(fd, end - start, start)):
        chunks.append(chunk)
        start += len(chunk)
    return b"".join(chunks)


class LineWindow(msgspec.Struct, frozen=True, kw_only=True):
    """Which lines of a file to return: offset/limit, head or tail.

    >>> LineWindow(tail=2).bounds(10), LineWindow().bounds(5000), LineWindow(offset=3).bounds(10)
    ((8, 10), (0, 2000), (3, 10))
    """

    offset: int | None = None
    limit: int | None = None
    head: int | None = None
    tail: int | None = None

    def bounds(self, total: int) -> tuple[int, int]:
        if self.tail is not None:
            return max(0, total - self.tail), total
        if self.head is not None:
            return 0, min(total, self.head)
        start = min(self.offset or 0, total)
        limit = DEFAULT_LINES if self.limit is None else self.limit
        return start, min(total, start + limit)


def _within_bytes(starts: Sequence[int], start: int, end: int) -> int:
    """The end (<= `end`) that keeps lines [start, end) within MAX_TEXT_BYTES, given
    where each line starts; at least one line, so a caller always moves on.

    >>> _within_bytes([0, 10, MAX_TEXT_BYTES, MAX_TEXT_BYTES + 1], 0, 3)
    2
    >>> big = MAX_TEXT_BYTES + 5
    >>> _within_bytes([0, big, big + 1], 0, 2), _within_bytes([0, 1], 1, 1)
    (1, 1)
    """
    if end <= start:
        return end
    fits = bisect.bisect_right(starts, starts[start] + MAX_TEXT_BYTES, start, end + 1) - 1
    return max(fits, start + 1)


def too_large(exc: TooLarge) -> LedgerError:
    return LedgerError(
        Code.VALIDATION,
        f"{exc.path} is {exc.size} bytes, over the limit of {exc.limit} bytes.",
        path=exc.path,
        details={"reason": "file_too_large", "size": exc.size, "limit": exc.limit},
    )


def list_directory(target: Resolved, sort_by: Literal["name", "size"] = "name") -> DirectoryListing:
    """The entries of a folder, sorted by name (or by size, largest first), with
    totals. Raises VALIDATION for a file."""
    if not target.is_dir:
        raise not_a_folder(target.path)
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
    if sort_by == "size":
        entries.sort(key=lambda e: e.size or 0, reverse=True)
    files = [e for e in entries if e.type == "file"]
    return DirectoryListing(
        path=target.path,
        entries=entries,
        files=len(files),
        directories=sum(e.type == "directory" for e in entries),
        total_size=sum(e.size or 0 for e in files),
    )


def _dir_entry(item: os.DirEntry[str]) -> DirEntry:
    if item.is_symlink():
        return DirEntry(name=item.name, type="symlink", size=None)
    if item.is_dir(follow_symlinks=False):
        return DirEntry(name=item.name, type="directory", size=None)
    if item.is_file(follow_symlinks=False):
        size = item.stat(follow_symlinks=False).st_size
        return DirEntry(name=item.name, type="file", size=size)
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


#: read_media_file returns files up to this size (base64 makes them a third larger).
MAX_MEDIA_BYTES = 10 * 1024 * 1024


def read_media(target: Resolved, max_size: int, vet: Vet | None = None) -> MediaFile:
    """An image or audio file's bytes (base64) and MIME type, by its extension.

    Raises VALIDATION for another kind of file, a folder, or a file over
    MAX_MEDIA_BYTES (or `max_size`, if smaller).
    """
    mime, _ = mimetypes.guess_type(target.path, strict=False)
    kind = (mime or "").partition("/")[0]
    if mime is None or kind not in ("image", "audio"):
        raise LedgerError(
            Code.VALIDATION,
            f"{target.path} is not an image or audio file ({mime or 'unknown type'}); "
            "use read_file.",
            path=target.path,
            details={"reason": "not_media", "mime_type": mime},
        )
    data, digest = read_content(target, min(max_size, MAX_MEDIA_BYTES), vet)
    info = MediaInfo(
        path=target.path,
        mime_type=mime,
        kind="image" if kind == "image" else "audio",
        size=len(data),
        content_hash=digest,
    )
    return MediaFile(info=info, data=base64.b64encode(data).decode("ascii"))
