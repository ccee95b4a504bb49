"""A workspace moved or copied elsewhere keeps its history and its undo.

The history is made by an agent through a real `ledgerfs serve` (the SDK's stdio
client); the folder is then moved (`shutil.move`) or copied (`shutil.copytree`, as a
backup restored in another folder) and everything is asked from the new place:
`ledgerfs log`, `show`, `undo` and `rewind`, and a new server's `history` and
`undo`. A copy's undo changes the copy only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client

from tests.server._support import ok, stdio_params

from ._support import ledgerfs

Relocate = Callable[[Path, Path], object]

RELOCATIONS: list[tuple[str, Relocate]] = [
    ("move", shutil.move),
    ("copy", lambda old, new: shutil.copytree(old, new, symlinks=True)),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def make_history(root: Path) -> None:
    """Four transactions by an agent: write a.txt, edit it, write sub/b.txt, move it."""
    async with Client(stdio_params(root)) as agent:
        ok(await agent.call_tool("write_file", {"path": "a.txt", "content": "one\ntwo\n"}))
        edit = {"old_text": "two", "new_text": "deux"}
        ok(await agent.call_tool("edit_file", {"path": "a.txt", "edits": [edit]}))
        ok(await agent.call_tool("write_file", {"path": "sub/b.txt", "content": "bee\n"}))
        ok(await agent.call_tool("move_file", {"source": "sub/b.txt", "destination": "c.txt"}))


def log_ids(cwd: Path, *options: str) -> list[int]:
    done = ledgerfs("log", *options, "--json", cwd=cwd, check=True)
    return [e["transaction"] for e in json.loads(done.stdout)["entries"]]


@pytest.mark.anyio
@pytest.mark.parametrize(("how", "relocate"), RELOCATIONS, ids=[r[0] for r in RELOCATIONS])
async def test_history_show_undo_and_rewind_work_from_the_new_place(
    tmp_path: Path, how: str, relocate: Relocate
) -> None:
    old = (tmp_path / "first" / "ws").resolve()
    (old / "sub").mkdir(parents=True)
    await make_history(old)
    new = (tmp_path / "elsewhere" / "ws").resolve()
    new.parent.mkdir()
    relocate(old, new)

    assert log_ids(new) == [4, 3, 2, 1]
    assert log_ids(new / "sub", "a.txt") == []  # a relative path starts at the folder
    assert log_ids(new, "a.txt") == [2, 1]
    assert log_ids(new, "c.txt") == [4]
    noted = ledgerfs("log", cwd=new, check=True)
    assert f"this journal was at {old}/.ledgerfs/journal.db" in noted.stderr
    shown = json.loads(ledgerfs("show", "2", "--json", cwd=new, check=True).stdout)
    assert shown["diff"].startswith("--- a/a.txt\n+++ b/a.txt\n")

    undone = json.loads(ledgerfs("undo", "4", "--json", cwd=new, check=True).stdout)
    assert undone["files"][0]["path"] == str(new / "c.txt")
    assert (new / "sub" / "b.txt").read_text() == "bee\n" and not (new / "c.txt").exists()
    rewound = ledgerfs("rewind", "--after", "1", "--json", cwd=new, check=True)
    assert json.loads(rewound.stdout)["transaction"] == 6
    assert (new / "a.txt").read_text() == "one\ntwo\n"
    assert not (new / "sub" / "b.txt").exists() and not (new / "c.txt").exists()
    # The new place is recorded now: the journal is at home here.
    assert "this journal was at" not in ledgerfs("log", cwd=new, check=True).stderr

    async with Client(stdio_params(new)) as agent:
        listed = ok(await agent.call_tool("history", {"path": "a.txt"}))
        assert [e["transaction"] for e in listed["entries"]] == [6, 2, 1]
        ok(await agent.call_tool("undo", {"transaction": 6}))
    assert (new / "a.txt").read_text() == "one\ndeux\n"
    assert (new / "sub" / "b.txt").read_text() == "bee\n"
    # The journal and every file it knows check out from here, its audit chain too.
    assert json.loads(ledgerfs("verify", "--json", cwd=new, check=True).stdout)["ok"]
    exported = ledgerfs("log", "--format", "jsonl", "a.txt", cwd=new, check=True).stdout
    assert [json.loads(line)["transaction"] for line in exported.splitlines()] == [1, 2, 6, 7]

    if how == "copy":  # the original is untouched, and keeps its own history
        assert (old / "a.txt").read_text() == "one\ndeux\n" and (old / "c.txt").exists()
        assert log_ids(old) == [4, 3, 2, 1]
        assert "this journal was at" not in ledgerfs("log", cwd=old, check=True).stderr


@pytest.mark.anyio
async def test_the_server_logs_that_the_journal_moved_and_records_the_new_place(
    tmp_path: Path,
) -> None:
    old = (tmp_path / "first" / "ws").resolve()
    (old / "sub").mkdir(parents=True)
    await make_history(old)
    new = (tmp_path / "restored").resolve()
    shutil.copytree(old, new)
    log = tmp_path / "server.log"
    for _ in range(2):
        async with Client(stdio_params(new, "--log-file", log)) as agent:
            listed = ok(await agent.call_tool("history", {"path": "c.txt"}))
            assert [e["transaction"] for e in listed["entries"]] == [4]
    warned = [line for line in log.read_text().splitlines() if "was at" in line]
    # Once: the first server recorded the new place.
    assert len(warned) == 1 and "WARNING" in warned[0]
    assert f"{new}/.ledgerfs/journal.db was at {old}/.ledgerfs/journal.db" in warned[0]
