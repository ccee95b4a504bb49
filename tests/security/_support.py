"""A raw JSON-RPC client for a real `ledgerfs serve` over stdio, and shared checks.

Raw, not the SDK client: the attacks send what an SDK would refuse to encode (lone
surrogates, huge integers, junk), and every test checks that each request gets
exactly one reply within a timeout and that stderr carries no traceback.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.server._support import REPO, serve_args, server_env

REPLY_TIMEOUT = 30.0
ENVELOPE_KEYS = {"code", "message", "path", "details", "suggestion", "retryable", "recovery"}


class Server:
    """One `python -m ledgerfs serve ARGS...` process spoken to line by line."""

    def __init__(self, *args: str | Path, env: dict[str, str] | None = None) -> None:
        # Kept for the life of the server (stderr fills no pipe), closed by close().
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, *serve_args(*args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=str(REPO),
            env={**server_env(), **(env or {})},
        )
        self._next = 0
        self._buffer = b""
        reply = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "security-tests", "version": "0"},
            },
        )
        assert "result" in reply, reply
        self.send_raw(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def send_raw(self, line: str) -> None:
        # surrogatepass: the line may carry what a hostile client sends.
        self.send_bytes(line.encode("utf-8", "surrogatepass"))

    def send_bytes(self, line: bytes) -> None:
        """Send `line` as it is (any bytes), then a newline."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def read_message(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        """The next message the server writes; fails the test after `timeout`."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"no reply within {timeout}s; stderr: {self.stderr()[-2000:]}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise AssertionError(f"the server closed stdout; stderr: {self.stderr()[-2000:]}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def replies_to(self, line: bytes, expected: int) -> list[dict[str, Any]]:
        """The replies `line` gets: all the server writes until it has answered a ping sent
        after it and written at least `expected` replies.

        The server reads its input in order and answers a refused line at once, so
        a reply too many shows up here or in the next call (as an extra reply).
        """
        self._next += 1
        probe = f"probe-{self._next}"
        self.send_bytes(line)
        self.send_raw(json.dumps({"jsonrpc": "2.0", "id": probe, "method": "ping"}))
        replies: list[dict[str, Any]] = []
        answered = False
        while not answered or len(replies) < expected:
            message = self.read_message()
            if message.get("id") == probe and "method" not in message:
                assert message == {"jsonrpc": "2.0", "id": probe, "result": {}}, message
                answered = True
            elif "method" not in message:  # a notification from the server is no reply
                replies.append(message)
        return replies

    def request(self, method: str, params: Any, *, raw_params: str | None = None) -> dict[str, Any]:
        """Send one request; return its one reply (notifications in between skipped)."""
        self._next += 1
        ident = self._next
        if raw_params is None:
            line = json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        else:
            line = (
                f'{{"jsonrpc": "2.0", "id": {ident}, "method": "{method}", "params": {raw_params}}}'
            )
        self.send_raw(line)
        while True:
            message = self.read_message()
            if message.get("id") == ident:
                return message
            assert "id" not in message or message.get("method"), message

    def call(self, tool: str, arguments: Any) -> dict[str, Any]:
        """tools/call: the result object (`isError`, `content`, `structuredContent`)."""
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def close(self) -> str:
        """Stop the server; return its stderr."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        text = self.stderr()
        self._stderr.close()
        return text

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        stderr = self.close()
        assert "Traceback" not in stderr, stderr


def ok(result: dict[str, Any]) -> dict[str, Any]:
    assert not result.get("isError"), result
    structured: dict[str, Any] = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == structured
    return structured


def error(result: dict[str, Any], *codes: str) -> dict[str, Any]:
    """The envelope body of a failed call, its code one of `codes` (any, when none)."""
    assert result.get("isError") is True, result
    [block] = result["content"]
    parsed = json.loads(block["text"])
    assert list(parsed) == ["error"], parsed
    body: dict[str, Any] = parsed["error"]
    assert set(body) >= ENVELOPE_KEYS, body
    assert not codes or body["code"] in codes, body
    assert "Internal server error" not in block["text"]
    return body
