"""Begins that overlap on one event loop: collected there and committed as one group.

Each test runs on asyncio and trio, against a real journal file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from pathlib import Path

import anyio
import msgspec
import pytest

from ledgerfs.journal import Journal, JournalError, TransactionStateError, TxIntent
from ledgerfs.journal._journal import _others_ready

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


def _intent(i: int, *, bad: bool = False) -> TxIntent:
    """A one-mutation intent; `bad` drops its blob, which is stored nowhere."""
    intent = write_intent(f"/b/{i}", b"batch %d" % i)
    return msgspec.structs.replace(intent, blobs={}) if bad else intent


def _on_disk(path: Path) -> dict[int, str]:
    """{tx: state} as another connection reads the file."""
    rows = raw(path).execute("SELECT id, state FROM transactions").fetchall()
    return {int(tx): str(state) for tx, state in rows}


async def _begin_all(j: Journal, count: int, bad: set[int]) -> dict[int, int | BaseException]:
    """Begin `count` intents in concurrent tasks; each one's id or error by index."""
    outcome: dict[int, int | BaseException] = {}

    async def one(i: int) -> None:
        try:
            outcome[i] = await j.begin(_intent(i, bad=i in bad))
        except (JournalError, TransactionStateError) as exc:
            outcome[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(one, i)
    return outcome


@pytest.mark.parametrize(
    ("durability", "count", "bad"),
    [
        ("full", 8, set()),
        ("full", 8, {0}),  # the batch's leader fails
        ("full", 8, {3, 6}),
        ("normal", 8, {5}),  # no syncer: the leader wakes the batch itself
        ("full", 1, {0}),  # a lone begin
    ],
)
async def test_a_failing_begin_in_a_loop_batch_fails_alone(
    journal_path: Path, durability: str, count: int, bad: set[int]
) -> None:
    async with Journal.open(journal_path, durability=durability) as j:  # type: ignore[arg-type]
        outcome = await _begin_all(j, count, bad)
        stats = await j.statistics()
    failed = {i for i, value in outcome.items() if isinstance(value, BaseException)}
    assert failed == bad
    for i in bad:
        assert isinstance(outcome[i], TransactionStateError)
    ids = sorted(value for value in outcome.values() if isinstance(value, int))
    # Everything ran on the loop's thread, as one group.
    assert stats.inline == count and stats.groups == 1 and stats.largest_group == count
    assert _on_disk(journal_path) == dict.fromkeys(ids, "pending")
    assert stats.failed_requests == len(bad)


@pytest.mark.parametrize(("count", "fault"), [(1, errno.EIO), (8, errno.EIO), (8, errno.ENOSPC)])
async def test_a_failed_fsync_fails_every_begin_of_the_loop_batch(
    journal_path: Path, count: int, fault: int
) -> None:
    """No begin of a batch is acknowledged when the fsync covering it failed."""
    syncs = [0]

    def datasync(fd: int) -> None:
        syncs[0] += 1
        raise OSError(fault, os.strerror(fault))

    async with Journal.open(journal_path, datasync=datasync) as j:
        outcome = await _begin_all(j, count, set())
        stats = await j.statistics()
        # The instance is broken: later begins fail without an fsync.
        with pytest.raises(JournalError) as later:
            await j.begin(_intent(99))
    assert stats.inline == count and syncs[0] == 1
    for value in [*outcome.values(), later.value]:
        assert isinstance(value, JournalError)
        assert (value.kind, value.errno_name) == ("io", errno.errorcode[fault])
        assert "fsync" in value.message


async def test_a_loop_batch_queues_behind_a_busy_writer(journal: Journal) -> None:
    """The writer thread took a request and has not finished it: the batch goes to
    it, behind that request."""
    release = threading.Event()
    order: list[str] = []

    def held(db: object) -> None:
        release.wait()
        order.append("held")

    journal._write_nowait(held)

    async def begin_one(i: int) -> None:
        await journal.begin(_intent(i))
        order.append("begin")

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(begin_one, i)
        await anyio.wait_all_tasks_blocked()
        release.set()
    stats = await journal.statistics()
    assert order == ["held"] + ["begin"] * 8
    assert stats.inline == 0 and stats.records == 9


async def test_a_cancelled_begin_of_a_loop_batch_is_still_recorded(journal_path: Path) -> None:
    """Cancelled while its batch's fsync runs: it stops waiting, its intent stays.

    A task kept ready to run makes the batch hand its fsync to the syncer thread
    (a loop with nothing else to run would fsync itself, and nobody could cancel
    anything meanwhile).
    """
    release, entered = threading.Event(), threading.Event()

    def datasync(fd: int) -> None:
        entered.set()
        release.wait()
        os.fdatasync(fd)

    async with Journal.open(journal_path, datasync=datasync) as j:
        done: list[int] = []
        cancelled = anyio.CancelScope()

        async def begin_one(i: int) -> None:
            done.append(await j.begin(_intent(i)))

        exited = anyio.Event()

        async def begin_cancelled() -> None:
            try:
                with cancelled:
                    await j.begin(_intent(7))
                    done.append(-1)  # never: it was cancelled while waiting
            finally:
                exited.set()

        async def spinner() -> None:  # ready again at every turn of the loop
            while not release.is_set():
                await anyio.sleep(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(spinner)
            for i in range(4):
                tg.start_soon(begin_one, i)
            tg.start_soon(begin_cancelled)
            # All five are committed and wait for the fsync, which waits for us.
            await anyio.to_thread.run_sync(entered.wait)
            cancelled.cancel()
            await exited.wait()
            release.set()
        stats = await j.statistics()
        recorded = await j.history(path="/b/7")
    assert cancelled.cancelled_caught and -1 not in done and len(done) == 4
    assert stats.inline == 5 and stats.largest_group == 5
    assert [r.state for r in recorded] == ["pending"]
    assert len(_on_disk(journal_path)) == 5


# asyncio only: trio runs a tick's tasks in an order of its choosing (it may
# resume the waiting begin before the tasks started just before it).
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("ready", "groups"), [(3, [4]), (0, [1])])
async def test_a_begin_gathers_the_ready_tasks_and_waits_for_none_else(
    journal: Journal, ready: int, groups: list[int]
) -> None:
    """A begin lets the loop's ready tasks run once, and their begins join its
    group; with no task ready (as asyncio's loop can tell) it commits before
    any other task has run."""
    ran: list[int] = []
    blocked = anyio.Event()

    async def follower(i: int) -> None:
        ran.append(i)
        await journal.begin(_intent(i))

    async def waiting() -> None:
        await blocked.wait()  # started, then not ready again until set
        ran.append(-1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiting)
        await anyio.sleep(0.01)
        for i in range(1, ready + 1):
            tg.start_soon(follower, i)
        await journal.begin(_intent(0))
        seen = list(ran)
        blocked.set()
    stats = await journal.statistics()
    assert seen == list(range(1, ready + 1))
    assert (stats.groups, stats.largest_group) == (len(groups), max(groups))


async def test_only_asyncio_tells_when_no_other_task_is_ready(anyio_backend: str) -> None:
    """What `_lead` asks before waiting a tick: asyncio's loop can tell; elsewhere a
    task is taken as ready, so a begin always waits its tick there."""
    assert _others_ready() is (anyio_backend != "asyncio")
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep, 0)
        assert _others_ready()


