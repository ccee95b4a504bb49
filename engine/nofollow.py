"""The one race-free way the engine opens what the sandbox checked.

The sandbox (`paths`) turns a client's path into a canonical path: absolute,
no `..`, no symlink anywhere in it. Between that check and the access, a folder
on the way can be swapped for a symlink to somewhere else. Every access (reads,
hashes, loads for planning and dry runs, before images, listings, file info,
git discovery, the folders writes work in) therefore opens the canonical path
with *no symlink followed in any component*: a path that still leads where it
was checked opens, one that was swapped under us fails with ELOOP (or ENOTDIR,
ENOENT), and never reaches outside.

Linux 5.6+ does this in one system call, `openat2(RESOLVE_NO_SYMLINKS)`, called
through ctypes since the standard library has no binding. Elsewhere (older
kernels, or a seccomp filter that refuses the call) the path is walked one
component at a time with `openat(O_NOFOLLOW)` from `/`, which is equally strict
and costs one system call per component.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
import sys

__all__ = ["OPENAT2", "open_beneath", "open_dir", "stat_beneath"]

_SYS_OPENAT2 = 437  # the same number on every architecture (the generic syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_AT_FDCWD = -100


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


def _load_syscall() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    syscall = getattr(libc, "syscall", None)
    if syscall is None:  # pragma: no cover - every Linux libc has it
        return None
    # No argtypes: every argument is passed as a ready ctypes object of the
    # width the kernel reads (the path as bytes, a char *), which spares ctypes
    # converting each one on every call (a third of the call's cost).
    syscall.restype = ctypes.c_long
    return syscall


_syscall = _load_syscall()
_NR_OPENAT2 = ctypes.c_long(_SYS_OPENAT2)
_DIRFD = ctypes.c_int(_AT_FDCWD)
_HOW_SIZE = ctypes.c_size_t(ctypes.sizeof(_OpenHow))
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

# One open_how per set of flags, built once: the kernel only reads it, so the
# threads that open files share them.
_hows: dict[int, tuple[_OpenHow, object]] = {}


def _how(flags: int) -> object:
    """A pointer to the open_how asking for `flags` and no symlink on the way."""
    found = _hows.get(flags)
    if found is None:
        how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        # The structure is kept with its pointer, which does not own it.
        found = _hows[flags] = (how, ctypes.pointer(how))
    return found[1]


def _openat2(path: str, flags: int) -> int:
    assert _syscall is not None
    name = path.encode(_FS_ENCODING, _FS_ERRORS)  # os.fsencode, without its type checks
    fd = int(_syscall(_NR_OPENAT2, _DIRFD, name, _how(flags), _HOW_SIZE))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


def _probe() -> bool:
    """Whether openat2 works here (kernel 5.6+, and no filter refuses it)."""
    if _syscall is None:
        return False
    try:
        os.close(_openat2("/", os.O_PATH | os.O_DIRECTORY))
    except OSError:
        return False
    return True


#: Whether accesses use openat2 (one system call) or the per-component walk.
OPENAT2 = _probe()


def _walk(path: str, flags: int) -> int:
    """Open `path` from `/` one component at a time, following no symlink."""
    parts = [part for part in path.split("/") if part]
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(
                    part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except NotADirectoryError:
                _raise_if_link(fd, part, path)
                raise
            os.close(fd)
            fd = child
        if not parts:
            return os.open("/", flags | os.O_CLOEXEC)
        try:
            last = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except NotADirectoryError:
            _raise_if_link(fd, parts[-1], path)
            raise
    finally:
        os.close(fd)
    # O_PATH with O_NOFOLLOW opens a symlink itself instead of failing.
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(last).st_mode):
        os.close(last)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    return last


def _raise_if_link(dir_fd: int, name: str, path: str) -> None:
    if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def _is_file(path: str) -> bool:
    try:
        fd = _openat2(path, os.O_PATH | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    return not (stat.S_ISLNK(mode) or stat.S_ISDIR(mode))


def open_beneath(path: str, flags: int) -> int:
    """Open the canonical absolute `path` with `flags`, following no symlink on the way.

    Raises OSError: ELOOP when any component is a symlink (a swap since the
    check), ENOENT, ENOTDIR and the other errors `open` raises.
    """
    if not OPENAT2:
        return _walk(path, flags)
    try:
        fd = _openat2(path, flags | os.O_NOFOLLOW)
    except NotADirectoryError:
        # O_DIRECTORY on a final symlink says ENOTDIR: tell a link (or a folder
        # that was one a moment ago) from a file.
        if flags & os.O_DIRECTORY and not _is_file(path):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
        raise
    # O_PATH with O_NOFOLLOW opens a symlink itself instead of failing.
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    return fd


def open_dir(path: str) -> int:
    """A descriptor of the folder at canonical `path` (for `dir_fd` calls and listings)."""
    return open_beneath(path, os.O_RDONLY | os.O_DIRECTORY)


def stat_beneath(path: str) -> os.stat_result:
    """The stat of what canonical `path` names now, reached without following a symlink."""
    fd = open_beneath(path, os.O_PATH)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)
