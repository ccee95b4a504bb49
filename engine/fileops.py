"""Blocking file primitives, and the steps the transaction builds from them.

Every write the engine makes goes through one `FileOps` instance, so a test can
wrap it and fail the n-th rename or fsync on real files. Steps work relative to a
folder descriptor opened through `nofollow` (no symlink followed on the way), so a
folder swapped for a link between the sandbox check and the write cannot redirect
the write outside a root (the rename itself never follows a link in its last
component). Loads read through the same opener.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import stat
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, suppress

from blake3 import blake3

from ..journal import content_hash
from .changes import LINK_MODE, NEW_DIR_MODE, NEW_FILE_MODE, Entry
from .nofollow import open_beneath, open_dir

__all__ = [
    "NEW_DIR_MODE",
    "NEW_FILE_MODE",
    "FileOps",
    "TooLarge",
    "Vet",
    "check_opened",
    "load_entry",
    "open_at",
    "read_to_end",
    "sync_filesystems",
    "temp_name",
]

_CHUNK = 1 << 20
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW


@functools.lru_cache(maxsize=4096)
def temp_name(name: str, owner: str) -> str:
    """A temp file name for `name`, fixed in length and naming its owner.

    >>> temp_name("report.txt", "abcdef0123456789")[:22]
    '.ledgerfs-abcdef012345'
    """
    tag = content_hash(name.encode("utf-8", "surrogateescape"))[7:23]
    return f".ledgerfs-{owner[:12]}-{tag}.tmp"


class FileOps:
    """The primitives: each one system call or a short fixed sequence of them.

    Every flush the engine's durability rests on is one of these methods: the
    journal's WAL sync (`datasync`), the flush's and recovery's `syncfs`;
    a test wraps them to record the order of writes and flushes, or to drop one
    and show that its absence loses data.
    """

    def open_dir(self, path: str) -> int:
        return open_dir(path)

    def write(self, fd: int, data: bytes) -> None:
        written = os.write(fd, data) if data else 0  # all of it, but for a short write
        while written < len(data):
            written += os.write(fd, memoryview(data)[written:])

    def syncfs(self, folders: Iterable[str]) -> None:
        """Flush every write on the file systems holding `folders` (a flush of applied files)."""
        sync_filesystems(folders)

    def datasync(self, fd: int) -> None:
        """Flush a file's data (the journal's WAL: the commit point of every transaction)."""
        os.fdatasync(fd)

    def rename(self, src_dir: int, src: str, dst_dir: int, dst: str) -> None:
        os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)

    def unlink(self, dir_fd: int, name: str) -> None:
        os.unlink(name, dir_fd=dir_fd)

    def mkdir(self, dir_fd: int, name: str, mode: int) -> None:
        os.mkdir(name, mode, dir_fd=dir_fd)

    def rmdir(self, dir_fd: int, name: str) -> None:
        os.rmdir(name, dir_fd=dir_fd)

    def symlink(self, dir_fd: int, name: str, target: bytes) -> None:
        os.symlink(target, name.encode("utf-8", "surrogateescape"), dir_fd=dir_fd)

    def swap_in(self, dir_fd: int, tmp: str, name: str) -> bool:
        """Put the file `tmp` at `name` atomically, leaving no `tmp`; True if it swapped.

        A file at `name` is swapped with `tmp` (renameat2's RENAME_EXCHANGE) and
        then unlinked under the temp name; with nothing at `name`, or on a file
        system that cannot swap, this is a plain rename (False). Readers see the
        old bytes or the new ones, as with a rename over the file. What a rename
        over a file costs on ext4 (and btrfs) is left out: the file system starts
        writing the new file's bytes at the rename (ext4's `auto_da_alloc`), so
        that a power loss cannot leave it empty. Only for bytes the journal holds
        durably (see `install`).

        If what is at `name` cannot be unlinked (a folder put there since the
        check), it is swapped back and the error raised, as the rename would have.
        """
        try:
            _exchange(dir_fd, tmp, name)
        except OSError:
            # Nothing at `name` (ENOENT), or no swap here: a file system without
            # it (EINVAL, or EXDEV from some stacked ones), a C library or kernel
            # without the call. A failed swap changed nothing, so the rename does
            # what it would have done, and raises what it would have raised.
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return False
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            _exchange(dir_fd, tmp, name)
            raise
        return True

    # Steps: what the transaction asks for, built from the primitives above.

    def install(
        self, path: str, data: bytes, mode: int, owner: str, *, journaled: bool = False
    ) -> None:
        """Atomically make `path` hold `data`: temp file, then rename or swap.

        No fsync here: the journal holds the bytes durably before a file step, and
        a flush (`syncfs`) makes the files durable in bulk later (engine/flush.py).

        `journaled` says the journal holds `data` durably already (durability
        `full`): a power loss that empties the file is repaired by recovery, and
        the checkpoint's `syncfs` writes the bytes, so the file goes in by
        `swap_in` and nothing is written out at the rename. Without it, the
        rename over the file keeps what the file system promises for it (ext4
        writes the new bytes before the rename is committed).
        """
        folder, name = os.path.split(path)
        # Not `with self._dir(...)`: on every change's path, a generator-based
        # context manager costs more than the try it stands for.
        dfd = self.open_dir(folder)
        try:
            tmp = temp_name(name, owner)
            fd = os.open(tmp, _TEMP_FLAGS, 0o600, dir_fd=dfd)
            try:
                try:
                    os.fchmod(fd, mode)
                    self.write(fd, data)
                finally:
                    os.close(fd)
                if journaled:
                    self.swap_in(dfd, tmp, name)
                else:
                    self.rename(dfd, tmp, dfd, name)
            except BaseException:
                _discard(dfd, tmp)
                raise
        finally:
            os.close(dfd)

    def install_link(self, path: str, target: bytes, owner: str) -> None:
        """Atomically make `path` a symbolic link to `target`: temp link, rename over."""
        folder, name = os.path.split(path)
        with self._dir(folder) as dfd:
            tmp = temp_name(name, owner)
            _discard(dfd, tmp)  # a link cannot be truncated like a temp file: start afresh
            self.symlink(dfd, tmp, target)
            try:
                self.rename(dfd, tmp, dfd, name)
            except BaseException:
                _discard(dfd, tmp)
                raise

    def remove(self, path: str) -> None:
        folder, name = os.path.split(path)
        with self._dir(folder) as dfd:
            self.unlink(dfd, name)

    def move(self, source: str, destination: str) -> None:
        src_folder, src_name = os.path.split(source)
        dst_folder, dst_name = os.path.split(destination)
        with self._dir(src_folder) as sfd, self._dir(dst_folder) as dfd:
            if _exists(dfd, dst_name):
                raise FileExistsError(errno.EEXIST, "destination exists", destination)
            self.rename(sfd, src_name, dfd, dst_name)

    def make_dir(self, path: str, mode: int) -> None:
        folder, name = os.path.split(path)
        with self._dir(folder) as dfd:
            self.mkdir(dfd, name, mode)

    def remove_dir(self, path: str) -> None:
        folder, name = os.path.split(path)
        with self._dir(folder) as dfd:
            self.rmdir(dfd, name)

    def discard_temps(self, folders: Iterable[str], live: Collection[str]) -> list[str]:
        """Remove the temp files in these folders of every owner not in `live`.

        Any dead owner's, not only the one whose transaction is recovered: a
        recovery cut short leaves the temps of the owner it claimed from.
        """
        tags = {owner[:12] for owner in live}
        removed = []
        for folder in sorted(set(folders)):
            try:
                fd = open_dir(folder)
            except OSError:
                continue
            try:
                stale = [name for name in os.listdir(fd) if _temp_owner(name) not in (None, *tags)]
                for name in stale:
                    with suppress(FileNotFoundError):
                        self.unlink(fd, name)
                        removed.append(os.path.join(folder, name))
            finally:
                os.close(fd)
        return removed

    @contextmanager
    def _dir(self, folder: str) -> Iterator[int]:
        fd = self.open_dir(folder)
        try:
            yield fd
        finally:
            os.close(fd)


class TooLarge(Exception):
    """A file is larger than the configured limit."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(path, size, limit)
        self.path, self.size, self.limit = path, size, limit


