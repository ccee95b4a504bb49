"""The audit chain: legitimate state changes keep it whole, tampering with the file breaks it.

Journals are written through the real `Journal` (begin, commit, rollback, checkpoint,
recovery, gc); tampering goes straight at the SQLite file, as someone with the
file and no ledgerfs would.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from ledgerfs.journal import Journal, check_export
from ledgerfs.journal import _schema as schema
from ledgerfs.journal._chain import ChainedMutation, ChainedTx, body

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _history(journal: Journal) -> list[int]:
    """Six transactions as the engine leaves them: committed and checkpointed, one
    rolled back, one undo, one left committed and not checkpointed (open)."""
    ids = []
    for n in range(5):
        tx = await journal.begin(write_intent(f"/w/f{n}.txt", f"v{n}\n".encode(), session="a"))
        await journal.commit(tx)
        ids.append(tx)
    failed = await journal.begin(write_intent("/w/bad.txt", b"x\n", session="b"))
    await journal.rollback(failed, outcome="rollback_complete", cause="ENOSPC", applied=[])
    await journal.checkpoint(max(ids))
    late = await journal.begin(write_intent("/w/late.txt", b"late\n", session="b"))
    await journal.commit(late)
    return [*ids, failed, late]


async def test_finished_transactions_are_chained_in_the_order_they_finished(
    journal_path: Path,
) -> None:
    async with Journal.open(journal_path) as j:
        await _history(j)
        report = await j.verify(full=True)
    assert report.ok, report.problems
    rows = raw(journal_path).execute("SELECT seq, tx FROM chain ORDER BY seq").fetchall()
    # The rollback finished first; the open one (7) is not chained yet.
    assert rows == [(1, 6), (2, 1), (3, 2), (4, 3), (5, 4), (6, 5)]
    assert report.links_checked == 6
    assert report.point is not None and report.point.seq == 6


async def test_the_open_transaction_is_chained_when_it_finishes(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        ids = await _history(j)
        await j.checkpoint(ids[-1])
        report = await j.verify()
    assert report.ok, report.problems
    assert raw(journal_path).execute("SELECT max(seq), tx FROM chain").fetchone() == (7, ids[-1])


async def test_recovery_and_gc_keep_the_chain_whole(journal_path: Path, tmp_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        ids = await _history(j)
    # The process that left 7 open is gone: recovery finishes it.
    async with Journal.open(journal_path) as j:
        [claimed] = await j.claim_unfinished()
        await j.finish_recovery(
            claimed.tx.id, state="recovered", outcome="rolled_forward", cause=None
        )
        dropped = await j.gc(keep_last=3)
        report = await j.verify(full=True)
    assert dropped.transactions_dropped > 0
    assert report.ok, report.problems
    # A gc run is an entry of its own, naming what it dropped.
    gc_rows = raw(journal_path).execute("SELECT count(*) FROM chain WHERE tx IS NULL").fetchone()
    assert gc_rows == (1,)
    assert ids[-1] in report.transactions


def _alter_summary(db: sqlite3.Connection) -> int:
    db.execute("UPDATE transactions SET summary = 'nothing to see' WHERE id = 3")
    return 3


def _alter_outcome(db: sqlite3.Connection) -> int:
    db.execute("UPDATE transactions SET state = 'committed', outcome = NULL WHERE id = 6")
    return 6


def _alter_image(db: sqlite3.Connection) -> int:
    # Point the record at another image: its mutations as another record stores them.
    other = db.execute("SELECT mutations FROM transactions WHERE id = 4").fetchone()[0]
    db.execute("UPDATE transactions SET mutations = ? WHERE id = 2", (other,))
    return 2


def _alter_time(db: sqlite3.Connection) -> int:
    db.execute("UPDATE transactions SET created_at = created_at - 86400 WHERE id = 4")
    return 4


def _delete_record(db: sqlite3.Connection) -> int:
    db.execute("DELETE FROM paths WHERE tx = 3")
    db.execute("DELETE FROM transactions WHERE id = 3")
    return 3


def _delete_record_and_link(db: sqlite3.Connection) -> int:
    _delete_record(db)
    db.execute("DELETE FROM chain WHERE tx = 3")
    return 3


def _reorder_links(db: sqlite3.Connection) -> int:
    # Positions 3 and 4 hold transactions 2 and 3: swap which holds which.
    db.execute("UPDATE chain SET tx = -1 WHERE tx = 2")
    db.execute("UPDATE chain SET tx = 2 WHERE tx = 3")
    db.execute("UPDATE chain SET tx = 3 WHERE tx = -1")
    return 2


def _reorder_records(db: sqlite3.Connection) -> int:
    # Swap the ids of transactions 4 and 5 (their rows trade places in id order).
    db.execute("UPDATE transactions SET id = -4 WHERE id = 4")
    db.execute("UPDATE transactions SET id = 4 WHERE id = 5")
    db.execute("UPDATE transactions SET id = 5 WHERE id = -4")
    return 4


def _unchained_record(db: sqlite3.Connection) -> int:
    db.execute("DELETE FROM chain WHERE tx = 5")
    return 5


TAMPERING: dict[str, Callable[[sqlite3.Connection], int]] = {
    "altered summary": _alter_summary,
    "altered outcome": _alter_outcome,
    "altered image": _alter_image,
    "altered time": _alter_time,
    "deleted record": _delete_record,
    "deleted record and link": _delete_record_and_link,
    "reordered links": _reorder_links,
    "reordered records": _reorder_records,
    "unchained record": _unchained_record,
}


@pytest.mark.parametrize("tamper", list(TAMPERING.values()), ids=list(TAMPERING))
async def test_tampering_with_the_file_is_reported(
    journal_path: Path, tamper: Callable[[sqlite3.Connection], int]
) -> None:
    async with Journal.open(journal_path) as j:
        await _history(j)
        assert (await j.verify()).ok
    db = raw(journal_path)
    db.execute("PRAGMA foreign_keys = OFF")
    tx = tamper(db)
    db.close()
    async with Journal.open(journal_path, readonly=True) as j:
        report = await j.verify()
    assert not report.ok
    assert any(f"transaction {tx} " in p or "positions" in p for p in report.problems), (
        report.problems
    )


async def test_a_dropped_record_is_not_one_deleted(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        await _history(j)
        await j.gc(keep_last=2)
        assert (await j.verify()).ok
    db = raw(journal_path)
    kept = db.execute("SELECT min(id) FROM transactions").fetchone()[0]
    db.execute("DELETE FROM transactions WHERE id = ?", (kept,))
    async with Journal.open(journal_path, readonly=True) as j:
        report = await j.verify()
    assert [p for p in report.problems if "deleted" in p] == [
        p for p in report.problems if f"transaction {kept} " in p
    ]
    assert not report.ok


async def test_incremental_verify_checks_what_came_after_its_point(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        ids = await _history(j)
        first = await j.verify()
        assert first.point is not None
        for n in range(3):
            tx = await j.begin(write_intent(f"/w/n{n}.txt", f"new {n}\n".encode()))
            await j.commit(tx)
        await j.checkpoint(tx)
        since = await j.verify(since=first.point)
    assert since.ok, since.problems
    # The open one of before and the three new ones; only the new blobs are hashed.
    assert since.links_checked == 4
    assert sorted(since.transactions) == [ids[-1], tx - 2, tx - 1, tx]
    assert since.blobs_checked == 3


async def test_incremental_verify_trusts_before_its_point_and_full_does_not(
    journal_path: Path,
) -> None:
    async with Journal.open(journal_path) as j:
        await _history(j)
        point = (await j.verify()).point
    db = raw(journal_path)
    _alter_summary(db)
    async with Journal.open(journal_path, readonly=True) as j:
        assert (await j.verify(since=point)).ok
        assert not (await j.verify()).ok


async def test_a_chain_rewritten_below_the_point_is_reported(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        await _history(j)
        point = (await j.verify()).point
    assert point is not None
    # What a rewrite that recomputed every link leaves: another link at the point.
    raw(journal_path).execute("UPDATE chain SET link = zeroblob(32) WHERE seq = ?", (point.seq,))
    async with Journal.open(journal_path, readonly=True) as j:
        report = await j.verify(since=point)
    assert not report.ok
    assert any("not the one verified before" in p for p in report.problems)


async def _export(journal: Journal) -> list[bytes]:
    lines: list[bytes] = []
    after: int | None = 0
    while after is not None:
        page, after = await journal.audit(after=after, limit=2)
        lines.extend(msgspec.json.encode(r) for r in page)
    lines.extend(msgspec.json.encode(r) for r in await journal.audit_unchained())
    return lines


async def test_an_export_checks_from_its_lines_alone(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        ids = await _history(j)
        await j.gc(keep_last=4)
        lines = await _export(j)
        head = (await j.verify()).point
    found = check_export(lines)
    assert found.ok, found.problems
    assert head is not None and found.head == head.link
    assert found.unchained == 1
    decoded = [msgspec.json.decode(line) for line in lines]
    assert [d["transaction"] for d in decoded if d["kind"] == "tx"] == [6, 1, 2, 3, 4, 5, ids[-1]]
    # gc kept the newest four (4 to 7): 1 to 3 keep their links only.
    pruned = [d["transaction"] for d in decoded if d["kind"] == "tx" and d["pruned"]]
    assert pruned == [1, 2, 3]
    assert [d["dropped"] for d in decoded if d["kind"] == "gc"] == [[1, 2, 3]]


def _edit_line(lines: list[bytes], index: int, **changes: object) -> list[bytes]:
    line = msgspec.json.decode(lines[index])
    line.update(changes)
    return [*lines[:index], msgspec.json.encode(line), *lines[index + 1 :]]


EXPORT_TAMPERING: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    "altered summary": lambda ls: _edit_line(ls, 2, summary="edited"),
    "altered state": lambda ls: _edit_line(ls, 0, state="committed"),
    "altered time": lambda ls: _edit_line(ls, 3, created_at=1.0),
    "removed line": lambda ls: ls[:2] + ls[3:],
    "swapped lines": lambda ls: [ls[0], ls[2], ls[1], *ls[3:]],
    "relinked line": lambda ls: _edit_line(ls, 4, prev=msgspec.json.decode(ls[2])["chain"]),
}


@pytest.mark.parametrize("tamper", list(EXPORT_TAMPERING.values()), ids=list(EXPORT_TAMPERING))
async def test_a_tampered_export_line_is_reported(
    journal_path: Path, tamper: Callable[[list[bytes]], list[bytes]]
) -> None:
    async with Journal.open(journal_path) as j:
        await _history(j)
        lines = await _export(j)
    assert check_export(lines).ok
    found = check_export(tamper(lines))
    assert not found.ok
    assert all(p.startswith("line ") for p in found.problems)


def _as_version_5(path: Path) -> None:
    """The journal as version 5 left it: versions 6 to 9 added indexes, tables and the
    blobs' forms (every blob here is stored whole)."""
    db = raw(path)
    assert db.execute("SELECT count(*) FROM blobs WHERE form != 0").fetchone() == (0,)
    db.execute("BEGIN")
    for table in ("chain", "roots", "locations", "blob_chunks"):
        db.execute(f"DROP TABLE {table}")
    for index in ("idx_transactions_undo_of", "idx_transactions_created"):
        db.execute(f"DROP INDEX {index}")
    db.execute("ALTER TABLE blobs DROP COLUMN form")
    db.execute("DELETE FROM migrations WHERE version > 5")
    db.execute("PRAGMA user_version = 5")
    db.execute("COMMIT")
    db.close()


