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

A row holds its bytes in one of three forms (`_images.Form`, its ``form``
column): as they are, as a zstd frame, or (an image above
`_images.CHUNKED_FROM`) as the list of its chunks' ids in ``blob_chunks (id ->
chunks)``, each chunk a row of its own, keyed by its hash like any blob, so
images share the chunks they have in common. A row's ``size`` is the length of
its bytes, ``hash`` their blake3 hash, whatever the form.

Invariants (verify checks them): every blob with ``id <= upto`` has its key in
``blob_keys``, pointing at it; no hash is stored twice; a chunked row has one
chunk list, and every id it lists names a row that is not chunked. A new blob's id is above
both the highest id and ``upto`` (gc may have deleted the highest ids), and gc
merges the tail before it deletes, so it deletes keyed blobs only and a tail
blob is never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

import blake3
from sqlite_utils import Database

from . import _sql
from ._images import BROKEN, Form, Image, decode_chunk_ids, encode_chunk_ids, pack, unpack

__all__ = [
    "MERGE_AT",
    "Row",
    "Tail",
    "drop_unused",
    "find",
    "ids",
    "intact",
    "integrity",
    "load",
    "merge",
    "pieces",
    "store",
]

# Tail length at which the writer merges it into blob_keys. Group commit of 4 KiB
# blobs makes 1.04 - 1.06x the records at 8,192 than at 1,024 (fresh journals,
# 1 s windows, `python -m benchmarks.ab_journal`); lookups read the tail from a cache, so
# its length costs them nothing but the cache's first fill.
MERGE_AT = 8192
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


def ids(db: Database, keys: Iterable[bytes], tail: Tail | None = None) -> dict[bytes, int]:
    """{key: id} of the stored blobs among `keys`. With `tail` (synced in this
    transaction) the tail is not scanned."""
    wanted = list(dict.fromkeys(keys))
    found: dict[bytes, int] = {}
    if tail is not None:
        found = {key: tail.ids[key] for key in wanted if key in tail.ids}
        wanted = [key for key in wanted if key not in found]
    for chunk in _sql.chunks(wanted):
        marks = ",".join("?" * len(chunk))
        rows = db.execute(f"SELECT hash, id FROM blob_keys WHERE hash IN ({marks})", chunk)
        found.update((bytes(key), id) for key, id in rows)
        if tail is None:
            rows = db.execute(
                "SELECT hash, id FROM blobs WHERE id > (SELECT upto FROM blob_merged)"
                f" AND hash IN ({marks})",
                chunk,
            )
            found.update((bytes(key), id) for key, id in rows)
    return found


def find(db: Database, keys: Iterable[bytes], tail: Tail | None = None) -> set[bytes]:
    """Which of `keys` are stored. With `tail` (synced in this transaction) the
    tail is not scanned."""
    return set(ids(db, keys, tail))


def store(db: Database, images: list[Image], tail: Tail | None = None) -> None:
    """Insert the images of `images` that are not stored yet.

    An image already stored (an edit's before image is usually the previous
    edit's after image) costs a lookup and writes nothing; of a new chunked
    image, only the chunks not stored yet are written, beside its chunk list.
    Merges the tail once it reaches `MERGE_AT`.
    """
    given = {image.key: image for image in images}
    stored = find(db, given, tail)
    new = [image for key, image in given.items() if key not in stored]
    if not new:
        return
    # Every new whole blob, the chunks of new chunked images among them, in id order.
    whole: dict[bytes, bytes | memoryview] = {
        image.key: image.data for image in new if image.data is not None
    }
    chunked = [image for image in new if image.chunks is not None]
    known: dict[bytes, int] = {}
    if chunked:
        named = {key for image in chunked for key, _ in image.chunks or ()}
        known = ids(db, named - whole.keys(), tail)
        for image in chunked:
            for key, piece in image.chunks or ():
                if key not in known:
                    whole.setdefault(key, piece)
    count = len(whole) + len(chunked)
    if tail is not None:
        first, upto = tail.next_id, tail.upto
        tail.next_id += count
    else:
        first, upto = db.execute(
            "SELECT max(coalesce((SELECT max(id) FROM blobs), 0), upto) + 1, upto FROM blob_merged"
        ).fetchone()
    known.update((key, first + n) for n, key in enumerate(whole))
    rows = [(first + n, key, len(data), *pack(data)) for n, (key, data) in enumerate(whole.items())]
    lists = []
    for n, image in enumerate(chunked, first + len(whole)):
        rows.append((n, image.key, image.size, Form.CHUNKED, b""))
        lists.append((n, encode_chunk_ids([known[key] for key, _ in image.chunks or ()])))
    db.conn.executemany(
        "INSERT INTO blobs (id, hash, size, form, data) VALUES (?, ?, ?, ?, ?)", rows
    )
    # REPLACE: a list whose row was deleted from outside the journal does not block
    # the id (ids are never handed out twice otherwise).
    db.conn.executemany("INSERT OR REPLACE INTO blob_chunks (id, chunks) VALUES (?, ?)", lists)
    if first + count - 1 - upto >= MERGE_AT:
        merge(db)  # the merged rows leave the tail: the next sync reads the new upto
    elif tail is not None:
        tail.new.extend((row[1], row[0]) for row in rows)


