"""The transaction protocol through the writer thread: round trips and group commit."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import anyio
import msgspec
import pytest

from ledgerfs.journal import (
    Durability,
    Journal,
    JournalError,
    MutationRecord,
    TransactionStateError,
    TxIntent,
    content_hash,
)

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


def test_content_hash_format() -> None:
    digest = content_hash(b"abc")
    assert digest.startswith("blake3:") and len(digest) == 7 + 64
    assert digest == digest.lower()
    assert content_hash(b"x" * (5 * 1024 * 1024)) == content_hash(b"x" * (5 * 1024 * 1024))


async def test_begin_commit_round_trip(journal: Journal) -> None:
    intent = write_intent("/w/a.txt", b"new", before=b"old")
    tx = await journal.begin(intent)
    pending = await journal.transaction(tx)
    assert pending is not None
    assert pending.state == "pending" and pending.owner == journal.owner
    assert pending.mutations[0].applied is False
    await journal.commit(tx)
    done = await journal.transaction(tx)
    assert done is not None
    assert done.state == "committed" and done.finished_at is not None
    assert done.mutations == [msgspec.structs.replace(intent.mutations[0], applied=True)]
    assert done.summary == "write" and done.session == "s1" and done.checkpointed is False
    assert await journal.blob(content_hash(b"old")) == b"old"
    assert await journal.blobs([content_hash(b"new"), "blake3:" + "0" * 64]) == {
        content_hash(b"new"): b"new"
    }


async def test_mark_applied_then_rollback(journal: Journal) -> None:
    mutations = [
        MutationRecord(
            ordinal=i,
            op="write",
            path=f"/w/{i}",
            destination=None,
            before_hash=None,
            after_hash=content_hash(b"x"),
            before_mode=None,
            after_mode=0o600,
        )
        for i in range(3)
    ]
    intent = TxIntent(
        session="s", mutations=mutations, blobs={content_hash(b"x"): b"x"}, budget_charge=3
    )
    tx = await journal.begin(intent)
    await journal.mark_applied(tx, 0)
    await journal.mark_applied(tx, 1)
    # Queued writes run in order, so a later awaited write sees them.
    await journal.checkpoint(0)
    record = await journal.transaction(tx)
    assert record is not None
    assert [m.applied for m in record.mutations] == [True, True, False]
    cause = '{"error": {"code": "NOT_FOUND"}}'
    await journal.rollback(tx, outcome="ROLLBACK_PARTIAL", cause=cause, applied=[1])
    record = await journal.transaction(tx)
    assert record is not None
    assert (record.state, record.outcome, record.cause) == (
        "rolled_back",
        "ROLLBACK_PARTIAL",
        cause,
    )
    assert [m.applied for m in record.mutations] == [False, True, False]
    with pytest.raises(TransactionStateError):
        await journal.commit(tx)


async def test_commit_unknown_tx_fails_alone(journal: Journal) -> None:
    with pytest.raises(TransactionStateError):
        await journal.commit(999)
    tx = await journal.begin(write_intent("/a", b"a"))
    await journal.commit(tx)


async def test_history_by_path_tx_session(journal: Journal) -> None:
    t1 = await journal.begin(write_intent("/a", b"1", session="s1"))
    await journal.commit(t1)
    t2 = await journal.begin(write_intent("/b", b"2", session="s2"))
    await journal.commit(t2)
    t3 = await journal.begin(
        write_intent("/a", b"3", before=b"1", op="move", destination="/c", session="s1")
    )
    await journal.commit(t3)
    assert [r.id for r in await journal.history()] == [t3, t2, t1]
    assert [r.id for r in await journal.history(path="/a")] == [t3, t1]
    assert [r.id for r in await journal.history(path="/c")] == [t3]
    assert [r.id for r in await journal.history(tx=t2)] == [t2]
    assert [r.id for r in await journal.history(session="s1")] == [t3, t1]
    assert [r.id for r in await journal.history(session="s1", path="/a", limit=1)] == [t3]
    assert [r.id for r in await journal.history(path="/a", limit=1)] == [t3]
    assert await journal.history(path="/nowhere") == []


async def test_last_change_ignores_pending_and_rolled_back(journal: Journal) -> None:
    assert await journal.last_change("/a") is None
    t1 = await journal.begin(write_intent("/a", b"1"))
    await journal.commit(t1)
    t2 = await journal.begin(write_intent("/a", b"2"))
    t3 = await journal.begin(write_intent("/a", b"3"))
    await journal.rollback(t3, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
    found = await journal.last_change("/a")
    assert found is not None and found[0].id == t1 and found[1].after_hash == content_hash(b"1")
    await journal.commit(t2)
    t4 = await journal.begin(write_intent("/a", b"2", op="move", destination="/z"))
    await journal.commit(t4)
    found = await journal.last_change("/z")
    assert found is not None and found[0].id == t4 and found[1].destination == "/z"


async def test_budget_persists_across_reopen(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        await j.begin(write_intent("/a", b"1", charge=2))
        await j.begin(write_intent("/b", b"2", charge=3))
        await j.begin(write_intent("/b", b"2", charge=7, session="other"))
        assert await j.budget_used("s1") == 5
    async with Journal.open(journal_path) as j:
        assert await j.budget_used("s1") == 5
        assert await j.budget_used("other") == 7
        assert await j.budget_used("nobody") == 0


async def test_blobs_are_deduplicated(journal: Journal, journal_path: Path) -> None:
    data = b"same bytes" * 100
    for _ in range(3):
        await journal.begin(write_intent("/a", data))

    async def begin_one() -> None:
        await journal.begin(write_intent("/b", data))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(begin_one)
    rows = raw(journal_path).execute("SELECT hash, size FROM blobs").fetchall()
    assert rows == [(bytes.fromhex(content_hash(data).removeprefix("blake3:")), len(data))]


async def test_omitted_blob_must_be_stored(journal: Journal) -> None:
    tx = await journal.begin(write_intent("/a", b"kept"))
    again = msgspec.structs.replace(write_intent("/a", b"kept"), blobs={})
    assert await journal.begin(again) == tx + 1
    unknown = msgspec.structs.replace(write_intent("/a", b"never stored"), blobs={})
    with pytest.raises(TransactionStateError, match="neither given nor stored"):
        await journal.begin(unknown)
    wrong = msgspec.structs.replace(write_intent("/a", b"x"), blobs={content_hash(b"x"): b"not x"})
    with pytest.raises(TransactionStateError, match="does not hash"):
        await journal.begin(wrong)


async def test_group_commit_batches_concurrent_begins(journal: Journal) -> None:
    before = await journal.statistics()
    ids: list[int] = []

    async def begin_one(i: int) -> None:
        ids.append(await journal.begin(write_intent(f"/g/{i}", b"%d" % i)))

    async with anyio.create_task_group() as tg:
        for i in range(32):
            tg.start_soon(begin_one, i)
    after = await journal.statistics()
    assert sorted(ids) == list(range(min(ids), min(ids) + 32))
    assert after.records - before.records == 32
    assert after.commits - before.commits <= 8
    assert after.largest_group >= 8


@pytest.mark.parametrize(("durability", "synced"), [("full", True), ("normal", False)])
async def test_full_durability_acknowledges_after_a_wal_fsync(
    journal_path: Path, durability: str, synced: bool
) -> None:
    """A begin returns only after an fdatasync of the WAL that started after its commit."""
    events: list[str] = []

    def recording_fdatasync(fd: int) -> None:
        events.append("sync " + os.readlink(f"/proc/self/fd/{fd}"))
        os.fdatasync(fd)

    async with Journal.open(
        journal_path,
        durability=durability,  # type: ignore[arg-type]
        datasync=recording_fdatasync,
    ) as j:

        async def begin_one(i: int) -> None:
            await j.begin(write_intent(f"/d/{i}", b"%d" % i))
            events.append("acknowledged")

        await begin_one(0)
        async with anyio.create_task_group() as tg:
            for i in range(1, 17):
                tg.start_soon(begin_one, i)
    syncs = [e for e in events if e.startswith("sync")]
    if not synced:
        assert syncs == []
        return
    assert events[0] == f"sync {journal_path}-wal" and events[1] == "acknowledged"
    assert set(syncs) == {f"sync {journal_path}-wal"}
    # Seventeen acknowledgements, each after a sync; concurrent ones shared them.
    assert events.count("acknowledged") == 17 and len(syncs) < 17
    last_sync = max(i for i, e in enumerate(events) if e.startswith("sync"))
    assert events[-1] == "acknowledged" and last_sync < len(events) - 1


async def test_overlapping_begins_share_one_commit_and_one_fsync(journal_path: Path) -> None:
    """A lone begin commits and fsyncs once; 32 begins queued while the writer is
    busy share what it drains next."""
    syncs: list[int] = []
    release = threading.Event()

    def datasync(fd: int) -> None:
        syncs.append(fd)
        os.fdatasync(fd)

    async with Journal.open(journal_path, datasync=datasync) as j:
        for i in range(5):
            await j.begin(write_intent(f"/lone/{i}", b"%d" % i))
        lone = await j.statistics()
        assert len(syncs) == 5 and (lone.records, lone.commits) == (5, 5)
        syncs.clear()

        async def begin_one(i: int) -> None:
            await j.begin(write_intent(f"/many/{i}", b"%d" % i))

        j._write_nowait(lambda db: release.wait())  # hold the writer thread
        async with anyio.create_task_group() as tg:
            for i in range(32):
                tg.start_soon(begin_one, i)
            await anyio.wait_all_tasks_blocked()
            release.set()
        many = await j.statistics()
    # The held request commits alone, or with begins queued before the writer
    # took it; the 32 begins queued while it held the thread share one commit.
    assert many.records == 37 + 1 and many.commits - lone.commits <= 2 and len(syncs) <= 2


@pytest.mark.parametrize("durability", ["full", "normal"])
@pytest.mark.parametrize(
    ("here", "writer_busy", "on_callers_thread"),
    [(True, False, True), (False, False, False), (True, True, False)],
    ids=["here_idle_writer", "queued", "here_busy_writer"],
)
async def test_a_group_runs_on_the_callers_thread_only_when_asked_and_the_writer_is_idle(
    journal_path: Path,
    durability: str,
    here: bool,
    writer_busy: bool,
    on_callers_thread: bool,
) -> None:
    """`here` moves the commit, its fsync and the wake-up to the caller's thread
    while the writer is idle; a busy writer still takes the group in turn. Either
    way the begin is acknowledged only after a WAL fsync (durability full)."""
    events: list[tuple[str, int]] = []
    release = threading.Event()

    def datasync(fd: int) -> None:
        events.append(("fsync", threading.get_ident()))
        os.fdatasync(fd)

    async with Journal.open(
        journal_path,
        durability=durability,  # type: ignore[arg-type]
        datasync=datasync,
    ) as j:
        writer = j._writer
        assert writer is not None
        writer.db.conn.set_trace_callback(
            lambda sql: (
                events.append(("commit", threading.get_ident())) if sql == "COMMIT" else None
            )
        )
        if writer_busy:
            j._write_nowait(lambda db: release.wait())
        caller = threading.get_ident()
        intent = write_intent("/here/a", b"a")
        async with anyio.create_task_group() as tg:

            async def begin() -> None:
                await j.begin(intent, here=here)
                events.append(("acknowledged", threading.get_ident()))

            tg.start_soon(begin)
            await anyio.wait_all_tasks_blocked()
            release.set()
        assert await j.transaction(1) is not None
    ours = events[-3:] if durability == "full" else events[-2:]
    kinds = [kind for kind, _ in ours]
    assert kinds == (
        ["commit", "fsync", "acknowledged"] if durability == "full" else ["commit", "acknowledged"]
    )
    threads = {thread for kind, thread in ours if kind != "acknowledged"}
    assert (threads == {caller}) is on_callers_thread
    assert ours[-1][1] == caller


async def test_a_group_asked_to_run_here_never_waits_for_another_processes_lock_on_the_loop(
    journal_path: Path,
) -> None:
    """While another connection holds the write lock, a `here` group goes to the
    writer thread at once, which waits for the lock, instead of the caller's
    thread waiting in its BEGIN (which would freeze the caller's event loop for
    as long as the other holds it). The lock is let go only once the caller's
    thread has tried its BEGIN: a BEGIN that waited would then commit there."""
    async with Journal.open(journal_path) as j:
        await j.begin(write_intent("/first", b"1"), here=True)
        writer = j._writer
        assert writer is not None
        caller = threading.get_ident()
        commits: list[int] = []
        tried_here = threading.Event()

        def trace(sql: str) -> None:
            if sql == "BEGIN IMMEDIATE" and threading.get_ident() == caller:
                tried_here.set()
            elif sql == "COMMIT":
                commits.append(threading.get_ident())

        writer.db.conn.set_trace_callback(trace)
        other = sqlite3.connect(journal_path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")

        def let_go() -> None:
            tried_here.wait(10)
            threading.Event().wait(0.05)  # well after a BEGIN that does not wait gave up
            other.execute("COMMIT")

        releaser = threading.Thread(target=let_go)
        releaser.start()
        tx = await j.begin(write_intent("/second", b"2"), here=True)
        releaser.join()
        other.close()
        assert tried_here.is_set() and await j.transaction(tx) is not None
    assert commits and caller not in commits


async def test_without_group_commit_each_record_commits_alone(journal_path: Path) -> None:
    async with Journal.open(journal_path, group_commit=False) as j:

        async def begin_one(i: int) -> None:
            await j.begin(write_intent(f"/g/{i}", b"%d" % i))

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(begin_one, i)
        stats = await j.statistics()
    assert stats.records == stats.commits == 16 and stats.largest_group == 1


async def test_failing_request_in_a_group_fails_alone(journal: Journal) -> None:
    good: list[int] = []
    bad: list[BaseException] = []

    async def commit_one(tx: int) -> None:
        try:
            await journal.commit(tx)
            good.append(tx)
        except TransactionStateError as exc:
            bad.append(exc)

    txs = [await journal.begin(write_intent(f"/f/{i}", b"f")) for i in range(10)]
    async with anyio.create_task_group() as tg:
        for tx in txs:
            tg.start_soon(commit_one, tx)
            tg.start_soon(commit_one, 10_000 + tx)
    assert sorted(good) == txs and len(bad) == 10
    for tx in txs:
        record = await journal.transaction(tx)
        assert record is not None and record.state == "committed"


async def test_cancelled_caller_request_still_executes(journal: Journal) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        # Cancelled at its first wait: the request was queued all the same.
        await journal.begin(write_intent("/c", b"c"))
    assert scope.cancelled_caught
    # A later awaited write runs after it (the queue is FIFO).
    await journal.checkpoint(0)
    records = await journal.history(path="/c")
    assert [r.state for r in records] == ["pending"]


async def test_a_cancelled_waiter_stops_waiting_and_its_queued_intent_commits(
    journal: Journal,
) -> None:
    release = threading.Event()
    journal._write_nowait(lambda db: release.wait())  # the writer is busy: begins queue
    with anyio.CancelScope() as scope:
        scope.cancel()
        await journal.begin(write_intent("/q", b"q"))
    assert scope.cancelled_caught
    release.set()  # the writer now commits it and wakes a waiter that is gone
    await journal.checkpoint(0)  # FIFO: after it
    assert [r.state for r in await journal.history(path="/q")] == ["pending"]
    tx = await journal.begin(write_intent("/after", b"after"))  # the writer lives on
    assert (await journal.transaction(tx)) is not None


async def test_meanwhile_runs_before_the_intent_is_committed(journal: Journal) -> None:
    """The hook overlaps the commit: it runs while the writer has not yet taken the intent."""
    release = threading.Event()
    journal._write_nowait(lambda db: release.wait())  # hold the writer thread
    seen: list[bool] = []

    def hook() -> None:
        seen.append(release.is_set())
        release.set()

    with anyio.fail_after(10):
        tx = await journal.begin(write_intent("/h", b"h"), meanwhile=hook)
    assert seen == [False]
    record = await journal.transaction(tx)
    assert record is not None and record.state == "pending"


async def test_a_failing_meanwhile_leaves_the_intent_recorded(journal: Journal) -> None:
    def hook() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await journal.begin(write_intent("/f", b"f"), meanwhile=hook)
    await journal.checkpoint(0)  # a writer round trip: the queued intent went through
    assert [r.state for r in await journal.history(path="/f")] == ["pending"]


class _Thens:
    """What `then` hooks saw: (event, transaction) in order, and on which thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[tuple[str, int]] = []
        self.threads: set[int] = set()
        self.stored: list[bool] = []

    def hook(self, tx: int) -> None:
        self.events.append(("then", tx))
        self.threads.add(threading.get_ident())
        # Committed already: another connection sees the row.
        with raw(self.path) as conn:
            row = conn.execute("SELECT 1 FROM transactions WHERE id = ?", (tx,)).fetchone()
        self.stored.append(row is not None)

    async def begin(self, j: Journal, intent: TxIntent) -> None:
        tx = await j.begin(intent, then=self.hook)
        self.events.append(("returned", tx))


