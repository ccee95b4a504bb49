"""Owner lock files: which Journal instances (processes) are alive.

Each instance holds an exclusive ``flock`` on ``<journal dir>/owners/<owner>.lock``
from open to close. flock (not lockf) because its lock belongs to the open file
description: two instances in one process exclude each other, and the kernel
drops the lock when a killed process's descriptors close.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from pathlib import Path

__all__ = [
    "OwnerLock",
    "live_owners",
    "owner_alive",
    "owners_dir",
    "remove_if_dead",
    "sweep_dead",
]

_SUFFIX = ".lock"


def owners_dir(journal_path: Path) -> Path:
    """Return the folder of owner lock files for the journal at `journal_path`."""
    return journal_path.parent / "owners"


class OwnerLock:
    """The held lock of one live owner."""

    def __init__(self, folder: Path) -> None:
        self.owner = uuid.uuid4().hex
        self.path = folder / f"{self.owner}{_SUFFIX}"
        folder.mkdir(parents=True, exist_ok=True)
        # Lock a temporary name, then rename: a file under the final name is always
        # already locked, so nobody can mistake a starting owner for a dead one.
        tmp = folder / f"{self.owner}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(tmp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        """Delete the lock file and drop the lock; idempotent."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            # Unlink while still locked, so no one can lock the name in between.
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None


def _try_lock(path: Path) -> int | None:
    """Return a locked descriptor if nobody holds `path`, None if its owner is alive."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def owner_alive(folder: Path, owner: str) -> bool:
    """Tell whether `owner` still holds its lock (a missing lock file means dead)."""
    fd = _try_lock(folder / f"{owner}{_SUFFIX}")
    if fd is None:
        return True
    if fd >= 0:
        os.close(fd)
    return False


def remove_if_dead(folder: Path, owner: str) -> None:
    """Delete a dead owner's lock file (a live owner's is left alone)."""
    path = folder / f"{owner}{_SUFFIX}"
    fd = _try_lock(path)
    if fd is None or fd < 0:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        os.close(fd)


def sweep_dead(folder: Path) -> int:
    """Delete every dead owner's lock file in `folder`; return how many went."""
    removed = 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    for name in names:
        if name.endswith(_SUFFIX) and not owner_alive(folder, name[: -len(_SUFFIX)]):
            remove_if_dead(folder, name[: -len(_SUFFIX)])
            removed += 1
    return removed


def live_owners(folder: Path) -> set[str]:
    """The owners whose lock is held now."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return set()
    owners = {name[: -len(_SUFFIX)] for name in names if name.endswith(_SUFFIX)}
    return {owner for owner in owners if owner_alive(folder, owner)}
