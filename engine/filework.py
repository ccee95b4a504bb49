"""One thread that makes small file steps for concurrent transactions.

With several transactions in flight, their file steps (temp file, write, rename:
a few hundred microseconds of system calls) would block the event loop that
plans the others. A worker-thread hop per step costs the loop about as much as
the step. This thread instead takes steps from a queue in order and wakes the
loop once for every run of steps it finished back to back, so the loop pays a
queue put and a share of one wake-up per step.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["FileWorker"]

T = TypeVar("T")


class _Job(Generic[T]):
    __slots__ = ("error", "event", "fn", "result", "soon")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.result: T | None = None
        self.error: BaseException | None = None
        self.event = anyio.Event()
        # How to schedule a callback in the caller's loop from another thread:
        # asyncio's call_soon_threadsafe or trio's run_sync_soon.
        loop = anyio.lowlevel.current_token().native_token
        soon = getattr(loop, "call_soon_threadsafe", None)
        self.soon: Callable[..., object] = soon if soon is not None else loop.run_sync_soon  # type: ignore[attr-defined]


_STOP = object()


class FileWorker:
    """Runs blocking callables one at a time, in order, on its own thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the thread; its result, or its exception raised here.

        Once queued, `fn` runs even if the caller is cancelled.
        """
        job = _Job(fn)
        self._start()
        self._queue.put(job)
        await job.event.wait()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def close(self) -> None:
        """Finish the queued callables and stop the thread (blocking, idempotent)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()

    def _start(self) -> None:
        # Started on first use: an engine with one writer never needs it.
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while True:
            finished: list[_Job[Any]] = []
            item = self._queue.get()
            while item is not _STOP:
                try:
                    item.result = item.fn()
                except BaseException as exc:  # handed to the caller, not lost here
                    item.error = exc
                finished.append(item)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            _wake(finished)
            if item is _STOP:
                return


def _wake(jobs: list[_Job[Any]]) -> None:
    """Set the jobs' events with one non-blocking call into each caller's loop."""
    by_loop: dict[Callable[..., object], list[anyio.Event]] = {}
    for job in jobs:
        by_loop.setdefault(job.soon, []).append(job.event)
    for soon, events in by_loop.items():
        # A loop that has ended (its caller gave up waiting) is skipped.
        with contextlib.suppress(Exception):
            soon(_set_all, events)


def _set_all(events: list[anyio.Event]) -> None:
    for event in events:
        event.set()