#: How the begins reach the writer: one alone, 32 at once, queued behind a busy
#: writer thread, a big image (the writer thread's path), without group commit,
#: with durability normal.
THEN_CASES = {
    "lone": ({}, 1, 8, False),
    "group": ({}, 32, 8, False),
    "queued": ({}, 16, 8, True),
    "big": ({}, 4, 300 * 1024, False),
    "single": ({"group_commit": False}, 8, 8, False),
    "normal": ({"durability": "normal"}, 16, 8, False),
}


@pytest.mark.parametrize("case", THEN_CASES)
async def test_then_runs_once_on_the_callers_thread_after_the_commit(
    journal_path: Path, case: str
) -> None:
    """Each `then` runs once, with its transaction's id, on the loop's thread, after
    the intent is stored and before its begin returns, whatever path it took."""
    options, count, size, busy = THEN_CASES[case]
    thens = _Thens(journal_path)
    async with Journal.open(journal_path, **options) as j:  # type: ignore[arg-type]
        release = threading.Event()
        if busy:
            j._write_nowait(lambda db: release.wait())
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(count):
                    data = b"%d" % i + b"x" * size
                    tg.start_soon(thens.begin, j, write_intent(f"/t/{i}", data))
                await anyio.sleep(0.05)
                release.set()
    assert thens.threads == {threading.get_ident()}
    assert thens.stored == [True] * count
    returned = [tx for event, tx in thens.events if event == "returned"]
    ran = [tx for event, tx in thens.events if event == "then"]
    assert sorted(ran) == sorted(returned) and len(set(ran)) == count
    for tx in returned:
        assert thens.events.index(("then", tx)) < thens.events.index(("returned", tx))


