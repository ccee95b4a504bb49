"""gc and verify: dropping old transactions and unused blobs, checking the file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from sqlite_utils import Database

from . import _blobstore, _chain, _codec, _places, _sql
from ._records import GcReport, IntegrityReport, VerifiedPoint

__all__ = ["gc", "gc_candidates", "give_back", "size_on_disk", "verify"]

# A transaction that nothing will ever need to recover from.
_FINISHED = "(state IN ('rolled_back', 'recovered') OR (state = 'committed' AND checkpointed = 1))"
_KNOWN_STATES = ("pending", "committed", "rolled_back", "recovered")
#: Above every transaction id (SQLite's integers are 64-bit).
_MAX_ID = 2**63 - 1


def _drop_clause(
    keep_days: float | None, keep_last: int | None, now: float
) -> tuple[str, list[float]]:
    """Return SQL that is true for transactions outside the keep policy.

    Each bound is a range of an index (the ids, the times), so gc reads the rows it
    drops, not the ones it keeps.
    """
    parts: list[str] = []
    params: list[float] = []
    if keep_last is not None and keep_last > 0:
        # Older than the keep_last-th newest transaction; none if there are fewer.
        parts.append(
            "id < coalesce((SELECT id FROM transactions WHERE id < ?"
            " ORDER BY id DESC LIMIT 1 OFFSET ?), 0)"
        )
        params.extend((_MAX_ID, keep_last - 1))
    if keep_days is not None:
        parts.append("created_at < ?")
        params.append(now - keep_days * 86400.0)
    return " AND ".join(parts) if parts else "1", params


def _doomed_query(
    keep_days: float | None, keep_last: int | None, now: float
) -> tuple[str, list[float]]:
    """SELECT of the ids gc drops under the keep policy (one answer for gc and its preview)."""
    drop, params = _drop_clause(keep_days, keep_last, now)
    # The newest row always stays: ids are rowids, and SQLite would hand a dropped
    # maximum out again, so an old id could come back naming a new transaction.
    return (
        f"SELECT id FROM transactions WHERE {drop} AND {_FINISHED}"
        " AND id < (SELECT max(id) FROM transactions)"
    ), params


def gc_candidates(
    db: Database, keep_days: float | None, keep_last: int | None, now: float
) -> list[int]:
    """The ids `gc` would drop now, oldest first."""
    if keep_days is None and keep_last is None:
        return []
    select, params = _doomed_query(keep_days, keep_last, now)
    return [int(r[0]) for r in db.execute(f"{select} ORDER BY id", params).fetchall()]


def gc(
    db: Database,
    keep_days: float | None,
    keep_last: int | None,
    now: float,
    only: list[int] | None = None,
) -> GcReport:
    """Drop finished transactions outside the keep policy, then unreferenced blobs.

    With `only`, drop no transaction outside it (what a preview showed).
    """
    if keep_days is None and keep_last is None:
        return GcReport(transactions_dropped=0, blobs_dropped=0, bytes_freed=0)
    select, params = _doomed_query(keep_days, keep_last, now)
    db.execute("CREATE TEMP TABLE IF NOT EXISTS gc_doomed (id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM gc_doomed")
    db.execute(f"INSERT INTO gc_doomed {select}", params)
    if only is not None:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS gc_only (id INTEGER PRIMARY KEY)")
        db.execute("DELETE FROM gc_only")
        db.conn.executemany("INSERT OR IGNORE INTO gc_only VALUES (?)", [(i,) for i in only])
        db.execute("DELETE FROM gc_doomed WHERE id NOT IN (SELECT id FROM gc_only)")
        db.execute("DELETE FROM gc_only")
    doomed = db.execute(
        "SELECT id, mutations FROM transactions WHERE id IN (SELECT id FROM gc_doomed)"
    ).fetchall()
    # The index holds keys for paths stored absolute before their root was recorded.
    first = _places.Places(_places.first_places(db))
    db.conn.executemany(
        "DELETE FROM paths WHERE path = ? AND tx = ?",
        [
            (_places.index_form(path, first), tx)
            for tx, data in doomed
            for path in _codec.named_paths(_codec.decode_mutations(data))
        ],
    )
    dropped = db.execute("DELETE FROM transactions WHERE id IN (SELECT id FROM gc_doomed)").rowcount
    # Their links stay; this entry says they were dropped, not deleted behind its back.
    _chain.record_gc(db, (int(tx) for tx, _ in doomed), now)
    db.execute("DELETE FROM gc_doomed")
    count, size = _drop_unreferenced(db)
    return GcReport(
        transactions_dropped=int(dropped), blobs_dropped=int(count), bytes_freed=int(size)
    )


def give_back(db: Database) -> None:
    """Return the journal's free pages to the file system.

    SQLite keeps the pages of deleted rows for reuse, so a gc alone leaves the
    file its size. VACUUM rewrites the file without them (into the WAL, then a
    TRUNCATE checkpoint copies it back and empties the WAL): it takes time and
    temporary space in proportion to what the journal keeps, which is why only
    gc runs it, and only when gc left free pages. `db` must be in no transaction
    and its writer held off. A reader that holds an old snapshot can delay the
    truncation; the file then shrinks at a later checkpoint.
    """
    if db.execute("PRAGMA freelist_count").fetchone()[0]:
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def size_on_disk(path: Path) -> int:
    """The bytes of the journal's file and its WAL."""
    total = 0
    for name in (path, path.with_name(path.name + "-wal")):
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(name).st_size
    return total


