"""`ledgerfs log/show/undo/verify/gc/recover` on a journal made through the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledgerfs.engine import Engine

from ._support import ledgerfs


@pytest.fixture
async def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    async with Engine.open({"roots": [str(root)]}) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "a.txt", "content": "one\ntwo\n"})
        await session.call(
            "edit_file", {"path": "a.txt", "edits": [{"old_text": "two", "new_text": "deux"}]}
        )
        await session.call("write_file", {"path": "b.txt", "content": "bee\n"})
    return root


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_log_show_undo_verify_gc(workspace: Path) -> None:
    root = workspace
    log = ledgerfs("log", "--root", root, check=True).stdout
    assert log.splitlines()[0].split()[:3] == ["TX", "WHEN", "STATE"]
    assert "edit_file a.txt" in log and "write_file b.txt" in log
    only_a = json.loads(ledgerfs("log", "a.txt", "--root", root, "--json", check=True).stdout)
    assert [e["transaction"] for e in only_a["entries"]] == [2, 1]

    show = ledgerfs("show", "2", "--root", root, check=True).stdout
    assert "-two\n+deux\n" in show and "--- a/a.txt" in show

    undo = ledgerfs("undo", "2", "--root", root, check=True).stdout
    assert "undid transaction 2" in undo
    assert (root / "a.txt").read_text() == "one\ntwo\n"

    verify = ledgerfs("verify", "--root", root)
    assert verify.returncode == 0, verify.stdout
    assert "verify:" in verify.stderr  # progress lines
    (root / "b.txt").write_text("edited by hand\n")
    drift = ledgerfs("verify", "--root", root)
    assert drift.returncode != 0
    assert "b.txt" in drift.stdout and "changed outside ledgerfs" in drift.stdout

    gc = ledgerfs("gc", "--keep-last", "1", "--root", root, "--json", check=True)
    assert json.loads(gc.stdout)["transactions_dropped"] >= 1
    assert "gc:" in gc.stderr

    recover = ledgerfs("recover", "--root", root, check=True).stdout
    assert "nothing to recover" in recover


@pytest.mark.anyio
async def test_errors_print_message_or_envelope(workspace: Path) -> None:
    text = ledgerfs("show", "99", "--root", workspace)
    assert text.returncode != 0
    assert "NOT_FOUND" in text.stderr and "suggestion:" in text.stderr
    as_json = ledgerfs("undo", "99", "--root", workspace, "--json")
    assert as_json.returncode != 0
    assert json.loads(as_json.stderr)["error"]["code"] == "NOT_FOUND"
    missing = ledgerfs("log", "--root", workspace / "nope")
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr
