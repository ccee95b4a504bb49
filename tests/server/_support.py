"""Helpers for talking to a real `ledgerfs serve` process with the SDK's own client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import StdioServerParameters

ENVELOPE_KEYS = {"code", "message", "path", "details", "suggestion", "retryable", "recovery"}
OCC_KEYS = ENVELOPE_KEYS | {"expected_hash", "current_hash", "conflict"}
REPO = Path(__file__).resolve().parents[2]


def server_env() -> dict[str, str]:
    """The minimal environment the server needs (the stdio client passes little)."""
    keep = (
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "LEDGERFS_LOCK_DIR",
    )
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def serve_args(*args: str | Path) -> list[str]:
    return ["-m", "ledgerfs", "serve", *map(str, args)]


def stdio_params(*args: str | Path) -> StdioServerParameters:
    """Parameters that start `python -m ledgerfs serve ARGS...` as a subprocess."""
    return StdioServerParameters(
        command=sys.executable, args=serve_args(*args), env=server_env(), cwd=str(REPO)
    )


def ok(result: types.CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call, checked against its text twin."""
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    [block] = result.content
    assert isinstance(block, types.TextContent)
    assert json.loads(block.text) == result.structured_content
    return result.structured_content


def envelope(result: types.CallToolResult, code: str) -> dict[str, Any]:
    """The error body of a failed call: isError, exact text, exact keys, the code."""
    assert result.is_error, result.structured_content
    [block] = result.content
    assert isinstance(block, types.TextContent)
    parsed = json.loads(block.text)
    assert list(parsed) == ["error"]
    assert parsed == result.structured_content
    body: dict[str, Any] = parsed["error"]
    assert body["code"] == code, body
    expected_keys = OCC_KEYS if code == "OCC_MISMATCH" else ENVELOPE_KEYS
    assert set(body) == expected_keys, sorted(body)
    rebase = {"OCC_MISMATCH", "HASH_REQUIRED", "STALE_GIT"}
    assert body["retryable"] is (code in rebase)
    if code in rebase | {"PATCH_FAILED"}:
        assert body["recovery"] == "read_and_rebase"
    elif code.startswith("ROLLBACK_"):
        assert body["recovery"] == "check_already_applied"
    elif not code.startswith(("GH_", "GL_")):
        assert body["recovery"] == "fix_arguments"
    return body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http(*args: str | Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start `ledgerfs serve --http 127.0.0.1:PORT` and wait until it accepts."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, *serve_args(*args, "--http", f"127.0.0.1:{port}")],
        env=server_env(),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_until_accepting(proc, port)
    return proc, f"http://127.0.0.1:{port}/mcp"


def wait_until_accepting(proc: subprocess.Popen[bytes], port: int) -> None:
    """Wait until the server `proc` accepts connections on 127.0.0.1:`port`."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the HTTP server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def git_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    (root / "tracked.txt").write_text("one\n")
    git(root, "add", "tracked.txt")
    git(root, "commit", "-qm", "init")
    return root