async def test_a_groups_thens_all_run_before_any_of_its_waiters_resumes(
    journal: Journal,
) -> None:
    thens = _Thens(journal.path)
    # Held busy (inside a group of its own) while the 32 begins queue, the writer
    # takes them as one group: on a loaded machine it could otherwise start on
    # the first ones before the rest are queued.
    started, release = threading.Event(), threading.Event()

    def busy(db: object) -> None:
        started.set()
        release.wait()

    journal._write_nowait(busy)
    await anyio.to_thread.run_sync(started.wait)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(32):
                tg.start_soon(thens.begin, journal, write_intent(f"/w/{i}", b"%d" % i))
            await anyio.sleep(0.05)
            release.set()
    assert (await journal.statistics()).largest_group >= 32
    assert [event for event, _ in thens.events] == ["then"] * 32 + ["returned"] * 32


async def test_a_then_that_raises_fails_its_begin_alone(journal: Journal) -> None:
    """Its begin raises what it raised, with the intent recorded; the group's other
    waiters are woken and their `then`s run."""
    thens = _Thens(journal.path)
    raised: list[int] = []

    def boom(tx: int) -> None:
        raised.append(tx)
        raise RuntimeError("then failed")

    async def begin_boom() -> None:
        with pytest.raises(RuntimeError, match="then failed"):
            await journal.begin(write_intent("/boom", b"boom"), then=boom)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(thens.begin, journal, write_intent(f"/fine/{i}", b"%d" % i))
            tg.start_soon(begin_boom)
    assert len([e for e, _ in thens.events if e == "returned"]) == 8
    [tx] = raised
    record = await journal.transaction(tx)
    assert record is not None and record.state == "pending"


