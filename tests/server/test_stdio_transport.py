"""The stdio transport on real pipes, in-process, on asyncio and trio.

The server end is `stdio_streams` over the descriptors of two `os.pipe()`s; the
client end reads and writes the other ends in worker threads (a MiB line must
not block the loop it is sent to). A process test checks what the transport
does to fd 0 and fd 1 while it serves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from ledgerfs.engine.jsonrpc import Refusal
from ledgerfs.engine.stdio import Incoming, Outgoing, stdio_streams

from ._support import REPO, serve_args, server_env

pytestmark = pytest.mark.anyio

#: Larger than any pipe's buffer: writing it must wait for the reader.
BIG = 3 * 1024 * 1024
#: The line cap of these wires: well above BIG.
CAP = 4 * BIG


@dataclass
class Wire:
    """The client's ends of the pipes and the server's streams."""

    to_server: int
    from_server: int
    incoming: Incoming
    outgoing: Outgoing

    async def send(self, data: bytes) -> None:
        await anyio.to_thread.run_sync(_write_all, self.to_server, data)

    async def read_lines(self, count: int) -> list[dict[str, Any]]:
        return await anyio.to_thread.run_sync(_read_lines, self.from_server, count)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_lines(fd: int, count: int) -> list[dict[str, Any]]:
    data = b""
    while data.count(b"\n") < count:
        chunk = os.read(fd, 1 << 16)
        assert chunk, "the server closed its output early"
        data += chunk
    lines = data.split(b"\n")
    assert lines[count:] == [b""], "more than the expected lines"
    return [json.loads(line) for line in lines[:count]]


def _refused(refusal: Refusal) -> types.JSONRPCMessage:
    error = types.ErrorData(code=refusal.code, message=refusal.fault)
    return types.JSONRPCError(jsonrpc="2.0", id=refusal.id, error=error)


@asynccontextmanager
async def wire(
    on_refused: Callable[[Refusal], types.JSONRPCMessage] = _refused, cap: int = CAP
) -> AsyncIterator[Wire]:
    server_in, to_server = os.pipe()
    from_server, server_out = os.pipe()
    try:
        async with stdio_streams(on_refused, cap=cap, read_fd=server_in, write_fd=server_out) as (
            incoming,
            outgoing,
        ):
            w = Wire(to_server, from_server, incoming, outgoing)
            try:
                yield w
            finally:
                os.close(w.to_server)  # the end of input ends the reader
                await outgoing.aclose()
        os.close(w.from_server)
    finally:
        os.close(server_in)
        os.close(server_out)


def request(ident: int, method: str = "tools/call", **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}).encode()


def response(ident: int, **result: Any) -> SessionMessage:
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=ident, result=result))


async def test_lines_in_one_read_become_messages_in_order_and_replies_become_lines() -> None:
    note = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
    async with wire() as w:
        await w.send(request(1, name="a") + b"\n" + note + b"\r\n" + request(2, name="b") + b"\n")
        got = [(await w.incoming.receive()) for _ in range(3)]
        assert all(isinstance(item, SessionMessage) for item in got)
        messages = [item.message for item in got if isinstance(item, SessionMessage)]
        assert [type(m) for m in messages] == [
            types.JSONRPCRequest,
            types.JSONRPCNotification,
            types.JSONRPCRequest,
        ]
        assert [getattr(m, "id", None) for m in messages] == [1, None, 2]
        await w.outgoing.send(response(2, text="two"))
        await w.outgoing.send(response(1, text="one"))
        assert await w.read_lines(2) == [
            {"jsonrpc": "2.0", "id": 2, "result": {"text": "two"}},
            {"jsonrpc": "2.0", "id": 1, "result": {"text": "one"}},
        ]


async def test_a_line_larger_than_the_pipe_arrives_whole_both_ways() -> None:
    content = "x" * BIG
    async with wire() as w:
        async with anyio.create_task_group() as group:
            group.start_soon(
                w.send, request(7, name="write_file", arguments={"c": content}) + b"\n"
            )
            item = await w.incoming.receive()
        assert isinstance(item, SessionMessage)
        assert isinstance(item.message, types.JSONRPCRequest)
        assert item.message.params == {"name": "write_file", "arguments": {"c": content}}
        async with anyio.create_task_group() as group:
            group.start_soon(w.outgoing.send, response(7, text=content))
            [line] = await w.read_lines(1)
        assert line["result"]["text"] == content


async def test_a_full_pipe_parks_the_writer_not_the_loop() -> None:
    # Nobody reads the reply (far larger than the pipe): the writer must wait
    # for the pipe while the loop still reads and delivers the next request.
    async with wire() as w:
        await w.outgoing.send(response(1, text="y" * BIG))
        await w.send(request(2, name="next") + b"\n")
        item = await w.incoming.receive()
        assert isinstance(item, SessionMessage) and getattr(item.message, "id", None) == 2
        lines: list[dict[str, Any]] = []

        async def read_two() -> None:
            lines.extend(await w.read_lines(2))

        async with anyio.create_task_group() as group:
            group.start_soon(read_two)
            await w.outgoing.send(response(2, text="after"))
        first, second = lines
        assert first["result"]["text"] == "y" * BIG
        assert second == {"jsonrpc": "2.0", "id": 2, "result": {"text": "after"}}


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (
            b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "\\ud800"}}',
            (3, -32602, "not_utf8"),
        ),
        (b"this is not JSON", (None, -32700, "shape")),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', (None, -32600, "shape")),
        (
            b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "caf\xe9"}}',
            (3, -32700, "not_utf8"),
        ),
        (b'{"jsonrpc": "2.0", "id": 3, "method": "ping", "params": "x', (None, -32700, "shape")),
    ],
    ids=["lone-surrogate", "not-json", "float-id", "not-utf8", "cut-short"],
)
async def test_a_refused_line_gets_the_callbacks_reply_and_never_reaches_the_sdk(
    line: bytes, reply: tuple[Any, int, str]
) -> None:
    refused: list[Refusal] = []

    def answer(refusal: Refusal) -> types.JSONRPCMessage:
        refused.append(refusal)
        return _refused(refusal)

    async with wire(answer) as w:
        await w.send(line + b"\n" + request(4, name="ok") + b"\n")
        item = await w.incoming.receive()
        assert isinstance(item, SessionMessage) and getattr(item.message, "id", None) == 4
        [written] = await w.read_lines(1)
    ident, code, fault = reply
    assert written == {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": fault}}
    assert len(refused) == 1


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b" \t\r",
        b'{"jsonrpc": "2.0", "id": 8, "result": {}}',
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": [1]}',
    ],
    ids=["empty", "blank", "response", "notification-by-position"],
)
async def test_a_line_that_wants_no_reply_gets_none(line: bytes) -> None:
    async with wire() as w:
        await w.send(line + b"\n" + request(5, name="ok") + b"\n")
        item = await w.incoming.receive()
        if getattr(item, "message", None) == types.JSONRPCResponse(jsonrpc="2.0", id=8, result={}):
            item = await w.incoming.receive()  # a response goes to the SDK
        assert isinstance(item, SessionMessage) and getattr(item.message, "id", None) == 5
        await w.outgoing.send(response(5))
        assert await w.read_lines(1) == [{"jsonrpc": "2.0", "id": 5, "result": {}}]


@pytest.mark.parametrize("split", [False, True], ids=["one-write", "byte-by-byte-head"])
async def test_a_line_over_the_cap_is_refused_and_the_next_served(split: bool) -> None:
    cap = 64 * 1024
    long = request(6, name="write_file", arguments={"c": "x" * (BIG)})
    async with wire(cap=cap) as w:
        async with anyio.create_task_group() as group:
            if split:  # a client that drips: the cap holds across reads
                for byte in long[:100]:
                    await w.send(bytes([byte]))
                group.start_soon(w.send, long[100:] + b"\n" + request(7, name="ok") + b"\n")
            else:
                group.start_soon(w.send, long + b"\n" + request(7, name="ok") + b"\n")
            item = await w.incoming.receive()
        assert isinstance(item, SessionMessage) and getattr(item.message, "id", None) == 7
        [written] = await w.read_lines(1)
    assert written == {"jsonrpc": "2.0", "id": 6, "error": {"code": -32600, "message": "too_long"}}


async def test_the_end_of_input_delivers_a_last_line_without_newline_then_ends() -> None:
    server_in, to_server = os.pipe()
    from_server, server_out = os.pipe()
    try:
        async with stdio_streams(_refused, cap=CAP, read_fd=server_in, write_fd=server_out) as (
            incoming,
            outgoing,
        ):
            os.write(to_server, request(9, name="last"))
            os.close(to_server)
            item = await incoming.receive()
            assert isinstance(item, SessionMessage) and getattr(item.message, "id", None) == 9
            with pytest.raises(anyio.EndOfStream):
                await incoming.receive()
            await outgoing.aclose()
        assert os.get_blocking(server_in) and os.get_blocking(server_out)
    finally:
        for fd in (server_in, server_out, from_server):
            os.close(fd)


async def test_a_client_that_closed_its_end_ends_the_writer_quietly() -> None:
    async with wire() as w:
        os.close(w.from_server)
        w.from_server = os.open(os.devnull, os.O_RDONLY)  # closed again by wire()
        await w.outgoing.send(response(1, text="nobody reads this"))
        await w.send(request(2, name="still read") + b"\n")
        item = await w.incoming.receive()
        assert isinstance(item, SessionMessage) and getattr(item.message, "id", None) == 2


async def test_regular_files_are_served_through_a_thread() -> None:
    with tempfile.TemporaryFile() as source, tempfile.TemporaryFile() as sink:
        source.write(request(1, name="a") + b"\n" + request(2, name="b") + b"\n")
        source.seek(0)
        async with stdio_streams(
            _refused, cap=CAP, read_fd=source.fileno(), write_fd=sink.fileno()
        ) as (
            incoming,
            outgoing,
        ):
            ids = [getattr(getattr(item, "message", None), "id", None) async for item in incoming]
            assert ids == [1, 2]
            await outgoing.send(response(1, text="done"))
            await outgoing.aclose()
        sink.seek(0)
        assert json.loads(sink.read()) == {"jsonrpc": "2.0", "id": 1, "result": {"text": "done"}}


# What a served process's fd 0 and fd 1 are while it serves -------------------------

_ECHO = """
import os, sys
import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from ledgerfs.engine.stdio import stdio_streams

