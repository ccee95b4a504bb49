"""Per-path locks that hold across tasks, engine instances and processes.

A path maps to one of BUCKETS buckets. Within an engine, an anyio lock per bucket
orders tasks; across engines and processes, an exclusive `flock` on the bucket's
lock file does. `flock` belongs to an open file description, so two engines in one
process exclude each other as two processes do. Buckets are always taken in
ascending order, so two batches never deadlock.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

__all__ = ["BUCKETS", "PathLocks", "bucket_of"]

BUCKETS = 256


def bucket_of(path: str) -> int:
    """The bucket a path's lock lives in.

    >>> bucket_of("/w/a.txt") == bucket_of("/w/a.txt")
    True
    """
    return zlib.crc32(path.encode("utf-8", "surrogateescape")) % BUCKETS


class PathLocks:
    """Exclusive locks on sets of paths, taken all together in a fixed order."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        # fast_acquire: an uncontended lock does not yield to the loop (the edit
        # awaits the journal soon enough); a contended one still waits fairly.
        self._locks = [anyio.Lock(fast_acquire=True) for _ in range(BUCKETS)]
        self._fds: dict[int, int] = {}

    @asynccontextmanager
    async def hold(self, paths: Iterable[str]) -> AsyncIterator[None]:
        """Hold every path's lock for the duration of the block."""
        buckets = sorted({bucket_of(path) for path in paths})
        taken: list[int] = []
        flocked: list[int] = []
        try:
            for bucket in buckets:
                await self._locks[bucket].acquire()
                taken.append(bucket)
            for bucket in buckets:
                await self._flock(bucket)
                flocked.append(bucket)
            yield
        finally:
            for bucket in reversed(flocked):
                fcntl.flock(self._fds[bucket], fcntl.LOCK_UN)
            for bucket in reversed(taken):
                self._locks[bucket].release()

    async def _flock(self, bucket: int) -> None:
        fd = self._fd(bucket)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another process holds it: wait in a worker thread, not on the loop.
            await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)

    def _fd(self, bucket: int) -> int:
        fd = self._fds.get(bucket)
        if fd is None:
            self._folder.mkdir(parents=True, exist_ok=True)
            path = self._folder / f"{bucket:03d}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fds[bucket] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