async def test_then_does_not_run_for_a_begin_that_failed(journal: Journal) -> None:
    """A failing intent in a group runs no `then`; the others' run."""
    thens = _Thens(journal.path)
    missing = write_intent("/m", b"m", before=b"never stored")
    missing.blobs.pop(content_hash(b"never stored"))
    failures: list[BaseException] = []

    async def begin_missing() -> None:
        try:
            await journal.begin(missing, then=thens.hook)
        except TransactionStateError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(thens.begin, journal, write_intent(f"/ok/{i}", b"%d" % i))
        tg.start_soon(begin_missing)
    assert len(failures) == 1
    ran = [tx for event, tx in thens.events if event == "then"]
    assert sorted(ran) == sorted(tx for event, tx in thens.events if event == "returned")
    assert len(ran) == 8


async def test_issue_writes_round_trip(journal: Journal) -> None:
    first = await journal.record_issue_write(
        key="k1", provider="github", repo="o/r", kind="comment", payload="{}", marker="m1"
    )
    second = await journal.record_issue_write(
        key="k2", provider="gitlab", repo="g/p", kind="create", payload="{}", marker="m2"
    )
    await journal.finish_issue_write(first, state="done", result='{"url": "u"}')
    pending = await journal.issue_writes(state="pending")
    assert [w.id for w in pending] == [second]
    done = await journal.issue_writes(key="k1")
    assert done[0].state == "done" and done[0].result == '{"url": "u"}'
    assert done[0].finished_at is not None and done[0].provider == "github"
    assert len(await journal.issue_writes()) == 2
    with pytest.raises(TransactionStateError):
        await journal.finish_issue_write(999, state="unknown", result=None)


