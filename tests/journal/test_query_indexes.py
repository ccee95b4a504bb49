"""A version-5 journal, written by the tools, migrates to the query indexes (version 6)
and every question asked of it gets the same answer as before.

The journal is written by today's engine with the schema held at version 5 (the
migrations after it withheld), so its rows are exactly what version 5 wrote:
sessions, checkpoints, edits, a move, undos, a rewind. Opened by this code, it
migrates; the indexes then serve the questions (their plans say so), and the
answers (history by path, session, time, transaction and page; undone-by; the
last change of a file; sessions; checkpoints; gc's preview) are those of version 5.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledgerfs.engine import Engine
from ledgerfs.journal import Journal, _images, _schema

from .conftest import raw

pytestmark = pytest.mark.anyio

V6_INDEXES = {"idx_transactions_undo_of", "idx_transactions_created"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the migration is synchronous SQL; one backend is enough


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def at_version_5(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While in effect, journals are created and opened at version 5, as it wrote them.

    Today's blob store writes each blob's form (version 8): the journal gets that
    column and table on open, and with compression and chunking off every blob is
    stored as version 5 stored it; `as_version_5` then takes them out again.
    """
    (forms,) = [m for m in _schema.MIGRATIONS if m.name == "chunked images"]
    monkeypatch.setattr(_schema, "MIGRATIONS", [m for m in _schema.MIGRATIONS if m.version <= 5])
    monkeypatch.setattr(_schema, "LATEST_VERSION", 5)
    monkeypatch.setattr(_images, "COMPRESS_FROM", 1 << 40)
    monkeypatch.setattr(_images, "CHUNKED_FROM", 1 << 40)
    prepare = _schema.prepare

    def with_forms(db: Any, label: str) -> int:
        version = prepare(db, label)
        if "blob_chunks" not in db.table_names():
            db.execute("BEGIN IMMEDIATE")
            forms.apply(db)
            db.execute("COMMIT")
        return version

    monkeypatch.setattr(_schema, "prepare", with_forms)
    yield
    monkeypatch.undo()


def as_version_5(path: Path) -> None:
    """Take out what version 8 added (every blob was stored as version 5 stored it)."""
    db = raw(path)
    db.execute("ALTER TABLE blobs DROP COLUMN form")
    db.execute("DROP TABLE blob_chunks")
    db.close()


async def write_history(config: dict[str, Any]) -> dict[str, int]:
    """A few sessions' work through the tools: edits, a move, undos, a checkpoint, a rewind."""
    made: dict[str, int] = {}
    async with Engine.open(config) as engine:
        agent = await engine.session("agent", client_name="test", client_version="5")
        other = await engine.session("other")

        async def tx(session: Any, tool: str, **arguments: Any) -> int:
            result = await session.call(tool, arguments)
            assert result.transaction is not None
            return int(result.transaction)

        made["a"] = await tx(agent, "write_file", path="a.txt", content="one\ntwo\n")
        made["b"] = await tx(other, "write_file", path="b.txt", content="b\n")
        for n in range(5):
            await tx(agent, "write_file", path=f"f{n}.txt", content=f"{n}\n")
        made["checkpoint"] = int((await agent.call("checkpoint", {"label": "t1"})).checkpoint)
        made["edit"] = await tx(
            agent, "edit_file", path="a.txt", edits=[{"old_text": "two", "new_text": "2"}]
        )
        made["move"] = await tx(other, "move_file", source="b.txt", destination="c.txt")
        made["undo"] = await tx(other, "undo", transaction=made["edit"])
        made["undo_move"] = await tx(agent, "undo", transaction=made["move"])
        await tx(agent, "write_file", path="f0.txt", content="zero\n")
        made["rewind"] = await tx(agent, "rewind", checkpoint=made["checkpoint"])
    return made


async def answers(journal_path: Path, made: dict[str, int], root: Path) -> dict[str, Any]:
    """Every question the tools and commands ask of the journal, answered."""
    async with Journal.open(journal_path) as journal:
        everything = await journal.history(limit=1000)
        times = sorted(r.created_at for r in everything)
        middle = times[len(times) // 2]
        found: dict[str, Any] = {
            "all": everything,
            "page": await journal.history(limit=3, before=made["undo"]),
            "path": await journal.history(path=str(root / "a.txt"), limit=10),
            "destination": await journal.history(path=str(root / "c.txt"), limit=10),
            "path_session": await journal.history(
                path=str(root / "a.txt"), session="agent", limit=10
            ),
            "session": await journal.history(session="other", limit=10),
            "session_after": await journal.history(session="agent", after=made["b"], limit=10),
            "after": await journal.history(after=made["checkpoint"], limit=100),
            "tx": await journal.history(tx=made["edit"], limit=1),
            "since": await journal.history(since=middle, limit=100),
            "until": await journal.history(until=middle, limit=100),
            "undone_by": await journal.undone_by(r.id for r in everything),
            "undos_of_edit": await journal.undos_of(made["edit"]),
            "undos_of_move": await journal.undos_of(made["move"]),
            "last_change": await journal.last_change(str(root / "a.txt")),
            "sessions": await journal.sessions(limit=10),
            "checkpoints": await journal.checkpoints(limit=10),
            "agent_checkpoints": await journal.checkpoints(session="agent", limit=10),
            "gc_keep_last": await journal.gc_candidates(keep_last=4),
            "gc_keep_days": await journal.gc_candidates(keep_days=0),
        }
    return msgspec.to_builtins(found)


def indexes(path: Path) -> set[str]:
    db = raw(path)
    return {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def plan(db: sqlite3.Connection, sql: str) -> str:
    return " | ".join(str(r[3]) for r in db.execute(f"EXPLAIN QUERY PLAN {sql}", (1,)))


async def test_a_version_5_journal_migrates_and_answers_the_same(
    workspace: Path, at_version_5: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"roots": [str(workspace)], "durability": "full", "auto_occ": "off"}
    journal_path = workspace / ".ledgerfs" / "journal.db"
    made = await write_history(config)
    before = await answers(journal_path, made, workspace)
    db = raw(journal_path)
    assert db.execute("PRAGMA user_version").fetchone() == (5,)
    assert not indexes(journal_path) & V6_INDEXES
    assert "SCAN transactions" in plan(db, "SELECT id FROM transactions WHERE undo_of = ?")
    db.close()
    as_version_5(journal_path)

    monkeypatch.undo()  # this code's migrations, all of them
    after = await answers(journal_path, made, workspace)
    assert after == before
    assert before["undone_by"] == {made["edit"]: made["undo"], made["move"]: made["undo_move"]}
    db = raw(journal_path)
    assert db.execute("PRAGMA user_version").fetchone() == (_schema.LATEST_VERSION,)
    assert db.execute("SELECT name FROM migrations WHERE version = 6").fetchone() == (
        "query indexes",
    )
    assert indexes(journal_path) >= V6_INDEXES
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    undo_plan = plan(db, "SELECT id FROM transactions WHERE undo_of = ?")
    assert "USING COVERING INDEX idx_transactions_undo_of" in undo_plan
    # The partial index holds the undos, every one of them, and nothing else.
    undos = db.execute(
        "SELECT count(*) FROM transactions INDEXED BY idx_transactions_undo_of"
        " WHERE undo_of IS NOT NULL"
    ).fetchone()
    assert undos == (sum(1 for r in after["all"] if r["undo_of"] is not None),)
