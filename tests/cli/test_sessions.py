"""`ledgerfs sessions` against a real journal, run as a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledgerfs.engine import Engine

from ._support import ledgerfs, tree


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def workspace(tmp_path: Path) -> Path:
    """Two sessions, as two processes one after the other leave them: an agent named
    by its client (two transactions, three paths) and a host's session (one write)."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    async with Engine.open({"roots": [str(root)]}) as engine:
        agent = await engine.session("agent", client_name="claude-code", client_version="2.1.0")
        await agent.call("write_file", {"path": "a.txt", "content": "one\n"})
        await agent.call("move_file", {"source": "a.txt", "destination": "b.txt"})
    async with Engine.open({"roots": [str(root)]}) as engine:
        host = await engine.session("host")
        await host.call("write_file", {"path": "c.txt", "content": "see\n"})
    return root


@pytest.mark.anyio
async def test_sessions_lists_every_process_s_sessions_newest_first(workspace: Path) -> None:
    done = ledgerfs("sessions", "--json", cwd=workspace, check=True)
    listed = json.loads(done.stdout)
    assert listed["truncated"] is False
    shapes = [
        (s["id"], s["client_name"], s["client_version"], s["transactions"], s["files_changed"])
        for s in listed["sessions"]
    ]
    # The move names its source and its destination.
    assert shapes == [("host", None, None, 1, 1), ("agent", "claude-code", "2.1.0", 2, 3)]
    for s in listed["sessions"]:
        assert s["started"] <= s["last_activity"]


@pytest.mark.anyio
async def test_sessions_as_a_table_and_limited(workspace: Path) -> None:
    done = ledgerfs("sessions", cwd=workspace, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["SESSION", "CLIENT", "STARTED", "LAST", "ACTIVITY", "TX", "FILES"]
    assert lines[1].split()[0] == "host" and lines[1].split()[-2:] == ["1", "1"]
    assert "claude-code 2.1.0" in lines[2] and lines[2].split()[-2:] == ["2", "3"]
    limited = ledgerfs("sessions", "--limit", "1", "--json", cwd=workspace, check=True)
    assert [s["id"] for s in json.loads(limited.stdout)["sessions"]] == ["host"]
    assert json.loads(limited.stdout)["truncated"] is True
    assert "older sessions left out" in ledgerfs("sessions", "-n", "1", cwd=workspace).stdout


@pytest.mark.parametrize(
    ("args", "code"),
    [(["--limit", "0"], 2), (["--limit", "x"], 2), (["--limit", "1001"], 2)],
)
def test_bad_arguments_change_nothing(tmp_path: Path, args: list[str], code: int) -> None:
    (tmp_path / "ws").mkdir()
    done = ledgerfs("sessions", *args, cwd=tmp_path / "ws")
    assert done.returncode == code
    assert tree(tmp_path) == {"ws"}


def test_no_journal_is_the_envelope_and_creates_nothing(tmp_path: Path) -> None:
    done = ledgerfs("sessions", "--json", "--root", tmp_path)
    assert done.returncode != 0
    assert json.loads(done.stderr)["error"]["code"] == "NOT_FOUND"
    assert tree(tmp_path) == set()
