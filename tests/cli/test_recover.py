"""SIGKILL the server during a large batch; `ledgerfs recover` makes it all-or-nothing."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.server._support import start_http, stop

from ._support import ledgerfs

COUNT = 1500


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_kill_during_batch_then_recover(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    (root / "big").mkdir(parents=True)
    content = "x" * 1000 + "\n"
    operations = [
        {"op": "write", "path": f"big/f{i:05}.txt", "content": f"{i}\n{content}"}
        for i in range(COUNT)
    ]
    proc, url = start_http(root)
    try:
        finished = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def send() -> None:
                try:
                    async with Client(url) as client:
                        await client.call_tool("batch", {"operations": operations})
                except Exception:
                    pass  # the server dies under the call
                finally:
                    finished.set()

            tg.start_soon(send)
            with anyio.fail_after(60):
                while not any((root / "big").iterdir()) and not finished.is_set():
                    await anyio.sleep(0.002)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            tg.cancel_scope.cancel()
    finally:
        stop(proc)

    done = ledgerfs("recover", "--root", root, "--json", check=True)
    recovered = json.loads(done.stdout)["recovered"]
    print(done.stdout)
    text = ledgerfs("recover", "--root", root, check=True).stdout
    assert "nothing to recover" in text  # the first run settled everything
    # A killed apply can leave its temp file (`.ledgerfs-*`) behind; recovery does
    # not sweep those yet (reported as an engine issue). They are never a target.
    files = sorted(p for p in (root / "big").iterdir() if not p.name.startswith(".ledgerfs-"))
    if recovered:
        [outcome] = recovered
        assert outcome["action"] in {"roll_back", "roll_forward"}
        assert outcome["outcome"] in {"rolled_back", "rolled_forward", "ROLLBACK_COMPLETE"}
    # All or nothing, and every present file whole.
    assert len(files) in (0, COUNT), len(files)
    for i, f in enumerate(files):
        assert f.read_text() == f"{i}\n{content}"
    verify = ledgerfs("verify", "--root", root, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["drifted"] == []
