"""Missing, corrupt, newer, locked and failing journal files map to JournalError kinds."""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import ledgerfs.journal._owners as owners
from ledgerfs.journal import Journal, JournalError
from ledgerfs.journal._errors import classify_sqlite

from .conftest import FaultyConnection, raw, write_intent

pytestmark = pytest.mark.anyio


async def _seed(path: Path) -> int:
    """Create a journal holding one committed transaction; return its id."""
    async with Journal.open(path) as j:
        tx = await j.begin(write_intent("/seed", b"seed"))
        await j.commit(tx)
        return tx


async def _assert_intact(path: Path, tx: int) -> None:
    """The journal opens and still holds committed transaction `tx`."""
    async with Journal.open(path, create=False) as j:
        record = await j.transaction(tx)
        assert record is not None and record.state == "committed"
        assert (await j.verify()).ok


async def test_missing_file_with_create_false(journal_path: Path) -> None:
    with pytest.raises(JournalError) as info:
        await Journal.open(journal_path, create=False)
    assert info.value.kind == "missing" and info.value.path == str(journal_path)
    assert str(journal_path) in str(info.value)
    assert not journal_path.exists() and not journal_path.parent.exists()


async def test_garbage_file_is_corrupt_and_untouched(journal_path: Path) -> None:
    journal_path.parent.mkdir(parents=True)
    garbage = os.urandom(8192)
    journal_path.write_bytes(garbage)
    with pytest.raises(JournalError) as info:
        await Journal.open(journal_path)
    assert info.value.kind == "corrupt" and str(journal_path) in info.value.message
    assert journal_path.read_bytes() == garbage


