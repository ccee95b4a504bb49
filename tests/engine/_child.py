"""Child programs for the crash and process tests, run through one fork server.

The server imports the engine once (and loads both anyio backends), then answers
commands on stdin, one JSON object a line:

* ``{"run": <program>, "args": {...}, "backend": "asyncio"|"trio"}``: fork a child
  that runs the program; the server prints ``P <pid>``.
* ``{"wait": <pid>}``: reap that child; the server prints ``X <pid> <status>``.

Children report on the same stdout, one line per event, each written with a single
``os.write`` (atomic on a pipe), so a SIGKILL right after a report loses nothing:

* ``generations``: ``O <owner>`` once open, then ``C <tx> <generation>`` after each
  batch call returned. Batches rewrite every file (and move a token) forever.
* ``commit_and_die``: ``C <tx> <owner>`` after one batch returned, then SIGKILLs
  itself before any checkpoint or close.
* ``increments``: ``D <commits> <conflicts>`` after `n` read-modify-write increments.
* ``recover``: opens the engine (recovery) and reports ``R <count>`` with how many
  transactions it recovered, then closes; the crash test kills it on the way.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Code, Engine, LedgerError

FILES = 16


def say(line: str) -> None:
    """Report one event, unbuffered, in one write."""
    os.write(1, (line + "\n").encode())


def file_name(i: int) -> str:
    return f"d{i % 4}/f{i:02d}.txt"


def content(generation: int, i: int, filler: int) -> str:
    return f"gen {generation}\nfile {i}\n" + "x" * filler


def token(generation: int) -> str:
    return "tok/even" if generation % 2 == 0 else "tok/odd"


def config(root: str, **more: Any) -> dict[str, Any]:
    return {"roots": [root], "auto_occ": "off", **more}


async def generations(root: str, start: int, seed: int, durability: str, interval: float) -> None:
    """Rewrite all FILES with one generation per batch (and move the token), forever."""
    rng = random.Random(seed)
    cfg = config(root, durability=durability, checkpoint_interval=interval)
    async with Engine.open(cfg) as engine:
        session = await engine.session()
        say(f"O {engine.journal.owner}")
        generation = start
        while True:
            ops: list[dict[str, Any]] = [
                {
                    "op": "write",
                    "path": file_name(i),
                    "content": content(generation, i, rng.choice((0, 100, 5000, 60000))),
                }
                for i in range(FILES)
            ]
            ops.insert(
                rng.randrange(len(ops) + 1),
                {"op": "move", "source": token(generation - 1), "destination": token(generation)},
            )
            result = await session.call("batch", {"operations": ops})
            say(f"C {result.transaction} {generation}")  # type: ignore[attr-defined]
            generation += 1


async def commit_and_die(root: str, operations: list[dict[str, Any]]) -> None:
    """Commit one batch, report it, and die before any checkpoint or close."""
    cfg = config(root, durability="full", checkpoint_interval=3600.0)
    async with Engine.open(cfg) as engine:
        session = await engine.session()
        result = await session.call("batch", {"operations": operations})
        say(f"C {result.transaction} {engine.journal.owner}")  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGKILL)


async def increments(root: str, path: str, n: int, tasks: int) -> None:
    """`n` increments of the counter in `path`, split over `tasks` tasks, with OCC retry."""
    commits = conflicts = 0
    async with Engine.open(config(root)) as engine:

        async def worker(count: int) -> None:
            nonlocal commits, conflicts
            session = await engine.session()
            done = 0
            while done < count:
                read = await session.call("read_file", {"path": path})
                value = int(read.content)  # type: ignore[attr-defined]
                try:
                    await session.call(
                        "write_file",
                        {
                            "path": path,
                            "content": str(value + 1),
                            "expected_hash": read.content_hash,  # type: ignore[attr-defined]
                        },
                    )
                except LedgerError as exc:
                    if exc.code is not Code.OCC_MISMATCH:
                        raise
                    conflicts += 1
                    continue
                done += 1
                commits += 1

        async with anyio.create_task_group() as group:
            for k in range(tasks):
                group.start_soon(worker, n // tasks + (k < n % tasks))
    say(f"D {commits} {conflicts}")


async def recover(root: str) -> None:
    """Open the engine (recovering what a dead process left) and close it."""
    async with Engine.open(config(root, durability="full")) as engine:
        say(f"R {len(engine.recovered)}")


PROGRAMS = {
    "recover": recover,
    "generations": generations,
    "commit_and_die": commit_and_die,
    "increments": increments,
}


async def _noop() -> None:
    """Nothing: running it once loads a backend's modules before any fork."""


def _child(command: dict[str, Any]) -> None:
    program = PROGRAMS[command["run"]]
    code = 0
    try:
        anyio.run(lambda: program(**command["args"]), backend=command.get("backend", "asyncio"))
    except BaseException:
        say("E " + json.dumps(traceback.format_exc()))
        code = 1
    os._exit(code)


def serve() -> None:
    """Answer command lines until stdin closes."""
    for backend in ("asyncio", "trio"):
        anyio.run(_noop, backend=backend)
    for line in sys.stdin:
        command = json.loads(line)
        if "wait" in command:
            pid = int(command["wait"])
            _, status = os.waitpid(pid, 0)
            say(f"X {pid} {status}")
            continue
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(command)
        say(f"P {pid}")


class ForkServer:
    """The test side: a running server and its line protocol."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.engine._child"],
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        #: Report lines of each child, in order.
        self.lines: dict[int, list[list[str]]] = {}
        self._pending: list[list[str]] = []

    def _send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def _read_until(self, tag: str) -> list[str]:
        """Collect report lines until a server line tagged `tag`; return it."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            fields = line.rstrip("\n").split(" ", 1 if line.startswith("E ") else 2)
            if fields[0] == tag:
                return fields
            self._pending.append(fields)
        raise AssertionError("fork server exited")

    def start(self, program: str, backend: str = "asyncio", **args: Any) -> int:
        """Fork a child running `program(**args)`; return its pid."""
        self._send({"run": program, "args": args, "backend": backend})
        pid = int(self._read_until("P")[1])
        self.lines[pid] = []
        return pid

    def wait(self, pid: int) -> tuple[int, list[list[str]]]:
        """Reap child `pid`; return its wait status and every line it reported.

        Only one child may report at a time unless each line names its child,
        so callers running several children read them all after reaping all.
        """
        self._send({"wait": pid})
        status = int(self._read_until("X")[2])
        lines, self._pending = self._pending, []
        for fields in lines:
            if fields[0] == "E":
                raise AssertionError(f"child failed: {json.loads(fields[1])}")
        return status, lines

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


if __name__ == "__main__":
    serve()