async def main():
    async with stdio_streams(print, cap=1 << 20) as (incoming, outgoing):
        async for item in incoming:
            print("stray print", flush=True)
            os.write(1, b"stray write\\n")
            inherited = os.read(0, 10)
            result = {"fd0": inherited.decode()}
            reply = types.JSONRPCResponse(jsonrpc="2.0", id=item.message.id, result=result)
            await outgoing.send(SessionMessage(reply))
        await outgoing.aclose()
    print("after", flush=True)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_while_serving_fd0_reads_nothing_and_fd1_goes_to_stderr(backend: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ECHO, backend],
        input=request(1, "ping").decode() + "\n",
        capture_output=True,
        text=True,
        env=server_env(),
        cwd=str(REPO),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    reply, after = done.stdout.splitlines()
    assert json.loads(reply) == {"jsonrpc": "2.0", "id": 1, "result": {"fd0": ""}}
    assert after == "after"  # fd 1 is the wire again once the transport is done
    assert "stray print" in done.stderr and "stray write" in done.stderr


# A real server process ------------------------------------------------------------


def _serving(root: str) -> subprocess.Popen[bytes]:
    """`ledgerfs serve root`, past the handshake."""
    proc = subprocess.Popen(
        [sys.executable, *serve_args(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(),
        cwd=str(REPO),
    )
    assert proc.stdin is not None and proc.stdout is not None
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    proc.stdin.write(request(1, "initialize", **hello) + b"\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    return proc


@pytest.mark.parametrize(
    ("stop", "exit_code"),
    [("end of input", 0), ("SIGINT", 130)],
)
def test_a_server_stops_cleanly(tmp_path: Path, stop: str, exit_code: int) -> None:
    proc = _serving(str(tmp_path))
    assert proc.stdin is not None and proc.stderr is not None
    if stop == "SIGINT":
        proc.send_signal(signal.SIGINT)
    else:
        proc.stdin.close()
    try:
        assert proc.wait(30) == exit_code
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        if not proc.stdin.closed:
            proc.stdin.close()
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
    assert "Traceback" not in stderr, stderr
