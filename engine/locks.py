"""Per-file locks that hold across tasks, engines and every ledgerfs process of the user.

The OCC check and the rename of a transaction run under these locks, so two
processes that change the same file never both pass the check. For that, two
processes must meet on the same lock whatever their journals and roots (nested
roots, a root reached through a symlink, a bind mount), so a lock is keyed by
what the file *is*, not how it was named: the device of the file system that
holds it and its name, casefolded (`bucket_of`). Every path of a file on one
device with one name meets in one bucket; different files sharing a bucket only
wait for each other a little.

Within an engine, an anyio lock per bucket orders tasks; across engines and
processes, an exclusive `flock` on the bucket's lock file in one directory per
user (`lock_folder`: `$LEDGERFS_LOCK_DIR`, else `/tmp/ledgerfs-<uid>/locks`; the
same for every process of the user whatever its environment, never the journal's
folder). `flock` belongs to an open file description, so two engines in one
process exclude each other as two processes do. Buckets are always taken in
ascending order, so two batches never deadlock.

Processes of different users do not exclude each other: a directory both could
write would let any local user hold every lock (or plant links in it).
"""

from __future__ import annotations

import fcntl
import os
import stat
import zlib
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

import anyio

from .errors import Code, LedgerError
from .paths import nearest_existing

__all__ = ["BUCKETS", "LOCK_DIR_ENV", "Held", "PathLocks", "bucket_of", "lock_folder"]

BUCKETS = 256

#: The environment variable that moves the lock directory (every process that
#: changes the same files must see the same value).
LOCK_DIR_ENV = "LEDGERFS_LOCK_DIR"


def lock_folder() -> Path:
    """The user's lock directory: `$LEDGERFS_LOCK_DIR`, else `/tmp/ledgerfs-<uid>/locks`."""
    given = os.environ.get(LOCK_DIR_ENV)
    if given:
        return Path(given)
    return Path("/tmp") / f"ledgerfs-{os.geteuid()}" / "locks"


def bucket_of(path: str) -> int:
    """The bucket a file's lock lives in: its file system's device and its name.

    The device is that of the nearest folder above the file that exists (a new
    file's folders are made on the same device).

    >>> bucket_of("/w/a.txt") == bucket_of("/w/A.TXT"), 0 <= bucket_of("/w/a.txt") < BUCKETS
    (True, True)
    """
    folder, _, name = path.rpartition(os.sep)
    if not (name and folder) or folder.endswith(os.sep):
        # Not of a canonical path's form (a name in `/`, a trailing or doubled
        # separator): the general split, which the short one equals otherwise.
        folder, name = os.path.dirname(path), os.path.basename(path.rstrip(os.sep))
    key = f"{_device(folder)}:{name.casefold()}"
    return zlib.crc32(key.encode("utf-8", "surrogateescape")) % BUCKETS


def _device(folder: str) -> int:
    # The folder itself nearly always exists: one stat. Else the nearest folder
    # above it that does, found in a few probes at any depth.
    try:
        return os.stat(folder).st_dev
    except OSError:
        pass
    try:
        return os.stat(nearest_existing(folder, _stats)).st_dev
    except OSError:
        return 0


def _stats(path: str) -> bool:
    try:
        os.stat(path)
    except OSError:
        return False
    return True


