"""Reading and matching the files a content search opened, in a process of its own.

A content search spends its time reading files and matching their lines, and
in one Python process both run on one core: the GIL passes between the walk
and the reads at every file, so a second thread only adds hand-overs. The
searching thread (`search`) walks the sandbox and opens each file there; it
hands batches of the opened descriptors to a worker process over a Unix socket
(SCM_RIGHTS), and that process reads and matches them on another core while
the walk goes on. The worker never opens a path: it reads only files the
sandbox opened, so its reads keep every promise the walk's keep (no link
followed, nothing outside the roots, nothing the walk refused).

`search_batch` reads and matches a batch wherever it runs: in a worker, or in
the searching thread when no worker is free, ready or alive. Either way a batch
gives the same hits.

The worker is started with the package's folders reachable but without running
the packages' `__init__` (`BOOT`): it imports the standard library, RE2,
msgspec, this module and its two neighbours (`credentials`, `textbytes`),
nothing of the engine or the journal, and is up in about 40 ms.

Frames on the worker's stdin and stdout are a 4-byte little-endian length and
a msgpack body: a `Job` in; `Ready` once, then a `Done` for each job, out. Each
job's descriptors follow it as one datagram on the socket.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
from collections.abc import Sequence
from typing import Any

import msgspec

from .credentials import secret_content
from .textbytes import is_text

__all__ = [
    "BOOT",
    "MAX_LINE",
    "Done",
    "Hit",
    "Job",
    "Ready",
    "frame",
    "matching_lines",
    "search_batch",
    "serve",
]

#: Longer lines (minified code) are cut in results.
MAX_LINE = 1000

#: The worker's program: the two packages as bare modules (their `__init__`
#: imports the whole engine), the engine's folder the only place to find its
#: modules, then this module's `serve`. argv: that folder, the socket's descriptor.
BOOT = """\
import sys, types
for name, folders in (("ledgerfs", []), ("ledgerfs.engine", [sys.argv[1]])):
    package = types.ModuleType(name)
    package.__path__ = folders
    sys.modules[name] = package
from ledgerfs.engine.searchworker import serve
serve(int(sys.argv[2]))
"""

_LENGTH = struct.Struct("<I")


class Hit(msgspec.Struct, array_like=True, frozen=True):
    """One matching line of a batch's file."""

    #: The file's place in its batch.
    file: int
    line: int
    text: str
    before: list[str]
    after: list[str]


class Job(msgspec.Struct, array_like=True, frozen=True):
    """A batch to search; its descriptors follow on the socket, one for each size."""

    batch: int
    #: Each file's size when it was opened.
    sizes: list[int]
    #: The compiled RE2 pattern, pickled (RE2 patterns pickle as their source
    #: and options).
    pattern: bytes
    context: int
    #: The most hits to give: a search needs no more of this batch than this.
    room: int
    max_size: int
    allow_secrets: bool


class Ready(msgspec.Struct, tag=True, array_like=True, frozen=True):
    """The worker is up and reading jobs."""


class Done(msgspec.Struct, tag=True, array_like=True, frozen=True):
    """A job's hits, in file order and line order."""

    batch: int
    hits: list[Hit]


_decode_job = msgspec.msgpack.Decoder(Job).decode
_encode = msgspec.msgpack.Encoder().encode


def frame(message: Job | Ready | Done) -> bytes:
    """`message` as one frame: its length, then its msgpack bytes."""
    body = _encode(message)
    return _LENGTH.pack(len(body)) + body


def search_batch(
    fds: Sequence[int],
    sizes: Sequence[int],
    pattern: Any,
    *,
    context: int,
    room: int,
    max_size: int,
    allow_secrets: bool,
) -> list[Hit]:
    """The matching lines of the opened files `fds` (of `sizes` when opened), at
    most `room` of them.

    A file over `max_size`, not UTF-8 text, or unreadable is passed over, and so
    is one whose bytes are a credential (unless secrets are allowed). Only a
    file with a hit is checked for either, as a file without one shows nothing:
    RE2 matches any bytes, text or not. Reads start at offset 0, whoever read the
    descriptor before. The descriptors stay open.
    """
    hits: list[Hit] = []
    for index, (fd, size) in enumerate(zip(fds, sizes, strict=True)):
        if len(hits) == room:
            break
        data = _load(fd, size, max_size)
        if data is None:
            continue
        found = matching_lines(data, pattern, context, room - len(hits), index)
        if found and is_text(data) and (allow_secrets or secret_content(data) is None):
            hits.extend(found)
    return hits


