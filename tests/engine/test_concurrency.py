"""Concurrency: no lost update across tasks, engines and processes; no deadlock;
recovery never touches a live process's transaction.

Races are forced with events: the live-process test blocks the first engine inside
its rename (in the worker thread) until a second engine has finished opening.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ledgerfs.engine import Code, Engine, LedgerError, Session

from ._child import ForkServer
from ._faulty import FaultyOps
from .conftest import temp_files


async def increment(session: Session, path: str) -> int:
    """One read-modify-write increment with expected_hash; return the conflicts met."""
    conflicts = 0
    while True:
        read: Any = await session.call("read_file", {"path": path})
        try:
            await session.call(
                "write_file",
                {
                    "path": path,
                    "content": str(int(read.content) + 1),
                    "expected_hash": read.content_hash,
                },
            )
        except LedgerError as exc:
            assert exc.code is Code.OCC_MISMATCH, exc.envelope
            assert exc.envelope.error.retryable
            conflicts += 1
            continue
        return conflicts


async def committed_writes(engine: Engine, path: Path) -> int:
    history = await engine.journal.history(path=str(path), limit=100_000)
    return sum(1 for record in history if record.state == "committed")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_64_tasks_increment_one_file(engine: Engine, workspace: Path) -> None:
    counter = workspace / "counter"
    counter.write_text("0")
    per_task = 1
    conflicts = 0

    async def worker() -> None:
        nonlocal conflicts
        session = await engine.session()
        for _ in range(per_task):
            conflicts += await increment(session, "counter")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for _ in range(64):
                group.start_soon(worker)
    await engine.flush()  # the lazy commit marks are written before this returns
    assert counter.read_text() == str(64 * per_task)
    assert await committed_writes(engine, counter) == 64 * per_task
    assert temp_files(workspace) == []


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    fork_server = ForkServer()
    yield fork_server
    fork_server.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_4_processes_increment_one_file(server: ForkServer, workspace: Path) -> None:
    """Four processes share the workspace and journal; flock orders them."""
    counter = workspace / "counter"
    counter.write_text("0")
    n, processes = 30, 4
    pids = [
        server.start(
            "increments",
            backend=("asyncio", "trio")[k % 2],
            root=str(workspace),
            path="counter",
            n=n,
            tasks=3,
        )
        for k in range(processes)
    ]
    reports = []
    for pid in pids:
        status, lines = await anyio.to_thread.run_sync(server.wait, pid)
        assert status == 0, lines
        reports += [(int(f[1]), int(f[2])) for f in lines if f[0] == "D"]
    assert len(reports) == processes
    assert sum(commits for commits, _ in reports) == n * processes
    assert counter.read_text() == str(n * processes)
    async with Engine.open({"roots": [str(workspace)]}) as engine:
        assert engine.recovered == []
        assert await committed_writes(engine, counter) == n * processes
        assert (await engine.journal.verify()).ok
    assert temp_files(workspace) == []


@pytest.mark.anyio
async def test_64_tasks_on_64_files_in_opposite_orders(
    engine: Engine, engine_config: dict[str, Any], workspace: Path
) -> None:
    """Each batch read-modify-writes two neighbouring files, half of them in reverse
    order, over two engines (anyio locks within one, flock between them)."""
    files = [f"f{i:02d}" for i in range(64)]
    for name in files:
        (workspace / name).write_text("0")
    rounds = 2

    async def worker(session: Session, i: int) -> None:
        pair = [files[i], files[(i + 1) % 64]]
        if i % 2:
            pair.reverse()
        for _ in range(rounds):
            while True:
                reads: list[Any] = [
                    await session.call("read_file", {"path": name}) for name in pair
                ]
                ops = [
                    {
                        "op": "write",
                        "path": name,
                        "content": str(int(read.content) + 1),
                        "expected_hash": read.content_hash,
                    }
                    for name, read in zip(pair, reads, strict=True)
                ]
                try:
                    await session.call("batch", {"operations": ops})
                except LedgerError as exc:
                    assert exc.code is Code.OCC_MISMATCH, exc.envelope
                    continue
                break

    async with Engine.open(engine_config) as second:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for i in range(64):
                    session = await (engine if i % 2 else second).session()
                    group.start_soon(worker, session, i)
    # Every file is in two pairs: each pair's batch adds one per round.
    assert {(workspace / name).read_text() for name in files} == {str(2 * rounds)}
    assert temp_files(workspace) == []


@pytest.mark.anyio
async def test_recovery_never_touches_a_live_transaction(
    engine_config: dict[str, Any], workspace: Path
) -> None:
    """A second engine opens while the first is inside its rename: nothing to recover."""
    big = workspace / "big.txt"
    before = b"b" * 100_000  # above the inline limit: applied in a worker thread
    after = "a" * 100_000
    big.write_bytes(before)
    entered, release = threading.Event(), threading.Event()
    ops = FaultyOps()

    def block(path: str) -> None:
        if path.endswith("/big.txt"):
            entered.set()
            release.wait(30)

    ops.hooks["rename"] = block
    async with Engine.open(engine_config, fileops=ops) as first:
        session = await first.session()
        result: list[Any] = []

        async def write() -> None:
            result.append(await session.call("write_file", {"path": "big.txt", "content": after}))

        async with anyio.create_task_group() as group:
            group.start_soon(write)
            assert await anyio.to_thread.run_sync(entered.wait, 30)
            # The first engine's transaction is pending, its temp file written.
            [tmp] = temp_files(workspace)
            async with Engine.open(engine_config) as second:
                assert second.recovered == []
                assert tmp.exists() and big.read_bytes() == before
                [record] = await second.journal.history(path=str(big))
                assert record.state == "pending" and record.owner == first.journal.owner
            release.set()
        [done] = result
        await first.flush()
        record = await first.journal.transaction(done.transaction)
        assert record is not None
        assert (record.state, record.checkpointed) == ("committed", True)
        assert big.read_text() == after
        assert temp_files(workspace) == []
    async with Engine.open(engine_config) as third:
        assert third.recovered == []
    assert big.read_text() == after
    assert os.listdir(workspace / ".ledgerfs" / "owners") == []


@pytest.mark.anyio
async def test_concurrent_file_steps_run_on_the_loop_and_fail_alone(
    engine_config: dict[str, Any], workspace: Path
) -> None:
    """Concurrent transactions' file steps run on the loop's thread (each group's in
    the callback that wakes it, no thread hop); a rename failing there rolls back
    that transaction only."""
    names = [f"f{i}.txt" for i in range(16)]
    for name in names:
        (workspace / name).write_text("old\n")
    ops = FaultyOps()
    threads: list[str] = []
    ops.hooks["rename"] = lambda path: threads.append(threading.current_thread().name)
    ops.fail("rename", 1, match="/f7.txt")
    outcomes: dict[str, Any] = {}
    async with Engine.open(engine_config, fileops=ops) as engine:
        sessions = {name: await engine.session() for name in names}

        async def write(name: str) -> None:
            session = sessions[name]
            try:
                outcomes[name] = await session.call(
                    "write_file", {"path": name, "content": "new\n"}
                )
            except LedgerError as exc:
                outcomes[name] = exc

        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(write, name)
        assert threads == [threading.current_thread().name] * len(names)
        alone = await engine.session()
        threads.clear()
        await alone.call("write_file", {"path": "f0.txt", "content": "alone\n"})
        assert threads == [threading.current_thread().name]

    failed = outcomes.pop("f7.txt")
    assert isinstance(failed, LedgerError) and failed.code is Code.ROLLBACK_COMPLETE
    assert failed.details["cause"]["op"] == "write"
    assert (workspace / "f7.txt").read_text() == "old\n"
    assert {name: (workspace / name).read_text() for name in outcomes} == {
        name: "alone\n" if name == "f0.txt" else "new\n" for name in outcomes
    }
    assert all(not isinstance(result, LedgerError) for result in outcomes.values())
    assert temp_files(workspace) == []


@pytest.mark.anyio
async def test_overlapping_calls_share_commits_and_a_lone_call_commits_alone(
    engine_config: dict[str, Any], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls started together are gathered into shared journal commits, a lone
    call after them commits alone."""
    import ledgerfs.journal._journal as journal_module

    # The lone call's begin takes the 16 marks along however soon it comes.
    monkeypatch.setattr(journal_module, "_MARKS_RIDE_AGE", 0.0)
    async with Engine.open(engine_config) as engine:
        # The flusher's commit marks are journal records too: held, so that the
        # records counted are the calls' alone.
        engine.journal.write_marks_nowait = lambda **_: None  # type: ignore[method-assign]
        sessions = [await engine.session() for _ in range(16)]
        start = await engine.journal.statistics()
        async with anyio.create_task_group() as group:
            for i, session in enumerate(sessions):
                group.start_soon(
                    session.call, "write_file", {"path": f"g{i}.txt", "content": "x\n"}
                )
        together = await engine.journal.statistics()
        with pytest.raises(LedgerError):
            await sessions[0].call("write_file", {"path": "../outside.txt", "content": "x\n"})
        await sessions[0].call("write_file", {"path": "lone.txt", "content": "x\n"})
        after = await engine.journal.statistics()
    assert together.records - start.records == 16 and together.largest_group > 1
    # The lone call's group: its begin, and the 16 calls' commit marks riding along.
    assert after.records - together.records == 2 and after.groups - together.groups == 1


