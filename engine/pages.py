"""Line indexes of file versions, so that a paged read costs the page, not the file.

A version of a file is known by its content hash; its `LineIndex` holds where
each of its lines starts (byte offsets, the lines `str.splitlines` makes of its
text). Indexes are kept in an LRU bounded by their bytes (`INDEX_BYTES`), keyed
by hash, so a changed file gets a new index and an unchanged one keeps its own.

Finding the hash of what a file holds now without reading it all rests on its
identity: (device, inode, size, mtime_ns, ctime_ns). Every write to a file sets
its ctime to the file-system clock, which no caller can set back; a rename over
it makes a new inode. So a file whose identity is unchanged holds the bytes it
held, but for one case: a write in the same tick of the file-system clock as
the write before it, with the same size. An identity is therefore trusted only
if the file was *settled* when it was read: its mtime and ctime older than the
start of the read by more than `RACY_NS` (more than any file system's timestamp
granularity, FAT's 2 s the coarsest). A write after that read gets a timestamp
newer than the read's start less one tick, so its identity differs. A file
changed more recently is read, hashed and checked in full on every read, as git
treats a "racily clean" index entry. A write during a read changes the stat the
read takes after reading, and such a read is not remembered either.

What this assumes: a local file system whose timestamps come from this
machine's clock, and a clock not stepped back by more than `RACY_NS` while a
file is indexed (a network file system whose server clock lags this one's may
break it, as it breaks make and git).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable
from itertools import accumulate
from typing import NamedTuple

import msgspec

from .encodings import LineEndings, line_endings
from .textbytes import is_text

__all__ = [
    "BLOCK",
    "INDEX_BYTES",
    "RACY_NS",
    "Fetch",
    "Identity",
    "LineIndex",
    "LineIndexes",
    "PageStatistics",
    "index_of",
    "line_start",
    "newline_blocks",
    "settled",
]

#: The line indexes an engine keeps, in bytes: 8 bytes a block of BLOCK bytes
#: (2 KiB for 1 MiB of text), or 8 bytes a line for text with line breaks other
#: than newlines (64 MiB: 8 million such lines).
INDEX_BYTES = 64 * 1024 * 1024
#: How much older than a read a file's timestamps must be for its identity to
#: name its content (see the module's docstring).
RACY_NS = 2_000_000_000
#: What an index costs besides its offsets (the hash, the structs).
_OVERHEAD = 256


class Identity(NamedTuple):
    """What names a file's content while it is unchanged (see the module's docstring)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(identity: Identity, read_started_ns: int) -> bool:
    """Whether a read that started at `read_started_ns` (wall clock) may name the
    file's content by its identity: it was last changed more than RACY_NS before.

    >>> old = Identity(1, 2, 3, mtime_ns=10**9, ctime_ns=10**9)
    >>> settled(old, 4 * 10**9), settled(old, 2 * 10**9)
    (True, False)
    """
    return read_started_ns - max(identity.mtime_ns, identity.ctime_ns) > RACY_NS


class LineIndex(msgspec.Struct, frozen=True, kw_only=True):
    """One version of a file: its hash, size, whether it is text, and for text
    how many lines it has and where each starts (`start`).

    Text whose lines all end in `\\n` (or `\\r\\n`), nearly all text, keeps the
    count of newlines before each block of BLOCK bytes (`blocks`): a line is found
    in its block, read when asked for, so the index is a few bytes per block and
    building it counts newlines without splitting anything. Text with the other
    line breaks `str.splitlines` knows keeps every line's start (`starts`).
    """

    hash: str
    size: int
    text: bool
    lines: int = 0
    #: The line endings of text (as read_file reports them).
    endings: LineEndings | None = None
    blocks: array[int] | None = None
    starts: array[int] | None = None

    @property
    def cost(self) -> int:
        """What keeping it costs, in bytes."""
        held = sum(a.itemsize * len(a) for a in (self.blocks, self.starts) if a is not None)
        return held + _OVERHEAD

    def start(self, line: int, fetch: Fetch) -> int:
        """Where line `line` starts (the size for `lines`), bytes read by `fetch`."""
        if self.starts is not None:
            return self.starts[line]
        assert self.blocks is not None
        return line_start(self.blocks, self.size, line, fetch)


def newline_blocks(data: bytes) -> array[int]:
    """How many newlines `data` holds before each block of BLOCK bytes, and in
    all (the last entry): bytes.count per block, nothing split.

    >>> newline_blocks(b"a\\n" * 3000).tolist()
    [0, 2048, 3000]
    """
    counts = (data.count(b"\n", at, at + BLOCK) for at in range(0, len(data), BLOCK))
    return array("q", accumulate(counts, initial=0))


def line_start(blocks: array[int], size: int, line: int, fetch: Fetch) -> int:
    """Where line `line` of `size` bytes split at newlines starts (just after its
    line-th newline; `size` past the last one), given its `newline_blocks` and
    `fetch` to read the one block that holds it.

    >>> data = b"ab\\n" * 2000
    >>> blocks, fetch = newline_blocks(data), lambda a, b: data[a:b]
    >>> [line_start(blocks, len(data), n, fetch) for n in (0, 1, 1500, 2000, 2001)]
    [0, 3, 4500, 6000, 6000]
    """
    if line == 0:
        return 0
    if line > blocks[-1]:
        return size  # the last line, without a newline, ends the file
    # The block holding the line's newline: before it, fewer than `line`.
    block = bisect.bisect_left(blocks, line) - 1
    first = block * BLOCK
    chunk = fetch(first, min(size, first + BLOCK))
    at = -1
    for _ in range(line - blocks[block]):
        at = chunk.find(b"\n", at + 1)
    return first + at + 1