def _load(fd: int, size: int, max_size: int) -> bytes | None:
    """All the bytes of the file open as `fd` (of `size` when opened), or None
    above `max_size` or unreadable."""
    try:
        # A byte more than the size: exactly the size back is the whole file.
        data = os.pread(fd, size + 1, 0)
        if len(data) == size:
            return data
        chunks, offset = [data], len(data)
        while offset <= max_size and (chunk := os.pread(fd, 1 << 20, offset)):
            chunks.append(chunk)
            offset += len(chunk)
    except OSError:
        return None  # gone bad since it was opened (an I/O error, a file system away)
    return b"".join(chunks) if offset <= max_size else None


def matching_lines(data: bytes, pattern: Any, context: int, room: int, file: int) -> list[Hit]:
    """Up to `room` lines of `data` (the batch's `file`) that `pattern` matches,
    each with the `context` lines before and after it.

    Lines end at "\\n" only (as grep counts them), and a line is a hit once
    however often it matches. Numbers are counted from the last hit, so a file
    is never split into lines as a whole.
    """
    found: list[Hit] = []
    size = len(data)
    number, counted_to, position = 0, 0, 0
    while position < size and len(found) < room:
        match = pattern.search(data, position)
        if match is None:
            break
        at = match.start()
        if at == size and data.endswith(b"\n"):
            break  # past the last line's "\n" is no line
        number += data.count(b"\n", counted_to, at)
        counted_to = at
        start = data.rfind(b"\n", 0, at) + 1
        following = data.find(b"\n", at)
        line = data[start:] if following < 0 else data[start:following]
        found.append(
            Hit(
                file,
                number + 1,
                _shown(line),
                _before(data, start, context) if context else [],
                _after(data, start, context) if context else [],
            )
        )
        position = size if following < 0 else following + 1
    return found


def _before(text: bytes, start: int, count: int) -> list[str]:
    """Up to `count` lines before the line starting at `start`."""
    lines: list[str] = []
    while count > len(lines) and start > 0:
        previous = text.rfind(b"\n", 0, start - 1) + 1
        lines.append(_shown(text[previous : start - 1]))
        start = previous
    return lines[::-1]


def _after(text: bytes, start: int, count: int) -> list[str]:
    """Up to `count` lines after the line starting at `start` (none past the last)."""
    lines: list[str] = []
    end = text.find(b"\n", start)
    while count > len(lines) and end >= 0 and end + 1 < len(text):
        following = text.find(b"\n", end + 1)
        lines.append(_shown(text[end + 1 :] if following < 0 else text[end + 1 : following]))
        end = following
    return lines


def _shown(raw: bytes) -> str:
    """A line as a result shows it: no "\\r", at most MAX_LINE characters."""
    # Only what can be shown is decoded: the data is UTF-8, so the cut can split
    # no more than the last character.
    line = raw[: 4 * (MAX_LINE + 2)].decode("utf-8", "ignore")
    if line.endswith("\r"):
        line = line[:-1]
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"


def serve(channel: int) -> None:
    """The worker's loop: a job from stdin and its descriptors from the socket
    `channel`, its hits to stdout, until stdin ends or the engine stops reading
    (it closed, or its process died)."""
    # Ctrl-C in a terminal reaches the whole process group: the engine decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=channel)
    try:
        _write(frame(Ready()))
        while (body := _read_frame()) is not None:
            _write(frame(_run(_decode_job(body), sock)))
    except BrokenPipeError:
        return  # the engine is gone: nobody to tell


def _run(job: Job, sock: socket.socket) -> Done:
    _, fds, _, _ = socket.recv_fds(sock, 1, len(job.sizes))
    try:
        return Done(
            job.batch,
            search_batch(
                fds,
                job.sizes,
                _pattern(job.pattern),
                context=job.context,
                room=job.room,
                max_size=job.max_size,
                allow_secrets=job.allow_secrets,
            ),
        )
    finally:
        for fd in fds:
            os.close(fd)


_patterns: dict[bytes, Any] = {}


def _pattern(pickled: bytes) -> Any:
    """The pattern of a job, compiled once for all of a search's jobs."""
    if pickled not in _patterns:
        _patterns.clear()  # one search at a time: keep its pattern only
        # The engine's own bytes: the pattern it compiled and checked.
        _patterns[pickled] = pickle.loads(pickled)
    return _patterns[pickled]


def _read_frame() -> bytes | None:
    head = _read_exactly(_LENGTH.size)
    return None if head is None else _read_exactly(_LENGTH.unpack(head)[0])


def _read_exactly(size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(0, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]
