"""The Streamable HTTP transport on 127.0.0.1, called by the SDK's own client."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from ._support import envelope, ok, start_http, stop


@pytest.mark.anyio
async def test_http_sessions_and_protocols(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    proc, url = start_http(root, "--mutation-budget", "1")
    try:
        # Handshake-era clients get an mcp-session-id each: one engine session each.
        async with Client(url, mode="legacy") as one, Client(url, mode="legacy") as two:
            ok(await one.call_tool("write_file", {"path": "one.txt", "content": "1"}))
            envelope(
                await one.call_tool("write_file", {"path": "one-b.txt", "content": "x"}),
                "BUDGET_EXCEEDED",
            )
            ok(await two.call_tool("write_file", {"path": "two.txt", "content": "2"}))
        # A 2026-07-28 client has no session id; sessionless calls share one session.
        async with Client(url) as modern:
            assert modern.protocol_version == "2026-07-28"
            names = [t.name for t in (await modern.list_tools()).tools]
            assert names[0] == "list_allowed_directories"
            assert ok(await modern.call_tool("read_file", {"path": "two.txt"}))["content"] == "2"
            ok(await modern.call_tool("write_file", {"path": "three.txt", "content": "3"}))
            envelope(await modern.call_tool("read_file", {"path": "/etc/hostname"}), "NOT_ALLOWED")
            envelope(
                await modern.call_tool("write_file", {"path": "four.txt", "content": "4"}),
                "BUDGET_EXCEEDED",
            )
    finally:
        stop(proc)
    assert sorted(p.name for p in root.iterdir() if p.is_file()) == [
        "one.txt",
        "three.txt",
        "two.txt",
    ]
