"""Writing the WAL's first megabytes once at open, so commits only overwrite.

With durability ``full`` every commit ends in an `fdatasync` of the WAL. While
the WAL grows, each of those also has to make the file's new size and blocks
durable: on ext4 (and XFS) a journal commit of the file system on top of the
data. Once the WAL starts over at its beginning (see `_walcheck`) commits
overwrite blocks that are already written and sized, and the fdatasync writes
the data alone. A journal opened afresh (every server start: SQLite deletes the
WAL when the last connection closes) would pay the growth on its first several
hundred commits.

So the open writes zeros from the WAL's end up to `RESERVE` bytes and makes them
durable, as databases that pre-zero their log segments do. SQLite reads a WAL
only up to its last valid frame (each frame is checked against the header's
salts and a running checksum), so zeros after it read as the end of the log,
like the old frames a restarted WAL leaves behind. The zeros are written under
SQLite's write lock, so no other connection (another process on the same
journal) appends frames meanwhile, and nothing before the file's end is
touched. It only saves time: any failure leaves the file as it was and the
journal works as without it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat

from sqlite_utils import Database

from ._walcheck import RESET_FRAMES

__all__ = ["RESERVE", "reserve"]

#: Bytes of WAL written ahead: as far as the WAL goes before it starts over. It
#: starts over once it holds `RESET_FRAMES` frames (4 KiB pages), and grows by the
#: commits made before the checkpointer next looks (64; 17.9 MiB in all measured
#: with one writer editing 4 KiB files). Busier journals may grow past it once.
RESERVE = RESET_FRAMES * (4096 + 24) + 4 * 1024 * 1024

_CHUNK = 1024 * 1024


def reserve(db: Database, wal: str, size: int | None = None) -> int:
    """Extend the WAL file `wal` of `db`'s database with durable zeros up to `size`
    (default `RESERVE`).

    Returns the bytes written (0 when the file is that big already, is not a
    regular file, or anything failed; nothing is left changed then).
    """
    size = RESERVE if size is None else size
    conn = db.conn
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error:
        return 0  # busy: another writer is at work, its WAL is growing anyway
    try:
        return _extend(wal, size)
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _extend(wal: str, size: int) -> int:
    try:
        # Never through a link, and never blocking on something that is not a file.
        fd = os.open(wal, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size >= size:
            return 0
        try:
            zeros = memoryview(bytes(min(_CHUNK, size - st.st_size)))
            end = st.st_size
            while end < size:
                end += os.pwrite(fd, zeros[: size - end], end)
            os.fdatasync(fd)
        except OSError:
            # Out of space, say: give back what was added.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, st.st_size)
            return 0
        return size - st.st_size
    finally:
        os.close(fd)
