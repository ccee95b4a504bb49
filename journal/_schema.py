"""Opening the journal file: connections, pragmas, schema checks and migrations.

The schema version is ``PRAGMA user_version``; each migration also records a row
in ``migrations``, inside the same ``BEGIN IMMEDIATE`` transaction that applies
it, so a crash leaves the file either fully at the old version or fully at the new.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from sqlite_utils import Database

from . import _chain, _codec, _places
from ._errors import make_error, map_errors
from ._records import Durability

__all__ = [
    "APPLICATION_ID",
    "LATEST_VERSION",
    "MIGRATIONS",
    "check_readable",
    "connect",
    "connect_readonly",
    "prepare",
]

# "LFJ1": marks the file as a ledgerfs journal, so a foreign database is refused.
APPLICATION_ID = 0x4C464A31

# Tests replace this with a sqlite3.Connection subclass that injects faults.
connection_factory: type[sqlite3.Connection] = sqlite3.Connection


class Migration(msgspec.Struct, frozen=True, kw_only=True):
    """One forward step of the schema."""

    version: int
    name: str
    apply: Callable[[Database], None]


def _create_tables(db: Database) -> None:
    """Version 1: the five tables."""
    db.create_table("migrations", {"version": int, "name": str, "applied_at": float}, pk="version")
    db.create_table(
        "transactions",
        {
            "id": int,
            "session": str,
            "state": str,
            "outcome": str,
            "cause": str,
            "created_at": float,
            "finished_at": float,
            "undo_of": int,
            "summary": str,
            "owner": str,
            "checkpointed": int,
        },
        pk="id",
        not_null=["session", "state", "created_at", "summary", "owner", "checkpointed"],
        defaults={"checkpointed": 0, "summary": ""},
    )
    db.create_table(
        "mutations",
        {
            "tx": int,
            "ordinal": int,
            "op": str,
            "path": str,
            "destination": str,
            "before_hash": str,
            "after_hash": str,
            "before_mode": int,
            "after_mode": int,
            "kind": str,
            "applied": int,
        },
        pk=("tx", "ordinal"),
        foreign_keys=[("tx", "transactions", "id")],
        not_null=["op", "path", "kind", "applied"],
        defaults={"kind": "file", "applied": 0},
    )
    db.create_table(
        "blobs", {"hash": str, "size": int, "data": bytes}, pk="hash", not_null=["size", "data"]
    )
    db.create_table(
        "sessions",
        {"id": str, "budget_used": int, "created_at": float},
        pk="id",
        not_null=["budget_used", "created_at"],
    )
    db.create_table(
        "issue_writes",
        {
            "id": int,
            "key": str,
            "provider": str,
            "repo": str,
            "kind": str,
            "payload": str,
            "marker": str,
            "state": str,
            "result": str,
            "created_at": float,
            "finished_at": float,
        },
        pk="id",
        not_null=["key", "provider", "repo", "kind", "payload", "marker", "state", "created_at"],
    )


def _create_indexes(db: Database) -> None:
    """Version 2: the indexes that keep history, recovery and gc flat as the journal grows."""
    # history(path=...) and last_change: newest tx first for a path or a move destination.
    db.table("mutations").create_index(["path", "tx"], index_name="idx_mutations_path")
    db.table("mutations").create_index(
        ["destination", "tx"], index_name="idx_mutations_destination"
    )
    db.table("transactions").create_index(["session", "id"], index_name="idx_transactions_session")
    # claim_unfinished and checkpoint look for pending / not-checkpointed rows only.
    db.table("transactions").create_index(
        ["state", "checkpointed", "owner"], index_name="idx_transactions_state"
    )
    db.table("transactions").create_index(["created_at"], index_name="idx_transactions_created")
    db.table("issue_writes").create_index(["key"], index_name="idx_issue_writes_key")
    db.table("issue_writes").create_index(["state"], index_name="idx_issue_writes_state")


def _lean_record(db: Database) -> None:
    """Version 3: one row per transaction, blobs under binary hashes, one path index.

    A transaction's mutations move into its row (msgpack, `_codec`); which of them
    are applied becomes one column; `paths` lists every path and move destination
    a transaction names, keyed (path, tx); blobs are keyed by the 32 bytes of their
    hash. An intent then writes its row, one `paths` entry per path, the blobs that
    are new and its session's budget: about half the pages of version 2.
    """
    conn = db.conn
    conn.execute("ALTER TABLE transactions ADD COLUMN mutations BLOB NOT NULL DEFAULT x'90'")
    # NULL: every mutation applied; otherwise a msgpack list of the applied ordinals.
    conn.execute("ALTER TABLE transactions ADD COLUMN applied BLOB")
    conn.execute(
        "CREATE TABLE paths (path TEXT NOT NULL, tx INTEGER NOT NULL, PRIMARY KEY (path, tx))"
        " WITHOUT ROWID"
    )
    # A rowid table: in a WITHOUT ROWID b-tree a 4 KiB row inserts three times
    # slower (its cells are kept small, so it splits and overflows more).
    conn.execute(
        "CREATE TABLE blobs_v3 (hash BLOB PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL)"
    )
    # A stored hash that is not a content hash raises ValueError: `prepare` says corrupt.
    _carry_mutations(conn)
    _carry_blobs(conn)
    conn.execute("DROP TABLE mutations")
    conn.execute("DROP TABLE blobs")
    conn.execute("ALTER TABLE blobs_v3 RENAME TO blobs")
    for name in ("session", "state", "created"):
        conn.execute(f"DROP INDEX IF EXISTS idx_transactions_{name}")
    # Only unfinished rows (pending, or committed and not checkpointed) are in it,
    # so it stays a few pages however long the journal grows.
    conn.execute("CREATE INDEX idx_transactions_open ON transactions (id) WHERE checkpointed = 0")


def _carry_mutations(conn: sqlite3.Connection) -> None:
    """Fold each version-2 transaction's mutation rows into its row and `paths`."""
    rows = conn.execute(
        "SELECT tx, ordinal, op, path, destination, before_hash, after_hash, before_mode,"
        " after_mode, kind, applied FROM mutations ORDER BY tx, ordinal"
    )
    for tx, group in itertools.groupby(rows, key=lambda row: int(row[0])):
        mutations, applied = [], []
        for row in group:
            mutations.append(
                _codec.Stored(
                    ordinal=row[1],
                    op=row[2],
                    path=row[3],
                    destination=row[4],
                    before=_codec.hash_key(row[5]),
                    after=_codec.hash_key(row[6]),
                    before_mode=row[7],
                    after_mode=row[8],
                    kind=row[9],
                )
            )
            applied.append((int(row[1]), bool(row[10])))
        every = all(flag for _, flag in applied)
        conn.execute(
            "UPDATE transactions SET mutations = ?, applied = ? WHERE id = ?",
            (
                _codec.encode_mutations(mutations),
                None if every else _codec.encode_ordinals([o for o, flag in applied if flag]),
                tx,
            ),
        )
        conn.executemany(
            "INSERT OR IGNORE INTO paths (path, tx) VALUES (?, ?)",
            [(p, tx) for p in _codec.named_paths(mutations)],
        )


