"""Finding a workspace's journal from where a command runs, as git finds its repository.

`ledgerfs log`, `show`, `undo`, `recover`, `verify` and `gc` work on a journal that
already exists: they look in the current folder and then in each folder above it
for `.ledgerfs/pointer.json` (a root of a workspace whose journal is elsewhere) or
`.ledgerfs/journal.db`. Finding none is NOT_FOUND; nothing is ever created while
looking. The workspace's roots are the ones its journal recorded, where they are
now (`ledgerfs.journal.recorded_roots`), so a command run inside any root acts on
every root, as the server did.

A workspace has one journal, whatever its roots: a transaction that touches two
roots (a move from one to the other, a batch) is one SQLite commit, all or
nothing. So each root that does not hold the journal gets a pointer, written when
an engine opens on the roots with the journal in its default place (a journal kept
elsewhere with `--journal` leaves the roots untouched):
`{"journal": "<the journal, relative to that .ledgerfs/>"}`. Relative, so a
workspace moved as a whole keeps finding its journal; and the root that holds the
journal loses a pointer it had (a root served alone again has its own journal
again).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ..journal import JournalError, recorded_roots
from .errors import Code, LedgerError
from .nonutf8 import escape_text

__all__ = [
    "JOURNAL_DIR",
    "JOURNAL_NAME",
    "POINTER_NAME",
    "Located",
    "find_journal",
    "journal_in",
    "locate",
    "point_roots_at",
]

log = logging.getLogger(__name__)

#: The folder of a workspace's first root that holds its journal.
JOURNAL_DIR = ".ledgerfs"
#: Where a workspace keeps its journal, relative to its first root.
JOURNAL_NAME = os.path.join(JOURNAL_DIR, "journal.db")
#: Where a root whose workspace keeps its journal elsewhere names that journal.
POINTER_NAME = os.path.join(JOURNAL_DIR, "pointer.json")


class Pointer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The content of a pointer file: the journal, relative to the pointer's folder."""

    journal: str


def journal_in(root: str) -> str:
    """The journal of the workspace whose first root is `root`.

    >>> journal_in("/w/proj")
    '/w/proj/.ledgerfs/journal.db'
    """
    return os.path.join(root, JOURNAL_NAME)


class Located(msgspec.Struct, frozen=True, kw_only=True):
    """A workspace found: its roots and its (existing) journal file."""

    roots: list[str]
    journal: str


def _pointed(root: str) -> str | None:
    """The journal `root`'s pointer names (it may be missing), or None without one.

    Raises NOT_FOUND for a pointer that cannot be read.
    """
    pointer = os.path.join(root, POINTER_NAME)
    try:
        data = Path(pointer).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _bad_pointer(pointer, exc.strerror or str(exc)) from exc
    try:
        named = msgspec.json.decode(data, type=Pointer).journal
    except msgspec.DecodeError as exc:
        raise _bad_pointer(pointer, str(exc)) from exc
    return os.path.normpath(os.path.join(os.path.dirname(pointer), named))


def _bad_pointer(pointer: str, reason: str) -> LedgerError:
    return LedgerError(
        Code.NOT_FOUND,
        f"{pointer} cannot be read ({reason}).",
        path=pointer,
        details={"pointer": pointer, "reason": reason},
        suggestion="start `ledgerfs serve` on this workspace's roots again, or pass --journal",
    )


def _journal_of(root: str) -> str | None:
    """The journal of the workspace `root` belongs to: its pointer's, else its own.

    None when it has neither. Raises NOT_FOUND for a pointer whose journal is gone
    (the workspace moved apart, or its first root was deleted).
    """
    pointed = _pointed(root)
    if pointed is not None:
        if not os.path.isfile(pointed):
            pointer = os.path.join(root, POINTER_NAME)
            raise LedgerError(
                Code.NOT_FOUND,
                f"{pointer} names the journal {pointed}, which does not exist.",
                path=pointed,
                details={"pointer": pointer, "journal": pointed},
                suggestion="start `ledgerfs serve` on this workspace's roots again, "
                "or pass --journal PATH",
            )
        return pointed
    own = journal_in(root)
    return own if os.path.isfile(own) else None


