"""`ledgerfs rewind` as people run it: a preview, the conflicts, a confirmation on a terminal.

The workspace's journal holds an agent's session and another's, both changing
f.txt (on lines apart) and the agent also a.txt; commands run as subprocesses,
piped or on a pseudo-terminal that answers the confirmation.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from ledgerfs.engine import Engine
from tests.server._support import server_env

from ._support import ledgerfs

LINES = "".join(f"line {i}\n" for i in range(1, 11))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "f.txt").write_text(LINES)
    anyio.run(_sessions, root)
    return root


async def _sessions(root: Path) -> None:
    async with Engine.open({"roots": [str(root)], "auto_occ": "off"}) as engine:
        agent, other = await engine.session("agent"), await engine.session("other")
        await agent.call("write_file", {"path": "a.txt", "content": "agent's\n"})  # 1
        edit = {"old_text": "line 2\n", "new_text": "agent 2\n"}
        await agent.call("edit_file", {"path": "f.txt", "edits": [edit]})  # 2
        edit = {"old_text": "line 9\n", "new_text": "other 9\n"}
        await other.call("edit_file", {"path": "f.txt", "edits": [edit]})  # 3
        await agent.call("write_file", {"path": "b.txt", "content": "agent's b\n"})  # 4


def agent_gone(root: Path) -> bool:
    return not (root / "a.txt").exists() and (root / "f.txt").read_text() == LINES.replace(
        "line 9\n", "other 9\n"
    )


def test_rewind_shows_the_change_then_makes_it(workspace: Path) -> None:
    done = ledgerfs("rewind", "--session", "agent", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert "rewind would revert 3 transactions (4, 2, 1)" in done.stdout
    assert "-agent 2\n+line 2\n" in done.stdout
    assert "rewound 3 transactions as transaction 5" in done.stdout
    assert agent_gone(workspace)
    ledgerfs("undo", "5", cwd=workspace, check=True)
    assert (workspace / "a.txt").read_text() == "agent's\n"


def test_dry_run_and_json(workspace: Path) -> None:
    before = {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()}
    dry = ledgerfs("rewind", "--session", "agent", "--dry-run", cwd=workspace, check=True)
    assert "-agent 2\n+line 2\n" in dry.stdout and "rewound" not in dry.stdout
    assert {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()} == before
    done = ledgerfs("rewind", "--session", "agent", "--json", cwd=workspace, check=True)
    result = json.loads(done.stdout)
    assert (result["rewound"], result["session"]) == ([4, 2, 1], "cli")
    assert agent_gone(workspace)


def test_after_a_transaction_rewinds_its_session_or_everyone(workspace: Path) -> None:
    ledgerfs("rewind", "--after", "2", "--json", cwd=workspace, check=True)
    assert not (workspace / "b.txt").exists() and "other 9\n" in (workspace / "f.txt").read_text()
    ledgerfs("rewind", "--after", "2", "--all-sessions", "--json", cwd=workspace, check=True)
    assert "other 9\n" not in (workspace / "f.txt").read_text()
    assert "agent 2\n" in (workspace / "f.txt").read_text()


def test_a_conflict_is_shown_and_nothing_changes(workspace: Path) -> None:
    text = (workspace / "f.txt").read_text().replace("agent 2\n", "person 2\n")
    (workspace / "f.txt").write_text(text)
    done = ledgerfs("rewind", "--session", "agent", cwd=workspace)
    assert done.returncode == 1
    assert "conflict f.txt" in done.stdout and "(by outside)" in done.stdout
    assert "rewound   agent 2" in done.stdout and "now       person 2" in done.stdout
    assert "OCC_MISMATCH" in done.stderr and "--skip-conflicts" in done.stderr
    assert (workspace / "a.txt").exists() and (workspace / "f.txt").read_text() == text
    skipped = ledgerfs("rewind", "--session", "agent", "--skip-conflicts", cwd=workspace)
    assert skipped.returncode == 0, skipped.stderr
    assert f"left as it is: {workspace / 'f.txt'}" in skipped.stdout
    assert not (workspace / "a.txt").exists() and (workspace / "f.txt").read_text() == text


def test_path_limits_the_rewind(workspace: Path) -> None:
    ledgerfs("rewind", "--session", "agent", "--path", "b.txt", "--json", cwd=workspace, check=True)
    assert not (workspace / "b.txt").exists() and (workspace / "a.txt").exists()


@pytest.mark.parametrize("arguments", [[], ["--session", "agent", "--after", "1"]])
def test_not_exactly_one_scope_is_refused(workspace: Path, arguments: list[str]) -> None:
    done = ledgerfs("rewind", *arguments, "--json", cwd=workspace)
    assert done.returncode == 1
    assert json.loads(done.stderr)["error"]["code"] == "VALIDATION"


def answered(answer: bytes, *args: str, cwd: Path) -> tuple[int, str]:
    """Run `python -m ledgerfs ARGS` on a terminal; answer its question with `answer`."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgerfs", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**server_env(), "TERM": "xterm-256color"},
    )
    os.close(slave)
    screen = b""
    asked = False
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed its end
                break
            if not chunk:
                break
            screen += chunk
            if not asked and b"[y/N]" in screen:
                os.write(master, answer)
                asked = True
    finally:
        os.close(master)
    return proc.wait(timeout=120), screen.decode(errors="replace")


@pytest.mark.parametrize(("answer", "code"), [(b"n\n", 1), (b"y\n", 0)])
def test_on_a_terminal_it_asks_first(workspace: Path, answer: bytes, code: int) -> None:
    status, screen = answered(answer, "rewind", "--session", "agent", cwd=workspace)
    assert status == code, screen
    assert "Rewind these 3 transactions? [y/N]" in screen
    assert "\x1b[31m" in screen and "\x1b[32m" in screen  # the diff in colour
    assert agent_gone(workspace) is (code == 0)
    if code:
        assert "nothing changed" in screen