def merge(db: Database) -> int:
    """Index the tail's keys (sorted, so each index page is written once); return
    how many. Runs inside a write transaction."""
    cursor = db.execute(
        "INSERT INTO blob_keys (hash, id) SELECT hash, id FROM blobs"
        " WHERE id > (SELECT upto FROM blob_merged) ORDER BY hash"
    )
    db.execute("UPDATE blob_merged SET upto = max(upto, coalesce((SELECT max(id) FROM blobs), 0))")
    return int(cursor.rowcount)


# A stored row: (id, form, data).
Row = tuple[int, int, bytes]

# The merged rows of a chunk of keys, and the tail's; {marks} is the chunk's placeholders.
_KEYED = (
    "SELECT k.hash, b.id, b.form, b.data FROM blob_keys AS k JOIN blobs AS b ON b.id = k.id"
    " WHERE k.hash IN ({marks})"
)
_IN_TAIL = (
    "SELECT hash, id, form, data FROM blobs WHERE id > (SELECT upto FROM blob_merged)"
    " AND hash IN ({marks})"
)


def load(db: Database, keys: Iterable[bytes], tail: Tail | None = None) -> dict[bytes, bytes]:
    """The bytes of every key in `keys` that is stored whole: an image whose bytes
    do not hash to its key (a chunk missing or damaged, a frame that does not
    decompress) is left out, as verify reports, and never handed out as if whole.

    With `tail` (synced in this transaction) the tail's blobs are read by id and
    the tail is not scanned. Without it, one statement per chunk of keys, so the
    index and the tail are read in one snapshot even outside a transaction (a
    merge between two statements would hide a blob from both).
    """
    found: dict[bytes, bytes] = {}
    for key, row in _rows(db, list(dict.fromkeys(keys)), tail).items():
        try:
            data = b"".join(pieces(db, row))
        except (*BROKEN, LookupError):
            continue
        if blake3.blake3(data).digest() == key:
            found[key] = data
    return found


def _rows(db: Database, wanted: list[bytes], tail: Tail | None) -> dict[bytes, Row]:
    """{key: row} of the stored keys among `wanted`."""
    if tail is None:
        return _fetch(db, f"{_KEYED} UNION ALL {_IN_TAIL}", wanted, repeat=2)
    by_id = {tail.ids[key]: key for key in wanted if key in tail.ids}
    cached = _fetch(db, "SELECT id, id, form, data FROM blobs WHERE id IN ({marks})", list(by_id))
    found = {by_id[id]: row for id, row in cached.items()}
    found.update(_fetch(db, _KEYED, [key for key in wanted if key not in tail.ids]))
    return found


def _fetch(db: Database, sql: str, values: list[K], *, repeat: int = 1) -> dict[K, Row]:
    """{first column: the other three} of `sql` run for each chunk of `values` (bound
    `repeat` times over, once per ``{marks}`` in `sql`)."""
    found: dict[K, Row] = {}
    for chunk in _sql.chunks(values):
        rows = db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk * repeat)
        found.update((first, (id, form, bytes(data))) for first, id, form, data in rows)
    return found


def pieces(db: Database, row: Row) -> Iterator[bytes]:
    """A stored row's bytes, in order: the whole blob, or its chunks a batch at a time.

    Raises LookupError if a chunk (or a chunked row's list) is missing, and one of
    `BROKEN` if stored bytes do not decode.
    """
    id, form, data = row
    if form != Form.CHUNKED:
        yield unpack(form, data)
        return
    listed = db.execute("SELECT chunks FROM blob_chunks WHERE id = ?", (id,)).fetchone()
    if listed is None:
        raise LookupError(f"blob {id} has no chunk list")
    chunk_ids = decode_chunk_ids(bytes(listed[0]))
    for batch in _sql.chunks(chunk_ids):
        got = _fetch(db, "SELECT id, id, form, data FROM blobs WHERE id IN ({marks})", batch)
        for chunk_id in batch:
            chunk = got.get(chunk_id)
            if chunk is None or chunk[1] == Form.CHUNKED:
                raise LookupError(f"chunk {chunk_id} of blob {id} is missing")
            yield unpack(chunk[1], chunk[2])