def find_journal(start: str) -> Located | None:
    """The nearest workspace at or above `start` that has a journal, or None.

    Raises NOT_FOUND for a pointer on the way that names no journal.
    """
    folder = Path(os.path.realpath(start))
    for candidate in (folder, *folder.parents):
        journal = _journal_of(str(candidate))
        if journal is not None:
            return Located(roots=[str(candidate)], journal=journal)
    return None


def _with_recorded(roots: list[str], journal: str) -> list[str]:
    """`roots`, then the other roots the journal recorded, where they are now."""
    try:
        recorded = recorded_roots(journal)
    except JournalError:
        return roots  # opening it says what is wrong
    return list(dict.fromkeys([*roots, *recorded]))


def point_roots_at(journal: str, roots: Sequence[str]) -> None:
    """Give each of `roots` that does not hold `journal` a pointer to it, and take
    a stale pointer from the one that does (blocking).

    A pointer only helps the commands find the journal: one that cannot be written
    or removed is logged and skipped.
    """
    journal = os.path.realpath(journal)
    for root in roots:
        pointer = os.path.join(root, POINTER_NAME)
        try:
            if journal == os.path.realpath(journal_in(root)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(pointer)
            else:
                _write_pointer(pointer, journal)
        except OSError as exc:
            log.warning(
                "cannot update %s (%s): commands run in that root may not find the"
                " workspace's journal by themselves (pass --journal)",
                escape_text(pointer),
                exc.strerror,
            )


def _write_pointer(pointer: str, journal: str) -> None:
    """Make `pointer` name `journal` (relative to it), atomically; unchanged if it does."""
    folder = os.path.dirname(pointer)
    data = msgspec.json.encode(Pointer(journal=os.path.relpath(journal, folder))) + b"\n"
    with contextlib.suppress(OSError):
        if Path(pointer).read_bytes() == data:
            return
    os.makedirs(folder, exist_ok=True)
    temporary = f"{pointer}.{os.getpid()}.tmp"
    try:
        Path(temporary).write_bytes(data)
        os.replace(temporary, pointer)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _root_of(journal: str, cwd: str) -> str:
    """The root a `--journal` file implies: the folder holding its `.ledgerfs/`, else `cwd`.

    >>> _root_of("/w/proj/.ledgerfs/journal.db", "/tmp")
    '/w/proj'
    >>> _root_of("/backups/journal.db", "/tmp")
    '/tmp'
    """
    parent = Path(journal).parent
    return str(parent.parent) if parent.name == JOURNAL_DIR else cwd


def locate(roots: list[str] | None, journal: str | None, cwd: str) -> Located:
    """The roots and journal a command uses, from its `--root` and `--journal` options.

    `--journal` names the file; `--root` alone means the journal of the first
    root's workspace (its pointer's, else `ROOT/.ledgerfs/journal.db`); neither
    walks up from `cwd`. The roots are the ones given, then those the journal
    recorded. The journal must exist. Raises NOT_FOUND naming the folder searched,
    the file missing or the pointer that names no journal.
    """
    cwd = os.path.abspath(cwd)
    absolute = [os.path.abspath(os.path.expanduser(r)) for r in roots or []]
    if journal is not None:
        path = os.path.abspath(os.path.expanduser(journal))
        if not os.path.isfile(path):
            raise LedgerError(
                Code.NOT_FOUND,
                f"There is no journal at {path}.",
                path=path,
                details={"journal": path},
                suggestion="pass --journal the path of an existing journal file",
            )
        return Located(roots=_with_recorded(absolute, path) or [_root_of(path, cwd)], journal=path)
    if absolute:
        own = _journal_of(absolute[0])
        if own is None:
            raise LedgerError(
                Code.NOT_FOUND,
                f"{absolute[0]} has no ledgerfs journal ({JOURNAL_NAME} is missing).",
                path=absolute[0],
                details={"journal": journal_in(absolute[0])},
                suggestion=("pass the root a ledgerfs server was started on, or --journal PATH"),
            )
        return Located(roots=_with_recorded(absolute, own), journal=own)
    found = find_journal(cwd)
    if found is None:
        raise LedgerError(
            Code.NOT_FOUND,
            f"No ledgerfs journal in {cwd} or any folder above it.",
            path=cwd,
            details={"searched": cwd},
            suggestion=(
                "run this inside a folder served by `ledgerfs serve`, "
                "or pass --root DIR or --journal PATH"
            ),
        )
    recorded = _with_recorded([], found.journal)
    return Located(roots=recorded or found.roots, journal=found.journal)