def _carry_blobs(conn: sqlite3.Connection) -> None:
    """Copy the version-2 blobs under their binary keys."""
    cursor = conn.execute("SELECT hash, size, data FROM blobs")
    while rows := cursor.fetchmany(256):
        conn.executemany(
            "INSERT OR IGNORE INTO blobs_v3 (hash, size, data) VALUES (?, ?, ?)",
            [(_codec.hash_key(digest), size, data) for digest, size, data in rows],
        )


def _blob_ids(db: Database) -> None:
    """Version 4: blobs in id order, their hashes indexed in batches (`_blobstore`).

    Every blob keeps its rowid as its id and gets its key in ``blob_keys``: the
    whole store starts merged. The blobs' bytes are copied once.
    """
    conn = db.conn
    conn.execute(
        "CREATE TABLE blobs_v4 (id INTEGER PRIMARY KEY, hash BLOB NOT NULL,"
        " size INTEGER NOT NULL, data BLOB NOT NULL)"
    )
    conn.execute(
        "INSERT INTO blobs_v4 (id, hash, size, data)"
        " SELECT rowid, hash, size, data FROM blobs ORDER BY rowid"
    )
    conn.execute(
        "CREATE TABLE blob_keys (hash BLOB PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID"
    )
    conn.execute("INSERT INTO blob_keys (hash, id) SELECT hash, id FROM blobs_v4 ORDER BY hash")
    # One row: the highest id whose key blob_keys holds (every lower one's too).
    conn.execute("CREATE TABLE blob_merged (upto INTEGER NOT NULL)")
    conn.execute("INSERT INTO blob_merged (upto) SELECT coalesce(max(id), 0) FROM blobs_v4")
    conn.execute("DROP TABLE blobs")
    conn.execute("ALTER TABLE blobs_v4 RENAME TO blobs")


