"""A short workload through the real `ledgerfs serve`, recorded by strace.

Each session is one server process under `strace` (see `_strace`), spoken to with
raw JSON-RPC lines: single edits, concurrent edits (sent together, so the server
commits them as groups), batches, patches, undos, moves and deletes, with a pause
long enough for a periodic checkpoint, then a clean close (the closing
checkpoint) or a SIGKILL. What each session leaves is a `Session`: its calls,
its replies by id and the transaction each mutation's reply names.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.server._support import REPO, serve_args, server_env

from . import _strace

REPLY_TIMEOUT = 60.0
LINES = 10


@dataclass
class Session:
    """One traced server process and what it answered."""

    calls: list[_strace.Call]
    replies: dict[int, dict[str, Any]]  # request id: reply
    reply_calls: dict[int, _strace.Call]  # request id: the write(2) that carried it
    transactions: dict[int, int]  # request id: the transaction its mutation made
    paths: dict[int, set[str]]  # transaction: the paths it changed
    stderr: str


@dataclass
class Workspace:
    """Two roots (one journal, under the first) and what the files hold."""

    roots: list[Path]
    durability: str
    text: dict[str, list[str]] = field(default_factory=dict)  # absolute path: lines

    @property
    def journal(self) -> Path:
        return self.roots[0] / ".ledgerfs" / "journal.db"

    @property
    def wal(self) -> str:
        return str(self.journal) + "-wal"

    def args(self) -> list[str]:
        return [*map(str, self.roots), "--durability", self.durability]


class Traced:
    """One `ledgerfs serve` under strace, spoken to line by line."""

    def __init__(
        self, ws: Workspace, trace: Path, *, traced: bool = True, extra: tuple[str, ...] = ()
    ) -> None:
        self.ws = ws
        self.trace = trace
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        argv = [sys.executable, *serve_args(*ws.args())]
        self.proc = subprocess.Popen(
            _strace.command(trace, argv, extra=extra) if traced else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=str(REPO),
            env={**server_env(), **state_dir()},
        )
        self._next = 0
        self._buffer = b""
        self.replies: dict[int, dict[str, Any]] = {}
        self.transactions: dict[int, int] = {}
        self.paths: dict[int, set[str]] = {}
        [reply] = self.send(
            [
                (
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "syscall-tests", "version": "0"},
                    },
                )
            ]
        )
        assert "result" in reply, reply
        self._line({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _line(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def send(self, requests: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Send every request at once, then wait for every reply; in order."""
        ids = []
        for method, params in requests:
            self._next += 1
            ids.append(self._next)
            self._line({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        while not all(i in self.replies for i in ids):
            message = self._read()
            if "id" in message and "method" not in message:
                self.replies[message["id"]] = message
        return [self.replies[i] for i in ids]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + REPLY_TIMEOUT
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise AssertionError(f"no reply in {REPLY_TIMEOUT}s: {self.stderr()[-2000:]}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise AssertionError(f"the server closed stdout: {self.stderr()[-2000:]}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def mutate(self, calls: list[tuple[str, dict[str, Any]]]) -> list[int]:
        """Run tool calls together; each must succeed; their transactions, in order."""
        first = self._next + 1
        replies = self.send([("tools/call", {"name": n, "arguments": a}) for n, a in calls])
        txs = []
        for ident, reply in enumerate(replies, first):
            result = reply["result"]
            assert not result.get("isError"), result
            body = result["structuredContent"]
            tx = body["transaction"]
            self.transactions[ident] = tx
            self.paths[tx] = {
                p for f in body["files"] for p in (f["path"], f["destination"]) if p is not None
            }
            txs.append(tx)
        return txs

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def close(self) -> Session:
        """End stdin (a clean shutdown: the closing checkpoint) and read the trace."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        return self._session()

    def kill(self) -> Session:
        """SIGKILL the server itself (strace then ends with it) and read the trace."""
        server = _child(self.proc.pid)
        os.kill(server, signal.SIGKILL)
        self.proc.wait(60)
        return self._session()

    def _session(self) -> Session:
        stderr = self.stderr()
        self._stderr.close()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        calls = _strace.read(self.trace) if self.trace.exists() else []
        return Session(
            calls, self.replies, _reply_calls(calls), self.transactions, self.paths, stderr
        )


def state_dir() -> dict[str, str]:
    """The journal marks' folder the test run chose (tests/conftest.py)."""
    state = os.environ.get("LEDGERFS_STATE_DIR")
    return {"LEDGERFS_STATE_DIR": state} if state else {}


def _child(pid: int) -> int:
    """The process strace (`pid`) started: the server."""
    for _ in range(100):
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            found = children.read().split()
        if found:
            return int(found[0])
        time.sleep(0.05)
    raise AssertionError("strace started no server")


def _reply_calls(calls: list[_strace.Call]) -> dict[int, _strace.Call]:
    """Each reply's id: the write(2) to the client's pipe that began its line."""
    found: dict[int, _strace.Call] = {}
    pending: dict[str, tuple[bytes, _strace.Call]] = {}
    for call in calls:
        # A write whose return strace never saw (the server was killed while it
        # stood at the call's exit) still wrote: the client read the reply.
        wrote = call.name == "write" and (call.ok or call.result is None)
        path = (call.fd_path(0) or "") if wrote else ""
        if not path.startswith("pipe:"):
            continue
        assert not (call.cut(1) and b"jsonrpc" in call.string(1)), "raise STRING_LIMIT"
        buffered, started = pending.get(path, (b"", call))
        buffered += call.string(1)[: call.result]
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and "id" in message and "method" not in message:
                found.setdefault(message["id"], started)
            started = call
        if buffered:
            pending[path] = (buffered, started)
        else:
            pending.pop(path, None)
    return found


# The workload.


def make_files(ws: Workspace, count: int) -> dict[str, list[str]]:
    """`count` files of LINES lines, half under each root: their text by path."""
    files = {}
    for i in range(count):
        root = ws.roots[i % len(ws.roots)]
        path = str(root / f"f{i:02}.txt")
        files[path] = [f"head f{i:02} v0"] + [f"line {n} of f{i:02}" for n in range(1, LINES)]
    return files


def _content(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def write(ws: Workspace, path: str, lines: list[str]) -> tuple[str, dict[str, Any]]:
    ws.text[path] = list(lines)
    return ("write_file", {"path": path, "content": _content(lines)})


def edit(ws: Workspace, path: str) -> tuple[str, dict[str, Any]]:
    """Bump the version on the file's first line."""
    lines = ws.text[path]
    head, _, version = lines[0].rpartition(" v")
    new = f"{head} v{int(version) + 1}"
    ws.text[path] = [new, *lines[1:]]
    return ("edit_file", {"path": path, "edits": [{"old_text": lines[0], "new_text": new}]})


def patch(ws: Workspace, path: str, root: Path) -> tuple[str, dict[str, Any]]:
    """A unified diff that changes the file's fifth line."""
    lines = ws.text[path]
    new = lines[4] + " patched"
    name = os.path.relpath(path, root)
    text = (
        f"--- a/{name}\n+++ b/{name}\n@@ -4,3 +4,3 @@\n"
        f" {lines[3]}\n-{lines[4]}\n+{new}\n {lines[5]}\n"
    )
    ws.text[path] = [*lines[:4], new, *lines[5:]]
    return ("apply_patch", {"patch": text})


def run_mixed(server: Traced, ws: Workspace, *, rounds: int, pause: float) -> None:
    """Single edits, concurrent edits, batches, patches, undos, moves and deletes."""
    files = make_files(ws, 16)
    for path, lines in files.items():
        server.mutate([write(ws, path, lines)])
    paths = sorted(files)
    root = ws.roots[0]
    for r in range(rounds):
        for path in paths[:4]:  # single edits, one after the other
            server.mutate([edit(ws, path)])
        server.mutate([edit(ws, path) for path in paths])  # together: group commits
        # An edit and its undo (the file goes back to what it held).
        before = list(ws.text[paths[0]])
        [tx] = server.mutate([edit(ws, paths[0])])
        server.mutate([("undo", {"transaction": tx})])
        ws.text[paths[0]] = before
        server.mutate([patch(ws, paths[2], root)])  # under the first root
        made = str(root / f"made{r}.txt")
        folder = str(root / f"dir{r}")
        server.mutate(
            [
                (
                    "batch",
                    {
                        "operations": [
                            {"op": "write", "path": made, "content": f"made {r}\n"},
                            {"op": "edit", **edit(ws, paths[4])[1]},
                            {"op": "mkdir", "path": folder},
                            {"op": "move", "source": made, "destination": folder + "/moved.txt"},
                        ]
                    },
                )
            ]
        )
        server.mutate([("delete_file", {"path": folder + "/moved.txt"})])
        if r == rounds // 2:
            time.sleep(pause)  # a periodic checkpoint (every second) falls in here
