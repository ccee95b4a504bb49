"""Progress of a long call, reported to whoever asked for it.

An adapter passes `Session.call` a reporter (the MCP server passes one that sends
`notifications/progress` when the client gave a progress token); the call's
handlers report through `report` on the event loop, or `report_from_thread`
inside a worker thread. Without a reporter both do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import anyio.from_thread

__all__ = ["EVERY", "Reporter", "report", "report_from_thread", "reporting"]

#: How often (in files or operations) a long call reports how far it got.
EVERY = 500

#: (done, total or None, message) -> sent.
Reporter = Callable[[float, float | None, str | None], Coroutine[Any, Any, None]]

_current: ContextVar[Reporter | None] = ContextVar("ledgerfs_progress", default=None)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Report the progress of the calls made inside the block to `reporter`."""
    token = _current.set(reporter)
    try:
        yield
    finally:
        _current.reset(token)


async def report(done: float, total: float | None = None, message: str | None = None) -> None:
    """Report progress of the current call (nothing without a reporter)."""
    reporter = _current.get()
    if reporter is not None:
        await reporter(done, total, message)


def report_from_thread(done: float, total: float | None = None, message: str | None = None) -> None:
    """`report` from a worker thread started by `anyio.to_thread.run_sync`, which
    runs in a copy of the call's context."""
    reporter = _current.get()
    if reporter is not None:
        anyio.from_thread.run(reporter, done, total, message)
