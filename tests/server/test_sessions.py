"""Sessions and checkpoints through real `ledgerfs serve` processes and the SDK's client:
two servers on one tree, each its own session; the sessions listed with their
clients; checkpoints that outlive their server; bad arguments change nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

MODES = ["auto", "legacy"]


@pytest.fixture
def root(workspace: Path) -> Path:
    return workspace


def client(root: Path, name: str, version: str, mode: str, *flags: str) -> Client:
    info = types.Implementation(name=name, version=version)
    return Client(stdio_params(root, *flags), mode=mode, client_info=info)


def journal_rows(root: Path, sql: str) -> list[Any]:
    with sqlite3.connect(root / ".ledgerfs" / "journal.db") as db:
        return db.execute(sql).fetchall()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_two_servers_on_one_tree_each_have_their_session(root: Path, mode: str) -> None:
    async with (
        client(root, "agent-a", "1.0", mode) as a,
        client(root, "agent-b", "2.0", mode) as b,
    ):
        first = ok(await a.call_tool("write_file", {"path": "a.txt", "content": "a\n"}))
        second = ok(await b.call_tool("write_file", {"path": "b.txt", "content": "b\n"}))
        again = ok(await a.call_tool("create_directory", {"path": "d"}))
        arguments = {"path": "c.txt", "content": "c\n", "dry_run": True}
        preview = ok(await b.call_tool("write_file", arguments))
        assert first["session"] == again["session"] != second["session"] == preview["session"]
        # A checkpoint writes the commit marks it covers: the other server reads
        # them committed at once (without one, within milliseconds).
        ok(await a.call_tool("checkpoint", {}))
        [seen] = ok(await b.call_tool("history", {"transaction": again["transaction"]}))["entries"]
        assert (seen["state"], seen["session"]) == ("committed", first["session"])
        listed = ok(await b.call_tool("history", {"sessions": True}))
        assert listed["entries"] == []
        shapes = {
            s["id"]: (s["client_name"], s["client_version"], s["transactions"], s["files_changed"])
            for s in listed["sessions"]
        }
        assert shapes == {
            first["session"]: ("agent-a", "1.0", 2, 2),
            second["session"]: ("agent-b", "2.0", 1, 1),
        }
        mine = ok(await b.call_tool("history", {"session": first["session"]}))["entries"]
        assert [e["transaction"] for e in mine] == [again["transaction"], first["transaction"]]
        assert {e["session"] for e in mine} == {first["session"]}
        theirs = ok(await a.call_tool("history", {"session": second["session"]}))["entries"]
        assert [e["transaction"] for e in theirs] == [second["transaction"]]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_checkpoint_outlives_its_server(root: Path, mode: str) -> None:
    async with client(root, "agent", "1", mode) as a:
        nothing = ok(await a.call_tool("checkpoint", {}))
        before = ok(await a.call_tool("write_file", {"path": "a.txt", "content": "1\n"}))
        marked = ok(await a.call_tool("checkpoint", {"label": "turn 2"}))
        after = ok(await a.call_tool("write_file", {"path": "b.txt", "content": "2\n"}))
    session = before["session"]
    assert nothing == {"checkpoint": 1, "label": None, "session": session, "transaction": None}
    assert marked == {
        "checkpoint": 2,
        "label": "turn 2",
        "session": session,
        "transaction": before["transaction"],
    }
    async with client(root, "other", "1", mode) as b:
        since = ok(await b.call_tool("history", {"checkpoint": marked["checkpoint"]}))["entries"]
        assert [e["transaction"] for e in since] == [after["transaction"]]
        whole = ok(await b.call_tool("history", {"checkpoint": nothing["checkpoint"]}))["entries"]
        assert [e["transaction"] for e in whole] == [after["transaction"], before["transaction"]]
        # The earlier process's session is found by its id.
        [old] = ok(await b.call_tool("history", {"sessions": True, "session": session}))["sessions"]
        assert (old["id"], old["client_name"], old["transactions"]) == (session, "agent", 2)
        mine = ok(await b.call_tool("history", {"session": session, "checkpoint": 2}))
        assert [e["transaction"] for e in mine["entries"]] == [after["transaction"]]


@pytest.mark.anyio
async def test_a_checkpoint_is_served_read_only_and_charges_no_budget(root: Path) -> None:
    async with Client(stdio_params(root, "--readonly")) as reader:
        made = ok(await reader.call_tool("checkpoint", {"label": "look only"}))
        assert made["transaction"] is None
        refused = await reader.call_tool("write_file", {"path": "a.txt", "content": "x"})
        envelope(refused, "READONLY")
    async with Client(stdio_params(root, "--mutation-budget", "1")) as writer:
        for _ in range(3):
            ok(await writer.call_tool("checkpoint", {}))
        ok(await writer.call_tool("write_file", {"path": "a.txt", "content": "x"}))
        envelope(
            await writer.call_tool("write_file", {"path": "b.txt", "content": "y"}),
            "BUDGET_EXCEEDED",
        )
    assert journal_rows(root, "SELECT count(*) FROM checkpoints") == [(4,)]


BAD_CALLS = [
    ("history", {"session": "no-such-session"}, "NOT_FOUND"),
    ("history", {"checkpoint": 999}, "NOT_FOUND"),
    ("history", {"sessions": True, "session": "no-such-session"}, "NOT_FOUND"),
    ("history", {"session": 5}, "VALIDATION"),
    ("history", {"session": ""}, "VALIDATION"),
    ("history", {"checkpoint": "1"}, "VALIDATION"),
    ("history", {"sessions": "yes"}, "VALIDATION"),
    ("history", {"sessions": True, "path": "a.txt"}, "VALIDATION"),
    ("history", {"sessions": True, "checkpoint": 1}, "VALIDATION"),
    ("checkpoint", {"label": 5}, "VALIDATION"),
    ("checkpoint", {"label": "x" * 201}, "VALIDATION"),
    ("checkpoint", {"label": "x", "session": "s"}, "VALIDATION"),
]


@pytest.mark.anyio
async def test_bad_arguments_get_their_code_and_change_nothing(root: Path) -> None:
    async with Client(stdio_params(root)) as c:
        ok(await c.call_tool("write_file", {"path": "a.txt", "content": "a\n"}))
        ok(await c.call_tool("checkpoint", {"label": "only"}))
        for tool, arguments, code in BAD_CALLS:
            body = envelope(await c.call_tool(tool, arguments), code)
            if code == "NOT_FOUND":
                assert body["details"] and body["suggestion"], body
    assert journal_rows(root, "SELECT label FROM checkpoints") == [("only",)]
    assert journal_rows(root, "SELECT count(*) FROM transactions") == [(1,)]
    assert sorted(p.name for p in root.iterdir()) == [".ledgerfs", "a.txt"]
