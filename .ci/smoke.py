"""Smoke-test an installed ledgerfs: run with the fresh venv's python, outside the clone.

Checks what a user of the wheel gets: the console script and `python -m ledgerfs`, a
site-packages that gains `ledgerfs` and no generic `engine` or `journal`, and
`ledgerfs serve` over stdio answering a real MCP client's tools/list and one edit.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

BIN = Path(sys.executable).parent
SITE = Path(sysconfig.get_paths()["purelib"])


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"smoke: FAILED: {what}")
    print(f"smoke: ok: {what}", flush=True)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)


def installed_layout() -> None:
    import ledgerfs

    check(Path(ledgerfs.__file__).is_relative_to(SITE), f"ledgerfs imports from {SITE}")
    names = {p.name for p in SITE.iterdir()}
    check("ledgerfs" in names, "site-packages holds ledgerfs")
    check(not names & {"engine", "journal"}, "site-packages holds no engine or journal")
    check(hasattr(ledgerfs, "Engine"), "`from ledgerfs import Engine` works")
    package = Path(ledgerfs.__file__).parent
    for folder in (package, package / "engine", package / "journal"):
        check((folder / "py.typed").is_file(), f"{folder.name} ships py.typed")
    # `ledgerfs ui` serves its own page from the wheel: nothing is fetched at run time.
    page = package / "engine" / "ui_files"
    shipped = {"templates/base.html", "templates/transaction.html", "static/ui.css", "static/ui.js"}
    check(all((page / name).is_file() for name in shipped), "the wheel ships the ui's page")


def commands() -> None:
    version = importlib.metadata.version("ledgerfs")
    done = run(str(BIN / "ledgerfs"), "--version")
    check(done.stdout == f"ledgerfs {version}\n", f"ledgerfs --version prints {version}")
    helped = run(sys.executable, "-m", "ledgerfs", "--help")
    check(helped.returncode == 0 and "serve" in helped.stdout, "python -m ledgerfs --help")


async def serve(root: Path) -> None:
    params = StdioServerParameters(command=str(BIN / "ledgerfs"), args=["serve", str(root)])
    async with Client(params) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        check({"read_file", "edit_file", "undo"} <= tools, f"tools/list lists {len(tools)} tools")
        read = await client.call_tool("read_file", {"path": "notes.txt"})
        assert isinstance(read.structured_content, dict)
        edit = await client.call_tool(
            "edit_file",
            {
                "path": "notes.txt",
                "edits": [{"old_text": "old", "new_text": "new"}],
                "expected_hash": read.structured_content["content_hash"],
            },
        )
        check(not edit.is_error, "edit_file with expected_hash succeeds")
    check((root / "notes.txt").read_text() == "new\n", "the edit is on disk")
    check((root / ".ledgerfs" / "journal.db").is_file(), "the edit is journaled")


def main() -> None:
    installed_layout()
    commands()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        (root / "notes.txt").write_text("old\n")
        os.chdir(tmp)
        anyio.run(serve, root)


if __name__ == "__main__":
    main()
