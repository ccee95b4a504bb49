"""Making committed WAL frames durable, off the writer thread.

With group commit and durability ``full`` the write connection runs with
``synchronous = NORMAL``: COMMIT writes the group's frames to the WAL without
fsyncing it, and the waiters are woken only after one `fdatasync` of the WAL file
that started after their COMMIT returned. That is what ``synchronous = FULL``
promises, with one difference that pays: while one group's fsync runs, the
writer already executes the next group, and one fsync covers every group
committed before it started.

Why this keeps the promise: SQLite writes WAL frames in order and never reuses
WAL space before a checkpoint has copied every frame into the database file and
fsynced it (a checkpoint syncs the WAL, then the database, whatever the
synchronous setting). An fdatasync on our own descriptor of the WAL flushes the
same file's pages, so after it returns every frame committed before it is on
stable storage.

When the writer has nothing queued it fsyncs on its own thread, so one writer
pays no hop to the syncer. An fsync that
fails breaks the journal instance: the waiters of every group it covered and every
later request fail with JournalError(io), since after a failed fsync nobody can
say what reached the disk. Reopening the journal (a new process, or a new
instance) starts clean; recovery then finds what did.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from ._errors import map_errors

__all__ = ["Syncer"]

G = TypeVar("G")


class Syncer(Generic[G]):
    """Fsyncs the WAL for batches of committed groups, then hands them back.

    `done(items, error)` runs once per fsync with the items of every group it
    covered, in commit order, and None or the exception of the failed fsync; the
    caller wakes their waiters in it (one wake per event loop, however many groups).
    """

    def __init__(
        self,
        wal: str,
        label: str,
        done: Callable[[list[G], BaseException | None], None],
        datasync: Callable[[int], None],
    ) -> None:
        self.wal = wal
        self._datasync = datasync
        self.label = label
        self._done = done
        self._cond = threading.Condition()
        self._pending: list[list[G]] = []
        self._stopping = False
        self._fd: int | None = None
        # Serialises fsyncs, so a batch is never woken before an earlier batch's
        # fsync has finished (or failed and broken the instance).
        self._sync_lock = threading.Lock()
        self.broken: BaseException | None = None
        self.thread = threading.Thread(
            target=self._run, name=f"journal-syncer {label}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def submit(self, group: list[G], *, inline: bool) -> None:
        """Wake `group`'s waiters once the WAL is durable; fsync here if `inline`."""
        with self._cond:
            self._pending.append(group)
            if not inline:
                self._cond.notify()
        if inline:
            self.sync()

    def stop(self) -> None:
        """Sync what is pending, stop the thread and close the descriptor (blocking)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.thread.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def sync(self) -> None:
        """Fsync the WAL once for every group pending now, then wake them all."""
        with self._sync_lock:
            with self._cond:
                batch, self._pending = self._pending, []
            if not batch:
                return
            self._sync_once()
            self._done([item for group in batch for item in group], self.broken)

    def sync_here(self) -> BaseException | None:
        """Fsync the WAL once on the calling thread, covering every commit that
        returned before this call; return what broke the instance, or None.

        Serialised with the thread's fsyncs, so an earlier one that failed is
        reported here too. The groups pending for the thread stay its to wake.
        """
        with self._sync_lock:
            self._sync_once()
        return self.broken

    def _sync_once(self) -> None:
        """One fdatasync of the WAL, unless the instance is broken (which it breaks)."""
        if self.broken is None:
            try:
                with map_errors(self.label):
                    self._fdatasync()
            except BaseException as exc:
                self.broken = exc

    def _fdatasync(self) -> None:
        self._datasync(self._wal_fd())

    def _wal_fd(self) -> int:
        """Our descriptor of the WAL, opened on first use (by either thread)."""
        with self._cond:
            if self._fd is None:
                self._fd = os.open(self.wal, os.O_RDONLY | os.O_CLOEXEC)
            return self._fd

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
            self.sync()
