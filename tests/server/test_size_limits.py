"""max_file_size guards what agents write, not what undo and rewind put back,
and every refusal names the limit that applied, through real stdio servers.

A first server, started with a larger limit, makes files bigger than a second
server's limit (a limit lowered since, as a restarted server may have it). The
second server undoes and rewinds those changes whole; what it refuses (an agent
writing or reading past its limit) names its limit, above the size a file is
read inline at (64 KiB), which once leaked into the message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

pytestmark = pytest.mark.anyio

LARGER = 200_000
LIMIT = 100_000
LINE = "x" * 99 + "\n"
END = "end\n"
SMALL = LINE * 800 + END  # 80,004 bytes: under both limits
GROWN = LINE * 1500 + END  # 150,004 bytes: under the first server's limit only


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    return ok(await client.call_tool(tool, arguments))


async def made_under_larger_limit(root: Path) -> dict[str, Any]:
    """Under the larger limit: a file written, then grown past the smaller limit;
    another written past it; returns their transactions and the session."""
    async with Client(stdio_params(root, "--max-file-size", LARGER)) as first:
        written = await call(first, "write_file", path="a.txt", content=SMALL)
        mark = await call(first, "checkpoint", label="before growing")
        edits = [{"old_text": END, "new_text": LINE * 700 + END}]
        grown = await call(first, "edit_file", path="a.txt", edits=edits)
        big = await call(first, "write_file", path="b.txt", content=GROWN)
    return {
        "written": written["transaction"],
        "checkpoint": mark["checkpoint"],
        "grown": grown["transaction"],
        "big": big["transaction"],
        "session": grown["session"],
    }


Action = Callable[[Client, Path, dict[str, Any]], Awaitable[Any]]


async def undo_the_growth(client: Client, root: Path, made: dict[str, Any]) -> None:
    await call(client, "undo", transaction=made["grown"])
    assert (root / "a.txt").read_text() == SMALL


async def undo_the_big_write(client: Client, root: Path, made: dict[str, Any]) -> None:
    await call(client, "undo", transaction=made["big"])
    assert not (root / "b.txt").exists()


async def undo_the_undo(client: Client, root: Path, made: dict[str, Any]) -> None:
    undo = await call(client, "undo", transaction=made["grown"])
    await call(client, "undo", transaction=undo["transaction"])  # the big image back
    assert (root / "a.txt").read_text() == GROWN


async def rewind_the_checkpoint(client: Client, root: Path, made: dict[str, Any]) -> None:
    await call(client, "rewind", checkpoint=made["checkpoint"], sessions="all")
    assert (root / "a.txt").read_text() == SMALL
    assert not (root / "b.txt").exists()


async def rewind_the_session(client: Client, root: Path, made: dict[str, Any]) -> None:
    await call(client, "rewind", session=made["session"])
    assert not (root / "a.txt").exists()
    assert not (root / "b.txt").exists()


@pytest.mark.parametrize(
    "action",
    [undo_the_growth, undo_the_big_write, undo_the_undo, rewind_the_checkpoint, rewind_the_session],
)
async def test_undo_and_rewind_restore_past_the_limit(workspace: Path, action: Action) -> None:
    made = await made_under_larger_limit(workspace)
    async with Client(stdio_params(workspace, "--max-file-size", LIMIT)) as second:
        await action(second, workspace, made)


def person_grows(root: Path) -> None:
    """A file bigger than every image the journal holds of it."""
    (root / "a.txt").write_text(GROWN + GROWN)


async def undo_what_a_person_grew(client: Client, made: dict[str, Any]) -> Any:
    return await client.call_tool("undo", {"transaction": made["grown"]})


async def edit_over_the_limit(client: Client, made: dict[str, Any]) -> Any:
    edits = [{"old_text": "x\n", "new_text": "y\n"}]
    return await client.call_tool("edit_file", {"path": "b.txt", "edits": edits})


async def write_over_the_limit(client: Client, made: dict[str, Any]) -> Any:
    return await client.call_tool("write_file", {"path": "c.txt", "content": GROWN})


async def read_over_the_limit(client: Client, made: dict[str, Any]) -> Any:
    return await client.call_tool("read_file", {"path": "b.txt"})


async def batch_edit_over_the_limit(client: Client, made: dict[str, Any]) -> Any:
    edits = [{"old_text": "x\n", "new_text": "y\n"}]
    operations = [{"op": "edit", "path": "b.txt", "edits": edits}]
    return await client.call_tool("batch", {"operations": operations})


@pytest.mark.parametrize(
    ("attempt", "code", "limit"),
    [
        (undo_what_a_person_grew, "OCC_MISMATCH", None),
        (edit_over_the_limit, "VALIDATION", LIMIT),
        (write_over_the_limit, "VALIDATION", LIMIT),
        (read_over_the_limit, "VALIDATION", LIMIT),
        (batch_edit_over_the_limit, "VALIDATION", LIMIT),
    ],
)
async def test_refusals_name_the_limit_that_applied(
    workspace: Path,
    attempt: Callable[[Client, dict[str, Any]], Awaitable[Any]],
    code: str,
    limit: int | None,
) -> None:
    made = await made_under_larger_limit(workspace)
    if attempt is undo_what_a_person_grew:
        person_grows(workspace)
    before = {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()}
    async with Client(stdio_params(workspace, "--max-file-size", LIMIT)) as second:
        body = envelope(await attempt(second, made), code)
    if limit is not None:
        assert body["details"]["reason"] == "file_too_large"
        assert body["details"]["limit"] == limit
        assert f"{limit} bytes" in body["message"]
    assert {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()} == before
