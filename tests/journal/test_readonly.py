"""Opening a journal read-only: inspection that creates, migrates and locks nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from msgspec.structs import replace

from ledgerfs.journal import Journal, JournalError

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


async def _committed(j: Journal, path: str, data: bytes) -> int:
    tx = await j.begin(write_intent(path, data))
    await j.commit(tx)
    return tx


@pytest.mark.parametrize("where", ["missing/state/journal.db", "journal.db"])
async def test_a_missing_journal_is_missing_and_nothing_is_created(
    tmp_path: Path, where: str
) -> None:
    before = tree(tmp_path)
    with pytest.raises(JournalError) as caught:
        await Journal.open(tmp_path / where, readonly=True)
    assert caught.value.kind == "missing"
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("content", "kind"),
    [(b"", "corrupt"), (b"not a database at all, just some text" * 40, "corrupt")],
    ids=["empty", "garbage"],
)
async def test_a_file_that_is_no_journal_is_refused_untouched(
    tmp_path: Path, content: bytes, kind: str
) -> None:
    path = tmp_path / "journal.db"
    path.write_bytes(content)
    with pytest.raises(JournalError) as caught:
        await Journal.open(path, readonly=True)
    assert caught.value.kind == kind
    assert path.read_bytes() == content


async def test_a_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(JournalError) as caught:
        await Journal.open(path, readonly=True)
    assert caught.value.kind == "corrupt"


async def test_reads_what_a_live_writer_committed(journal: Journal, journal_path: Path) -> None:
    first = await _committed(journal, "/w/a", b"a")
    async with Journal.open(journal_path, readonly=True) as view:
        assert [r.id for r in await view.history()] == [first]
        second = await _committed(journal, "/w/b", b"b")
        assert [r.id for r in await view.history()] == [second, first]
        assert await view.blob(write_intent("/w/b", b"b").mutations[0].after_hash or "") == b"b"
        assert (await view.verify()).ok
        # No owner lock: the writer's is the only one.
        assert [p.stem for p in (journal_path.parent / "owners").iterdir()] == [journal.owner]


async def test_every_write_is_refused_and_changes_nothing(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        await _committed(j, "/w/a", b"a")
    async with Journal.open(journal_path, readonly=True) as view:
        assert view.readonly
        with pytest.raises(JournalError) as caught:
            await view.begin(write_intent("/w/b", b"b"))
        assert (caught.value.kind, caught.value.errno_name) == ("io", "EROFS")
        with pytest.raises(JournalError):
            await view.gc(keep_last=0)
        with pytest.raises(JournalError):
            await view.claim_unfinished()
    with raw(journal_path) as db:
        assert db.execute("SELECT count(*) FROM transactions").fetchone() == (1,)


async def test_history_within_a_window_of_time(journal: Journal, journal_path: Path) -> None:
    ids = [await _committed(journal, f"/w/{i}", b"%d" % i) for i in range(4)]
    # Spread the creation times a day apart, oldest first.
    with raw(journal_path) as db:
        for day, tx in enumerate(ids):
            db.execute("UPDATE transactions SET created_at = ? WHERE id = ?", (day * 86400.0, tx))
    window = await journal.history(since=86400.0, until=3 * 86400.0)
    assert [r.id for r in window] == [ids[2], ids[1]]
    assert [r.id for r in await journal.history(since=2 * 86400.0)] == [ids[3], ids[2]]
    assert [r.id for r in await journal.history(path="/w/0", until=86400.0)] == [ids[0]]
    assert await journal.history(path="/w/0", since=86400.0) == []


async def test_undone_by_names_the_undo_in_effect(journal: Journal) -> None:
    edit = await _committed(journal, "/w/a", b"a")
    kept = await _committed(journal, "/w/b", b"b")
    failed_undo = await journal.begin(replace(write_intent("/w/a", b"x"), undo_of=edit))
    await journal.rollback(failed_undo, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
    assert await journal.undone_by([edit, kept]) == {}
    undo_tx = await journal.begin(replace(write_intent("/w/a", b"y"), undo_of=edit))
    await journal.commit(undo_tx)
    assert await journal.undone_by([edit, kept, undo_tx]) == {edit: undo_tx}
