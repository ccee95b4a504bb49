"""MCP over stdin and stdout, read and written by the event loop itself.

A pipe (or socket) is made non-blocking and driven by the loop's own poller: a
line is read when the loop says the pipe is readable, a reply is written at once
and waits for the loop only when the pipe is full (a slow reader). A call thus
costs no hand-off to a worker thread, where a transport built on blocking file
objects costs one per read, per write and per flush. Anything else on fd 0 or 1
(a terminal, a regular file, the null device) cannot be polled and is read and
written in a worker thread, as before.

Each line is judged once (`jsonrpc.classify`): a message reaches the server
through the SDK's stream contract (memory object streams of `SessionMessage`);
any other line is answered in its place by `on_refused`, and the SDK never sees
it: every request gets its one answer. A line is held in memory up to a cap
(`line_cap`); past it the reader keeps only its first and last bytes, discards
the rest up to the next newline and answers it as too long, so the reader's
memory is bounded by the cap whatever a client sends.

While serving, fd 0 reads the null device and fd 1 writes to stderr, so a child
process or a stray print never reaches the wire; both are put back on exit.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .jsonrpc import Refusal, classify, refuse_oversized

__all__ = [
    "ESCAPE_FACTOR",
    "LINE_SLACK",
    "Incoming",
    "Outgoing",
    "line_cap",
    "loop_options",
    "stdio_streams",
]

#: What the server reads: the SDK's contract (this reader sends only messages).
Incoming = MemoryObjectReceiveStream[SessionMessage | Exception]
#: What the server writes.
Outgoing = MemoryObjectSendStream[SessionMessage]
#: The reply to a line that is no message for the SDK.
OnRefused = Callable[[Refusal], types.JSONRPCMessage]

#: One read: a request line is usually far smaller; a larger one takes several.
_CHUNK = 1 << 16
#: The bytes kept of each end of a line over the cap, to recover its id and method.
_ENDS = 1 << 12
#: How much larger than its file a request line can be: JSON escapes a byte in at
#: most 6 (a control byte as `\u0001`; base64 takes 4 per 3).
ESCAPE_FACTOR = 6
#: Room for the rest of a request around its largest argument.
LINE_SLACK = 1 << 20


def line_cap(max_file_size: int) -> int:
    """The longest stdin line served: a write_file of `max_file_size` bytes, JSON-escaped.

    >>> line_cap(50 * 2**20) // 2**20
    301
    """
    return ESCAPE_FACTOR * max_file_size + LINE_SLACK


def loop_options() -> dict[str, Any]:
    """anyio's asyncio options for a served process: uvloop when it is installed.

    uvloop runs the loop's own work (polling, callbacks, task steps) in C; without
    it (not installed, or a platform it does not build for) the standard loop runs.

    >>> set(loop_options()) <= {"use_uvloop"}
    True
    """
    return {"use_uvloop": True} if importlib.util.find_spec("uvloop") is not None else {}


@dataclass
class _Pipe:
    """One end of the wire: a descriptor, polled by the loop or served by a thread."""

    fd: int
    polled: bool

    @classmethod
    def open(cls, fd: int) -> _Pipe:
        mode = os.fstat(fd).st_mode
        polled = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        if polled:
            os.set_blocking(fd, False)
        return cls(fd, polled)

    def restore(self) -> None:
        # The descriptor may be shared with whoever started us: leave it blocking.
        if self.polled:
            with contextlib.suppress(OSError):
                os.set_blocking(self.fd, True)

    async def read(self) -> bytes:
        """The next bytes there are (b"" at the end of input)."""
        if not self.polled:
            # A worker thread blocked in read() cannot be interrupted: abandoned
            # on cancellation (the descriptor stays open until the process ends).
            data: bytes = await anyio.to_thread.run_sync(
                os.read, self.fd, _CHUNK, abandon_on_cancel=True
            )
            return data
        while True:
            try:
                return os.read(self.fd, _CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)

    async def write(self, data: bytes) -> None:
        """Write all of `data`, waiting whenever the reader has not caught up."""
        view = memoryview(data)
        while view:
            if self.polled:
                try:
                    written = os.write(self.fd, view)
                except BlockingIOError:
                    await anyio.wait_writable(self.fd)
                    continue
            else:
                written = await anyio.to_thread.run_sync(os.write, self.fd, view)
            view = view[written:]


@contextlib.contextmanager
def _claimed(fd: int, diversion: Callable[[], int]) -> Iterator[int]:
    """A private duplicate of `fd` while `fd` itself points at `diversion()`.

    Yields `fd` unchanged when it cannot be duplicated or diverted (the wire is
    then served in place).
    """
    try:
        private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield fd
        return
    try:
        stand_in = diversion()
        try:
            os.dup2(stand_in, fd)
        finally:
            os.close(stand_in)
    except OSError:
        os.close(private)
        yield fd
        return
    try:
        yield private
    finally:
        os.dup2(private, fd)
        os.close(private)


def _null_input() -> int:
    return os.open(os.devnull, os.O_RDONLY)


def _stderr_output() -> int:
    return os.dup(2)


@dataclass
class _Oversized:
    """A line past the cap: its first and last bytes and its length."""

    head: bytes
    tail: bytes
    size: int


class _LineSplitter:
    """Bytes in, whole lines out; a line past `cap` comes out as `_Oversized`.

    Holds at most `cap` bytes (and a read) of a line: past the cap it keeps only
    the line's ends and counts the rest until the newline.

    >>> lines = _LineSplitter(cap=8)
    >>> lines.feed(b"ab\\ncd"), lines.feed(b"ef\\n0123456789"), lines.feed(b"xy\\nz")
    ([b'ab'], [bytearray(b'cdef')], [_Oversized(head=b'0123456789', tail=b'0123456789xy', size=12)])
    >>> lines.end()
    [bytearray(b'z')]
    """

    def __init__(self, cap: int) -> None:
        self._cap = cap
        # One growing buffer, not a list of reads: a client that sends a byte per
        # read costs a byte each, not an object each.
        self._line = bytearray()
        self._over: _Oversized | None = None  # the line being discarded

    def feed(self, chunk: bytes) -> list[bytes | bytearray | _Oversized]:
        *whole, rest = chunk.split(b"\n")
        done: list[bytes | bytearray | _Oversized] = []
        for line in whole:
            if not self._line and self._over is None and len(line) <= self._cap:
                done.append(line)  # whole in this read: no copy through the buffer
            else:  # the end of a line begun in an earlier read, or one over the cap
                self._take(line)
                done.append(self._finish())
        self._take(rest)
        return done

    def end(self) -> list[bytes | bytearray | _Oversized]:
        """The last line, when the input ended without a newline."""
        return [self._finish()] if self._line or self._over else []

    def _take(self, piece: bytes) -> None:
        if not piece:
            return
        if self._over is not None:
            self._over.tail = (self._over.tail + piece)[-_ENDS:]
            self._over.size += len(piece)
            return
        self._line += piece
        if len(self._line) > self._cap:
            line = self._line
            self._over = _Oversized(bytes(line[:_ENDS]), bytes(line[-_ENDS:]), len(line))
            self._line = bytearray()

    def _finish(self) -> bytes | bytearray | _Oversized:
        # The buffer itself is handed on (the parsers take a bytearray): no copy of the line.
        over, line = self._over, self._line
        self._line, self._over = bytearray(), None
        return over if over is not None else line


def _judge(item: bytes | bytearray | _Oversized, cap: int) -> types.JSONRPCMessage | list[Refusal]:
    if isinstance(item, _Oversized):
        return [refuse_oversized(item.head, item.tail, item.size, cap)]
    return classify(item)


async def _read_lines(
    pipe: _Pipe,
    incoming: MemoryObjectSendStream[SessionMessage | Exception],
    replies: Outgoing,
    on_refused: OnRefused,
    cap: int,
) -> None:
    """Deliver each line of `pipe` to `incoming`, or its reply to `replies`, until its end."""

    async def deliver(item: bytes | bytearray | _Oversized) -> None:
        judged = _judge(item, cap)
        if isinstance(judged, list):
            for refusal in judged:
                await replies.send(SessionMessage(on_refused(refusal)))
        else:
            await incoming.send(SessionMessage(judged))

    lines = _LineSplitter(cap)
    async with incoming, replies:
        try:
            while chunk := await pipe.read():
                for line in lines.feed(chunk):
                    await deliver(line)
            for line in lines.end():
                await deliver(line)
        except anyio.BrokenResourceError:
            pass  # the server stopped reading: nobody is left to deliver to


def _encode(item: SessionMessage) -> bytes:
    return item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


async def _write_lines(pipe: _Pipe, outgoing: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """Write each message as one line; replies ready together go out in one write."""
    async with outgoing:
        async for item in outgoing:
            lines = [_encode(item)]
            while True:
                try:
                    lines.append(_encode(outgoing.receive_nowait()))
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            try:
                await pipe.write(b"".join(lines))
            except (BrokenPipeError, ConnectionResetError):
                return  # the client is gone: later replies are dropped by the server


@asynccontextmanager
async def stdio_streams(
    on_refused: OnRefused,
    *,
    cap: int,
    read_fd: int | None = None,
    write_fd: int | None = None,
) -> AsyncIterator[tuple[Incoming, Outgoing]]:
    """The server's streams over stdin/stdout (or the given descriptors), until the block ends.

    A line longer than `cap` bytes is refused unread (see `line_cap`).

    The read stream ends at the end of input; closing the write stream (the
    server does when it stops) flushes what is left and ends the writer.
    """
    with contextlib.ExitStack() as claims:
        if read_fd is None:
            read_fd = claims.enter_context(_claimed(0, _null_input))
        if write_fd is None:
            write_fd = claims.enter_context(_claimed(1, _stderr_output))
        reader, writer = _Pipe.open(read_fd), _Pipe.open(write_fd)
        claims.callback(writer.restore)
        claims.callback(reader.restore)
        incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception]()
        outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage]()
        async with anyio.create_task_group() as group:
            group.start_soon(_write_lines, writer, outgoing_receive)
            with incoming, outgoing:
                async with anyio.create_task_group() as reading:
                    replies = outgoing.clone()
                    reading.start_soon(_read_lines, reader, incoming_send, replies, on_refused, cap)
                    yield incoming, outgoing
                    # The server stopped (normally at the end of input): stop reading,
                    # and let the writer flush what the server left.
                    reading.cancel_scope.cancel()