def _sessions_and_checkpoints(db: Database) -> None:
    """Version 5: who each session is and what it did; checkpoints; transactions by session.

    A session's row gains the client that opened it (name and version, as the
    client gave them), its last activity and the counts its transactions add as
    they begin (`begin_many` updates them in the upsert it already makes, so the
    listing of sessions reads one row each). `checkpoints` holds the points a
    session named, each with the newest transaction in effect at that point.
    """
    conn = db.conn
    for column in ("client_name TEXT", "client_version TEXT", "last_activity REAL"):
        conn.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
    for column in ("transactions", "files_changed"):
        conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    # history(session=...) and the rewind of a session: its transactions by id.
    conn.execute("CREATE INDEX idx_transactions_session ON transactions (session, id)")
    conn.execute("CREATE INDEX idx_sessions_started ON sessions (created_at)")
    conn.execute(
        "CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, label TEXT, session TEXT NOT NULL,"
        " tx INTEGER, created_at REAL NOT NULL)"
    )
    conn.execute("CREATE INDEX idx_checkpoints_session ON checkpoints (session, id)")
    _carry_sessions(conn)


def _carry_sessions(conn: sqlite3.Connection) -> None:
    """Count what the transactions already journaled did, session by session."""
    # A session whose row is missing (none is, as version 4 wrote them) gets one.
    conn.execute(
        "INSERT OR IGNORE INTO sessions (id, budget_used, created_at)"
        " SELECT session, 0, min(created_at) FROM transactions GROUP BY session"
    )
    conn.execute(
        "UPDATE sessions SET transactions = t.n, last_activity = t.newest"
        " FROM (SELECT session, count(*) AS n, max(created_at) AS newest FROM transactions"
        " GROUP BY session) AS t WHERE sessions.id = t.session"
    )
    conn.execute(
        "UPDATE sessions SET files_changed = f.n"
        " FROM (SELECT t.session, count(*) AS n FROM paths p JOIN transactions t ON t.id = p.tx"
        " GROUP BY t.session) AS f WHERE sessions.id = f.session"
    )
    conn.execute("UPDATE sessions SET last_activity = created_at WHERE last_activity IS NULL")


def _query_indexes(db: Database) -> None:
    """Version 6: an index for every question the tools and commands ask of the journal.

    Whether a transaction was undone, and by which, is asked of every transaction
    a history page or an undo names: `undo_of` is indexed, only where it is set
    (undos are few among the rows). A time window (`ledgerfs log --since/--until`,
    gc's --keep-days) walks `created_at`. Paths, sessions and checkpoints have
    theirs already (versions 3 and 5).
    """
    conn = db.conn
    conn.execute(
        "CREATE INDEX idx_transactions_undo_of ON transactions (undo_of, id)"
        " WHERE undo_of IS NOT NULL"
    )
    conn.execute("CREATE INDEX idx_transactions_created ON transactions (created_at)")


def _audit_chain(db: Database) -> None:
    """Version 7: the audit chain (`_chain`), with every finished record linked in id order.

    Records still open (pending, or committed and not checkpointed) are linked
    when they finish, after these.
    """
    _chain.create(db)
    _chain.seal_all(db)


def _chunked_images(db: Database) -> None:
    """Version 8: images stored compressed, or as chunks that images share (`_blobstore`).

    A blob gains its form (as it is, a zstd frame, or chunked), and a chunked
    blob's chunk ids live in ``blob_chunks``. The blobs written before stay as
    they are (form 0, their bytes as they are) and are read as such: the
    migration adds a column with a constant default and a table, whatever the
    journal holds.
    """
    conn = db.conn
    conn.execute("ALTER TABLE blobs ADD COLUMN form INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE TABLE blob_chunks (id INTEGER PRIMARY KEY, chunks BLOB NOT NULL)")


def _relative_paths(db: Database) -> None:
    """Version 9: paths inside roots stored relative to them (`_places`).

    It adds the tables of roots and of the journal's locations, and records where
    the journal is now. The paths already stored become keys when their root is
    first given to an open (the engine gives every open its roots), in the
    transaction that records that root: the journal file alone cannot tell which
    folders were roots.
    """
    _places.create_tables(db)
    db.execute(
        "INSERT INTO locations (path, since) VALUES (?, ?)",
        (_places.journal_file(db), time.time()),
    )


