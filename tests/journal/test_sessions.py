"""Sessions and checkpoints in the journal: counts, clients, checkpoints, the
migration that adds them, and the indexes their queries use."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
from sqlite_utils import Database

from ledgerfs.journal import Journal, TxIntent, _codec
from ledgerfs.journal._schema import APPLICATION_ID, LATEST_VERSION, MIGRATIONS

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


def move_intent(source: str, destination: str, data: bytes, session: str) -> TxIntent:
    intent = write_intent(source, data, before=data, session=session, op="move")
    mutation = intent.mutations[0]
    moved = msgspec.structs.replace(mutation, destination=destination)
    return msgspec.structs.replace(intent, mutations=[moved])


async def test_begin_counts_transactions_files_and_budget_per_session(journal: Journal) -> None:
    for intent in (
        write_intent("/a", b"1", session="s1", charge=1),
        write_intent("/b", b"2", session="s1", charge=2),
        move_intent("/b", "/c", b"2", session="s1"),
        write_intent("/a", b"3", session="s2"),
    ):
        await journal.commit(await journal.begin(intent))
    one, two = await journal.session_record("s1"), await journal.session_record("s2")
    assert one is not None and two is not None
    # A move names two paths: its source and its destination.
    assert (one.transactions, one.files_changed, one.budget_used) == (3, 4, 4)
    assert (two.transactions, two.files_changed, two.budget_used) == (1, 1, 1)
    assert one.started <= one.last_activity
    assert await journal.session_record("nobody") is None


async def test_open_session_keeps_the_client_and_the_counts(journal: Journal) -> None:
    opened = await journal.open_session("s1", client_name="claude-code", client_version="2.1")
    assert (opened.client_name, opened.client_version, opened.transactions) == (
        "claude-code",
        "2.1",
        0,
    )
    await journal.commit(await journal.begin(write_intent("/a", b"1", session="s1")))
    # Opened again without a client (a reconnect): what was known stays.
    again = await journal.open_session("s1")
    assert (again.client_name, again.client_version, again.transactions) == (
        "claude-code",
        "2.1",
        1,
    )
    assert again.started == opened.started


async def test_sessions_are_listed_newest_first_and_paged(journal: Journal) -> None:
    for name in ("first", "second", "third"):
        await journal.open_session(name, client_name=name)
    listed = await journal.sessions()
    assert [s.id for s in listed] == ["third", "second", "first"]
    page = await journal.sessions(limit=1, started_before=listed[0].started)
    assert [s.id for s in page] == ["second"]


async def test_a_checkpoint_names_the_newest_transaction_in_effect(journal: Journal) -> None:
    empty = await journal.record_checkpoint(session="s1", label=None)
    assert (empty.transaction, empty.label, empty.session) == (None, None, "s1")
    first = await journal.begin(write_intent("/a", b"1", session="s2"))
    await journal.commit(first)
    # A pending one (in flight) and a rolled-back one are not in effect.
    pending = await journal.begin(write_intent("/b", b"2", session="s2"))
    rolled = await journal.begin(write_intent("/c", b"3", session="s2"))
    await journal.rollback(rolled, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
    marked = await journal.record_checkpoint(session="s1", label="before the refactor")
    assert marked.transaction == first
    assert marked.id > empty.id
    # A commit mark noted (not yet written) counts as committed.
    journal.commit_nowait(pending)
    noted = await journal.record_checkpoint(session="s1", label="x")
    assert noted.transaction == pending
    assert await journal.checkpoint_record(marked.id) == marked
    assert await journal.checkpoint_record(10**9) is None
    assert [c.id for c in await journal.checkpoints(session="s1")] == [
        noted.id,
        marked.id,
        empty.id,
    ]
    assert await journal.checkpoints(session="s2") == []


async def test_a_checkpoint_survives_reopening(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        await j.commit(await j.begin(write_intent("/a", b"1")))
        made = await j.record_checkpoint(session="s1", label="turn 1")
    async with Journal.open(journal_path) as j:
        assert await j.checkpoint_record(made.id) == made
        record = await j.session_record("s1")
        assert record is not None and record.last_activity >= made.created_at


async def test_history_filters_by_session_and_after(journal: Journal) -> None:
    ids = []
    for index, session in enumerate(["s1", "s2", "s1", "s2"]):
        tx = await journal.begin(write_intent(f"/f{index}", b"x", session=session))
        await journal.commit(tx)
        ids.append(tx)
    assert [r.id for r in await journal.history(session="s1")] == [ids[2], ids[0]]
    assert [r.id for r in await journal.history(after=ids[1])] == [ids[3], ids[2]]
    assert [r.id for r in await journal.history(session="s2", after=ids[1])] == [ids[3]]
    assert [r.id for r in await journal.history(path="/f0", session="s2")] == []


def _plan(db: Database, sql: str, params: tuple[object, ...]) -> list[str]:
    return [str(r[-1]) for r in db.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()]


@pytest.mark.parametrize(
    ("sql", "params", "index"),
    [
        # history(session=...), paged, and after a checkpoint
        (
            "SELECT id FROM transactions WHERE id < ? AND id > ? AND session = ?"
            " ORDER BY id DESC LIMIT ?",
            (10, 2, "s", 50),
            "idx_transactions_session",
        ),
        ("SELECT id FROM transactions WHERE id > ? ORDER BY id DESC LIMIT ?", (2, 50), "PRIMARY"),
        (
            "SELECT id, state, outcome FROM transactions WHERE id < ? ORDER BY id DESC LIMIT 64",
            (10,),
            "PRIMARY",
        ),
        (
            "SELECT id FROM checkpoints WHERE session = ? ORDER BY id DESC LIMIT ?",
            ("s", 5),
            "idx_checkpoints_session",
        ),
        ("SELECT id FROM checkpoints WHERE id = ?", (1,), "PRIMARY"),
        (
            "SELECT id FROM sessions WHERE created_at < ? ORDER BY created_at DESC LIMIT ?",
            (1.0, 5),
            "idx_sessions_started",
        ),
        ("SELECT id FROM sessions WHERE id IN (?)", ("s",), "sqlite_autoindex_sessions_1"),
    ],
)
async def test_session_and_checkpoint_queries_use_indexes(
    journal_path: Path, sql: str, params: tuple[object, ...], index: str
) -> None:
    async with Journal.open(journal_path):
        pass
    steps = _plan(Database(raw(journal_path)), sql, params)
    assert any(index in step for step in steps), steps
    assert not [step for step in steps if step.startswith("SCAN")], steps


async def test_a_version_4_journal_is_carried_forward(journal_path: Path) -> None:
    """Sessions and transactions written by version 4 get their counts; a checkpoint
    can then be made in the migrated file."""
    journal_path.parent.mkdir(parents=True)
    db = Database(raw(journal_path))
    for migration in MIGRATIONS[:4]:
        db.execute("BEGIN IMMEDIATE")
        migration.apply(db)
        db.execute("INSERT INTO migrations VALUES (?, ?, 0)", (migration.version, migration.name))
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {migration.version}")
        db.execute("COMMIT")
    now = time.time()
    stored = [
        _codec.Stored(
            ordinal=0, op="move", path="/a", destination="/b", before=None, after=None,
            before_mode=None, after_mode=None, kind="file",
        )
    ]  # fmt: skip
    for tx, session, at in ((1, "old", now - 10), (2, "old", now - 5), (3, "other", now)):
        db.execute(
            "INSERT INTO transactions (id, session, state, created_at, summary, owner,"
            " checkpointed, mutations) VALUES (?, ?, 'committed', ?, '', 'o', 1, ?)",
            (tx, session, at, _codec.encode_mutations(stored)),
        )
        db.conn.executemany("INSERT INTO paths (path, tx) VALUES (?, ?)", [("/a", tx), ("/b", tx)])
    db.conn.executemany(
        "INSERT INTO sessions (id, budget_used, created_at) VALUES (?, ?, ?)",
        [("old", 2, now - 10), ("other", 1, now)],
    )
    db.conn.close()
    async with Journal.open(journal_path, create=False) as j:
        old = await j.session_record("old")
        assert old is not None
        assert (old.transactions, old.files_changed, old.budget_used) == (2, 4, 2)
        assert (old.started, old.last_activity) == (now - 10, now - 5)
        assert old.client_name is None
        assert [r.id for r in await j.history(session="old")] == [2, 1]
        made = await j.record_checkpoint(session="old", label="after migration")
        assert made.transaction == 3
    check = raw(journal_path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION
    names = [r[0] for r in check.execute("SELECT name FROM migrations ORDER BY version")]
    assert "sessions and checkpoints" in names
