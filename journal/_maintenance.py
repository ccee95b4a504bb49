"""gc and verify: dropping old transactions and unused blobs, checking the file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from sqlite_utils import Database

from . import _blobstore, _codec
from ._records import GcReport, IntegrityReport, content_hash

__all__ = ["gc", "gc_candidates", "give_back", "size_on_disk", "verify"]

# A transaction that nothing will ever need to recover from.
_FINISHED = "(state IN ('rolled_back', 'recovered') OR (state = 'committed' AND checkpointed = 1))"
_KNOWN_STATES = ("pending", "committed", "rolled_back", "recovered")


def _keep_clause(
    keep_days: float | None, keep_last: int | None, now: float
) -> tuple[str, list[float]]:
    """Return SQL that is true for transactions the keep policy protects."""
    parts: list[str] = []
    params: list[float] = []
    if keep_last is not None and keep_last > 0:
        # The id of the keep_last-th newest transaction; NULL (keep all) if there are fewer.
        parts.append(
            "id >= coalesce((SELECT id FROM transactions ORDER BY id DESC LIMIT 1 OFFSET ?), 0)"
        )
        params.append(keep_last - 1)
    if keep_days is not None:
        parts.append("created_at >= ?")
        params.append(now - keep_days * 86400.0)
    return ("(" + " OR ".join(parts) + ")") if parts else "0", params


def _doomed_query(
    keep_days: float | None, keep_last: int | None, now: float
) -> tuple[str, list[float]]:
    """SELECT of the ids gc drops under the keep policy (one answer for gc and its preview)."""
    keep, params = _keep_clause(keep_days, keep_last, now)
    # The newest row always stays: ids are rowids, and SQLite would hand a dropped
    # maximum out again, so an old id could come back naming a new transaction.
    return (
        f"SELECT id FROM transactions WHERE {_FINISHED} AND NOT {keep}"
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
    db.conn.executemany(
        "DELETE FROM paths WHERE path = ? AND tx = ?",
        [
            (path, tx)
            for tx, data in doomed
            for path in _codec.named_paths(_codec.decode_mutations(data))
        ],
    )
    dropped = db.execute("DELETE FROM transactions WHERE id IN (SELECT id FROM gc_doomed)").rowcount
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


def _missing_blobs(db: Database) -> list[str]:
    """Return hashes that mutations reference but the blobs table lacks."""
    referenced = set(_referenced(db))
    tail = _blobstore.Tail()  # one read of the tail, not one per chunk of hashes
    tail.sync(db)
    missing = referenced - _blobstore.find(db, referenced, tail)
    return sorted(_codec.hash_text(h) or "" for h in missing)


def _corrupt_blobs(db: Database) -> tuple[int, list[str]]:
    """Hash every stored blob; return how many were checked and which do not match."""
    checked = 0
    corrupt: list[str] = []
    cursor = db.execute("SELECT hash, size, data FROM blobs")
    while rows := cursor.fetchmany(256):
        for key, size, data in rows:
            checked += 1
            digest = _codec.hash_text(bytes(key)) or ""
            if len(data) != size or content_hash(bytes(data)) != digest:
                corrupt.append(digest)
    return checked, sorted(corrupt)


def verify(db: Database, full: bool) -> IntegrityReport:
    """Check the file, the references and every blob's bytes."""
    problems = _pragma_problems(db, full) + _blobstore.integrity(db)
    missing = _missing_blobs(db)
    checked, corrupt = _corrupt_blobs(db)
    ok = not (problems or missing or corrupt)
    return IntegrityReport(
        ok=ok, blobs_checked=checked, missing=missing, corrupt=corrupt, problems=problems
    )
