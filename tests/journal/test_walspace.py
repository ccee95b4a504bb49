"""The WAL written ahead at open: there on a `full` journal, safe beside other writers.

`_walspace.reserve` writes zeros after the WAL's end so that commits overwrite
blocks already written. What must hold: the zeros are really written (not a
hole), SQLite reads the log as before (every commit comes back, after a kill
too), frames another connection writes are never overwritten, and anything
unusual (a link at the WAL's name, a full disk, a busy journal) leaves the file
as it was.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from sqlite_utils import Database

from ledgerfs.journal import Journal, _walspace, content_hash
from ledgerfs.journal._walspace import RESERVE, reserve
from tests._wal import valid_frames

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


def wal_of(path: Path) -> Path:
    return Path(f"{path}-wal")


@pytest.mark.parametrize(("durability", "reserved"), [("full", True), ("normal", False)])
async def test_a_full_journal_opens_with_its_wal_written_ahead(
    journal_path: Path, durability: str, reserved: bool
) -> None:
    async with Journal.open(journal_path, durability=durability):  # type: ignore[arg-type]
        st = wal_of(journal_path).stat()
        assert (st.st_size >= RESERVE) is reserved
        if reserved:
            # Written blocks, not a hole: a hole would be allocated (and its size
            # logged) by the commits that fill it.
            assert st.st_blocks * 512 >= RESERVE


@pytest.mark.parametrize("ahead", [True, False], ids=["written-ahead", "grown-by-commits"])
async def test_every_commit_reads_back_after_a_killed_writer(
    journal_path: Path, ahead: bool
) -> None:
    """The next open finds every commit, whether the killed writer's WAL was written
    ahead or grew with its commits (then the open writes its zeros after them)."""
    child = f"""
import os, signal, sys, anyio
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from ledgerfs.journal import Journal, _walspace
from tests.journal.conftest import write_intent

async def main(path):
    if not {ahead!r}:
        _walspace.RESERVE = 0
    journal = await Journal.open(path)
    for i in range(40):
        await journal.commit(await journal.begin(write_intent(f"/f{{i}}", b"%d" % i * 3000)))
    os.kill(os.getpid(), signal.SIGKILL)

anyio.run(main, sys.argv[1])
"""
    done = subprocess.run([sys.executable, "-c", child, str(journal_path)], check=False)
    assert done.returncode == -signal.SIGKILL
    wal = wal_of(journal_path)
    assert valid_frames(wal) > 40  # the commits are in the WAL
    assert (wal.stat().st_size >= RESERVE) is ahead
    async with Journal.open(journal_path) as journal:
        assert wal.stat().st_size >= RESERVE
        records = [await journal.transaction(tx) for tx in range(1, 41)]
        assert [r.state for r in records if r is not None] == ["committed"] * 40
        blobs = await journal.blobs({content_hash(b"%d" % i * 3000) for i in range(40)})
        assert len(blobs) == 40


async def test_frames_another_connection_commits_are_never_overwritten(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection keeps reserving a little past the end of a WAL that a
    writer keeps growing: without the write lock its zeros would land on frames
    the writer appended after it looked at the file's size."""
    monkeypatch.setattr(_walspace, "RESERVE", 0)  # the journal's WAL grows at its end
    payloads = [(b"%05d" % i) * 3000 for i in range(300)]
    wal = wal_of(journal_path)
    async with Journal.open(journal_path) as journal:
        other = Database(
            sqlite3.connect(journal_path, isolation_level=None, timeout=10, check_same_thread=False)
        )
        stop = threading.Event()
        reserved: list[int] = []

        def keep_reserving() -> None:
            while not stop.wait(0.001):  # lets the writer take the lock in between
                reserved.append(reserve(other, str(wal), wal.stat().st_size + 8192))

        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, keep_reserving)
            try:
                for i, data in enumerate(payloads):
                    await journal.commit(await journal.begin(write_intent(f"/f{i}", data)))
            finally:
                stop.set()
        other.conn.close()
    assert sum(1 for n in reserved if n) > 10  # the race really ran
    async with Journal.open(journal_path) as journal:
        blobs = await journal.blobs({content_hash(data) for data in payloads})
        assert sorted(blobs.values()) == sorted(payloads)
    with raw(journal_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def new_wal_database(folder: Path) -> tuple[Database, Path]:
    path = folder / "j.db"
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.execute("INSERT INTO t VALUES (randomblob(10000))")
    return Database(conn), wal_of(path)


def test_a_wal_that_big_already_is_left_as_is(tmp_path: Path) -> None:
    db, wal = new_wal_database(tmp_path)
    used = wal.stat().st_size
    assert reserve(db, str(wal), 2 * MiB) == 2 * MiB - used
    before = wal.read_bytes()
    assert len(before) == 2 * MiB
    assert reserve(db, str(wal), MiB) == 0
    assert reserve(db, str(wal), 2 * MiB) == 0
    assert wal.read_bytes() == before


def test_the_zeros_follow_the_log_and_it_reads_back(tmp_path: Path) -> None:
    db, wal = new_wal_database(tmp_path)
    used = wal.stat().st_size
    assert used > 0
    log = wal.read_bytes()
    assert reserve(db, str(wal), MiB) == MiB - used
    data = wal.read_bytes()
    assert data[:used] == log and data[used:] == bytes(MiB - used)
    db.execute("INSERT INTO t VALUES (x'01')")
    db.conn.close()
    with sqlite3.connect(tmp_path / "j.db") as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def plant_link(wal: Path, outside: Path) -> None:
    wal.symlink_to(outside)


def plant_fifo(wal: Path, outside: Path) -> None:
    os.mkfifo(wal)


@pytest.mark.parametrize("plant", [plant_link, plant_fifo], ids=["link", "fifo"])
def test_what_is_not_a_file_at_the_wal_name_is_not_written(
    tmp_path: Path, plant: Callable[[Path, Path], None]
) -> None:
    """Nothing written through a link, and no hang on a fifo (opening one to write
    waits for a reader)."""
    db, wal = new_wal_database(tmp_path)
    db.conn.close()  # the last connection checkpoints and removes the WAL
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    wal.unlink(missing_ok=True)
    plant(wal, outside)
    conn = sqlite3.connect(tmp_path / "j.db", isolation_level=None, timeout=0)
    try:
        assert reserve(Database(conn), str(wal), MiB) == 0
    finally:
        conn.close()
    assert outside.stat().st_size < MiB


def test_a_failed_write_gives_back_what_it_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, wal = new_wal_database(tmp_path)
    size = wal.stat().st_size
    writes: list[int] = []
    real_pwrite = os.pwrite

    def full_disk(fd: int, data: bytes, offset: int) -> int:
        if writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        writes.append(offset)
        return real_pwrite(fd, data[: 64 * 1024], offset)

    monkeypatch.setattr(_walspace.os, "pwrite", full_disk)
    assert reserve(db, str(wal), 4 * MiB) == 0
    assert writes  # one write went through before the disk was full
    assert wal.stat().st_size == size


def test_a_busy_journal_is_not_waited_for(tmp_path: Path) -> None:
    db, wal = new_wal_database(tmp_path)
    size = wal.stat().st_size
    holder = sqlite3.connect(tmp_path / "j.db", isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert reserve(db, str(wal), MiB) == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert wal.stat().st_size == size