#: A policy check on what a load opened: called with the stat (data None) before
#: reading, then with the bytes; raises to refuse the file.
Vet = Callable[[str, os.stat_result, bytes | None], None]


def load_entry(
    path: str,
    max_size: int | None = None,
    vet: Vet | None = None,
    *,
    links: bool = False,
    hash_above: int | None = None,
) -> Entry:
    """What canonical `path` holds now: bytes, mode and hash; a folder; or nothing.

    Opened through `nofollow`, so a component swapped for a symlink since the
    sandbox check fails with ELOOP instead of reading elsewhere. With `links`, a
    symbolic link (the last component only) is an entry too: its target's bytes,
    hashed, with LINK_MODE. Raises TooLarge above `max_size`, before reading the
    file, and what `vet` raises. A file over `hash_above` bytes is hashed as it
    is read, a chunk at a time, and its entry has no bytes (`data` None): memory
    stays bounded whatever its size.
    """
    try:
        # O_NONBLOCK: a fifo swapped in after the sandbox check must not hang us.
        fd = open_beneath(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return Entry()
    except OSError as exc:
        target = _link_beneath(path) if links and exc.errno == errno.ELOOP else None
        if target is None:
            raise
        return Entry(data=target, hash=content_hash(target), mode=LINK_MODE)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return Entry(is_dir=True, mode=stat.S_IMODE(st.st_mode))
        check_opened(path, st, max_size, vet)
        if hash_above is not None and st.st_size > hash_above:
            return Entry(hash=_streamed_hash(fd), mode=stat.S_IMODE(st.st_mode))
        data = read_to_end(fd, st.st_size)
    finally:
        os.close(fd)
    if vet is not None:
        vet(path, st, data)
    return Entry(data=data, hash=content_hash(data), mode=stat.S_IMODE(st.st_mode))


#: How a walk opens a listed file: no link followed at its name, and O_NONBLOCK,
#: so a fifo put at the name since the listing cannot hang the open.
_AT_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def open_at(
    folder_fd: int, name: str, path: str, max_size: int, vet: Vet | None = None
) -> tuple[int, int]:
    """A descriptor of the regular file `name` in the folder open as `folder_fd`,
    checked by its stat (`check_opened`), and the size that stat gave; the caller
    reads it, vets its bytes and closes it.

    For a walk that holds each folder open: the folder was opened through
    `nofollow`, and `name` is opened without following a link, so no link is
    followed anywhere on the way, with no path walked again per file. `path` (the
    file's canonical path) is what `vet` and errors name. Raises TooLarge above
    `max_size`; what `vet` raises; OSError: ELOOP for a link at `name`, EINVAL for
    a folder or special file, ENOENT for a file gone.
    """
    fd = os.open(name, _AT_FLAGS, dir_fd=folder_fd)
    try:
        st = os.fstat(fd)
        check_opened(path, st, max_size, vet)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def check_opened(path: str, st: os.stat_result, max_size: int | None, vet: Vet | None) -> None:
    """Refuse an opened file before reading it: not a regular file (EINVAL), what
    `vet` refuses by its stat, or a size over `max_size` (TooLarge)."""
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    if vet is not None:
        vet(path, st, None)
    if max_size is not None and st.st_size > max_size:
        raise TooLarge(path, st.st_size, max_size)


def read_to_end(fd: int, size: int) -> bytes:
    """What `fd` reads from its position to its end; `size` is what its stat said."""
    # One read asking for a byte more than the stat's size: exactly the size
    # back is the whole file, with no read for the end and no buffer larger
    # than the file. More (it grew) or less (it shrank, or a short read)
    # reads on to the end.
    first = os.read(fd, size + 1)
    if len(first) == size:
        return first
    chunks = [first]
    while chunk := os.read(fd, _CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def _streamed_hash(fd: int) -> str:
    """The content hash of what `fd` reads to its end, read a chunk at a time."""
    hasher = blake3(max_threads=blake3.AUTO)
    while chunk := os.read(fd, _CHUNK):
        hasher.update(chunk)
    return "blake3:" + hasher.hexdigest()


def _temp_owner(name: str) -> str | None:
    """The owner tag of an engine temp file's name, or None for any other name.

    >>> _temp_owner(temp_name("a.txt", "abcdef0123456789")), _temp_owner("a.txt")
    ('abcdef012345', None)
    """
    if not (name.startswith(".ledgerfs-") and name.endswith(".tmp")):
        return None
    return name[len(".ledgerfs-") :].split("-", 1)[0]


def _link_beneath(path: str) -> bytes | None:
    """The target of the link `path` names, read in its folder opened through
    `nofollow` (a folder swapped since raises ELOOP), or None if it is no link."""
    folder, name = os.path.split(path)
    fd = open_dir(folder)
    try:
        return os.readlink(os.fsencode(name), dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _discard(dir_fd: int, name: str) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    _renameat2.restype = ctypes.c_int
_RENAME_EXCHANGE = 2


def _exchange(dir_fd: int, a: str, b: str) -> None:
    """Swap what two names in one folder hold, in one step (never following a link)."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), b)
    if _renameat2(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), b)


def sync_filesystems(folders: Iterable[str]) -> None:
    """Flush every write on the file systems holding these folders to stable storage.

    One `syncfs` per file system coalesces the fsyncs of every file and folder the
    engine changed since the last checkpoint; without syncfs, `sync()` does it.
    """
    seen: set[int] = set()
    for folder in folders:
        try:
            fd = open_dir(folder)
        except OSError:
            continue
        try:
            dev = os.fstat(fd).st_dev
            if dev in seen:
                continue
            seen.add(dev)
            if _syncfs is None or _syncfs(fd) != 0:
                os.sync()
        finally:
            os.close(fd)
