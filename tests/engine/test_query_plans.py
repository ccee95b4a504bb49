"""Every journal query a tool or a command runs is served by an index.

The statements are not listed by hand: every journal connection is opened with a
trace callback, the tools (through the engine, as the server calls them) and the
`ledgerfs` commands (in this process) run on a small real journal, and each
statement they issued is asked for its plan with ``EXPLAIN QUERY PLAN``. A query
added later is traced and checked the same way.

No plan may scan a table that grows with the history (``SCAN transactions``,
``SCAN paths``, ...); a scan of a covering index counts as a scan too. The
exceptions are named in `ALLOWED` and `BOUNDED_SCANS`, each with why its cost is bounded or is the
work itself. `verify` is not driven: checking every image is what it is for.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgerfs.engine import Engine
from ledgerfs.engine.cli import main
from ledgerfs.journal import _schema

#: Tables whose size is the history's (or the sessions' and checkpoints').
GROWING = ("transactions", "paths", "sessions", "checkpoints", "blobs", "blob_keys")

#: Statements allowed a full pass, by a regular expression on their text, and why.
ALLOWED: dict[str, str] = {
    # gc's sweep: which images the kept transactions still name, and the blobs no
    # one names. Reading the whole history is the work gc is asked to do.
    r"^SELECT mutations FROM transactions$": "gc reads every kept record to mark the images",
    r"gc_used": "gc drops the blobs no kept record names",
}

#: Plan lines allowed to read a whole index, and why that index stays small.
BOUNDED_SCANS: dict[str, str] = {
    # A partial index of the unfinished rows only (pending, or committed and not
    # checkpointed yet): a few, however long the journal grows.
    "SCAN transactions USING INDEX idx_transactions_open": "recovery's unfinished rows",
}

_SKIPPED = ("--", "PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "CREATE", "DROP")


class Tracer:
    """Every statement the journal's connections ran, as SQLite expanded it."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, statement: str) -> None:
        with self._lock:
            self.statements.append(statement)

    def temp_tables(self) -> list[str]:
        """The statements that made the temporary tables some queries use."""
        return [s for s in self.statements if s.upper().startswith("CREATE TEMP TABLE")]

    def queries(self) -> list[str]:
        """The distinct statements that read or write rows, in order first seen."""
        seen: dict[str, None] = {}
        for text in self.statements:
            text = " ".join(text.split())
            if text and not text.upper().startswith(_SKIPPED):
                seen.setdefault(text, None)
        return list(seen)


