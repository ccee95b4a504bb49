"""engine.filework: the thread that makes file steps for concurrent transactions."""

from __future__ import annotations

import threading

import anyio
import pytest

from ledgerfs.engine.filework import FileWorker

pytestmark = pytest.mark.anyio


async def test_jobs_run_on_one_worker_thread_and_return_their_results() -> None:
    worker = FileWorker("test-files")
    threads: set[str] = set()
    results: dict[int, int] = {}

    def job(n: int) -> int:
        threads.add(threading.current_thread().name)
        return n * n

    async def call(n: int) -> None:
        results[n] = await worker.run(lambda: job(n))

    try:
        async with anyio.create_task_group() as group:
            for n in range(50):
                group.start_soon(call, n)
    finally:
        worker.close()
    assert results == {n: n * n for n in range(50)}
    assert threads == {"test-files"}


async def test_a_job_that_raises_raises_in_its_caller_only() -> None:
    worker = FileWorker("test-files")

    def broken() -> None:
        raise OSError(5, "Input/output error")

    try:
        with pytest.raises(OSError, match="Input/output"):
            await worker.run(broken)
        assert await worker.run(lambda: "still working") == "still working"
    finally:
        worker.close()


async def test_a_cancelled_caller_job_still_runs_and_close_waits_for_it() -> None:
    worker = FileWorker("test-files")
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def held() -> None:
        entered.set()
        release.wait(30)
        ran.append("held")

    async with anyio.create_task_group() as group:
        group.start_soon(worker.run, held)
        assert await anyio.to_thread.run_sync(entered.wait, 30)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await worker.run(lambda: ran.append("queued"))  # queued, then cancelled
        release.set()
    worker.close()
    worker.close()  # idempotent
    assert ran == ["held", "queued"]


def test_closing_a_worker_that_never_ran_is_a_no_op() -> None:
    FileWorker("test-files").close()
