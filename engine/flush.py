"""Flushes: make applied files durable in bulk, then tell the journal.

Commit marks, which the journal only notes when a transaction commits, are
written by a later begin's commit (once the oldest is 2 ms old), or a few
milliseconds later (`MARKS_DELAY`) when none comes, those of every transaction
finished meanwhile in one small write: from then on other processes read the
transactions committed, not pending.

With durability `full`, a transaction is acknowledged once its intent and commit
records are durable in the journal and its files are renamed into place; the
files' own fsyncs are coalesced here, one `syncfs` per file system per interval
(`checkpoint_interval`), and the journal then marks the transactions
checkpointed (`Journal.checkpoint`). Until a flush covers it, recovery rolls a
committed transaction forward from its after images, so an acknowledged change
survives power loss either way. (The journal's own WAL checkpoints are another
thing: journal/_walcheck.py.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from ..journal import Journal, JournalError
from .incidents import describe

__all__ = ["Flusher"]

log = logging.getLogger(__name__)

#: Seconds a commit mark waits to be written with the ones that follow it: at
#: most one small journal write per MARKS_DELAY, however fast transactions commit.
MARKS_DELAY = 0.005


class Flusher:
    """Tracks finished transactions and flushes their files periodically."""

    def __init__(
        self,
        journal: Journal,
        syncfs: Callable[[], None],
        *,
        interval: float,
    ) -> None:
        self.journal = journal
        self.syncfs = syncfs
        self.interval = interval
        self._inflight: set[int] = set()
        self._finished_max = 0
        self._flushed = 0
        self._lock = anyio.Lock()
        self.checkpoints = 0
        # Set when a transaction finished since the commit marks were last written.
        self._marks_due = anyio.Event()

    def started(self, tx: int) -> None:
        self._inflight.add(tx)

    def finished(self, tx: int) -> None:
        self._inflight.discard(tx)
        self._finished_max = max(self._finished_max, tx)
        self._marks_due.set()

    async def write_marks(self) -> None:
        """Write the commit marks noted so far `MARKS_DELAY` after a transaction
        finished, until cancelled (the journal only notes them as they commit).

        Marks younger than half that are left (they were noted during this
        round's sleep): a later begin takes them along in its commit, and if
        none comes, the next round here (their transaction set `_marks_due`
        again) writes them. A mark waits at most
        twice `MARKS_DELAY`, and a stream of writes pays no commit for them.
        """
        while True:
            await self._marks_due.wait()
            self._marks_due = anyio.Event()
            await anyio.sleep(MARKS_DELAY)
            try:
                self.journal.write_marks_nowait(age=MARKS_DELAY / 2)
            except JournalError:
                return  # closed: aclose writes what is left

    def _horizon(self) -> int:
        # Transactions finish out of order; only ids below every in-flight one are safe.
        if self._inflight:
            return min(min(self._inflight) - 1, self._finished_max)
        return self._finished_max

    async def run(self) -> None:
        """Flush every `interval` seconds until cancelled.

        A failure is logged once (a warning naming its errno, say ENOSPC), and so is
        the flush that succeeds after it; one a second would flood the log.
        """
        failing = False
        while True:
            await anyio.sleep(self.interval)
            try:
                await self.flush()
            except (JournalError, OSError) as exc:
                # The next interval tries again; recovery covers what is not checkpointed.
                if not failing:
                    log.warning(
                        "flush failed (%s): retrying every %ss; until one succeeds, "
                        "recovery rolls acknowledged transactions forward",
                        describe(exc),
                        self.interval,
                    )
                failing = True
                continue
            if failing:
                log.info("flush succeeded again")
                failing = False

    async def flush(self) -> None:
        """Sync what finished so far and mark it checkpointed in the journal."""
        async with self._lock:
            horizon = self._horizon()
            if horizon <= self._flushed:
                return
            # Files first, then the mark: a mark the journal kept over files the
            # disk lost would stop recovery from making them again.
            await anyio.to_thread.run_sync(self.syncfs)
            await self.journal.checkpoint(horizon)
            self._flushed = horizon
