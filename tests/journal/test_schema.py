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
    assert {"transactions", "mutations", "blobs", "sessions", "issue_writes", "migrations"} <= set(
        db.table_names()
    )
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
    assert "idx_mutations_path" in {i.name for i in check.table("mutations").indexes}


def _plan(db: Database, sql: str, params: tuple[object, ...]) -> str:
    rows = db.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    return " | ".join(str(r[-1]) for r in rows)


async def test_hot_queries_use_indexes(journal_path: Path) -> None:
    async with Journal.open(journal_path):
        pass
    db = Database(raw(journal_path))
    by_path = _plan(
        db,
        "SELECT tx FROM (SELECT tx FROM mutations WHERE path = ?1 ORDER BY tx DESC LIMIT ?2)"
        " UNION SELECT tx FROM (SELECT tx FROM mutations WHERE destination = ?1"
        " ORDER BY tx DESC LIMIT ?2) ORDER BY tx DESC LIMIT ?2",
        ("/a", 50),
    )
    assert "idx_mutations_path" in by_path and "idx_mutations_destination" in by_path
    by_session = _plan(
        db, "SELECT id FROM transactions WHERE session = ? ORDER BY id DESC LIMIT 50", ("s",)
    )
    assert "idx_transactions_session" in by_session
    unfinished = _plan(
        db,
        "SELECT id FROM transactions WHERE state = 'committed' AND checkpointed = 0"
        " AND owner = ? AND id <= ?",
        ("o", 5),
    )
    assert "idx_transactions_state" in unfinished
    for plan in (by_path, by_session, unfinished):
        assert "SCAN transactions" not in plan and "SCAN mutations" not in plan
