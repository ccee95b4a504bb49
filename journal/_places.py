"""Where a journal's paths are: its roots, the keys paths are stored under, its location.

A path inside one of the workspace's roots is stored as ``<root id>:<path inside
the root>`` (``"1:src/a.py"``; ``"1:"`` is the root itself); any other path is
stored as it is, absolute. So a workspace moved or copied elsewhere, journal
included, keeps its history and its undo: its records name places inside roots,
and only the roots' places change.

The ``roots`` table names each root once, under an id that is never reused, with
where it was when a writable open last saw it and its place relative to the
journal's folder then (``..`` for the root that holds ``.ledgerfs/journal.db``).
Opening finds each recorded root among the roots it is given, by its place
relative to the journal first (a workspace moved as a whole), then by the path
it was recorded at (a journal moved alone, with ``--journal``); a root it is not
given stays where its relative place says, if that folder exists, else where it
was recorded. A root given for the first time is recorded, and the `paths` index
holds the paths already stored absolute inside it under their keys, in the
transaction that records it; the records keep them as stored (the audit chain
covers them so), and they read as inside the root, wherever it is now.

A path inside several roots (nested roots) is keyed by the oldest of them (the
lowest id): ids only grow, so every process keys a path the same way whatever
roots it serves, and records written before a root was known stay found.

The ``locations`` table lists where the journal file has been opened, newest last;
a writable open from another place records the new one, and every open from a
place that is not the newest recorded says so (`Relocation`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import msgspec
from sqlite_utils import Database

from . import _codec
from ._records import Relocation

__all__ = [
    "Places",
    "adopt",
    "bind",
    "create_tables",
    "first_places",
    "index_form",
    "journal_file",
    "loaded_key",
    "recorded_roots",
    "stored_key",
]

#: Separates a root's id from the path inside it in a stored key.
_SEP = ":"


class RootRow(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded root: its id, where it was last seen, its place from the journal,
    and where it was when recorded."""

    id: int
    path: str
    relative: str
    first: str


def _prefix(root: str) -> str:
    """What every path strictly inside `root` starts with.

    >>> _prefix("/w/a"), _prefix("/")
    ('/w/a/', '/')
    """
    return root.rstrip("/") + "/"


class Places:
    """The roots of one open journal, where they are now: paths to keys and back."""

    def __init__(self, roots: dict[int, str], first: dict[int, str] | None = None) -> None:
        # Where each root was when recorded: paths stored absolute before then
        # (version 7 and older) lie inside it, and read as inside the root now.
        self._first = tuple((i, p, _prefix(p)) for i, p in sorted((first or {}).items()))
        self._set(roots)

    def _set(self, roots: dict[int, str]) -> None:
        # Each method reads one of the two, replaced whole: a reader on another
        # thread sees the old map or the new, never one half done.
        ordered = tuple((i, roots[i], _prefix(roots[i])) for i in sorted(roots))
        self._ordered = ordered
        self._by_id = {i: root for i, root, _ in ordered}

    def key(self, path: str) -> str:
        """The key `path` is stored under: inside a root, relative to the oldest one.

        >>> Places({1: "/w/a", 2: "/w/a/sub"}).key("/w/a/sub/x.txt")
        '1:sub/x.txt'
        >>> Places({1: "/w/a"}).key("/w/a"), Places({1: "/w/a"}).key("/w/ab")
        ('1:', '/w/ab')
        """
        for root_id, root, prefix in self._ordered:
            if path.startswith(prefix):
                return f"{root_id}{_SEP}{path[len(prefix) :]}"
            if path == root:
                return f"{root_id}{_SEP}"
        return path

    def path(self, key: str, db: Database | None = None) -> str:
        """The absolute path a stored key names now.

        A root another process recorded after this one bound its roots is looked
        up in `db` (the connection reading the key).

        >>> Places({1: "/x/a"}).path("1:src/b.py"), Places({1: "/x/a"}).path("/elsewhere")
        ('/x/a/src/b.py', '/elsewhere')
        """
        if key.startswith("/"):
            return self._carried(key)
        head, sep, inside = key.partition(_SEP)
        if not sep or not head.isdigit():
            return key  # not a key this module wrote: a path as some caller gave it
        root_id = int(head)
        root = self._by_id.get(root_id)
        if root is None and db is not None:
            self._first = Places({}, first_places(db))._first
            self._set({**_placed(db, _journal_folder(db), {}), **self._by_id})
            root = self._by_id.get(root_id)
        if root is None:
            return key
        if not inside:
            return root
        return _prefix(root) + inside

    def _carried(self, path: str) -> str:
        """An absolute path stored before its root was recorded, where it is now.

        >>> Places({1: "/new/ws"}, {1: "/old/ws"})._carried("/old/ws/a.txt")
        '/new/ws/a.txt'
        """
        for root_id, first, prefix in self._first:
            if path == first or path.startswith(prefix):
                root = self._by_id.get(root_id)
                if root is not None:
                    return root + path[len(first) :]
        return path