MIGRATIONS: list[Migration] = [
    Migration(version=1, name="tables", apply=_create_tables),
    Migration(version=2, name="indexes", apply=_create_indexes),
    Migration(version=3, name="lean record", apply=_lean_record),
    Migration(version=4, name="blob ids", apply=_blob_ids),
    Migration(version=5, name="sessions and checkpoints", apply=_sessions_and_checkpoints),
    Migration(version=6, name="query indexes", apply=_query_indexes),
    Migration(version=7, name="audit chain", apply=_audit_chain),
    Migration(version=8, name="chunked images", apply=_chunked_images),
    Migration(version=9, name="relative paths", apply=_relative_paths),
]
LATEST_VERSION = MIGRATIONS[-1].version


def connect(path: Path, *, busy_timeout: float, durability: Durability) -> Database:
    """Open one connection with the journal's pragmas (autocommit; BEGIN is explicit)."""
    synchronous = "FULL" if durability == "full" else "NORMAL"
    return _open(
        str(path),
        busy_timeout=busy_timeout,
        pragmas=("PRAGMA foreign_keys = ON", f"PRAGMA synchronous = {synchronous}"),
    )


def connect_readonly(path: Path, *, busy_timeout: float) -> Database:
    """Open one connection that can only read (SQLite's mode=ro; it never creates the file)."""
    return _open(
        f"{path.as_uri()}?mode=ro", busy_timeout=busy_timeout, pragmas=("PRAGMA query_only = ON",)
    )


def _open(target: str, *, busy_timeout: float, pragmas: tuple[str, ...]) -> Database:
    """Connect to `target` (a path, or a ``file:`` URI) in autocommit and run `pragmas`;
    the connection is closed again if one fails."""
    conn = sqlite3.connect(
        target,
        uri=target.startswith("file:"),
        timeout=busy_timeout,
        isolation_level=None,
        check_same_thread=False,
        factory=connection_factory,
    )
    try:
        for pragma in pragmas:
            conn.execute(pragma)
        # Plugins are not ours to run inside a journal (and loading them is slow).
        return Database(conn, execute_plugins=False, recursive_triggers=False)
    except BaseException:
        conn.close()
        raise


def _header(db: Database) -> tuple[int, int, int]:
    """Return (user_version, application_id, number of tables); reading fails on garbage.

    One statement, so one snapshot: read apart, a journal another process creates
    meanwhile would show its tables beside the version it had before (0), which
    reads as a foreign database.
    """
    row = db.execute(
        "SELECT (SELECT user_version FROM pragma_user_version),"
        " (SELECT application_id FROM pragma_application_id),"
        " (SELECT count(*) FROM sqlite_master WHERE type = 'table')"
    ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def _check_header(db: Database, label: str) -> int:
    """Refuse a foreign or newer file before anything is written to it; return its version."""
    version, app_id, tables = _header(db)
    if version > LATEST_VERSION:
        raise make_error(
            "newer_schema",
            label,
            f"schema version {version} is newer than this code knows ({LATEST_VERSION})",
        )
    foreign = app_id not in (0, APPLICATION_ID) or (version == 0 and tables > 0)
    if foreign:
        # Never initialise over somebody else's data.
        raise make_error(
            "corrupt", label, "the file is an SQLite database but not a ledgerfs journal"
        )
    return version


def _migrate_one(db: Database, migration: Migration) -> None:
    """Apply one migration and record it, atomically; skip it if another process did."""
    db.execute("BEGIN IMMEDIATE")
    try:
        current = int(db.execute("PRAGMA user_version").fetchone()[0])
        if current < migration.version:
            migration.apply(db)
            db.execute(
                "INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {migration.version}")
        db.execute("COMMIT")
    except BaseException:
        # The failure may already have ended the transaction (SQLITE_FULL does).
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise


def check_readable(db: Database, label: str) -> int:
    """Check the header of a journal opened read-only; return its version.

    Without migrations to run, a file that was never initialised is not a journal.
    """
    with map_errors(label):
        version = _check_header(db, label)
        if version == 0:
            raise make_error("corrupt", label, "the file is not an initialised ledgerfs journal")
        if version < LATEST_VERSION:
            raise make_error(
                "old_schema",
                label,
                f"it is at schema version {version}, and a read-only open reads only"
                f" version {LATEST_VERSION}",
            )
        return version


def prepare(db: Database, label: str) -> int:
    """Check the header, switch to WAL and run pending migrations; return the version."""
    with map_errors(label):
        version = _check_header(db, label)
        mode = str(db.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        if mode != "wal":
            raise make_error("io", label, f"cannot switch to WAL mode (got {mode!r})")
        for migration in MIGRATIONS:
            if migration.version > version:
                try:
                    _migrate_one(db, migration)
                except ValueError as exc:
                    raise make_error(
                        "corrupt", label, f"cannot migrate to version {migration.version}: {exc}"
                    ) from exc
        return _check_header(db, label)
