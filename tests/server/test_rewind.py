"""Rewind through real stdio servers: two agents and a person on one tree.

Two `ledgerfs serve` processes on one workspace are two sessions sharing one
journal; the test writes files behind both, as a person's editor does. A rewind
of one agent's turn puts back its lines only: the other agent's and the
person's edits to the same files stay. Edits that overlap the agent's lines
refuse the rewind: the envelope names each file and who changed it (the other
server's session, or "outside"), and no file changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

pytestmark = pytest.mark.anyio

LINES = "".join(f"line {i}\n" for i in range(1, 13))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = (tmp_path / "ws").resolve()
    folder.mkdir()
    (folder / "f.txt").write_text(LINES)
    (folder / "g.txt").write_text(LINES)
    return folder


@pytest.fixture
async def agents(root: Path) -> AsyncIterator[tuple[Client, Client]]:
    async with Client(stdio_params(root)) as one, Client(stdio_params(root)) as two:
        yield one, two


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    return ok(await client.call_tool(tool, arguments))


async def edit(client: Client, path: str, old: str, new: str) -> dict[str, Any]:
    edits = [{"old_text": old, "new_text": new}]
    return await call(client, "edit_file", path=path, edits=edits)


def person_replaces(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))


async def test_rewind_keeps_the_other_agent_and_the_person(
    agents: tuple[Client, Client], root: Path
) -> None:
    agent, other = agents
    turn = await call(agent, "checkpoint", label="turn 1")
    mine = await edit(agent, "f.txt", "line 2\n", "agent 2\n")
    await edit(agent, "g.txt", "line 4\n", "agent 4\n")
    await edit(other, "f.txt", "line 8\n", "other 8\n")
    person_replaces(root, "f.txt", "line 5\n", "person 5\n")
    person_replaces(root, "g.txt", "line 10\n", "person 10\n")

    result = await call(agent, "rewind", checkpoint=turn["checkpoint"])

    assert result["session"] == mine["session"] == turn["session"]
    assert len(result["rewound"]) == 2 and result["skipped"] == []
    assert (root / "f.txt").read_text() == LINES.replace("line 8\n", "other 8\n").replace(
        "line 5\n", "person 5\n"
    )
    assert (root / "g.txt").read_text() == LINES.replace("line 10\n", "person 10\n")
    # Undone, the rewind gives the agent's lines back and keeps the rest.
    await call(other, "undo", transaction=result["transaction"])
    assert "agent 2\n" in (root / "f.txt").read_text()
    assert "other 8\n" in (root / "f.txt").read_text()


async def test_overlapping_edits_refuse_the_rewind_naming_who(
    agents: tuple[Client, Client], root: Path
) -> None:
    agent, other = agents
    mine = await edit(agent, "f.txt", "line 2\n", "agent 2\n")
    await edit(agent, "g.txt", "line 4\n", "agent 4\n")
    theirs = await edit(other, "f.txt", "line 3\n", "other 3\n")  # next to the agent's line
    person_replaces(root, "g.txt", "agent 4\n", "person 4\n")  # over the agent's line
    person_replaces(root, "g.txt", "line 11\n", "person 11\n")  # far from it
    before = {name: (root / name).read_bytes() for name in ("f.txt", "g.txt")}

    refused = await agent.call_tool("rewind", {"session": mine["session"]})

    body = envelope(refused, "OCC_MISMATCH")
    conflicts = {c["label"]: c for c in body["details"]["conflicts"]}
    assert set(conflicts) == {"f.txt", "g.txt"}
    assert conflicts["f.txt"]["by"] == theirs["session"] != mine["session"]
    assert conflicts["g.txt"]["by"] == "outside"
    [hunk] = conflicts["g.txt"]["hunks"]
    assert (hunk["start"], hunk["rewound"], hunk["now"]) == (4, "agent 4\n", "person 4\n")
    assert {name: (root / name).read_bytes() for name in before} == before

    # Skipping the conflicts rewinds nothing else here: both files are left as they are.
    skipped = await call(agent, "rewind", session=mine["session"], on_conflict="skip")
    assert {s["path"] for s in skipped["skipped"]} == {str(root / "f.txt"), str(root / "g.txt")}
    assert skipped["transaction"] is None
    assert {name: (root / name).read_bytes() for name in before} == before
