"""A version-2 journal, as that version wrote it, reads the same after the migrations
to the latest version (3: the lean record; 4: blob ids).

The journal is written with version 2's own schema (its migrations are still the
first two steps) and its rows exactly as version 2's `begin`, `commit`, `rollback`
and `checkpoint` left them: committed, checkpointed or not, an undo, a move, a
folder, a rolled-back one, a pending one of a dead owner, a name that is not UTF-8.
Every question the journal and the `ledgerfs` commands answer is then asked of the
migrated file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sqlite_utils import Database

from ledgerfs.journal import Journal, JournalError, MutationRecord, TxRecord, content_hash
from ledgerfs.journal._schema import APPLICATION_ID, LATEST_VERSION, MIGRATIONS
from tests.cli._support import ledgerfs

from .conftest import raw

pytestmark = pytest.mark.anyio

DEAD = "d" * 32
LIVE_BEFORE = "e" * 32  # an owner that finished its transactions, then exited
A1, A2, X, C1, C2 = b"one\n", b"one\ntwo\n", b"x\n", b"c\n", b"c2\n"
CAUSE = '{"error": {"code": "ROLLBACK_COMPLETE"}}'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the commands run as subprocesses; one backend is enough


def h(data: bytes | None) -> str | None:
    return None if data is None else content_hash(data)


def mutation(
    ordinal: int,
    op: str,
    path: str,
    before: bytes | None,
    after: bytes | None,
    *,
    destination: str | None = None,
    kind: str = "file",
    modes: tuple[int | None, int | None] = (None, 0o644),
    applied: bool = True,
) -> MutationRecord:
    return MutationRecord(
        ordinal=ordinal,
        op=op,
        path=path,
        destination=destination,
        before_hash=h(before),
        after_hash=h(after),
        before_mode=modes[0],
        after_mode=modes[1],
        kind=kind,
        applied=applied,
    )


def history_of(root: Path) -> list[TxRecord]:
    """The transactions of the version-2 journal, as the journal must report them."""
    w = str(root)
    common: dict[str, Any] = {"outcome": None, "cause": None, "undo_of": None, "checkpointed": True,
              "created_at": 0.0, "finished_at": None, "owner": ""}  # fmt: skip
    records = [
        TxRecord(id=1, session="s1", state="committed", summary="write_file a.txt",
                 mutations=[mutation(0, "write", f"{w}/a.txt", None, A1)], **common),
        TxRecord(id=2, session="s1", state="committed", summary="edit_file a.txt",
                 mutations=[mutation(0, "edit", f"{w}/a.txt", A1, A2, modes=(0o644, 0o644))],
                 **common),
        TxRecord(id=3, session="s2", state="committed", summary="undo 2",
                 mutations=[mutation(0, "edit", f"{w}/a.txt", A2, A1, modes=(0o644, 0o644))],
                 **{**common, "undo_of": 2}),
        TxRecord(id=4, session="s2", state="committed", summary="move_file a.txt",
                 mutations=[mutation(0, "move", f"{w}/a.txt", A1, A1, destination=f"{w}/b.txt",
                                     modes=(0o644, 0o644))], **common),
        TxRecord(id=5, session="s1", state="committed", summary="batch",
                 mutations=[mutation(0, "mkdir", f"{w}/d", None, None, kind="dir",
                                     modes=(None, 0o755)),
                            mutation(1, "write", f"{w}/d/x", None, X)], **common),
        TxRecord(id=6, session="s1", state="rolled_back", summary="write_file c.txt",
                 mutations=[mutation(0, "write", f"{w}/c.txt", None, C1, applied=False)],
                 **{**common, "outcome": "ROLLBACK_COMPLETE", "cause": CAUSE}),
        TxRecord(id=7, session="s2", state="committed", summary="edit_file b.txt",
                 mutations=[mutation(0, "edit", f"{w}/b.txt", A1, C2, modes=(0o644, 0o644))],
                 **{**common, "checkpointed": False}),
        TxRecord(id=8, session="s1", state="pending", summary="batch",
                 mutations=[mutation(0, "write", f"{w}/caf\udce9", None, C1),
                            mutation(1, "write", f"{w}/e.txt", None, C2, applied=False)],
                 **{**common, "checkpointed": False}),
    ]  # fmt: skip
    owners = {7: DEAD, 8: DEAD}
    return [
        msgspec.structs.replace(
            r,
            created_at=1_700_000_000.0 + r.id,
            finished_at=None if r.state == "pending" else 1_700_000_000.5 + r.id,
            owner=owners.get(r.id, LIVE_BEFORE),
        )
        for r in records
    ]


def _stored_path(path: str) -> str:
    """Version 2's encoding of a path SQLite text cannot hold."""
    import base64

    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "b64:" + base64.b64encode(path.encode("utf-8", "surrogateescape")).decode()
    return path


