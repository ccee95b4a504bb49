"""The `history` tool and `ledgerfs show` render a journaled transaction alike.

Each kind of change is made through a real server; then its diff is read back
through the server's `history` tool and through the `ledgerfs show` command.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from ledgerfs.engine.history import DROPPED, NOT_KEPT
from tests.server._support import ok, stdio_params

from ._support import ledgerfs

#: Files over this many bytes keep no image when deleted.
MAX_FILE_SIZE = 64

Check = Callable[[str], bool]

#: (name, tool, arguments, what its diff shows); made in this order, one transaction each.
CASES: list[tuple[str, str, dict[str, Any], Check]] = [
    ("file", "write_file", {"path": "a.txt", "content": "one\n"}, lambda d: "+one\n" in d),
    ("folder", "create_directory", {"path": "made/deeper"}, lambda d: d == ""),
    (
        "symlink",
        "delete_file",
        {"path": "link"},
        lambda d: d.startswith("diff --git a/link b/link\ndeleted file mode 120000\n"),
    ),
    (
        "binary file",
        "write_file",
        {
            "path": "bin.dat",
            "content": base64.b64encode(bytes(range(48))).decode(),
            "encoding": "base64",
        },
        lambda d: "bin.dat" in d and "+++" not in d,
    ),
    (
        "file over max_file_size",
        "delete_file",
        {"path": "big.txt"},
        lambda d: d == f"delete big.txt: {NOT_KEPT}\n",
    ),
    # Last, so that its image is the journal's newest blob (dropped below).
    (
        "image dropped by gc",
        "write_file",
        {"path": "gone.txt", "content": "lost\n"},
        lambda d: d == f"write gone.txt: {DROPPED}\n",
    ),
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """Each case's diff as the `history` tool returns it and as `ledgerfs show` does."""
    root = (tmp_path_factory.mktemp("render") / "ws").resolve()
    root.mkdir()
    (root / "big.txt").write_text("x" * (MAX_FILE_SIZE * 2))
    os.symlink("a.txt", root / "link")
    serve = (root, "--max-file-size", str(MAX_FILE_SIZE))
    transactions: dict[str, int] = {}

    async def make() -> None:
        async with Client(stdio_params(*serve)) as client:
            for name, tool, arguments, _check in CASES:
                done = ok(await client.call_tool(tool, arguments))
                transactions[name] = done["transaction"]

    async def read() -> dict[str, str]:
        async with Client(stdio_params(*serve)) as client:
            return {
                name: ok(await client.call_tool("history", {"transaction": tx, "diff": True}))[
                    "entries"
                ][0]["diff"]
                for name, tx in transactions.items()
            }

    anyio.run(make)
    _drop_newest_blob(root / ".ledgerfs" / "journal.db")
    by_tool = anyio.run(read)
    return {
        name: (
            by_tool[name],
            json.loads(ledgerfs("show", str(tx), "--json", cwd=root, check=True).stdout)["diff"],
        )
        for name, tx in transactions.items()
    }


def _drop_newest_blob(journal: Path) -> None:
    """Take the newest image out of the journal, as gc takes an unused one."""
    with sqlite3.connect(journal) as db:
        (newest,) = db.execute("SELECT max(id) FROM blobs").fetchone()
        db.execute("DELETE FROM blob_keys WHERE id = ?", (newest,))
        db.execute("DELETE FROM blobs WHERE id = ?", (newest,))


@pytest.mark.parametrize(("name", "check"), [pytest.param(c[0], c[3], id=c[0]) for c in CASES])
def test_the_tool_and_the_cli_render_a_transaction_alike(
    rendered: dict[str, tuple[str, str]], name: str, check: Check
) -> None:
    by_tool, by_cli = rendered[name]
    assert by_tool == by_cli
    assert check(by_tool), by_tool