# -- reading and recording roots ------------------------------------------------------


def create_tables(db: Database) -> None:
    """The tables of schema version 9: roots and locations."""
    db.execute(
        "CREATE TABLE roots (id INTEGER PRIMARY KEY, path TEXT NOT NULL,"
        " relative TEXT NOT NULL, seen_at REAL NOT NULL, first_path TEXT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE locations (id INTEGER PRIMARY KEY, path TEXT NOT NULL, since REAL NOT NULL)"
    )


def journal_file(db: Database) -> str:
    """The resolved path of the journal file `db` has open."""
    for _, name, file in db.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return os.path.realpath(str(file))
    raise ValueError("the connection has no main database")  # pragma: no cover


def _journal_folder(db: Database) -> str:
    return os.path.dirname(journal_file(db))


def _rows(db: Database) -> list[RootRow]:
    rows = db.execute("SELECT id, path, relative, first_path FROM roots ORDER BY id").fetchall()
    return [
        RootRow(id=int(r[0]), path=str(r[1]), relative=str(r[2]), first=str(r[3])) for r in rows
    ]


def first_places(db: Database) -> dict[int, str]:
    """{root id: where it was when recorded}."""
    return {r.id: r.first for r in _rows(db)}


def _relative_place(row: RootRow, folder: str) -> str:
    """Where a root is if it kept its place relative to the journal's folder."""
    return os.path.normpath(os.path.join(folder, row.relative))


def _where_now(row: RootRow, folder: str) -> str:
    """Where a root not given is now: at its relative place if that folder exists."""
    candidate = _relative_place(row, folder)
    return candidate if os.path.isdir(candidate) else row.path


def _placed(db: Database, folder: str, matched: dict[int, str]) -> dict[int, str]:
    """{id: where it is now} of every recorded root; `matched` ones are where given."""
    return {r.id: matched.get(r.id) or _where_now(r, folder) for r in _rows(db)}


def recorded_roots(db: Database) -> list[str]:
    """Where the journal's recorded roots are now, oldest first; those found nowhere
    (neither at their place relative to the journal nor where they were recorded)
    are left out."""
    folder = _journal_folder(db)
    return [p for p in _placed(db, folder, {}).values() if os.path.isdir(p)]


def _match(rows: list[RootRow], folder: str, given: Sequence[str]) -> dict[int, str]:
    """{root id: given root} for the recorded roots found among `given`: by their
    place relative to the journal first, then by the path they were recorded at."""
    free = list(dict.fromkeys(given))
    matched: dict[int, str] = {}
    for by_relative in (True, False):
        for row in rows:
            if row.id in matched:
                continue
            wanted = (
                os.path.normpath(os.path.join(folder, row.relative)) if by_relative else row.path
            )
            if wanted in free:
                matched[row.id] = wanted
                free.remove(wanted)
    return matched


class Bound(msgspec.Struct, frozen=True, kw_only=True):
    """What `bind` found: the places of the roots, and whether the journal moved."""

    places: dict[int, str]
    first: dict[int, str]
    relocation: Relocation | None
    #: Whether a writable open has something to record (roots, the location).
    unrecorded: bool = False


class _Changes(msgspec.Struct, frozen=True, kw_only=True):
    """What a writable open records: roots seen elsewhere, new roots, the location."""

    moved: dict[int, str]
    new: list[str]
    location: bool

    def __bool__(self) -> bool:
        return bool(self.moved or self.new or self.location)


