"""Stale edits merged, through real `ledgerfs serve` processes and the SDK's client.

Two clients (two server processes on one root and one journal): the first reads
a file, the second changes another part of it, the first sends its edit with the
hash it read. Refused by default, as OCC_MISMATCH always was; merged with
`on_stale: "merge"` (or `--on-stale merge`); refused with each conflict shown and
nothing written when both changed the same lines.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

pytestmark = pytest.mark.anyio

BASE = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(8))


@pytest.fixture
def root(workspace: Path) -> Path:
    (workspace / "m.py").write_text(BASE)
    return workspace


def edit(old: str, new: str, **extra: Any) -> dict[str, Any]:
    return {"path": "m.py", "edits": [{"old_text": old, "new_text": new}], **extra}


MINE = ("    return 1\n", "    return 100\n")
THEIRS = ("    return 6\n", "    return 600\n")


async def read_then_changed(first: Client, second: Client, change: tuple[str, str]) -> str:
    """`first` reads m.py; `second` edits it (`change`). The hash `first` read."""
    read = ok(await first.call_tool("read_file", {"path": "m.py"}))
    ok(await second.call_tool("edit_file", edit(*change)))
    return str(read["content_hash"])


async def clients(stack: AsyncExitStack, root: Path, *flags: str) -> tuple[Client, Client]:
    first = await stack.enter_async_context(Client(stdio_params(root, *flags)))
    second = await stack.enter_async_context(Client(stdio_params(root, *flags)))
    return first, second


async def test_a_stale_edit_of_another_part_merges(root: Path) -> None:
    async with AsyncExitStack() as stack:
        first, second = await clients(stack, root)
        base = await read_then_changed(first, second, THEIRS)
        current = ok(await second.call_tool("read_file", {"path": "m.py"}))["content_hash"]
        result = ok(
            await first.call_tool("edit_file", edit(*MINE, expected_hash=base, on_stale="merge"))
        )
    both = BASE.replace(*MINE).replace(*THEIRS)
    assert (root / "m.py").read_text() == both
    assert result["merged"] == [
        {"path": str(root / "m.py"), "base_hash": base, "current_hash": current}
    ]
    assert "-    return 1\n+    return 100\n" in result["diff"]
    assert "600" not in result["diff"]


async def test_a_stale_edit_is_refused_by_default(root: Path) -> None:
    async with AsyncExitStack() as stack:
        first, second = await clients(stack, root)
        base = await read_then_changed(first, second, THEIRS)
        body = envelope(
            await first.call_tool("edit_file", edit(*MINE, expected_hash=base)), "OCC_MISMATCH"
        )
    assert body["expected_hash"] == base
    assert body["details"] == {}
    assert (root / "m.py").read_text() == BASE.replace(*THEIRS)


async def test_the_server_flag_merges_what_gives_no_on_stale(root: Path) -> None:
    async with AsyncExitStack() as stack:
        first, second = await clients(stack, root, "--on-stale", "merge")
        base = await read_then_changed(first, second, THEIRS)
        ok(await first.call_tool("edit_file", edit(*MINE, expected_hash=base)))
    assert (root / "m.py").read_text() == BASE.replace(*MINE).replace(*THEIRS)


async def test_an_edit_of_the_same_lines_shows_the_conflict_and_writes_nothing(
    root: Path,
) -> None:
    async with AsyncExitStack() as stack:
        first, second = await clients(stack, root)
        base = await read_then_changed(first, second, ("    return 1\n", "    return -1\n"))
        body = envelope(
            await first.call_tool("edit_file", edit(*MINE, expected_hash=base, on_stale="merge")),
            "OCC_MISMATCH",
        )
        history = ok(await first.call_tool("history", {"path": "m.py"}))
    assert body["details"]["merge"] == "conflicts"
    assert body["details"]["conflicts"] == [
        {
            "line": 5,
            "end_line": 5,
            "base_line": 5,
            "base_end_line": 5,
            "base": "    return 1\n",
            "yours": "    return 100\n",
            "current": "    return -1\n",
        }
    ]
    assert body["recovery"] == "read_and_rebase"
    assert (root / "m.py").read_text() == BASE.replace("    return 1\n", "    return -1\n")
    assert len(history["entries"]) == 1  # the other client's edit alone


async def test_a_file_changed_outside_merges_from_what_the_client_read(root: Path) -> None:
    """No mutation recorded the version read: the server kept what its read returned."""
    async with Client(stdio_params(root)) as client:
        base = ok(await client.call_tool("read_file", {"path": "m.py"}))["content_hash"]
        (root / "m.py").write_text(BASE.replace(*THEIRS))
        ok(await client.call_tool("edit_file", edit(*MINE, expected_hash=base, on_stale="merge")))
    assert (root / "m.py").read_text() == BASE.replace(*MINE).replace(*THEIRS)