async def test_closed_journal_refuses_calls_and_aclose_is_idempotent(journal_path: Path) -> None:
    j = await Journal.open(journal_path)
    tx = await j.begin(write_intent("/a", b"a"))
    await j.mark_applied(tx, 0)
    await j.aclose()
    await j.aclose()
    with pytest.raises(JournalError) as info:
        await j.transaction(tx)
    assert info.value.kind == "closed" and str(journal_path) in info.value.message
    # The queued mark_applied was drained before the thread stopped.
    reopened = await Journal.open(journal_path, readonly=True)
    async with reopened:
        record = await reopened.transaction(tx)
    assert record is not None and [m.applied for m in record.mutations] == [True]


async def test_aclose_is_shielded_from_cancellation(journal_path: Path) -> None:
    j = await Journal.open(journal_path)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await j.aclose()
    with pytest.raises(JournalError):
        await j.budget_used("s")
    assert not j._writer.thread.is_alive()


async def test_two_instances_in_one_process_share_the_file(journal_path: Path) -> None:
    async with Journal.open(journal_path) as a, Journal.open(journal_path) as b:
        assert a.owner != b.owner
        ta = await a.begin(write_intent("/a", b"a"))
        tb = await b.begin(write_intent("/b", b"b"))
        await a.commit(ta)
        await b.commit(tb)
        seen = await b.transaction(ta)
        assert seen is not None and seen.state == "committed"


