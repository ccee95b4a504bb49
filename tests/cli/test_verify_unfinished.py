"""`ledgerfs verify` tells the two kinds of unfinished transaction apart.

Both states are made for real, in one journal:

* **interrupted**: a process writes a file (its call returns) and is SIGKILLed
  before any checkpoint or close: the commit mark, written lazily, never reached
  the journal, so the transaction is pending with a dead owner;
* **acknowledged**: an engine whose checkpoint flush fails with ENOSPC (the disk
  full at exit) writes a file and closes: the close writes the commit mark but no
  checkpoint, so the transaction is committed, not checkpointed, owner gone.

verify reports each with its own wording and JSON field (before, both were "left
unfinished by a process that died"); recover rolls both forward and verify is
clean afterwards.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from ledgerfs.engine import Engine, FileOps
from tests.server._support import REPO, server_env

from ._support import ledgerfs

#: Writes one file through the engine, reports its transaction, then dies at once
#: (no checkpoint: the interval is an hour; no close).
DIE_AFTER_WRITE = """
import anyio, os, signal, sys
from ledgerfs.engine import Engine

async def main():
    config = {"roots": [sys.argv[1]], "checkpoint_interval": 3600.0}
    async with Engine.open(config) as engine:
        session = await engine.session("killed")
        result = await session.call("write_file", {"path": "killed.txt", "content": "k\\n"})
        os.write(1, f"{result.transaction}\\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)

anyio.run(main)
"""


class FullDisk(FileOps):
    """The real file steps; every checkpoint flush fails as on a full disk."""

    def syncfs(self, folders: Iterable[str]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def killed_after_write(root: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", DIE_AFTER_WRITE, str(root)],
        env=server_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr
    return int(done.stdout)


@pytest.mark.anyio
async def test_verify_tells_acknowledged_from_interrupted(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    interrupted = killed_after_write(root)
    # recover=False: this engine must leave the killed process's transaction as it is.
    async with Engine.open({"roots": [str(root)]}, fileops=FullDisk(), recover=False) as engine:
        session = await engine.session("full-disk")
        result = await session.call("write_file", {"path": "acked.txt", "content": "a\n"})
        acknowledged = result.transaction
    assert interrupted != acknowledged

    checked = ledgerfs("verify", "--root", root, "--json")
    assert checked.returncode == 2, checked.stderr
    report = json.loads(checked.stdout)
    assert report["acknowledged"] == [acknowledged]
    assert report["interrupted"] == [interrupted]
    assert report["awaiting_recovery"] == sorted([acknowledged, interrupted])
    assert report["drifted"] == [] and report["journal_ok"] is True

    text = ledgerfs("verify", "--root", root).stdout
    [ack_line] = [line for line in text.splitlines() if f"transaction {acknowledged} " in line]
    assert "acknowledged and waiting for their files" in ack_line
    assert "rolls them forward" in ack_line and "died" not in ack_line
    [died_line] = [line for line in text.splitlines() if f"transaction {interrupted} " in line]
    assert "died before their commit mark" in died_line

    recovered = json.loads(ledgerfs("recover", "--root", root, "--json", check=True).stdout)
    outcomes = {o["transaction"]: o["outcome"] for o in recovered["recovered"]}
    assert outcomes == {acknowledged: "rolled_forward", interrupted: "rolled_forward"}
    clean = json.loads(ledgerfs("verify", "--root", root, "--json", check=True).stdout)
    assert clean["awaiting_recovery"] == clean["acknowledged"] == clean["interrupted"] == []
    assert (root / "killed.txt").read_text() == "k\n" and (root / "acked.txt").read_text() == "a\n"
