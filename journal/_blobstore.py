"""Where blobs live: a table filled in id order, and a hash index merged in batches.

A blob is named by its content hash, and hashes are random: a b-tree keyed by
them takes every new key on a random page. With one index entry per blob, a
group commit of 30 records wrote about 28 index pages beside the blobs' own (a
third of its WAL frames). So:

- ``blobs (id, hash, size, data)`` is a rowid table; a new blob gets the next id,
  so a group's blobs share the rightmost pages;
- ``blob_keys (hash -> id)`` indexes every blob whose id is at most
  ``blob_merged.upto``; the newer ones, the *tail*, are found from a cache of
  the tail that each connection keeps (`Tail`), or by a scan of their ids;
- once the tail holds `MERGE_AT` blobs, the group that crossed it merges it: one
  statement inserts its keys in sorted order, so an index page is written once
  per merge rather than once per blob. A merge of k keys into an index of L
  leaves writes about min(k, L) pages, so the larger the merge, the fewer pages
  a blob costs, until the index outgrows it.

Invariants (verify checks them): every blob with ``id <= upto`` has its key in
``blob_keys``, pointing at it; no hash is stored twice. A new blob's id is above
both the highest id and ``upto`` (gc may have deleted the highest ids), and gc
merges the tail before it deletes, so it deletes keyed blobs only and a tail
blob is never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from sqlite_utils import Database

__all__ = ["MERGE_AT", "Tail", "drop_unused", "find", "integrity", "load", "merge", "store"]

# Tail length at which the writer merges it into blob_keys. Group commit of 4 KiB
# blobs makes 1.04 - 1.06x the records at 8,192 than at 1,024 (fresh journals,
# 1 s windows, `python -m benchmarks.ab_journal`); lookups read the tail from a cache, so
# its length costs them nothing but the cache's first fill.
MERGE_AT = 8192
# Below SQLite's variable limit, with room to spare.
_CHUNK = 500

K = TypeVar("K")


class Tail:
    """A connection's cache of the tail: {hash: id} of the blobs above ``upto``.

    It holds only committed rows. `sync` reads what others committed since it
    last looked, inside a transaction of its connection, so nothing changes
    under it: the writer's (which holds the write lock) or a reader's (a
    snapshot; a connection's snapshots only move forward). The writer's own
    rows join once their COMMIT has returned (`committed`), and are forgotten
    if it never does. Tail blobs are never deleted, and rows at or below
    ``upto`` are dropped, so a cached id always names its blob.
    """

    __slots__ = ("ids", "new", "next_id", "seen", "upto")

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}
        # Rows this transaction inserted: (key, id), in id order.
        self.new: list[tuple[bytes, int]] = []
        # Every committed row up to `seen` was read (or lies at or below `upto`).
        self.seen = 0
        self.upto = 0
        # The id a new blob gets: above the highest id and above `upto`.
        self.next_id = 1

    def sync(self, db: Database) -> None:
        """Catch up with the committed tail (inside a transaction of `db`).

        One statement when nobody else added blobs, which is the usual case.
        """
        self.new = []  # a transaction that did not commit
        upto, top = db.execute(
            "SELECT upto, coalesce((SELECT max(id) FROM blobs), 0) FROM blob_merged"
        ).fetchone()
        if upto != self.upto:
            self.upto = upto
            self.ids = {key: id for key, id in self.ids.items() if id > upto}
        if top > max(self.seen, upto):
            rows = db.execute(
                "SELECT id, hash FROM blobs WHERE id > ?", (max(self.seen, upto),)
            ).fetchall()
            self.ids.update((bytes(key), id) for id, key in rows)
            self.seen = top
        self.next_id = max(top, upto) + 1

    def committed(self) -> None:
        """The transaction that inserted `new` has committed: they are in the tail.

        Every id below them was read already: new ids are allocated above the
        highest one under the write lock.
        """
        if self.new:
            self.ids.update(self.new)
            self.seen = max(self.seen, self.new[-1][1])
            self.new = []


def _upto(db: Database) -> int:
    return int(db.execute("SELECT upto FROM blob_merged").fetchone()[0])


def find(db: Database, keys: Iterable[bytes], tail: Tail | None = None) -> set[bytes]:
    """Which of `keys` are stored. With `tail` (synced in this transaction) the
    tail is not scanned."""
    wanted = list(dict.fromkeys(keys))
    found: set[bytes] = set()
    if tail is not None:
        found = {key for key in wanted if key in tail.ids}
        wanted = [key for key in wanted if key not in found]
    for chunk in _chunks(wanted):
        marks = ",".join("?" * len(chunk))
        found.update(
            bytes(row[0])
            for row in db.execute(f"SELECT hash FROM blob_keys WHERE hash IN ({marks})", chunk)
        )
        if tail is None:
            found.update(
                bytes(row[0])
                for row in db.execute(
                    f"SELECT hash FROM blobs WHERE id > (SELECT upto FROM blob_merged)"
                    f" AND hash IN ({marks})",
                    chunk,
                )
            )
    return found


def store(db: Database, blobs: list[tuple[bytes, bytes]], tail: Tail | None = None) -> None:
    """Insert the blobs of `blobs` ((key, bytes)) that are not stored yet.

    An image already stored (an edit's before image is usually the previous
    edit's after image) costs a lookup and writes nothing. Merges the tail once
    it reaches `MERGE_AT`.
    """
    given = dict(blobs)
    stored = find(db, given, tail)
    new = [(key, data) for key, data in given.items() if key not in stored]
    if not new:
        return
    if tail is not None:
        first, upto = tail.next_id, tail.upto
        tail.next_id += len(new)
    else:
        first, upto = db.execute(
            "SELECT max(coalesce((SELECT max(id) FROM blobs), 0), upto) + 1, upto FROM blob_merged"
        ).fetchone()
    db.conn.executemany(
        "INSERT INTO blobs (id, hash, size, data) VALUES (?, ?, ?, ?)",
        [(first + n, key, len(data), data) for n, (key, data) in enumerate(new)],
    )
    if first + len(new) - 1 - upto >= MERGE_AT:
        merge(db)  # the merged rows leave the tail: the next sync reads the new upto
    elif tail is not None:
        tail.new.extend((key, first + n) for n, (key, _) in enumerate(new))


def merge(db: Database) -> int:
    """Index the tail's keys (sorted, so each index page is written once); return
    how many. Runs inside a write transaction."""
    cursor = db.execute(
        "INSERT INTO blob_keys (hash, id) SELECT hash, id FROM blobs"
        " WHERE id > (SELECT upto FROM blob_merged) ORDER BY hash"
    )
    db.execute("UPDATE blob_merged SET upto = max(upto, coalesce((SELECT max(id) FROM blobs), 0))")
    return int(cursor.rowcount)


# The merged blobs of a chunk of keys, and the tail's; {marks} is the chunk's placeholders.
_KEYED = (
    "SELECT k.hash, b.data FROM blob_keys AS k JOIN blobs AS b ON b.id = k.id"
    " WHERE k.hash IN ({marks})"
)
_IN_TAIL = (
    "SELECT hash, data FROM blobs WHERE id > (SELECT upto FROM blob_merged) AND hash IN ({marks})"
)


def load(db: Database, keys: Iterable[bytes], tail: Tail | None = None) -> dict[bytes, bytes]:
    """The stored bytes of every key in `keys` that is stored.

    With `tail` (synced in this transaction) the tail's blobs are read by id and
    the tail is not scanned. Without it, one statement per chunk, so the index
    and the tail are read in one snapshot even outside a transaction (a merge
    between two statements would hide a blob from both).
    """
    wanted = list(dict.fromkeys(keys))
    if tail is None:
        return _fetch(db, f"{_KEYED} UNION ALL {_IN_TAIL}", wanted, repeat=2)
    by_id = {tail.ids[key]: key for key in wanted if key in tail.ids}
    cached = _fetch(db, "SELECT id, data FROM blobs WHERE id IN ({marks})", list(by_id))
    found = {by_id[id]: data for id, data in cached.items()}
    found.update(_fetch(db, _KEYED, [key for key in wanted if key not in tail.ids]))
    return found


def _fetch(db: Database, sql: str, values: list[K], *, repeat: int = 1) -> dict[K, bytes]:
    """{first column: second column} of `sql` run for each chunk of `values` (bound
    `repeat` times over, once per ``{marks}`` in `sql`)."""
    found: dict[K, bytes] = {}
    for chunk in _chunks(values):
        rows = db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk * repeat)
        found.update((first, bytes(data)) for first, data in rows)
    return found


def drop_unused(db: Database, used_table: str) -> tuple[int, int]:
    """Delete the blobs whose hash is not in `used_table` (a temp table with a
    ``hash`` column); return how many and their bytes. Merges the tail first, so
    only keyed blobs are deleted (the tail's invariant)."""
    merge(db)
    unused = f"SELECT id FROM blob_keys WHERE hash NOT IN (SELECT hash FROM {used_table})"
    count, size = db.execute(
        f"SELECT count(*), coalesce(sum(size), 0) FROM blobs WHERE id IN ({unused})"
    ).fetchone()
    db.execute(f"DELETE FROM blobs WHERE id IN ({unused})")
    db.execute(f"DELETE FROM blob_keys WHERE hash NOT IN (SELECT hash FROM {used_table})")
    return int(count), int(size)


def integrity(db: Database) -> list[str]:
    """What breaks the store's invariants, in words (verify reports it)."""
    problems: list[str] = []
    upto = _upto(db)
    unkeyed = db.execute(
        "SELECT count(*) FROM blobs AS b WHERE b.id <= ? AND NOT EXISTS"
        " (SELECT 1 FROM blob_keys AS k WHERE k.hash = b.hash AND k.id = b.id)",
        (upto,),
    ).fetchone()[0]
    if unkeyed:
        problems.append(f"{unkeyed} merged blobs have no key in blob_keys")
    dangling = db.execute(
        "SELECT count(*) FROM blob_keys AS k WHERE NOT EXISTS"
        " (SELECT 1 FROM blobs AS b WHERE b.id = k.id AND b.hash = k.hash)"
    ).fetchone()[0]
    if dangling:
        problems.append(f"{dangling} keys in blob_keys name no blob with that hash")
    twice = db.execute(
        "SELECT count(*) FROM (SELECT hash FROM blobs GROUP BY hash HAVING count(*) > 1)"
    ).fetchone()[0]
    if twice:
        problems.append(f"{twice} hashes are stored more than once")
    return problems


def _chunks(keys: list[K]) -> Iterable[list[K]]:
    for start in range(0, len(keys), _CHUNK):
        yield keys[start : start + _CHUNK]