def _referenced(db: Database) -> Iterator[bytes]:
    """Every hash whose blob a stored mutation needs (read from each transaction row)."""
    cursor = db.execute("SELECT mutations FROM transactions")
    while rows := cursor.fetchmany(512):
        for (data,) in rows:
            yield from _images_needed(data)


def _images_needed(data: bytes) -> Iterator[bytes]:
    """The hashes whose blobs one transaction row's mutations need: each after image,
    and each before image that was kept."""
    for m in _codec.decode_mutations(data):
        if m.before is not None and m.before_kept:
            yield m.before
        if m.after is not None:
            yield m.after


def _drop_unreferenced(db: Database) -> tuple[int, int]:
    """Delete the blobs no transaction names; return how many and their bytes."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS gc_used (hash BLOB PRIMARY KEY) WITHOUT ROWID")
    db.execute("DELETE FROM gc_used")
    db.conn.executemany("INSERT OR IGNORE INTO gc_used VALUES (?)", ((h,) for h in _referenced(db)))
    count, size = _blobstore.drop_unused(db, "gc_used")
    db.execute("DELETE FROM gc_used")
    return count, size


def _pragma_problems(db: Database, full: bool) -> list[str]:
    """Run SQLite's own checks; return their complaints."""
    check = "integrity_check" if full else "quick_check"
    problems = [str(r[0]) for r in db.execute(f"PRAGMA {check}").fetchall() if r[0] != "ok"]
    for row in db.execute("PRAGMA foreign_key_check").fetchall():
        problems.append(f"foreign key violation in {row[0]} rowid {row[1]} -> {row[2]}")
    marks = ",".join("?" * len(_KNOWN_STATES))
    bad = db.execute(
        f"SELECT count(*) FROM transactions WHERE state NOT IN ({marks})", _KNOWN_STATES
    ).fetchone()[0]
    if bad:
        problems.append(f"{bad} transactions have an unknown state")
    return problems


def _missing_blobs(db: Database, txs: list[int] | None = None) -> list[str]:
    """Return hashes that mutations (of `txs` when given) reference but the blobs
    table lacks."""
    referenced = set(_referenced(db) if txs is None else _referenced_by(db, txs))
    tail = _blobstore.Tail()  # one read of the tail, not one per chunk of hashes
    tail.sync(db)
    missing = referenced - _blobstore.find(db, referenced, tail)
    return sorted(_codec.hash_text(h) or "" for h in missing)


def _referenced_by(db: Database, txs: list[int]) -> Iterator[bytes]:
    """Every hash whose blob the mutations of `txs` need."""
    sql = "SELECT mutations FROM transactions WHERE id IN ({marks})"
    for (data,) in _sql.rows_in(db, sql, txs):
        yield from _images_needed(data)


def _corrupt_blobs(db: Database, above: int = 0) -> tuple[int, list[str]]:
    """Hash every stored blob with an id above `above` (a chunked image reassembled
    from its chunks, so a damaged chunk shows in it too); return how many were
    checked and which do not match."""
    checked = 0
    corrupt: list[str] = []
    cursor = db.execute("SELECT id, hash, size, form, data FROM blobs WHERE id > ?", (above,))
    while rows := cursor.fetchmany(256):
        for id, key, size, form, data in rows:
            checked += 1
            if not _blobstore.intact(db, bytes(key), size, (id, form, bytes(data))):
                corrupt.append(_codec.hash_text(bytes(key)) or "")
    return checked, sorted(corrupt)


def verify(
    db: Database, full: bool, label: str, now: float, since: VerifiedPoint | None = None
) -> IntegrityReport:
    """Check the file, the references, every blob's bytes and the audit chain.

    With `since` (a point an earlier verify reached), only what came after it:
    the links chained since and their records' blobs, the blobs stored since, and
    that the chain still holds the link the point recorded. SQLite's own checks
    read the whole file, so they run only without it.
    """
    if since is None:
        chain = _chain.check(db)
        problems = _pragma_problems(db, full) + _blobstore.integrity(db)
        missing = _missing_blobs(db)
        checked, corrupt = _corrupt_blobs(db)
    else:
        chain = _chain.check(db, since.seq, _anchor(since), above_tx=since.transaction)
        problems = []
        missing = _missing_blobs(db, chain.transactions)
        checked, corrupt = _corrupt_blobs(db, above=since.blob)
    problems += chain.problems
    ok = not (problems or missing or corrupt)
    newest_tx, newest_blob = db.execute(
        "SELECT (SELECT coalesce(max(id), 0) FROM transactions),"
        " (SELECT coalesce(max(id), 0) FROM blobs)"
    ).fetchone()
    point = VerifiedPoint(
        journal=label,
        seq=chain.head_seq,
        link=_codec.hash_text(chain.head_link) or "",
        transaction=int(newest_tx),
        blob=int(newest_blob),
        at=now,
    )
    return IntegrityReport(
        ok=ok,
        blobs_checked=checked,
        missing=missing,
        corrupt=corrupt,
        problems=problems,
        links_checked=chain.checked,
        point=point,
        since=since,
        transactions=chain.transactions,
    )


def _anchor(point: VerifiedPoint) -> bytes:
    """The link a point recorded (no bytes, which matches no link, if it is garbled)."""
    try:
        return _codec.hash_key(point.link) or b""
    except ValueError:
        return b""
