"""No tool reaches the journal, wherever --journal puts it.

The journal's database, its sidecars and its folder are refused (FILE_POLICY_DENIED)
by resolved path and by identity (a hard link to the database is the database),
to every tool, through the engine and the real stdio server. After every attack
the journal still records the next change.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine, LedgerError

from ._support import Server, error, ok

# Where the journal lives, relative to the test folder: (id, --journal, names the
# attacks use for the database and its folder, relative to the root).
LAYOUTS = [
    pytest.param("root/state/j.db", "state/j.db", "state", id="folder-inside-root"),
    pytest.param("root/j.db", "j.db", None, id="file-in-root"),
    pytest.param(None, ".ledgerfs/journal.db", ".ledgerfs", id="default"),
    pytest.param("root/link/j.db", "state/j.db", "state", id="through-a-symlink"),
    pytest.param("outside/j.db", "hard.db", None, id="hard-link-into-root"),
]


def layout(tmp_path: Path, journal: str | None) -> tuple[Path, list[str]]:
    root = tmp_path / "root"
    (root / "state").mkdir(parents=True)
    (root / "link").symlink_to(root / "state")
    (tmp_path / "outside").mkdir()
    (root / "a.txt").write_text("a\n")
    args = [] if journal is None else ["--journal", str(tmp_path / journal)]
    return root, args


def attacks(db: str, folder: str | None) -> list[tuple[str, dict[str, Any]]]:
    """Every tool aimed at the journal's files and folder."""
    found: list[tuple[str, dict[str, Any]]] = []
    # A hard link is the database itself; its name has no sidecars.
    names = [db] if db == "hard.db" else [db, db + "-wal", db + "-shm"]
    for name in names:
        found += [
            ("read_file", {"path": name}),
            ("get_file_info", {"path": name}),
            ("write_file", {"path": name, "content": "x"}),
            ("write_file", {"path": name, "content": "x", "dry_run": True}),
            ("edit_file", {"path": name, "edits": [{"old_text": "SQLite", "new_text": "x"}]}),
            ("delete_file", {"path": name}),
            ("move_file", {"source": name, "destination": "moved.db"}),
            ("move_file", {"source": "a.txt", "destination": name}),
            ("batch", {"operations": [{"op": "delete", "path": name}]}),
        ]
    found.append(
        (
            "apply_patch",
            {"patch": f"--- a/{db}\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"},
        )
    )
    if folder is not None:
        found += [
            ("list_directory", {"path": folder}),
            ("write_file", {"path": f"{folder}/new.txt", "content": "x"}),
            ("create_directory", {"path": f"{folder}/sub"}),
            ("move_file", {"source": folder, "destination": "elsewhere"}),
            ("delete_file", {"path": folder}),
            ("read_file", {"path": f"{folder}/owners"}),
            ("list_directory", {"path": f"{folder}/owners"}),
        ]
    return found


def prepare(root: Path, tmp_path: Path, db: str, journal: str | None) -> None:
    if db == "hard.db":
        os.link(tmp_path / "outside" / "j.db", root / "hard.db")


def journal_rows(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        (count,) = conn.execute("select count(*) from transactions").fetchone()
    return int(count)


@pytest.mark.parametrize(("journal", "db", "folder"), LAYOUTS)
def test_server_refuses_the_journal(
    tmp_path: Path, journal: str | None, db: str, folder: str | None
) -> None:
    root, args = layout(tmp_path, journal)
    with Server(root, *args) as server:
        ok(server.call("write_file", {"path": "a.txt", "content": "b\n"}))
        prepare(root, tmp_path, db, journal)
        for tool, arguments in attacks(db, folder):
            body = error(server.call(tool, arguments), "FILE_POLICY_DENIED", "NOT_FOUND")
            if body["code"] == "NOT_FOUND":
                # Only a sidecar SQLite has not made (yet) may be missing.
                assert arguments.get("path", "").endswith(("-shm", "-wal")), (tool, body)
            else:
                assert body["details"].get("reason") in ("journal", "inside .ledgerfs/"), body
        done = ok(server.call("write_file", {"path": "a.txt", "content": "c\n"}))
        history = ok(server.call("history", {}))
        assert history["entries"][0]["transaction"] == done["transaction"]
    assert (root / "a.txt").read_text() == "c\n"
    assert not (root / "moved.db").exists() and not (root / "elsewhere").exists()
    real_db = Path(os.path.realpath(tmp_path / journal)) if journal else root / db
    assert journal_rows(real_db) == 2


@pytest.mark.anyio
@pytest.mark.parametrize(("journal", "db", "folder"), LAYOUTS)
async def test_engine_refuses_the_journal(
    tmp_path: Path, journal: str | None, db: str, folder: str | None
) -> None:
    root, args = layout(tmp_path, journal)
    config: dict[str, Any] = {"roots": [str(root)]}
    if args:
        config["journal"] = args[1]
    async with Engine.open(config) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "a.txt", "content": "b\n"})
        prepare(root, tmp_path, db, journal)
        for tool, arguments in attacks(db, folder):
            with pytest.raises(LedgerError) as caught:
                await session.call(tool, arguments)
            assert caught.value.code.value in ("FILE_POLICY_DENIED", "NOT_FOUND"), (tool, arguments)
        await session.call("write_file", {"path": "a.txt", "content": "c\n"})
    assert (root / "a.txt").read_text() == "c\n"
