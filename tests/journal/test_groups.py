"""A group of begins (`Journal.begin_group`; a lone `begin` is a group of one):
one commit and one fsync on the writer's threads, each intent failing alone.

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
        ("full", 8, {0}),
        ("full", 8, {3, 6}),
        ("normal", 8, {5}),  # no syncer: the writer wakes the group itself
        ("full", 1, {0}),  # a lone begin
    ],
)
async def test_a_failing_begin_of_a_group_fails_alone(
    journal_path: Path, durability: str, count: int, bad: set[int]
) -> None:
    async with Journal.open(journal_path, durability=durability) as j:  # type: ignore[arg-type]
        intents = [_intent(i, bad=i in bad) for i in range(count)]
        outcome = await j.begin_group(intents, [None] * count)
        stats = await j.statistics()
    failed = {i for i, value in enumerate(outcome) if isinstance(value, BaseException)}
    assert failed == bad
    for i in bad:
        assert isinstance(outcome[i], TransactionStateError)
    ids = sorted(value for value in outcome if isinstance(value, int))
    assert _on_disk(journal_path) == dict.fromkeys(ids, "pending")
    if count > len(bad):  # the rest shared one commit
        assert (stats.commits, stats.records) == (1, count - len(bad))


@pytest.mark.parametrize(("count", "fault"), [(1, errno.EIO), (8, errno.EIO), (8, errno.ENOSPC)])
async def test_a_failed_fsync_fails_every_begin_of_the_group(
    journal_path: Path, count: int, fault: int
) -> None:
    """No begin of a group is acknowledged when the fsync covering it failed."""
    syncs = [0]

    def datasync(fd: int) -> None:
        syncs[0] += 1
        raise OSError(fault, os.strerror(fault))

    async with Journal.open(journal_path, datasync=datasync) as j:
        outcome = await j.begin_group([_intent(i) for i in range(count)], [None] * count)
        # The instance is broken: later begins fail without an fsync.
        with pytest.raises(JournalError) as later:
            await j.begin(_intent(99))
    assert syncs[0] == 1
    for value in [*outcome, later.value]:
        assert isinstance(value, JournalError)
        assert (value.kind, value.errno_name) == ("io", errno.errorcode[fault])
        assert "fsync" in value.message


async def test_begins_queue_behind_a_busy_writer(journal: Journal) -> None:
    """The writer thread took a request and has not finished it: the begins wait
    behind that request."""
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
    assert stats.records == 9


async def test_a_cancelled_begin_is_still_recorded(journal_path: Path) -> None:
    """Cancelled while its group's fsync runs: it stops waiting, its intent stays."""
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

        async with anyio.create_task_group() as tg:
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
    assert stats.records == 5
    assert [r.state for r in recorded] == ["pending"]
    assert len(_on_disk(journal_path)) == 5


async def test_no_statement_or_fsync_of_a_begin_runs_on_the_loop_thread(
    journal_path: Path,
) -> None:
    """Every statement and fsync of the journal's writes runs on its own threads, the
    loop meanwhile free for other tasks (here: the begin's `meanwhile`)."""
    threads: list[str] = []
    loop_thread = threading.current_thread().name

    def datasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        os.fdatasync(fd)

    seen: list[str] = []
    async with Journal.open(journal_path, datasync=datasync) as j:
        for count in (1, 8):

            def meanwhile() -> None:
                seen.append(threading.current_thread().name)

            outcome = await j.begin_group(
                [_intent(i) for i in range(count)], [None] * count, meanwhile=meanwhile
            )
            assert all(isinstance(tx, int) for tx in outcome)
    assert len(threads) == 2 and loop_thread not in threads
    assert seen == [loop_thread] * 2


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
async def test_a_begins_meanwhile_leaves_its_intent_recorded_whatever_it_does(
    journal_path: Path, fails: bool
) -> None:
    """`meanwhile` runs once the intent is queued; what it raises, the begin raises,
    and the intent is recorded (and its `then` run) all the same."""

    def meanwhile() -> None:
        if fails:
            raise RuntimeError("boom")

    async with Journal.open(journal_path) as j:
        thens: list[int] = []
        raised = pytest.raises(RuntimeError, match="boom") if fails else contextlib.nullcontext()
        with raised:
            await j.begin(_intent(1), meanwhile=meanwhile, then=thens.append)
        await j.begin(_intent(2))  # after the first: its wake-up has run
    assert len(thens) == 1  # the intent is durable, so its `then` ran
    assert sorted(_on_disk(journal_path).values()) == ["pending", "pending"]