@pytest.fixture
def tracer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tracer]:
    found = Tracer()

    class Traced(sqlite3.Connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.set_trace_callback(found)

    monkeypatch.setattr(_schema, "connection_factory", Traced)
    yield found


def full_scans(db: sqlite3.Connection, statement: str) -> list[str]:
    """The plan lines of `statement` that scan a growing table or its index."""
    if any(re.search(pattern, statement) for pattern in ALLOWED):
        return []
    # SQLite expands a bound infinity as the bare word Inf, which it cannot parse.
    statement = re.sub(r"(?<![\w'])Inf(?![\w'])", "1e999", statement)
    plan = db.execute(f"EXPLAIN QUERY PLAN {statement}").fetchall()
    lines = [str(row[3]) for row in plan]
    pattern = re.compile(rf"^SCAN ({'|'.join(GROWING)})\b")
    return [line for line in lines if pattern.match(line) and line not in BOUNDED_SCANS]


LINES = "".join(f"line {i}\n" for i in range(1, 21))


async def drive_tools(config: dict[str, Any], tracer: Tracer) -> dict[str, int]:
    """Make a small history through the tools, then ask every question of it."""
    async with Engine.open(config):
        pass
    tracer.statements.clear()  # creating the file migrates it, once in its life
    async with Engine.open(config) as engine:
        agent = await engine.session("agent", client_name="plan", client_version="1")
        other = await engine.session("other")
        made: dict[str, int] = {}

        async def tx(session: Any, tool: str, **arguments: Any) -> int:
            result = await session.call(tool, arguments)
            assert result.transaction is not None
            return int(result.transaction)

        made["write"] = await tx(agent, "write_file", path="a.txt", content=LINES)
        await tx(other, "write_file", path="b.txt", content="b\n")
        checkpoint = await agent.call("checkpoint", {"label": "turn 1"})
        made["checkpoint"] = int(checkpoint.checkpoint)
        made["edit"] = await tx(
            agent, "edit_file", path="a.txt", edits=[{"old_text": "line 3\n", "new_text": "3\n"}]
        )
        await tx(agent, "create_directory", path="d")
        await tx(agent, "move_file", source="b.txt", destination="d/b.txt")
        made["undo"] = await tx(other, "undo", transaction=made["edit"])
        await tx(agent, "write_file", path="c.txt", content="c\n")
        await agent.call("read_file", {"path": "a.txt"})
        await agent.call("write_file", {"path": "c.txt", "content": "c2\n", "dry_run": True})
        for arguments in (
            {},
            {"path": "a.txt"},
            {"path": "d/b.txt", "limit": 1},
            {"transaction": made["edit"], "diff": True},
            {"session": "agent"},
            {"session": "agent", "limit": 1, "before": made["undo"]},
            {"checkpoint": made["checkpoint"]},
            {"sessions": True},
            {"sessions": True, "session": "agent"},
        ):
            await agent.call("history", arguments)
        await agent.call("undo", {"transaction": made["write"], "dry_run": True})
        await agent.call("rewind", {"checkpoint": made["checkpoint"], "dry_run": True})
        await agent.call("rewind", {"after_transaction": made["write"], "dry_run": True})
        await agent.call("rewind", {"session": "agent", "dry_run": True})
        await tx(agent, "rewind", checkpoint=made["checkpoint"])
        await engine.journal.checkpoints(limit=5)
        await engine.journal.checkpoints(session="agent", limit=5)
        return made


def run_command(*args: str) -> None:
    try:
        main(list(args))
    except SystemExit as exc:
        assert not exc.code, args


def test_every_tool_and_command_query_uses_an_index(
    tracer: Tracer,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(workspace)
    config = {"roots": [str(workspace)], "durability": "normal", "auto_occ": "warn"}
    made = anyio.run(drive_tools, config, tracer)
    journal = workspace / ".ledgerfs" / "journal.db"
    where = ("--root", str(workspace))
    for command in (
        ("log",),
        ("log", "a.txt"),
        ("log", "--session", "agent"),
        ("log", "--since", "1h"),
        ("log", "--until", "2999-01-01"),
        ("sessions",),
        ("show", str(made["edit"])),
        ("undo", str(made["write"])),
        ("rewind", "--after", str(made["write"]), "--all-sessions", "--dry-run"),
        ("gc", "--keep-last", "3", "--dry-run"),
        ("gc", "--keep-days", "1", "--keep-last", "2", "--yes"),
        ("recover",),
    ):
        run_command(*command, *where, "--json")
    capsys.readouterr()
    queries = tracer.queries()
    assert any("undo_of" in q for q in queries)  # the trace did see the journal's queries
    scans: dict[str, list[str]] = {}
    with sqlite3.connect(f"{journal.as_uri()}?mode=ro", uri=True) as db:
        for statement in tracer.temp_tables():
            db.execute(statement)
        for statement in queries:
            found = full_scans(db, statement)
            if found:
                scans[statement] = found
    assert not scans, "\n".join(f"{lines}: {q}" for q, lines in scans.items())


def test_the_allowed_scans_are_named_for_queries_that_exist(
    tracer: Tracer,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each exception still matches a query the code runs (a stale one hides nothing)."""
    config = {"roots": [str(workspace)], "durability": "normal", "auto_occ": "warn"}
    anyio.run(drive_tools, config, tracer)
    monkeypatch.chdir(workspace)
    run_command("gc", "--keep-last", "1", "--yes", "--root", str(workspace), "--json")
    capsys.readouterr()
    queries = tracer.queries()
    for pattern in ALLOWED:
        assert any(re.search(pattern, q) for q in queries), pattern
