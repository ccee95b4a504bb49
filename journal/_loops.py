"""What differs between event loops, in one place: how a waiter waits for the
writer thread, and how that thread wakes it.

The journal is woken from threads of its own (the writer, the syncer), so it
needs a wait that another thread can end. anyio's `Event` does that on every
backend, through the loop's token; on asyncio a bare future of the running
loop, set by `call_soon_threadsafe`, does it at a few times less cost per
request, and asyncio is the served loop (uvloop included: it implements the
same public calls). Nothing here reads a loop's private state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.lowlevel

__all__ = ["Slot", "call_soon", "new_slot", "set_slot", "wait_slot"]

T = TypeVar("T")

#: What one waiter waits on: an asyncio future, or an anyio Event (trio).
Slot = asyncio.Future[None] | anyio.Event


def new_slot() -> tuple[Slot, object]:
    """A slot for a waiter of the running loop, and that loop (or trio token)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop runs this thread: trio
        return anyio.Event(), anyio.lowlevel.current_token().native_token
    return loop.create_future(), loop


async def wait_slot(slot: Slot) -> None:
    """Wait until `slot` is set; a cancelled waiter stops waiting, nothing more."""
    if isinstance(slot, anyio.Event):
        await slot.wait()
    else:
        await slot


def set_slot(slot: Slot) -> None:
    """Set `slot` (on its loop's thread); a cancelled waiter's is left as it is."""
    if isinstance(slot, anyio.Event):
        slot.set()
    elif not slot.done():
        slot.set_result(None)


def call_soon(loop: object, fn: Callable[[T], None], arg: T) -> None:
    """Schedule ``fn(arg)`` in `loop` from another thread, without waiting.

    `loop` is what `new_slot` returned: an asyncio loop or a trio token.
    """
    soon = getattr(loop, "call_soon_threadsafe", None)  # asyncio
    if soon is None:
        soon = loop.run_sync_soon  # type: ignore[attr-defined]  # trio
    soon(fn, arg)
