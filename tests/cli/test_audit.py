"""`ledgerfs verify` over the audit chain, incremental and --full, and `ledgerfs log
--format jsonl` with its check (`ledgerfs verify --export`), as a user runs them.

The journal is made by real tool calls through the engine; tampering goes at the
SQLite file directly.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgerfs.engine import Engine

from ._support import ledgerfs

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    """Where the verified point is kept: the test's own folder."""
    folder = tmp_path / "state"
    folder.mkdir()
    return {"LEDGERFS_STATE_DIR": str(folder)}


async def _calls(root: Path, session: str, count: int, start: int = 0) -> list[int]:
    """`count` writes, an edit and an undo of that edit, through the engine's tools."""
    done = []
    async with Engine.open({"roots": [str(root)]}) as engine:
        s = await engine.session(session)
        for n in range(start, start + count):
            r = await s.call("write_file", {"path": f"f{n}.txt", "content": f"v{n}\n"})
            done.append(r.transaction)
        edit = await s.call(
            "edit_file",
            {"path": f"f{start}.txt", "edits": [{"old_text": f"v{start}", "new_text": "w"}]},
        )
        undo = await s.call("undo", {"transaction": edit.transaction})
        done += [edit.transaction, undo.transaction]
    return done


@pytest.fixture
async def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    await _calls(root, "alice", 4)
    return root


def _journal(root: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(root / ".ledgerfs" / "journal.db"), isolation_level=None)
    db.execute("PRAGMA foreign_keys = OFF")
    return db


def _verify(root: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, object]]:
    done = ledgerfs("verify", "--root", root, "--json", *args, env=env)
    return done.returncode, json.loads(done.stdout)


def _alter(db: sqlite3.Connection) -> str:
    db.execute("UPDATE transactions SET summary = 'write_file other.txt' WHERE id = 2")
    return "transaction 2 (chain position 2) does not match its link"


def _delete(db: sqlite3.Connection) -> str:
    db.execute("DELETE FROM paths WHERE tx = 3")
    db.execute("DELETE FROM transactions WHERE id = 3")
    return "transaction 3 (chain position 3) was deleted"


def _delete_with_link(db: sqlite3.Connection) -> str:
    _delete(db)
    db.execute("DELETE FROM chain WHERE tx = 3")
    return "chain positions 3 to 3 are missing"


def _reorder(db: sqlite3.Connection) -> str:
    db.execute("UPDATE chain SET seq = -1 WHERE seq = 2")
    db.execute("UPDATE chain SET seq = 2 WHERE seq = 3")
    db.execute("UPDATE chain SET seq = 3 WHERE seq = -1")
    return "(chain position 2) does not match its link"


TAMPERING: dict[str, Callable[[sqlite3.Connection], str]] = {
    "altered": _alter,
    "deleted": _delete,
    "deleted with its link": _delete_with_link,
    "reordered": _reorder,
}


@pytest.mark.parametrize("tamper", list(TAMPERING.values()), ids=list(TAMPERING))
async def test_verify_reports_a_record_tampered_with(
    workspace: Path, state: dict[str, str], tamper: Callable[[sqlite3.Connection], str]
) -> None:
    assert _verify(workspace, state)[0] == 0
    said = tamper(_journal(workspace))
    code, report = _verify(workspace, state, "--full")
    assert code == 2
    assert report["journal_ok"] is False
    assert any(said in p for p in report["problems"]), report["problems"]  # type: ignore[attr-defined]
    text = ledgerfs("verify", "--root", workspace, "--full", env=state)
    assert text.returncode == 2 and "journal: DAMAGED" in text.stdout and said in text.stdout


async def test_verify_checks_what_changed_since_the_last_clean_one(
    workspace: Path, state: dict[str, str]
) -> None:
    code, first = _verify(workspace, state)
    assert code == 0 and first["incremental"] is False and first["links_checked"] == 6
    head = first["chain_head"]
    code, again = _verify(workspace, state)
    assert code == 0 and again["incremental"] is True
    assert again["links_checked"] == 0 and again["since_position"] == 6
    assert again["chain_head"] == head
    # Every journaled file is still checked: the expectations are kept with the point.
    assert again["files_checked"] == first["files_checked"] == 4
    await _calls(workspace, "bob", 2, start=10)
    code, later = _verify(workspace, state)
    assert code == 0 and later["since_position"] == 6 and later["links_checked"] == 4
    assert later["files_checked"] == 6
    assert _verify(workspace, state, "--full")[1]["links_checked"] == 10


async def test_incremental_verify_still_finds_files_changed_by_hand(
    workspace: Path, state: dict[str, str]
) -> None:
    assert _verify(workspace, state)[0] == 0
    (workspace / "f2.txt").write_text("by hand\n")
    code, report = _verify(workspace, state)
    assert code == 2 and report["incremental"] is True
    assert [d["path"] for d in report["drifted"]] == [str(workspace / "f2.txt")]  # type: ignore[attr-defined]


async def test_a_rewritten_chain_is_caught_by_the_point_incremental_verify_kept(
    workspace: Path, state: dict[str, str]
) -> None:
    assert _verify(workspace, state)[0] == 0
    _journal(workspace).execute("UPDATE chain SET link = zeroblob(32) WHERE seq = 6")
    code, report = _verify(workspace, state)
    assert code == 2
    assert any("not the one verified before" in p for p in report["problems"])  # type: ignore[attr-defined]


def _export(root: Path, env: dict[str, str], *args: str) -> list[str]:
    done = ledgerfs("log", "--root", root, "--format", "jsonl", *args, env=env, check=True)
    return done.stdout.splitlines()


async def test_the_jsonl_export_holds_every_transaction_and_checks_alone(
    workspace: Path, state: dict[str, str], tmp_path: Path
) -> None:
    lines = _export(workspace, state)
    records = [json.loads(line) for line in lines]
    assert [r["transaction"] for r in records] == [1, 2, 3, 4, 5, 6]
    first = records[0]
    assert first["session"] == "alice" and first["tool"] == "write_file"
    assert first["paths"] == [str(workspace / "f0.txt")]
    assert first["state"] == "committed" and first["mutations"][0]["after_hash"].startswith(
        "blake3:"
    )
    assert records[-1]["undo_of"] == 5
    export = tmp_path / "audit.jsonl"
    export.write_text("\n".join(lines) + "\n")
    checked = ledgerfs("verify", "--export", export, "--json", env=state)
    assert checked.returncode == 0, checked.stdout
    found = json.loads(checked.stdout)
    assert found["links_checked"] == 6
    assert found["head"] == _verify(workspace, state)[1]["chain_head"]
    # One line altered: the check names it.
    records[3]["summary"] = "write_file nothing.txt"
    export.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    tampered = ledgerfs("verify", "--export", export, env=state)
    assert tampered.returncode == 2
    assert "line 4: transaction 4 does not match its link" in tampered.stdout


async def test_log_since_and_until_bound_the_export_and_the_listing(
    workspace: Path, state: dict[str, str]
) -> None:
    assert _export(workspace, state, "--since", "2h") != []
    assert _export(workspace, state, "--until", "2h") == []
    assert _export(workspace, state, "--since", "2999-01-01") == []
    listed = ledgerfs("log", "--root", workspace, "--json", "--until", "1d", env=state)
    assert json.loads(listed.stdout)["entries"] == []
