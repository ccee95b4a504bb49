"""WAL checkpoints off the acknowledgement path.

SQLite's automatic checkpoint runs inside the COMMIT that crosses its threshold,
so one unlucky waiter pays for copying the whole WAL into the database and
fsyncing it. The write connection turns it off (``wal_autocheckpoint = 0``);
instead this thread, on a connection of its own, runs a PASSIVE checkpoint once
the writer reports `EVERY` commits or `EVERY_RECORDS` records since the last one
(a group commit of many records writes as many pages as many commits). A PASSIVE
checkpoint takes no write lock, so commits (and their fsyncs) go on while it copies.

The WAL starts over at a write transaction that finds every frame already
copied. Commits that follow each other closely seldom leave such a moment (one
writer editing 4 KiB files does not either: its WAL reaches the bound below), so
once the WAL holds `RESET_FRAMES` frames this thread asks the writer to
checkpoint between two groups (`request_reset`): nearly every frame is copied by
then, and the next transaction starts the WAL over. The WAL stays bounded near
`RESET_FRAMES` pages (16 MiB with 4 KiB pages); `_walspace` writes that much of
it ahead when a journal opens.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable

from sqlite_utils import Database

__all__ = ["EVERY", "EVERY_RECORDS", "RESET_FRAMES", "WalCheckpointer"]

# Commits, or records, between two background checkpoints. Counting records too
# keeps the WAL's unchecked tail short under group commit, so the WAL restart
# (which holds the write lock) copies little.
EVERY = 64
EVERY_RECORDS = 256
# WAL frames (pages) past which the writer restarts the WAL: four times SQLite's
# own checkpoint threshold, so one writer never needs it.
RESET_FRAMES = 4000


class WalCheckpointer:
    """The thread that copies the WAL into the database while the writer commits."""

    def __init__(self, db: Database, label: str, request_reset: Callable[[], None]) -> None:
        self.db = db
        self._request_reset = request_reset
        self._cond = threading.Condition()
        self._commits = 0
        self._records = 0
        self._stopping = False
        self.checkpoints = 0
        self.thread = threading.Thread(
            target=self._run, name=f"journal-checkpointer {label}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def committed(self, records: int) -> None:
        """Count one commit of `records` records; wake the thread when one is due
        (never blocks long)."""
        with self._cond:
            self._commits += 1
            self._records += records
            if self._due():
                self._cond.notify()

    def _due(self) -> bool:
        return self._commits >= EVERY or self._records >= EVERY_RECORDS

    def stop(self) -> None:
        """Stop the thread and close its connection (blocking)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.thread.join()
        self.db.conn.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due() and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                self._commits = self._records = 0
            frames = self._checkpoint()
            if frames >= RESET_FRAMES:
                self._request_reset()

    def _checkpoint(self) -> int:
        """One PASSIVE checkpoint; return the frames the WAL holds (0 if it failed).

        A failure here loses nothing (the frames stay in the WAL) and the next
        round tries again; the writer's checkpoint reports real trouble.
        """
        with contextlib.suppress(sqlite3.Error):
            row = self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self.checkpoints += 1
            return int(row[1])
        return 0