async def test_commit_nowait_lands_before_the_next_awaited_write(journal: Journal) -> None:
    tx = await journal.begin(write_intent("/n", b"n"))
    journal.commit_nowait(tx)
    await journal.checkpoint(tx)  # FIFO: runs after the queued commit
    record = await journal.transaction(tx)
    assert record is not None and record.state == "committed" and record.checkpointed
    # A lazy group must leave the connection at the durability it was opened with
    # (NORMAL under group commit: the syncer fsyncs the WAL).
    assert journal._writer.db.execute("PRAGMA synchronous").fetchone()[0] == 1


def _on_disk(path: Path, tx: int) -> tuple[str, int]:
    """(state, checkpointed) of `tx` as another process reads the file."""
    row = raw(path).execute("SELECT state, checkpointed FROM transactions WHERE id = ?", (tx,))
    state, checkpointed = row.fetchone()
    return str(state), int(checkpointed)


async def test_commit_nowait_writes_nothing_until_the_checkpoint(
    journal: Journal, journal_path: Path
) -> None:
    early = await journal.begin(write_intent("/e", b"e"))
    late = await journal.begin(write_intent("/l", b"l"))
    records = (await journal.statistics()).records
    journal.commit_nowait(early)
    journal.commit_nowait(late)
    # Written by nobody yet: the file says pending, this journal says committed.
    assert _on_disk(journal_path, early) == ("pending", 0)
    seen = await journal.transaction(early)
    assert seen is not None and seen.state == "committed" and seen.finished_at is not None
    assert all(m.applied for m in seen.mutations)
    await journal.checkpoint(early)  # one statement: committed and checkpointed
    assert (await journal.statistics()).records == records + 1
    assert _on_disk(journal_path, early) == ("committed", 1)
    assert _on_disk(journal_path, late) == ("pending", 0)
    stored = await journal.transaction(early)
    assert stored is not None and stored.finished_at == seen.finished_at
    assert stored.mutations == seen.mutations