async def test_an_older_journal_is_chained_by_the_migration(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        ids = await _history(j)
    _as_version_5(journal_path)
    db = raw(journal_path)
    assert 7 in [m.version for m in schema.MIGRATIONS if m.version > 5]
    async with Journal.open(journal_path) as j:
        report = await j.verify(full=True)
        # The open one's process is gone: its recovery finishes it.
        [claimed] = await j.claim_unfinished()
        await j.finish_recovery(
            claimed.tx.id, state="recovered", outcome="rolled_forward", cause=None
        )
        later = await j.verify(full=True)
    assert db.execute("PRAGMA user_version").fetchone() == (schema.LATEST_VERSION,)
    assert report.ok and later.ok, (report.problems, later.problems)
    # In id order at the migration; the open one joins when it finishes.
    rows = db.execute("SELECT tx FROM chain ORDER BY seq").fetchall()
    assert [tx for (tx,) in rows] == sorted(ids)
    names = db.execute("SELECT name FROM migrations WHERE version = 7").fetchone()
    assert names == ("audit chain",)


def test_a_transaction_body_is_its_fields_in_order() -> None:
    # The links of every journal ever written cover these bytes: a field moved,
    # put in another position or added breaks all of them.
    before = "blake3:" + "1" * 64
    mutation = ChainedMutation(
        ordinal=0,
        op="move",
        path="a.txt",
        destination="b.txt",
        before_hash=before,
        after_hash=None,
        before_mode=0o644,
        after_mode=None,
        kind="file",
        before_kept=False,
        applied=True,
    )
    tx = ChainedTx(
        transaction=7,
        session="s",
        summary="move_file a.txt",
        undo_of=None,
        created_at=1.5,
        finished_at=2.5,
        state="checkpointed",
        outcome=None,
        cause=None,
        mutations=[mutation],
    )
    as_array = [
        "tx",
        7,
        "s",
        "move_file a.txt",
        None,
        1.5,
        2.5,
        "checkpointed",
        None,
        None,
        [[0, "move", "a.txt", "b.txt", before, None, 0o644, None, "file", False, True]],
    ]
    assert body(tx) == msgspec.msgpack.encode(as_array)