class PathLocks:
    """Exclusive locks on sets of files, taken all together in a fixed order."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder if folder is not None else lock_folder()
        # fast_acquire: an uncontended lock does not yield to the loop (the edit
        # awaits the journal soon enough); a contended one still waits fairly.
        self._locks = [anyio.Lock(fast_acquire=True) for _ in range(BUCKETS)]
        self._fds: dict[int, int] = {}
        self._ids: dict[int, tuple[int, int]] = {}
        self._paths: dict[int, str] = {}
        self._checked = False

    def hold(self, paths: Iterable[str]) -> Held:
        """Hold every path's lock for the duration of an `async with` block.

        Raises TOOL_UNAVAILABLE when the lock directory is not a private folder
        of this user.
        """
        return Held(self, self.buckets(paths))

    def buckets(self, paths: Iterable[str]) -> list[int]:
        """The buckets `hold` takes for `paths`, in the order it takes them."""
        return sorted({bucket_of(path) for path in paths})

    def hold_nowait(self, buckets: list[int]) -> Held | None:
        """Take these buckets' locks now (`buckets` as `buckets` gives them), or none
        of them and None when any is held by another task or process; release with
        `Held.release`.
        """
        held = Held(self, buckets)
        return held if held.take_nowait() else None

    def _flock_nowait(self, bucket: int) -> bool:
        fd = self._fd(bucket)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if self._still_named(bucket, fd):
            return True
        # Replaced by a cleaner: the waiting path (`_flock`) locks the new file.
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False

    async def _flock(self, bucket: int) -> None:
        while True:
            fd = self._fds.get(bucket)
            if fd is None:
                fd = self._fd(bucket)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Another process holds it: wait in a worker thread, not on the loop.
                await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
            if self._still_named(bucket, fd):
                return
            # A cleaner removed or replaced the lock file while we waited: a
            # process that opens it now would not meet us. Lock the new one.
            fcntl.flock(fd, fcntl.LOCK_UN)
            del self._ids[fd]
            os.close(self._fds.pop(bucket))

    def _still_named(self, bucket: int, fd: int) -> bool:
        try:
            named = os.stat(self._path(bucket), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == self._ids[fd]

    def _path(self, bucket: int) -> str:
        path = self._paths.get(bucket)
        if path is None:
            path = self._paths[bucket] = str(self._folder / f"{bucket:03d}.lock")
        return path

    def _fd(self, bucket: int) -> int:
        fd = self._fds.get(bucket)
        if fd is None:
            self._check_folder()
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                fd = os.open(self._path(bucket), flags, 0o600)
            except OSError as exc:
                raise _unusable(self._folder, f"cannot open a lock file: {exc.strerror}") from exc
            self._fds[bucket] = fd
            # What a descriptor names never changes: taken once, not at every hold.
            held = os.fstat(fd)
            self._ids[fd] = (held.st_dev, held.st_ino)
        return fd

    def _check_folder(self) -> None:
        """Make the lock directory (0700) and refuse one that is not this user's own."""
        if self._checked:
            return
        try:
            self._folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._folder.mkdir(mode=0o700, exist_ok=True)
            owned = [os.lstat(self._folder)]
            if self._folder == lock_folder() and LOCK_DIR_ENV not in os.environ:
                owned.append(os.lstat(self._folder.parent))  # /tmp/ledgerfs-<uid> too
        except OSError as exc:
            raise _unusable(self._folder, exc.strerror or str(exc)) from exc
        for st in owned:
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise _unusable(self._folder, "it is not a folder owned by this user")
            if st.st_mode & 0o022:
                raise _unusable(self._folder, "others can write to it")
        self._checked = True

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._ids.clear()


class Held:
    """The locks of some buckets, taken on entering a block and released on leaving it.

    A class rather than a generator-based context manager: this is on every
    change's path, and a generator costs a few microseconds more to drive.
    """

    __slots__ = ("_buckets", "_flocked", "_locks", "_taken")

    def __init__(self, locks: PathLocks, buckets: list[int]) -> None:
        self._locks = locks
        self._buckets = buckets
        self._taken = 0
        self._flocked = 0

    async def __aenter__(self) -> None:
        locks = self._locks
        try:
            for bucket in self._buckets:
                await locks._locks[bucket].acquire()
                self._taken += 1
            for bucket in self._buckets:
                await locks._flock(bucket)
                self._flocked += 1
        except BaseException:
            self._release()
            raise

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._release()

    def take_nowait(self) -> bool:
        """Take every lock without waiting; on False none is held."""
        locks = self._locks
        try:
            for bucket in self._buckets:
                locks._locks[bucket].acquire_nowait()
                self._taken += 1
            for bucket in self._buckets:
                if not locks._flock_nowait(bucket):
                    self._release()
                    return False
                self._flocked += 1
        except anyio.WouldBlock:
            self._release()
            return False
        except BaseException:
            self._release()
            raise
        return True

    def release(self) -> None:
        """Release what `take_nowait` took."""
        self._release()

    def _release(self) -> None:
        locks, buckets = self._locks, self._buckets
        for bucket in reversed(buckets[: self._flocked]):
            fcntl.flock(locks._fds[bucket], fcntl.LOCK_UN)
        for bucket in reversed(buckets[: self._taken]):
            locks._locks[bucket].release()
        self._taken = self._flocked = 0


def _unusable(folder: Path, why: str) -> LedgerError:
    return LedgerError(
        Code.TOOL_UNAVAILABLE,
        f"The lock directory {folder} cannot be used: {why}.",
        path=str(folder),
        details={"reason": "lock_directory"},
        suggestion=f"set {LOCK_DIR_ENV} to a folder only this user can write",
    )
