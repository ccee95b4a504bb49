"""FaultyOps: the real file primitives, failing on the calls a test names.

A fault names a primitive (write, fsync, rename, unlink, mkdir, rmdir, symlink), which of
its calls fail (1-based, counted over the calls whose path matches), the errno to
raise, and optionally a substring the call's path must contain. Several faults
can be armed at once, so a test can fail the apply (rename call n) and then the
rollback too (rename call n+1). Every call is recorded, so a test can also assert
which primitives a step used. A hook can block a call (to force a race with
events): it runs in the worker thread before the real primitive.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ledgerfs.engine import FileOps

PRIMITIVES = ("write", "rename", "unlink", "mkdir", "rmdir", "symlink")


@dataclass
class Fault:
    """Fail the `calls` (1-based) of `primitive` whose path contains `match`."""

    primitive: str
    calls: frozenset[int]
    errno: int = errno.EIO
    match: str | None = None
    seen: int = 0
    fired: list[str] = field(default_factory=list)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"<fd {fd}>"


def _at(dir_fd: int, name: str) -> str:
    return os.path.join(_fd_path(dir_fd), name)


class FaultyOps(FileOps):
    """The real primitives, with faults and hooks armed per test."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str]] = []
        self.hooks: dict[str, Callable[[str], None]] = {}
        self._lock = threading.Lock()
        self._installing = threading.local()

    def fail(
        self,
        primitive: str,
        calls: int | Iterable[int],
        err: int = errno.EIO,
        *,
        match: str | None = None,
    ) -> Fault:
        """Arm a fault: `calls` of `primitive` (on paths containing `match`) raise `err`."""
        assert primitive in PRIMITIVES, primitive
        wanted = frozenset([calls] if isinstance(calls, int) else calls)
        fault = Fault(primitive, wanted, err, match)
        self.faults.append(fault)
        return fault

    def reset(self) -> None:
        """Disarm every fault and forget the recorded calls."""
        self.faults.clear()
        self.calls.clear()
        self.hooks.clear()

    def count(self, primitive: str) -> int:
        return sum(1 for name, _ in self.calls if name == primitive)

    def _check(self, primitive: str, path: str) -> None:
        with self._lock:
            self.calls.append((primitive, path))
            failing = None
            for fault in self.faults:
                if fault.primitive != primitive:
                    continue
                if fault.match is not None and fault.match not in path:
                    continue
                fault.seen += 1
                if failing is None and fault.seen in fault.calls:
                    fault.fired.append(path)
                    failing = fault
        hook = self.hooks.get(primitive)
        if hook is not None:
            hook(path)
        if failing is not None:
            raise OSError(failing.errno, os.strerror(failing.errno), path)

    def install(
        self, path: str, data: bytes, mode: int, owner: str, *, journaled: bool = False
    ) -> None:
        self._installing.path = path
        try:
            super().install(path, data, mode, owner, journaled=journaled)
        finally:
            self._installing.path = None

    # The primitives ----------------------------------------------------------

    def write(self, fd: int, data: bytes) -> None:
        # A write goes to a temp file; it is reported as the file being installed.
        self._check("write", getattr(self._installing, "path", None) or _fd_path(fd))
        super().write(fd, data)

    def rename(self, src_dir: int, src: str, dst_dir: int, dst: str) -> None:
        # Matched on the target: a temp file's rename names the file it installs.
        self._check("rename", _at(dst_dir, dst))
        super().rename(src_dir, src, dst_dir, dst)

    def swap_in(self, dir_fd: int, tmp: str, name: str) -> bool:
        # The other way to put a temp file in place: a fault or hook on "rename" covers both.
        self._check("rename", _at(dir_fd, name))
        return super().swap_in(dir_fd, tmp, name)

    def unlink(self, dir_fd: int, name: str) -> None:
        self._check("unlink", _at(dir_fd, name))
        super().unlink(dir_fd, name)

    def mkdir(self, dir_fd: int, name: str, mode: int) -> None:
        self._check("mkdir", _at(dir_fd, name))
        super().mkdir(dir_fd, name, mode)

    def rmdir(self, dir_fd: int, name: str) -> None:
        self._check("rmdir", _at(dir_fd, name))
        super().rmdir(dir_fd, name)

    def symlink(self, dir_fd: int, name: str, target: bytes) -> None:
        self._check("symlink", _at(dir_fd, name))
        super().symlink(dir_fd, name, target)