#: Reads bytes [start, end) of the version an index describes.
Fetch = Callable[[int, int], bytes]

#: Newlines are counted per block of this many bytes.
BLOCK = 4096
#: Line breaks of str.splitlines but `\n` and `\r`, in ASCII and beyond (U+0085,
#: U+2028, U+2029): text holding none is indexed by blocks.
_ASCII_BREAKS = (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_OTHER_BREAKS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")


def _newline_ended(data: bytes) -> bool:
    """Whether every line break of text `data` is a `\\n` (or a `\\r\\n`).

    >>> _newline_ended(b"a\\r\\nb\\n"), _newline_ended(b"a\\rb"), _newline_ended("\\u2028".encode())
    (True, False, False)
    """
    # Each a memchr or a fast search; the counts only for text with a `\r`.
    if any(b in data for b in _ASCII_BREAKS):
        return False
    if not data.isascii() and any(b in data for b in _OTHER_BREAKS):
        return False
    return b"\r" not in data or data.count(b"\r") == data.count(b"\r\n")


def index_of(data: bytes, digest: str) -> LineIndex:
    """The line index of `data`, whose content hash is `digest`.

    >>> index_of(b"a\\r\\nb\\x0cc", "h").starts.tolist(), index_of(b"\\x00", "h").text
    ([0, 3, 5, 6], False)
    >>> index = index_of(b"a\\r\\nb\\nc", "h")
    >>> index.lines, [index.start(i, lambda a, b: b"a\\r\\nb\\nc"[a:b]) for i in range(4)]
    (3, [0, 3, 5, 6])
    """
    if not is_text(data):
        return LineIndex(hash=digest, size=len(data), text=False)
    endings = line_endings(data)
    if _newline_ended(data):
        blocks = newline_blocks(data)
        total = blocks[-1] + (not data.endswith(b"\n") and bool(data))
        return LineIndex(
            hash=digest, size=len(data), text=True, lines=total, blocks=blocks, endings=endings
        )
    split = data.decode("utf-8").splitlines(keepends=True)
    # ASCII text has a byte per character: the lines' lengths are their sizes.
    sizes = map(len, split) if data.isascii() else map(len, map(str.encode, split))
    starts = array("q", accumulate(sizes, initial=0))
    return LineIndex(
        hash=digest, size=len(data), text=True, lines=len(split), starts=starts, endings=endings
    )


class PageStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the indexes served: reads that found the version by the file's
    identity (no hash, no split), reads that found its index by hash (no
    split), reads that built one; the indexes held and their bytes."""

    by_identity: int
    by_hash: int
    built: int
    indexes: int
    bytes: int


class LineIndexes:
    """The line indexes of the versions read lately, by hash, bounded by bytes;
    and the identities that name them. Shared by the worker threads that read.

    >>> indexes = LineIndexes(limit=2 * _OVERHEAD)
    >>> for digest in ("a", "b", "c"):
    ...     indexes.remember(index_of(b"\\x00", digest), None, 0)
    >>> indexes.by_hash("a"), indexes.by_hash("c").hash
    (None, 'c')
    """

    def __init__(self, limit: int = INDEX_BYTES, clock: Callable[[], int] = time.time_ns) -> None:
        self.limit = limit
        #: The wall clock a read's start is taken from (`settled`).
        self.clock = clock
        self._lock = threading.Lock()
        self._indexes: OrderedDict[str, LineIndex] = OrderedDict()
        self._identities: OrderedDict[Identity, str] = OrderedDict()
        self._bytes = 0
        self._by_identity = self._by_hash = self._built = 0

    def by_identity(self, identity: Identity) -> LineIndex | None:
        """The index of the version a settled file with this identity holds, if known."""
        with self._lock:
            digest = self._identities.get(identity)
            index = None if digest is None else self._indexes.get(digest)
            if index is not None:
                self._indexes.move_to_end(index.hash)
                self._by_identity += 1
            return index

    def by_hash(self, digest: str) -> LineIndex | None:
        with self._lock:
            index = self._indexes.get(digest)
            if index is not None:
                self._indexes.move_to_end(digest)
            return index

    def remember(self, index: LineIndex, identity: Identity | None, read_started_ns: int) -> None:
        """Keep `index` (dropping the least recently used beyond the limit), and
        let `identity` name it if the file was settled when its read started."""
        with self._lock:
            if index.hash in self._indexes:
                self._by_hash += 1
            else:
                self._built += 1
                if index.cost > self.limit:
                    return
                self._indexes[index.hash] = index
                self._bytes += index.cost
                self._evict()
            if identity is not None and settled(identity, read_started_ns):
                self._identities[identity] = index.hash
                self._identities.move_to_end(identity)
                # An identity costs little, but no more of them than of indexes.
                while len(self._identities) > max(16, 4 * len(self._indexes)):
                    self._identities.popitem(last=False)

    def statistics(self) -> PageStatistics:
        with self._lock:
            return PageStatistics(
                by_identity=self._by_identity,
                by_hash=self._by_hash,
                built=self._built,
                indexes=len(self._indexes),
                bytes=self._bytes,
            )

    def _evict(self) -> None:
        while self._bytes > self.limit:
            _, dropped = self._indexes.popitem(last=False)
            self._bytes -= dropped.cost
