"""On a real terminal (a pseudo-terminal): colour, the pager for long output, progress bars."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from ledgerfs.engine import Engine
from tests.server._support import server_env

LINES = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def long_change(tmp_path: Path) -> Path:
    """A workspace whose transaction 2 rewrites a LINES-line file: a long diff."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    async with Engine.open({"roots": [str(root)]}) as engine:
        session = await engine.session()
        before = "".join(f"line {i}\n" for i in range(LINES))
        await session.call("write_file", {"path": "long.txt", "content": before})
        await session.call("write_file", {"path": "long.txt", "content": before.upper()})
    return root


def in_terminal(*args: str, cwd: Path, rows: int, env: dict[str, str]) -> str:
    """Run `python -m ledgerfs ARGS` with stdin, stdout and stderr on a `rows`-line terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgerfs", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**server_env(), "TERM": "xterm-256color", **env},
    )
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.anyio
async def test_long_output_goes_through_the_pager_in_colour(long_change: Path) -> None:
    paged = long_change.parent / "paged.txt"
    pager = {"PAGER": f"cat > {paged}"}
    screen = in_terminal("show", "2", cwd=long_change, rows=20, env=pager)
    text = paged.read_text()
    assert "transaction" in text and f"+LINE {LINES - 1}" in text
    assert "\x1b[32m" in text and "\x1b[31m" in text  # added green, removed red
    assert f"+LINE {LINES - 1}" not in screen  # the pager had it, not the terminal
    paged.unlink()
    short = in_terminal("show", "1", cwd=long_change, rows=LINES * 3, env=pager)
    assert "+line 0" in short and not paged.exists()  # fits: printed, not paged


@pytest.mark.anyio
async def test_progress_shows_on_a_terminal_only(long_change: Path) -> None:
    screen = in_terminal("verify", cwd=long_change, rows=40, env={})
    assert "verifying" in screen and "journal: \x1b[32mok" in screen
    piped = subprocess.run(
        [sys.executable, "-m", "ledgerfs", "verify"],
        cwd=long_change,
        env=server_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=True,
    )
    assert piped.stderr == "" and "journal: ok" in piped.stdout
