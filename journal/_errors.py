"""Every error the journal raises, and the one place where lower errors are translated.

`map_errors` is the boundary between sqlite3/OSError and `JournalError`: every
call that touches the journal file runs inside it, so the mapping (most specific
first) lives here and nowhere else.
"""

from __future__ import annotations

import errno as _errno
import sqlite3
from types import TracebackType
from typing import Literal

__all__ = ["JournalError", "JournalErrorKind", "TransactionStateError", "map_errors"]

JournalErrorKind = Literal[
    "missing", "corrupt", "newer_schema", "old_schema", "locked", "io", "closed", "lost"
]


class JournalError(Exception):
    """The journal file cannot be used.

    Raised by `Journal.open` (missing, corrupt, newer_schema, locked, io; lost when
    the journal holds fewer transactions than it had, see `_marker`; old_schema
    when a read-only open finds a journal an older version wrote, which only a
    writable open migrates), by every
    write and read (locked, io, corrupt) and by any call after `aclose` (closed).
    `message` is a sentence naming the file and what to do; `errno_name` is set for
    io errors when the cause is known (``"ENOSPC"``, ``"EIO"``, ...).
    """

    def __init__(
        self,
        kind: JournalErrorKind,
        path: str,
        message: str,
        *,
        errno_name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: JournalErrorKind = kind
        self.path = path
        self.message = message
        self.errno_name = errno_name

    def __repr__(self) -> str:
        return (
            f"JournalError(kind={self.kind!r}, path={self.path!r}, errno_name={self.errno_name!r})"
        )


class TransactionStateError(ValueError):
    """A call names a transaction that does not exist or is in the wrong state.

    Raised by `commit`, `rollback` (the transaction is not pending), by
    `finish_recovery` (not claimed by this journal, or already finished), by
    `finish_issue_write` (unknown id) and by `begin` (a referenced blob is neither
    given nor stored, or a given blob does not hash to its key). A caller bug, not a
    problem of the file: the journal is unchanged.
    """


# SQLite result-code names (Python 3.11 sets `sqlite_errorname`) -> (kind, errno name).
_BY_SQLITE_NAME: dict[str, tuple[JournalErrorKind, str | None]] = {
    "SQLITE_BUSY": ("locked", None),
    "SQLITE_LOCKED": ("locked", None),
    "SQLITE_FULL": ("io", "ENOSPC"),
    "SQLITE_IOERR": ("io", "EIO"),
    "SQLITE_CORRUPT": ("corrupt", None),
    "SQLITE_NOTADB": ("corrupt", None),
    "SQLITE_CANTOPEN": ("io", None),
    "SQLITE_READONLY": ("io", "EROFS"),
}

# Message fragments for errors built without a result code (and older builds).
_BY_MESSAGE: list[tuple[str, JournalErrorKind, str | None]] = [
    ("database is locked", "locked", None),
    ("database table is locked", "locked", None),
    ("database or disk is full", "io", "ENOSPC"),
    ("disk i/o error", "io", "EIO"),
    ("malformed", "corrupt", None),
    ("not a database", "corrupt", None),
    ("no such table", "corrupt", None),
    ("no such column", "corrupt", None),
    ("unable to open database file", "io", None),
    ("readonly database", "io", "EROFS"),
]

_ADVICE: dict[JournalErrorKind, str] = {
    "missing": "create it first or open with create=True",
    "corrupt": "restore it from a backup or move it aside; it was left untouched",
    "newer_schema": "upgrade ledgerfs to a version that knows this schema",
    "old_schema": (
        "open it once for writing to migrate it (start the server, or run `ledgerfs recover`)"
    ),
    "locked": "another process holds it; retry when that process has finished",
    "io": "check free space and the disk, then retry",
    "closed": "open the journal again",
    "lost": (
        "restore it from a backup, or run `ledgerfs recover` to go on with it as it is"
        " (the lost transactions' history and undo are gone; no file is changed)"
    ),
}


def advice(kind: JournalErrorKind) -> str:
    """Return what a user should do about an error of `kind`.

    >>> advice("missing")
    'create it first or open with create=True'
    """
    return _ADVICE[kind]


def make_error(
    kind: JournalErrorKind, path: str, what: str, *, errno_name: str | None = None
) -> JournalError:
    """Build a `JournalError` whose message names the file, the problem and the remedy."""
    detail = f" ({errno_name})" if errno_name else ""
    message = f"journal {path}: {what}{detail}; {advice(kind)}"
    return JournalError(kind, path, message, errno_name=errno_name)


def classify_sqlite(exc: sqlite3.Error) -> tuple[JournalErrorKind, str | None] | None:
    """Return (kind, errno name) for a sqlite3 error, or None for a caller bug."""
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError):
        return None
    name = getattr(exc, "sqlite_errorname", None) or ""
    # Extended codes (SQLITE_IOERR_FSYNC, ...) share the primary code's prefix.
    for prefix, found in _BY_SQLITE_NAME.items():
        if name == prefix or name.startswith(prefix + "_"):
            return found
    text = str(exc).lower()
    for fragment, kind, errno_name in _BY_MESSAGE:
        if fragment in text:
            return kind, errno_name
    return "io", None


def errno_name(exc: OSError) -> str:
    """The symbolic name of an OSError's errno (the one helper; the engine uses it too).

    >>> errno_name(OSError(28, "No space left on device"))
    'ENOSPC'
    >>> errno_name(OSError("no errno")), errno_name(OSError(100000, "unknown"))
    ('OSError', '100000')
    """
    if exc.errno is None:
        return type(exc).__name__
    return _errno.errorcode.get(exc.errno, str(exc.errno))


class map_errors:  # lower case: it reads as the function it replaced
    """Translate sqlite3 and OS errors raised inside the block into `JournalError`.

    Integrity and programming errors pass through unchanged: they are bugs of the
    caller, not states of the file. A plain class, not a generator: it wraps
    every statement of a commit, where a generator's frame costs more than the
    statement's own Python.
    """

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or isinstance(exc, JournalError):
            return False
        if isinstance(exc, sqlite3.Error):
            found = classify_sqlite(exc)
            if found is None:
                return False
            kind_name, name = found
            raise make_error(kind_name, self.path, f"SQLite says {exc}", errno_name=name) from exc
        if isinstance(exc, OSError):
            raise make_error(
                "io", self.path, f"{exc.strerror or exc}", errno_name=errno_name(exc)
            ) from exc
        return False
