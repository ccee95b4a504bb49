"""Finding a workspace's journal from where a command runs, as git finds its repository.

`ledgerfs log`, `show`, `undo`, `recover`, `verify` and `gc` work on a journal that
already exists: they look for `.ledgerfs/journal.db` in the current folder and then
in each folder above it, and the folder holding it is the workspace's root. Finding
none is NOT_FOUND; nothing is ever created while looking.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from .errors import Code, LedgerError

__all__ = ["JOURNAL_DIR", "JOURNAL_NAME", "Located", "find_journal", "journal_in", "locate"]

#: The folder of a workspace's first root that holds its journal.
JOURNAL_DIR = ".ledgerfs"
#: Where a workspace keeps its journal, relative to its first root.
JOURNAL_NAME = os.path.join(JOURNAL_DIR, "journal.db")


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


def find_journal(start: str) -> Located | None:
    """The nearest workspace at or above `start` that has a journal, or None."""
    folder = Path(os.path.realpath(start))
    for candidate in (folder, *folder.parents):
        journal = journal_in(str(candidate))
        if os.path.isfile(journal):
            return Located(roots=[str(candidate)], journal=journal)
    return None


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

    `--journal` names the file; `--root` alone means `ROOT/.ledgerfs/journal.db`;
    neither walks up from `cwd`. The journal must exist. Raises NOT_FOUND naming
    the folder searched or the file missing.
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
        return Located(roots=absolute or [_root_of(path, cwd)], journal=path)
    if absolute:
        path = journal_in(absolute[0])
        if not os.path.isfile(path):
            raise LedgerError(
                Code.NOT_FOUND,
                f"{absolute[0]} has no ledgerfs journal ({JOURNAL_NAME} is missing).",
                path=absolute[0],
                details={"journal": path},
                suggestion=("pass the root a ledgerfs server was started on, or --journal PATH"),
            )
        return Located(roots=absolute, journal=path)
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
    return found