@pytest.mark.parametrize("busy", [False, True], ids=["nothing-else-ready", "a-task-ready"])
async def test_a_batch_fsyncs_on_the_loop_only_while_nothing_else_could_run(
    journal_path: Path, anyio_backend: str, busy: bool
) -> None:
    """With no other task ready the loop would only wait for a batch's fsync, so it
    runs it itself; with one ready (or where the loop cannot tell) the syncer
    thread does, and the loop goes on meanwhile. Every begin is durable either way."""
    threads: list[str] = []

    def datasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        os.fdatasync(fd)

    stop = anyio.Event()

    async def spinner() -> None:  # always ready to run: yields and is ready again
        while not stop.is_set():
            await anyio.sleep(0)

    async with Journal.open(journal_path, datasync=datasync) as j:
        async with anyio.create_task_group() as tg:
            if busy:
                tg.start_soon(spinner)
            outcome = await _begin_all(j, 8, set())
            stop.set()
        stats = await j.statistics()
    assert sorted(outcome.values()) == list(range(1, 9))  # type: ignore[type-var]
    assert stats.largest_group == 8 and len(threads) == 1
    on_loop = anyio_backend == "asyncio" and not busy
    assert (threads[0] == threading.current_thread().name) is on_loop, threads
    assert _on_disk(journal_path) == dict.fromkeys(range(1, 9), "pending")


@pytest.mark.parametrize("fails", [False, True], ids=["hook returns", "hook raises"])
async def test_a_lone_begins_while_waiting_runs_between_its_commit_and_its_fsync(
    journal_path: Path, fails: bool
) -> None:
    """Run inline, the hook does its work while the WAL's pages go to the disk: the
    intent is committed when it runs, and fsynced after it, whatever it does."""
    events: list[str] = []

    def datasync(fd: int) -> None:
        events.append("fsync")
        os.fdatasync(fd)

    def hook() -> None:
        events.append(f"hook sees {sorted(_on_disk(journal_path).values())}")
        if fails:
            raise RuntimeError("boom")

    async with Journal.open(journal_path, datasync=datasync) as j:
        await j.begin(_intent(0))
        events.clear()
        thens: list[int] = []
        raised = pytest.raises(RuntimeError, match="boom") if fails else contextlib.nullcontext()
        with raised:
            await j.begin(_intent(1), while_waiting=hook, then=thens.append)
        stats = await j.statistics()
    assert stats.inline == 2
    assert events == ["hook sees ['pending', 'pending']", "fsync"]
    assert len(thens) == 1  # the intent is durable, so its `then` ran
    assert sorted(_on_disk(journal_path).values()) == ["pending", "pending"]