@pytest.mark.anyio
async def test_a_lone_call_commits_on_the_loops_thread_and_overlapping_calls_on_the_writers(
    engine_config: dict[str, Any], workspace: Path
) -> None:
    """A call with the engine to itself commits (and fsyncs) its journal group on
    the event loop's thread, saving two thread wake-ups; while others are in
    flight, groups go to the writer thread, so the loop never blocks on them."""
    commits: list[int] = []
    async with Engine.open(engine_config) as engine:
        writer = engine.journal._writer
        assert writer is not None
        writer.db.conn.set_trace_callback(
            lambda sql: commits.append(threading.get_ident()) if sql == "COMMIT" else None
        )
        loop_thread = threading.get_ident()
        sessions = [await engine.session() for _ in range(8)]
        commits.clear()
        await sessions[0].call("write_file", {"path": "lone.txt", "content": "x\n"})
        assert engine.alone
        lone, commits[:] = list(commits), []
        async with anyio.create_task_group() as group:
            for i, session in enumerate(sessions):
                group.start_soon(
                    session.call, "write_file", {"path": f"g{i}.txt", "content": "x\n"}
                )
        together = list(commits)
    assert lone == [loop_thread]
    assert together and loop_thread not in together
    assert sorted(p.name for p in workspace.glob("g*.txt")) == [f"g{i}.txt" for i in range(8)]


@pytest.mark.anyio
@pytest.mark.parametrize("ticks", range(8))
async def test_a_lone_call_cancelled_at_any_tick_lands_whole_or_not_at_all(
    engine_config: dict[str, Any], workspace: Path, ticks: int
) -> None:
    """Cancelled `ticks` loop ticks after it starts (before its quiet ticks, in
    them, or once its group runs on the loop), a lone call either changed the
    file, recorded its transaction and charged its budget, or did none of these."""
    target = workspace / "t.txt"
    target.write_text("before\n")
    async with Engine.open(engine_config) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "warm.txt", "content": "x\n"})
        used = session.budget.used
        async with anyio.create_task_group() as group:
            group.start_soon(session.call, "write_file", {"path": "t.txt", "content": "after\n"})
            for _ in range(ticks):
                await anyio.lowlevel.checkpoint()
            group.cancel_scope.cancel()
        landed = await committed_writes(engine, target)
        assert session.budget.used - used == landed
    assert target.read_text() == ("after\n" if landed else "before\n")
    assert temp_files(workspace) == []
