"""MCP over stdin and stdout, read and written by the event loop itself.

A pipe (or socket) is made non-blocking and driven by the loop's own poller: a
line is read when the loop says the pipe is readable, a reply is written at once
and waits for the loop only when the pipe is full (a slow reader). A call thus
costs no hand-off to a worker thread, where a transport built on blocking file
objects costs one per read, per write and per flush. Anything else on fd 0 or 1
(a terminal, a regular file, the null device) cannot be polled and is read and
written in a worker thread, as before.

Lines are parsed as the MCP SDK parses them and reach the server through the
SDK's stream contract (memory object streams of `SessionMessage`). A line the
SDK's parser refuses goes to `on_unparsable`, whose reply, if any, is written
in its place: every request gets its one answer.

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

__all__ = ["Incoming", "Outgoing", "loop_options", "stdio_streams"]

#: What the server reads: a parsed message, or what the parser raised (the SDK's contract).
Incoming = MemoryObjectReceiveStream[SessionMessage | Exception]
#: What the server writes.
Outgoing = MemoryObjectSendStream[SessionMessage]
#: The reply to a line the parser refused, or None when it wants none.
OnUnparsable = Callable[[Exception], types.JSONRPCMessage | None]

#: One read: a request line is usually far smaller; a larger one takes several.
_CHUNK = 1 << 16


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


def _parse(line: bytes) -> SessionMessage | Exception:
    # As the SDK reads: UTF-8 with bad bytes replaced, then its JSON-RPC parser.
    try:
        message = types.jsonrpc_message_adapter.validate_json(
            line.decode("utf-8", "replace"), by_name=False
        )
    except Exception as exc:
        return exc
    return SessionMessage(message)


async def _read_lines(
    pipe: _Pipe,
    incoming: MemoryObjectSendStream[SessionMessage | Exception],
    replies: Outgoing,
    on_unparsable: OnUnparsable,
) -> None:
    """Parse each line of `pipe` to `incoming` until the end of input, then close it."""

    async def deliver(line: bytes) -> None:
        item = _parse(line)
        if isinstance(item, SessionMessage):
            await incoming.send(item)
            return
        reply = on_unparsable(item)
        if reply is not None:
            await replies.send(SessionMessage(reply))

    async with incoming, replies:
        parts: list[bytes] = []  # the line being received, when it came in several reads
        try:
            while chunk := await pipe.read():
                if b"\n" not in chunk:
                    parts.append(chunk)
                    continue
                parts.append(chunk)
                *lines, last = b"".join(parts).split(b"\n")
                parts = [last] if last else []
                for line in lines:
                    await deliver(line)
            if parts:
                await deliver(b"".join(parts))
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
    on_unparsable: OnUnparsable, *, read_fd: int | None = None, write_fd: int | None = None
) -> AsyncIterator[tuple[Incoming, Outgoing]]:
    """The server's streams over stdin/stdout (or the given descriptors), until the block ends.

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
                    reading.start_soon(_read_lines, reader, incoming_send, replies, on_unparsable)
                    yield incoming, outgoing
                    # The server stopped (normally at the end of input): stop reading,
                    # and let the writer flush what the server left.
                    reading.cancel_scope.cancel()
