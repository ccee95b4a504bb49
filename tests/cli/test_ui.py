"""`ledgerfs ui` from a shell: the address it prints, and why it does not start."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.server._support import REPO, server_env
from tests.ui._support import agents, ui_process


def ledgerfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledgerfs", *args],
        env=server_env(),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_prints_a_loopback_address_with_a_new_token_each_start(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    with agents(root, "claude-code") as (agent,):
        agent.call("write_file", path="a.txt", content="1\n")
    with ui_process(root) as first, ui_process(root) as second:
        for ui in (first, second):
            assert ui.url.startswith("http://127.0.0.1:")
            assert len(ui.token) >= 32
        assert first.token != second.token and first.port != second.port
        # It listens on 127.0.0.1 alone: nothing answers on the machine's other addresses.
        assert _listening(first.port) == ["0100007F"]


def _listening(port: int) -> list[str]:
    """The addresses (hex, as /proc/net/tcp and tcp6 write them) listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_a_folder_without_a_journal_is_not_found(tmp_path: Path) -> None:
    done = ledgerfs("ui", str(tmp_path))
    assert done.returncode == 1
    assert "NOT_FOUND" in done.stderr and "no ledgerfs journal" in done.stderr
    assert not (tmp_path / ".ledgerfs").exists()


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    with agents(root, "claude-code") as (agent,):
        agent.call("write_file", path="a.txt", content="1\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = ledgerfs("ui", str(root), "--port", str(taken.getsockname()[1]))
    assert done.returncode == 1
    assert "VALIDATION" in done.stderr and "--port" in done.stderr