def bind(db: Database, given: Sequence[str], *, record: bool) -> Bound:
    """Find the journal's recorded roots among `given` (resolved paths) and where it is.

    With `record` (a writable open, inside the caller's write transaction) it
    records the roots given for the first time (their stored paths becoming keys),
    where the given ones are now, and the journal's location when it changed;
    without, it only says whether there is any of that to record.
    """
    if not _has_roots(db):
        # Below version 9 (only a test that holds a journal there opens one so):
        # paths are stored as they are given, as that version stored them.
        return Bound(places={}, first={}, relocation=None)
    folder = _journal_folder(db)
    here = journal_file(db)
    rows = _rows(db)
    matched = _match(rows, folder, given)
    newest = _newest_location(db)
    relocation = None
    if newest is not None and newest[0] != here:
        relocation = Relocation(previous=newest[0], previous_since=newest[1], current=here)
    changes = _Changes(
        moved={
            row.id: at
            for row in rows
            if (at := matched.get(row.id)) is not None
            and (at, os.path.relpath(at, folder)) != (row.path, row.relative)
        },
        new=[root for root in dict.fromkeys(given) if root not in matched.values()],
        location=newest is None or newest[0] != here,
    )
    if record and changes:
        now = time.time()
        for root_id, at in changes.moved.items():
            db.execute(
                "UPDATE roots SET path = ?, relative = ?, seen_at = ? WHERE id = ?",
                (at, os.path.relpath(at, folder), now, root_id),
            )
        for root in changes.new:
            matched[adopt(db, root, folder, now)] = root
        if changes.location:
            db.execute("INSERT INTO locations (path, since) VALUES (?, ?)", (here, now))
    # A root given to a read-only open but never recorded has no id: the paths
    # inside it are stored absolute, and found as they are.
    return Bound(
        places=_placed(db, folder, matched),
        first=first_places(db),
        relocation=relocation,
        unrecorded=bool(changes) and not record,
    )


def _has_roots(db: Database) -> bool:
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'roots'"
    ).fetchone()
    return found is not None


def _newest_location(db: Database) -> tuple[str, float] | None:
    row = db.execute("SELECT path, since FROM locations ORDER BY id DESC LIMIT 1").fetchone()
    return None if row is None else (str(row[0]), float(row[1]))


def stored_key(path: str, places: Places) -> str:
    """How `path` is stored: its key, encoded when it is not UTF-8 (see _codec).

    >>> stored_key("/w/a/x", Places({3: "/w/a"}))
    '3:x'
    """
    return _codec.stored_path(places.key(path))


def loaded_key(text: str, places: Places, db: Database | None = None) -> str:
    """The absolute path a stored text names now."""
    return places.path(_codec.loaded_path(text), db)


# -- keys for the paths already stored ---------------------------------------------------


def adopt(db: Database, root: str, folder: str, now: float) -> int:
    """Record `root` under a new id and index the paths stored inside it by their keys;
    return the id.

    Only paths stored absolute can lie inside it: one inside an older root is a
    key of that root already (the oldest root keys a path). The records keep them
    as they were stored (the audit chain covers them as stored); they read as
    inside the root wherever it is (`Places`' first places), and the `paths`
    index holds their keys, as it does for the records written from now on.
    """
    cursor = db.execute(
        "INSERT INTO roots (path, relative, seen_at, first_path) VALUES (?, ?, ?, ?)",
        (root, os.path.relpath(root, folder), now, root),
    )
    root_id = int(cursor.lastrowid or 0)
    places = Places({root_id: root})
    found = _stored_inside(db, root)
    db.conn.executemany("DELETE FROM paths WHERE path = ? AND tx = ?", found)
    db.conn.executemany(
        "INSERT OR IGNORE INTO paths (path, tx) VALUES (?, ?)",
        [(index_form(p, places), tx) for p, tx in found],
    )
    return root_id


def _stored_inside(db: Database, root: str) -> list[tuple[str, int]]:
    """The (stored path, tx) rows of the `paths` index that lie inside `root`."""
    prefix = _prefix(root)
    # Every text that starts with `prefix` sorts between it and the prefix with its
    # last character ("/") raised by one ("0"): one range of the index.
    above = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    rows = db.execute(
        "SELECT path, tx FROM paths WHERE path = ? OR (path >= ? AND path < ?)",
        (root, prefix, above),
    ).fetchall()
    # Names that are not UTF-8 are stored encoded whole (see _codec): decode them.
    encoded = db.execute(
        "SELECT path, tx FROM paths WHERE path >= ? AND path < ?",
        (_codec.ENCODED, _codec.ENCODED[:-1] + chr(ord(_codec.ENCODED[-1]) + 1)),
    ).fetchall()
    inside = [
        (str(p), int(tx)) for p, tx in encoded if _inside(_codec.loaded_path(str(p)), root, prefix)
    ]
    return [(str(p), int(tx)) for p, tx in rows] + inside


def _inside(path: str, root: str, prefix: str) -> bool:
    return path == root or path.startswith(prefix)


def index_form(stored: str, places: Places) -> str:
    """What the `paths` index holds for a stored path: its key when it was stored
    absolute inside one of `places`' roots (as they were when recorded).

    >>> index_form("/w/a/x", Places({1: "/w/a"})), index_form("2:y", Places({1: "/w/a"}))
    ('1:x', '2:y')
    """
    loaded = _codec.loaded_path(stored)
    if not loaded.startswith("/"):
        return stored  # a key already
    return _codec.stored_path(places.key(loaded))
