"""Cancellation inside a worker thread: long CPU steps stop when their call is cancelled.

A handler's blocking work runs in one `anyio.to_thread.run_sync` hop, which waits
for the thread to finish even when the call is cancelled. Long steps (a walk over
many files, a search through many lines) call `raise_if_cancelled` between small
pieces of work, so a cancelled call gives its thread back within one piece.
"""

from __future__ import annotations

import anyio.from_thread

__all__ = ["raise_if_cancelled"]


def raise_if_cancelled() -> None:
    """Raise the event loop's cancellation if the call that started this worker
    thread was cancelled; nothing outside a worker thread (a direct call, a test)."""
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:
        return  # not in a worker thread: nothing can cancel this call
