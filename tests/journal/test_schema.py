"""Schema creation, migrations, pragmas, and the indexes behind flat history cost."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlite_utils import Database

from ledgerfs.journal import Journal
from ledgerfs.journal._schema import APPLICATION_ID, LATEST_VERSION, MIGRATIONS

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


async def test_open_creates_parent_dirs_tables_and_version(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        assert j.path == journal_path
        assert len(j.owner) == 32
    db = Database(raw(journal_path))
    tables = {"transactions", "paths", "blobs", "blob_keys", "blob_merged", "sessions"}
    tables.add("checkpoints")
    tables.add("chain")
    tables.add("blob_chunks")
    tables |= {"roots", "locations"}
    assert {*tables, "issue_writes", "migrations"} == set(db.table_names())
    assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    versions = [r[0] for r in db.execute("SELECT version FROM migrations ORDER BY version")]
    assert versions == [m.version for m in MIGRATIONS]


async def test_reopen_keeps_data_and_runs_no_migration(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        tx = await j.begin(write_intent("/a", b"x"))
        await j.commit(tx)
    async with Journal.open(journal_path, create=False) as j:
        record = await j.transaction(tx)
        assert record is not None and record.state == "committed"
    assert raw(journal_path).execute("SELECT count(*) FROM migrations").fetchone()[0] == len(
        MIGRATIONS
    )


@pytest.mark.parametrize(
    ("durability", "group_commit", "expected", "wal_syncer"),
    [
        # full + group commit: COMMIT writes the WAL, the syncer fsyncs it (_syncer.py).
        ("full", True, 1, True),
        ("full", False, 2, False),
        ("normal", True, 1, False),
        ("normal", False, 1, False),
    ],
)
async def test_durability_sets_synchronous(
    journal_path: Path, durability: str, group_commit: bool, expected: int, wal_syncer: bool
) -> None:
    async with Journal.open(
        journal_path,
        durability=durability,  # type: ignore[arg-type]
        group_commit=group_commit,
    ) as j:
        assert j.durability == durability
        value = j._writer.db.execute("PRAGMA synchronous").fetchone()[0]
        foreign_keys = j._writer.db.execute("PRAGMA foreign_keys").fetchone()[0]
        has_syncer = j._writer.syncer is not None
    assert value == expected
    assert foreign_keys == 1
    assert has_syncer == wal_syncer


async def test_old_version_is_migrated_forward(journal_path: Path) -> None:
    journal_path.parent.mkdir(parents=True)
    db = Database(raw(journal_path))
    db.execute("BEGIN IMMEDIATE")
    MIGRATIONS[0].apply(db)
    db.execute("INSERT INTO migrations VALUES (1, 'tables', 0)")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 1")
    db.execute("COMMIT")
    db.conn.close()
    async with Journal.open(journal_path, create=False):
        pass
    check = Database(raw(journal_path))
    assert check.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION
    assert "mutations" not in check.table_names()
    assert "paths" in check.table_names()


def _plan(db: Database, sql: str, params: tuple[object, ...]) -> str:
    rows = db.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    return " | ".join(str(r[-1]) for r in rows)


async def test_hot_queries_use_indexes(journal_path: Path) -> None:
    async with Journal.open(journal_path):
        pass
    db = Database(raw(journal_path))
    by_path = _plan(db, "SELECT tx FROM paths WHERE path = ? ORDER BY tx DESC LIMIT ?", ("/a", 50))
    assert "SEARCH paths USING PRIMARY KEY (path=?)" in by_path
    unfinished = _plan(
        db,
        "UPDATE transactions SET checkpointed = 1 WHERE checkpointed = 0"
        " AND state = 'committed' AND owner = ? AND id <= ?",
        ("o", 5),
    )
    assert "idx_transactions_open" in unfinished
    claim = _plan(
        db,
        "SELECT id, owner, state FROM transactions WHERE checkpointed = 0"
        " AND state IN ('pending', 'committed') ORDER BY id",
        (),
    )
    assert "idx_transactions_open" in claim
    # Only the unfinished rows are in the partial index: walking it is not a table scan.
    for plan in (by_path, unfinished, claim):
        scans = [step for step in plan.split(" | ") if step.startswith("SCAN")]
        assert all("USING" in step and "INDEX" in step for step in scans), plan


async def test_an_intent_writes_one_row_per_table(journal_path: Path) -> None:
    """The lean record: a transaction row, one paths entry per path, new blobs only."""
    async with Journal.open(journal_path) as j:
        first = await j.begin(write_intent("/a", b"one"))
        await j.commit(first)
        second = await j.begin(write_intent("/a", b"two", before=b"one"))
    db = raw(journal_path)
    assert db.execute("SELECT count(*) FROM transactions").fetchone() == (2,)
    assert db.execute("SELECT path, tx FROM paths ORDER BY tx").fetchall() == [
        ("/a", first),
        ("/a", second),
    ]
    # The before image of the second edit is the first one's after image: stored once.
    assert db.execute("SELECT count(*), sum(length(hash)) FROM blobs").fetchone() == (2, 64)
    indexes = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall()
    assert sorted(name for (name,) in indexes) == [
        "idx_chain_gc",
        "idx_checkpoints_session",
        "idx_issue_writes_key",
        "idx_issue_writes_state",
        "idx_sessions_started",
        "idx_transactions_created",
        "idx_transactions_open",
        "idx_transactions_session",
        "idx_transactions_undo_of",
    ]


@pytest.mark.anyio
async def test_a_journal_created_while_its_header_is_read_is_not_foreign(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process creates the journal between this open's first look and its
    table count: the open sees one state or the other, never a mix of both."""
    import sqlite3

    import ledgerfs.journal._schema as schema

    created: list[int] = []

    class Racing(sqlite3.Connection):
        def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:  # type: ignore[override]
            if "sqlite_master" in sql and not created:
                created.append(1)
                other = schema.connect(journal_path, busy_timeout=5, durability="full")
                try:
                    schema.prepare(other, str(journal_path))
                finally:
                    other.conn.close()
            return super().execute(sql, parameters)  # type: ignore[arg-type]

    monkeypatch.setattr(schema, "connection_factory", Racing)
    async with Journal.open(journal_path) as journal:
        assert created and journal.path == journal_path.absolute()
    assert int(raw(journal_path).execute("PRAGMA user_version").fetchone()[0]) == LATEST_VERSION
