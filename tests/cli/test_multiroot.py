"""A workspace of several roots: one journal, found from inside any of its roots.

`ledgerfs serve A B` keeps one journal, in A (a transaction that touches both roots
is one commit), and gives B a pointer to it. The commands then run from inside
either root, or a folder below one, and act on the whole workspace: the journal
knows its roots, so an undo run from A of a change in B needs no `--root`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.server._support import ok, stdio_params

from ._support import ledgerfs


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def roots(tmp_path: Path) -> tuple[Path, Path]:
    """Roots A and B, served together: a write in each, then a move from A to B."""
    a, b = (tmp_path / "A").resolve(), (tmp_path / "B").resolve()
    a.mkdir()
    (b / "sub").mkdir(parents=True)
    async with Client(stdio_params(a, b)) as agent:
        ok(await agent.call_tool("write_file", {"path": f"{a}/a.txt", "content": "a\n"}))
        ok(await agent.call_tool("write_file", {"path": f"{b}/sub/b.txt", "content": "b\n"}))
        move = {"source": f"{a}/a.txt", "destination": f"{b}/a.txt"}
        ok(await agent.call_tool("move_file", move))
    return a, b


def run(cwd: Path, *args: str) -> dict[str, Any]:
    done = ledgerfs(*args, "--json", cwd=cwd, check=True)
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def log_ids(cwd: Path, *args: str) -> list[int]:
    return [e["transaction"] for e in run(cwd, "log", *args)["entries"]]


FROM = ["A", "B", "B/sub"]


@pytest.mark.anyio
@pytest.mark.parametrize("where", FROM)
async def test_log_show_and_undo_from_any_root(roots: tuple[Path, Path], where: str) -> None:
    a, b = roots
    cwd = a.parent / where
    assert log_ids(cwd) == [3, 2, 1]
    assert log_ids(cwd, str(b / "sub" / "b.txt")) == [2]
    assert log_ids(cwd, str(a / "a.txt")) == [3, 1]
    shown = run(cwd, "show", "2")
    assert shown["diff"] == "--- /dev/null\n+++ b/sub/b.txt\n@@ -0,0 +1 @@\n+b\n"
    # The move touched both roots; its undo runs from here without naming them.
    run(cwd, "undo", "3")
    assert (a / "a.txt").read_text() == "a\n" and not (b / "a.txt").exists()
    run(cwd, "undo", "2")
    assert not (b / "sub" / "b.txt").exists()
    assert log_ids(cwd) == [5, 4, 3, 2, 1]


@pytest.mark.anyio
async def test_the_other_root_points_at_the_journal_until_served_alone(
    roots: tuple[Path, Path],
) -> None:
    a, b = roots
    pointer = b / ".ledgerfs" / "pointer.json"
    assert json.loads(pointer.read_text()) == {"journal": "../../A/.ledgerfs/journal.db"}
    assert not (a / ".ledgerfs" / "pointer.json").exists()
    assert not (b / ".ledgerfs" / "journal.db").exists()
    # Served alone, B keeps its own journal, and its commands read that one.
    async with Client(stdio_params(b)) as agent:
        ok(await agent.call_tool("write_file", {"path": "own.txt", "content": "own\n"}))
    assert not pointer.exists()
    assert log_ids(b) == [1]
    assert log_ids(a) == [3, 2, 1]


def test_a_pointer_to_a_journal_that_is_gone_says_so(tmp_path: Path) -> None:
    root = tmp_path.resolve() / "B"
    (root / ".ledgerfs").mkdir(parents=True)
    (root / ".ledgerfs" / "pointer.json").write_text('{"journal": "../../A/.ledgerfs/journal.db"}')
    for cwd in (root, tmp_path):
        args = ("log", "--json") if cwd == root else ("log", "--root", str(root), "--json")
        done = ledgerfs(*args, cwd=cwd)
        assert done.returncode == 1, done
        error = json.loads(done.stderr)["error"]
        assert error["code"] == "NOT_FOUND"
        assert error["details"] == {
            "pointer": str(root / ".ledgerfs" / "pointer.json"),
            "journal": str(tmp_path.resolve() / "A" / ".ledgerfs" / "journal.db"),
        }
    assert sorted(p.name for p in (root / ".ledgerfs").iterdir()) == ["pointer.json"]