def intact(db: Database, key: bytes, size: int, row: Row) -> bool:
    """Whether a stored row's bytes (reassembled from its chunks, if chunked) are
    `size` long and hash to `key`; read a chunk at a time."""
    hasher = blake3.blake3()
    length = 0
    try:
        for piece in pieces(db, row):
            hasher.update(piece)
            length += len(piece)
    except (*BROKEN, LookupError):
        return False
    return length == size and hasher.digest() == key


def drop_unused(db: Database, used_table: str) -> tuple[int, int]:
    """Delete the blobs that no hash in `used_table` (a temp table with a ``hash``
    column) names, as an image or as a chunk of one; return how many and their
    bytes (as read back, not as compressed). Merges the tail first, so only keyed
    blobs are deleted (the tail's invariant).

    A mark pass: the chunks of every used chunked image are kept, so a chunk two
    images share stays while either is used.
    """
    merge(db)
    db.execute("CREATE TEMP TABLE IF NOT EXISTS gc_chunks (id INTEGER PRIMARY KEY)")
    db.execute("CREATE TEMP TABLE IF NOT EXISTS gc_unused (id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM gc_chunks")
    db.execute("DELETE FROM gc_unused")
    lists = db.execute(
        "SELECT c.chunks FROM blob_keys AS k JOIN blob_chunks AS c ON c.id = k.id"
        f" WHERE k.hash IN (SELECT hash FROM {used_table})"
    ).fetchall()
    for (listed,) in lists:
        try:
            chunk_ids = decode_chunk_ids(bytes(listed))
        except BROKEN:
            continue  # the image is lost already (verify says so); its chunks are not kept
        db.conn.executemany(
            "INSERT OR IGNORE INTO gc_chunks (id) VALUES (?)", [(i,) for i in chunk_ids]
        )
    db.execute(
        "INSERT INTO gc_unused (id) SELECT id FROM blob_keys"
        f" WHERE hash NOT IN (SELECT hash FROM {used_table})"
        " AND id NOT IN (SELECT id FROM gc_chunks)"
    )
    unused = "SELECT id FROM gc_unused"
    # The bytes of the whole blobs and chunks dropped (a chunked image's are its chunks').
    count, size = db.execute(
        "SELECT count(*), coalesce(sum(CASE WHEN form = ? THEN 0 ELSE size END), 0)"
        f" FROM blobs WHERE id IN ({unused})",
        (Form.CHUNKED,),
    ).fetchone()
    db.execute(f"DELETE FROM blobs WHERE id IN ({unused})")
    db.execute(f"DELETE FROM blob_chunks WHERE id IN ({unused})")
    db.execute(f"DELETE FROM blob_keys WHERE id IN ({unused})")
    db.execute("DELETE FROM gc_chunks")
    db.execute("DELETE FROM gc_unused")
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
    return problems + _chunk_problems(db)


def _chunk_problems(db: Database) -> list[str]:
    """Chunked rows without a chunk list, lists without their row, lists that do not
    decode or that name a chunk that is missing or itself chunked."""
    problems: list[str] = []
    unlisted = db.execute(
        "SELECT count(*) FROM blobs AS b WHERE b.form = ? AND NOT EXISTS"
        " (SELECT 1 FROM blob_chunks AS c WHERE c.id = b.id)",
        (Form.CHUNKED,),
    ).fetchone()[0]
    if unlisted:
        problems.append(f"{unlisted} chunked blobs have no chunk list")
    broken = orphans = absent = 0
    for listed, form in db.execute(
        "SELECT c.chunks, b.form FROM blob_chunks AS c LEFT JOIN blobs AS b ON b.id = c.id"
    ).fetchall():
        if form != Form.CHUNKED:
            orphans += 1
            continue
        try:
            chunk_ids = sorted(set(decode_chunk_ids(bytes(listed))))
        except BROKEN:
            broken += 1
            continue
        for batch in _sql.chunks(chunk_ids):
            marks = ",".join("?" * len(batch))
            leaves = db.execute(
                f"SELECT count(*) FROM blobs WHERE id IN ({marks}) AND form != ?",
                [*batch, Form.CHUNKED],
            ).fetchone()[0]
            absent += len(batch) - leaves
    if orphans:
        problems.append(f"{orphans} chunk lists belong to no chunked blob")
    if broken:
        problems.append(f"{broken} chunk lists do not decode")
    if absent:
        problems.append(f"chunk lists name {absent} chunks that are missing or chunked")
    return problems