async def test_close_writes_the_marks_no_checkpoint_covered(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        tx = await j.begin(write_intent("/c", b"c"))
        j.commit_nowait(tx)
    assert _on_disk(journal_path, tx) == ("committed", 0)  # recovery still rolls it forward


async def test_marks_nobody_checkpoints_are_written_lazily(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledgerfs.journal._journal as module

    monkeypatch.setattr(module, "_MARKS_MAX", 3)
    async with Journal.open(journal_path) as j:
        txs = [await j.begin(write_intent(f"/m{n}", b"%d" % n)) for n in range(3)]
        for tx in txs:
            j.commit_nowait(tx)
        await j.commit(await j.begin(write_intent("/x", b"x")))  # FIFO: after the marks
        assert [_on_disk(journal_path, tx) for tx in txs] == [("committed", 0)] * 3
        assert j._committing == {}


async def test_written_marks_read_committed_in_another_process(
    journal: Journal, journal_path: Path
) -> None:
    first = await journal.begin(write_intent("/e", b"e"))
    second = await journal.begin(write_intent("/f", b"f"))
    journal.commit_nowait(first, second)
    assert _on_disk(journal_path, first) == ("pending", 0)
    before = await journal.statistics()
    journal.write_marks_nowait()
    journal.write_marks_nowait()  # one is queued already: it takes every mark noted
    await journal.checkpoint(0)  # a writer round trip: the queued write went first
    assert [_on_disk(journal_path, tx) for tx in (first, second)] == [("committed", 0)] * 2
    assert journal._committing == {}
    assert (await journal.statistics()).records == before.records + 2  # marks, checkpoint
    other = await Journal.open(journal_path)
    async with other:
        seen = await other.transaction(first)
        assert seen is not None and seen.state == "committed" and seen.finished_at is not None
        assert all(m.applied for m in seen.mutations)
    records = (await journal.statistics()).records
    journal.write_marks_nowait()  # nothing noted: nothing queued
    assert (await journal.statistics()).records == records
    await journal.checkpoint(second)
    assert _on_disk(journal_path, second) == ("committed", 1)


@pytest.mark.parametrize(("ride_age", "ride"), [(0.0, True), (3600.0, False)])
async def test_noted_marks_old_enough_ride_along_with_the_next_begin_in_its_commit(
    journal: Journal,
    journal_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ride_age: float,
    ride: bool,
) -> None:
    """A begin takes every mark noted so far into its own commit once the oldest
    is `_MARKS_RIDE_AGE` old (other processes read them committed after one
    commit, not two); younger ones stay noted for a later begin or write."""
    import ledgerfs.journal._journal as module

    monkeypatch.setattr(module, "_MARKS_RIDE_AGE", ride_age)
    first = await journal.begin(write_intent("/e", b"e"))
    second = await journal.begin(write_intent("/f", b"f"))
    journal.commit_nowait(first, second)
    before = await journal.statistics()
    third = await journal.begin(write_intent("/g", b"g"))
    after = await journal.statistics()
    assert after.commits - before.commits == 1
    assert after.records - before.records == (2 if ride else 1)  # the begin, the marks
    marks = ("committed", 0) if ride else ("pending", 0)
    assert [_on_disk(journal_path, tx) for tx in (first, second)] == [marks] * 2
    assert _on_disk(journal_path, third) == ("pending", 0)
    assert set(journal._committing) == (set() if ride else {first, second})


@pytest.mark.parametrize(("age", "written"), [(0.0, True), (3600.0, False)])
async def test_marks_younger_than_the_age_asked_are_left_noted(
    journal: Journal, journal_path: Path, age: float, written: bool
) -> None:
    tx = await journal.begin(write_intent("/a", b"a"))
    journal.commit_nowait(tx)
    journal.write_marks_nowait(age=age)
    await journal.checkpoint(0)  # a writer round trip: a queued write went first
    assert _on_disk(journal_path, tx) == ("committed" if written else "pending", 0)
    assert (tx in journal._committing) is not written


@pytest.mark.parametrize(
    ("durability", "group_commit"), [("full", True), ("full", False), ("normal", True)]
)
async def test_written_marks_leave_the_connection_as_it_was(
    journal_path: Path, durability: Durability, group_commit: bool
) -> None:
    async with Journal.open(journal_path, durability=durability, group_commit=group_commit) as j:
        db = j._writer.db
        names = ("synchronous", "busy_timeout")
        pragmas = [db.execute(f"PRAGMA {name}").fetchone()[0] for name in names]
        tx = await j.begin(write_intent("/s", b"s"))
        j.commit_nowait(tx)
        j.write_marks_nowait()
        await j.checkpoint(0)  # a writer round trip
        assert _on_disk(journal_path, tx) == ("committed", 0)
        after = [db.execute(f"PRAGMA {name}").fetchone()[0] for name in names]
        assert after == pragmas


async def test_marks_another_process_keeps_from_the_file_land_with_the_next_write(
    journal: Journal, journal_path: Path
) -> None:
    """While another process holds SQLite's write lock, the marks wait in the
    writer's queue (the loop never waits for the lock) and this journal reads
    them committed."""
    early = await journal.begin(write_intent("/e", b"e"))
    late = await journal.begin(write_intent("/l", b"l"))
    holder = raw(journal_path)
    holder.execute("BEGIN IMMEDIATE")
    journal.commit_nowait(early)
    journal.write_marks_nowait()
    journal.commit_nowait(late)
    journal.write_marks_nowait()  # the queued write takes it along
    seen = await journal.transaction(early)
    assert seen is not None and seen.state == "committed"
    assert _on_disk(journal_path, early) == ("pending", 0)
    holder.execute("ROLLBACK")
    await journal.commit(await journal.begin(write_intent("/x", b"x")))  # FIFO: after the marks
    assert [_on_disk(journal_path, tx) for tx in (early, late)] == [("committed", 0)] * 2
    assert journal._committing == {}
    assert journal._writer.db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


async def test_a_checkpoint_record_writes_the_marks_it_covers(
    journal: Journal, journal_path: Path
) -> None:
    tx = await journal.begin(write_intent("/c", b"c"))
    journal.commit_nowait(tx)
    made = await journal.record_checkpoint(session="s1", label=None)
    assert made.transaction == tx
    assert _on_disk(journal_path, tx) == ("committed", 0)
    assert journal._committing == {}


async def test_commit_nowait_of_an_unknown_transaction_changes_nothing(
    journal: Journal, journal_path: Path
) -> None:
    journal.commit_nowait(12345)
    await journal.checkpoint(12345)
    assert (await journal.statistics()).failed_requests == 0
    assert await journal.transaction(12345) is None
    count = raw(journal_path).execute("SELECT count(*) FROM transactions").fetchone()
    assert count == (0,)


@pytest.mark.anyio
async def test_a_queued_commit_mark_is_visible_to_this_journals_reads(tmp_path: Path) -> None:
    """commit_nowait returns before the mark is written; reads must not show pending."""
    async with await Journal.open(tmp_path / "j.db", durability="normal") as j:
        seen = []
        for n in range(50):
            digest = content_hash(b"%d" % n)
            intent = TxIntent(
                session="s",
                mutations=[
                    MutationRecord(
                        ordinal=0,
                        op="write",
                        path="/p",
                        destination=None,
                        before_hash=None,
                        after_hash=digest,
                        before_mode=None,
                        after_mode=0o644,
                    )
                ],
                blobs={digest: b"%d" % n},
                budget_charge=1,
            )
            tx = await j.begin(intent)
            j.commit_nowait(tx)
            record = await j.transaction(tx)
            assert record is not None
            seen.append(record.state)
            [latest] = await j.history(path="/p", limit=1)
            assert (latest.id, latest.state) == (tx, "committed")
            change = await j.last_change("/p")
            assert change is not None and change[0].id == tx
        assert set(seen) == {"committed"}


async def test_wal_checkpoints_leave_commit_and_the_wal_stays_bounded(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledgerfs.journal._walcheck as walcheck
    import ledgerfs.journal._walspace as walspace

    monkeypatch.setattr(walcheck, "EVERY", 4)
    monkeypatch.setattr(walcheck, "RESET_FRAMES", 40)
    # The file's size is then how far the WAL ever grew: nothing written ahead.
    monkeypatch.setattr(walspace, "RESERVE", 0)
    async with Journal.open(journal_path) as j:
        # No COMMIT copies the WAL into the database: the checkpointer thread does.
        assert j._writer.db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        walcheck_thread = j._writer.walcheck
        assert walcheck_thread is not None

        async def begin_some(k: int) -> None:
            for i in range(20):
                await j.begin(write_intent(f"/w/{k}", b"%d %d" % (k, i) * 900))

        async with anyio.create_task_group() as tg:
            for k in range(16):
                tg.start_soon(begin_some, k)
        await j.commit(await j.begin(write_intent("/last", b"last")))
        checkpoints = walcheck_thread.checkpoints
        wal_frames = os.path.getsize(f"{journal_path}-wal") // (4096 + 24)
    # 320 intents of two pages and more each, without checkpoints, need well over
    # 1000 frames; restarted every 40 or so, the WAL never held more than a few
    # groups beyond that.
    assert checkpoints > 0
    assert wal_frames < 600, wal_frames


@pytest.mark.parametrize(
    ("groups", "due"),
    [
        ([1] * 63, False),
        ([1] * 64, True),  # one writer: every EVERY commits
        ([30] * 8, False),
        ([30] * 9, True),  # group commit: every EVERY_RECORDS records
        ([255], False),
        ([256], True),
    ],
)
def test_a_background_checkpoint_is_due_after_enough_commits_or_records(
    journal_path: Path, groups: list[int], due: bool
) -> None:
    from ledgerfs.journal import _schema
    from ledgerfs.journal._walcheck import WalCheckpointer

    journal_path.parent.mkdir(parents=True)
    db = _schema.connect(journal_path, busy_timeout=1.0, durability="full")
    checkpointer = WalCheckpointer(db, "test", lambda: None)  # not started
    for records in groups:
        checkpointer.committed(records)
    assert checkpointer._due() is due
    db.conn.close()