def write_version_2(path: Path, records: list[TxRecord]) -> None:
    """The journal file exactly as version 2 left it (its schema, its rows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = Database(raw(path))
    db.execute("PRAGMA journal_mode = WAL")
    for migration in MIGRATIONS[:2]:
        db.execute("BEGIN IMMEDIATE")
        migration.apply(db)
        db.execute(
            "INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, 0)",
            (migration.version, migration.name),
        )
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {migration.version}")
        db.execute("COMMIT")
    for data in (A1, A2, X, C1, C2):
        db.execute("INSERT INTO blobs VALUES (?, ?, ?)", (content_hash(data), len(data), data))
    for r in records:
        db.execute(
            "INSERT INTO transactions (id, session, state, outcome, cause, created_at,"
            " finished_at, undo_of, summary, owner, checkpointed)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (r.id, r.session, r.state, r.outcome, r.cause, r.created_at, r.finished_at,
             r.undo_of, r.summary, r.owner, int(r.checkpointed)),
        )  # fmt: skip
        for m in r.mutations:
            db.execute(
                "INSERT INTO mutations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.id, m.ordinal, m.op, _stored_path(m.path),
                 None if m.destination is None else _stored_path(m.destination),
                 m.before_hash, m.after_hash, m.before_mode, m.after_mode, m.kind,
                 int(m.applied)),
            )  # fmt: skip
    for session, used in (("s1", 5), ("s2", 3)):
        db.execute("INSERT INTO sessions VALUES (?, ?, 0)", (session, used))
    db.conn.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = (tmp_path / "ws").resolve()
    folder.mkdir()
    return folder


async def test_a_read_only_open_refuses_an_old_journal_and_changes_nothing(root: Path) -> None:
    path = root / ".ledgerfs" / "journal.db"
    write_version_2(path, history_of(root))
    with pytest.raises(JournalError) as info:
        await Journal.open(path, readonly=True)
    assert info.value.kind == "old_schema" and "ledgerfs recover" in info.value.message
    assert raw(path).execute("PRAGMA user_version").fetchone() == (2,)


async def test_version_2_reads_the_same_after_migration(root: Path) -> None:
    path = root / ".ledgerfs" / "journal.db"
    records = history_of(root)
    write_version_2(path, records)
    w = str(root)
    async with Journal.open(path) as j:
        assert [await j.transaction(r.id) for r in records] == records
        assert [r.id for r in await j.history(path=f"{w}/a.txt")] == [4, 3, 2, 1]
        assert [r.id for r in await j.history(path=f"{w}/b.txt")] == [7, 4]
        assert [r.id for r in await j.history(path=f"{w}/caf\udce9")] == [8]
        assert [r.id for r in await j.history(session="s2")] == [7, 4, 3]
        assert [r.id for r in await j.history(limit=3)] == [8, 7, 6]
        window = await j.history(since=1_700_000_002.0, until=1_700_000_004.0)
        assert [r.id for r in window] == [3, 2]
        moved = await j.last_change(f"{w}/a.txt")
        assert moved is not None and (moved[0].id, moved[1].op) == (4, "move")
        edited = await j.last_change(f"{w}/b.txt")
        assert edited is not None and edited[0].id == 7
        assert await j.last_change(f"{w}/c.txt") is None  # rolled back: not in effect
        assert await j.undos_of(2) == [3]
        assert await j.undone_by([1, 2, 3]) == {2: 3}
        images = [A1, A2, X, C1, C2]
        assert await j.blobs(content_hash(b) for b in images) == {
            content_hash(b): b for b in images
        }
        assert await j.budget_used("s1") == 5
        report = await j.verify(full=True)
        assert report.ok and report.blobs_checked == 5, report

    def log(*options: str) -> list[tuple[object, object, object]]:
        done = ledgerfs("log", *options, "--json", cwd=root, check=True)
        return [
            (e["transaction"], e["state"], e["undone_by"])
            for e in json.loads(done.stdout)["entries"]
        ]

    committed = "committed"
    assert log("a.txt") == [(4, committed, None), (3, committed, None), (2, committed, 3),
                            (1, committed, None)]  # fmt: skip
    assert log("b.txt") == [(7, committed, None), (4, committed, None)]
    assert log("c.txt") == [(6, "rolled_back", None)]
    assert log("--session", "s2") == [(7, committed, None), (4, committed, None),
                                      (3, committed, None)]  # fmt: skip
    shown = json.loads(ledgerfs("show", "2", "--json", cwd=root, check=True).stdout)
    assert shown["diff"] == "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"

    async with Journal.open(path) as j:
        claimed = await j.claim_unfinished()
        assert [(u.tx.id, u.action, u.previous_owner) for u in claimed] == [
            (7, "roll_forward", DEAD),
            (8, "roll_back", DEAD),
        ]
        assert [m.applied for m in claimed[1].tx.mutations] == [True, False]
        for u in claimed:
            await j.finish_recovery(
                u.tx.id, state="recovered", outcome="rolled_forward", cause=None
            )
        report = await j.gc(keep_last=1)
        assert (report.transactions_dropped, report.blobs_dropped) == (7, 3)
        assert report.bytes_freed == len(A1) + len(A2) + len(X)
        assert [r.id for r in await j.history(limit=100)] == [8]
        assert (await j.verify()).ok
    check = raw(path)
    assert check.execute("PRAGMA user_version").fetchone() == (LATEST_VERSION,)
    assert [v for (v,) in check.execute("SELECT version FROM migrations ORDER BY version")] == [
        m.version for m in MIGRATIONS
    ]