async def test_foreign_database_is_refused_not_initialised(journal_path: Path) -> None:
    journal_path.parent.mkdir(parents=True)
    conn = raw(journal_path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = journal_path.read_bytes()
    with pytest.raises(JournalError) as info:
        await Journal.open(journal_path)
    assert info.value.kind == "corrupt"
    assert journal_path.read_bytes() == before


async def test_newer_schema_is_refused_and_untouched(journal_path: Path) -> None:
    await _seed(journal_path)
    conn = raw(journal_path)
    conn.execute("PRAGMA user_version = 999")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = journal_path.read_bytes()
    with pytest.raises(JournalError) as info:
        await Journal.open(journal_path)
    assert info.value.kind == "newer_schema" and "999" in info.value.message
    assert journal_path.read_bytes() == before


async def test_locked_write_past_busy_timeout(journal_path: Path) -> None:
    tx = await _seed(journal_path)
    holder = raw(journal_path)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        async with Journal.open(journal_path, busy_timeout=0.2) as j:
            with pytest.raises(JournalError) as info:
                await j.begin(write_intent("/x", b"x"))
            assert info.value.kind == "locked" and str(journal_path) in info.value.message
            # Reads still work in WAL mode while a writer holds the lock.
            assert await j.transaction(tx) is not None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await _assert_intact(journal_path, tx)


async def test_locked_at_open_leaves_file_untouched(journal_path: Path) -> None:
    tx = await _seed(journal_path)
    holder = raw(journal_path)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    before = journal_path.read_bytes()
    try:
        with pytest.raises(JournalError) as info:
            await Journal.open(journal_path, busy_timeout=0.2)
        assert info.value.kind == "locked"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert journal_path.read_bytes() == before
    await _assert_intact(journal_path, tx)


FAULTS: dict[str, tuple[Callable[[], BaseException], str]] = {
    "EIO": (lambda: OSError(errno.EIO, "Input/output error"), "EIO"),
    "ENOSPC": (lambda: OSError(errno.ENOSPC, "No space left on device"), "ENOSPC"),
    "sqlite-ioerr": (lambda: sqlite3.OperationalError("disk I/O error"), "EIO"),
    "sqlite-full": (lambda: sqlite3.OperationalError("database or disk is full"), "ENOSPC"),
}

WRITE_SITES = {
    "begin": "INSERT INTO transactions",
    "blob": "INTO blobs (",
    "commit": "SET state = 'committed'",
    "rollback": "SET state = 'rolled_back'",
    "group-commit": "COMMIT",
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("site", sorted(WRITE_SITES))
async def test_fault_at_write_site_is_io_error(
    journal_path: Path, faulty: type[FaultyConnection], site: str, fault: str
) -> None:
    seeded = await _seed(journal_path)
    make, name = FAULTS[fault]
    async with Journal.open(journal_path) as j:
        tx = await j.begin(write_intent("/t", b"pending"))
        faulty.trigger, faulty.error = WRITE_SITES[site], make
        with pytest.raises(JournalError) as info:
            if site == "commit":
                await j.commit(tx)
            elif site == "rollback":
                await j.rollback(tx, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
            else:
                await j.begin(write_intent("/t2", b"fresh bytes"))
        assert (info.value.kind, info.value.errno_name) == ("io", name)
        assert str(journal_path) in info.value.message
        assert faulty.hits >= 1
        faulty.trigger = None
        # The same instance keeps working once the fault is gone.
        record = await j.transaction(tx)
        assert record is not None and record.state == "pending"
        await j.commit(tx)
    await _assert_intact(journal_path, seeded)
    await _assert_intact(journal_path, tx)


@pytest.mark.parametrize("here", [False, True], ids=["writer_thread", "callers_thread"])
@pytest.mark.parametrize("fault", ["EIO", "ENOSPC"])
async def test_failed_wal_fsync_stops_the_instance_not_the_file(
    journal_path: Path, fault: str, here: bool
) -> None:
    """After a failed fsync nobody knows what reached the disk: refuse, then reopen;
    the same whichever thread ran the group and its fsync."""
    seeded = await _seed(journal_path)
    make, name = FAULTS[fault]

    failing = [True]

    def datasync(fd: int) -> None:
        if failing[0]:
            raise make()
        os.fdatasync(fd)

    async with Journal.open(journal_path, datasync=datasync) as j:
        with pytest.raises(JournalError) as first:
            await j.begin(write_intent("/t", b"not durable"), here=here)
        failing[0] = False
        # The fault is gone, but this instance no longer acknowledges writes.
        with pytest.raises(JournalError) as later:
            await j.begin(write_intent("/t2", b"later"), here=here)
        for info in (first, later):
            assert (info.value.kind, info.value.errno_name) == ("io", name)
            assert str(journal_path) in info.value.message
        assert (await j.statistics()).failed_requests >= 2
    await _assert_intact(journal_path, seeded)
    async with Journal.open(journal_path) as j:
        tx = await j.begin(write_intent("/t3", b"after reopen"))
        await j.commit(tx)
    await _assert_intact(journal_path, tx)


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_fault_during_migration(
    journal_path: Path, faulty: type[FaultyConnection], fault: str
) -> None:
    make, name = FAULTS[fault]
    faulty.trigger, faulty.error = "CREATE TABLE", make
    with pytest.raises(JournalError) as info:
        await Journal.open(journal_path)
    assert (info.value.kind, info.value.errno_name) == ("io", name)
    # Nothing half-created: the migration's transaction was rolled back.
    assert raw(journal_path).execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    faulty.trigger = None
    async with Journal.open(journal_path) as j:
        tx = await j.begin(write_intent("/a", b"a"))
        await j.commit(tx)
    await _assert_intact(journal_path, tx)


async def test_real_sqlite_full_fails_alone_then_recovers(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded = await _seed(journal_path)
    async with Journal.open(journal_path) as j:
        small = await j.begin(write_intent("/small", b"s"))
        pages = j._writer.db.execute("PRAGMA page_count").fetchone()[0]
        j._writer.db.execute(f"PRAGMA max_page_count = {pages + 2}")
        with pytest.raises(JournalError) as info:
            await j.begin(write_intent("/big", os.urandom(200_000)))
        assert (info.value.kind, info.value.errno_name) == ("io", "ENOSPC")
        j._writer.db.execute("PRAGMA max_page_count = 1073741823")
        await j.commit(small)
    await _assert_intact(journal_path, seeded)
    await _assert_intact(journal_path, small)


async def test_owner_lock_failure_is_io_error(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def failing_open(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(owners.os, "open", failing_open)
    with pytest.raises(JournalError) as info:
        await Journal.open(journal_path)
    assert (info.value.kind, info.value.errno_name) == ("io", "ENOSPC")
    monkeypatch.undo()
    async with Journal.open(journal_path):
        pass


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("database is locked", ("locked", None)),
        ("database or disk is full", ("io", "ENOSPC")),
        ("disk I/O error", ("io", "EIO")),
        ("database disk image is malformed", ("corrupt", None)),
        ("file is not a database", ("corrupt", None)),
    ],
)
def test_classify_sqlite_messages(message: str, expected: tuple[str, str | None]) -> None:
    assert classify_sqlite(sqlite3.OperationalError(message)) == expected


def test_integrity_errors_are_not_journal_errors() -> None:
    assert classify_sqlite(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
