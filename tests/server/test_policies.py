"""Server flags through real server processes: policies, protocols, roots, two clients.

Each test starts its own `ledgerfs serve` (the flags differ), on asyncio only:
the SDK's subprocess client is what is under test, not the event loop.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from ._support import REPO, envelope, ok, serve_args, server_env, stdio_params


@pytest.fixture
def root(workspace: Path) -> Path:
    (workspace / "a.txt").write_text("alpha\n")
    return workspace


def test_no_roots_prints_roots_empty_and_exits_non_zero() -> None:
    done = subprocess.run(
        [sys.executable, *serve_args()],
        env=server_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert "ROOTS_EMPTY" in done.stderr
    assert "No allowed directories are configured." in done.stderr


@pytest.mark.anyio
async def test_block_budget_and_tools(root: Path) -> None:
    args = (
        root,
        "--auto-occ",
        "block",
        "--mutation-budget",
        "2",
        "--tools",
        "read_file,write_file",
    )
    async with Client(stdio_params(*args)) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["read_file", "write_file"]
        body = envelope(
            await client.call_tool("write_file", {"path": "a.txt", "content": "x"}), "HASH_REQUIRED"
        )
        assert body["retryable"] is True
        h = ok(await client.call_tool("read_file", {"path": "a.txt"}))["content_hash"]
        ok(
            await client.call_tool(
                "write_file", {"path": "a.txt", "content": "b\n", "expected_hash": h}
            )
        )
        ok(await client.call_tool("write_file", {"path": "new1.txt", "content": "1"}))
        envelope(
            await client.call_tool("write_file", {"path": "new2.txt", "content": "2"}),
            "BUDGET_EXCEEDED",
        )
        assert not (root / "new2.txt").exists()
        envelope(await client.call_tool("list_directory", {"path": "."}), "TOOL_UNAVAILABLE")
        envelope(await client.call_tool("history", {}), "TOOL_UNAVAILABLE")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_concurrent_first_calls_share_one_budget(root: Path, mode: str) -> None:
    # Eight writes sent together as the client's very first calls: one session
    # (and one budget of 3) serves them all, so exactly 3 are made.
    results: dict[int, types.CallToolResult] = {}
    async with Client(stdio_params(root, "--mutation-budget", "3"), mode=mode) as client:

        async def write(i: int) -> None:
            results[i] = await client.call_tool("write_file", {"path": f"b{i}.txt", "content": "x"})

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(write, i)
    made = sorted(i for i, result in results.items() if not result.is_error)
    assert len(made) == 3
    for i, result in results.items():
        if i not in made:
            envelope(result, "BUDGET_EXCEEDED")
    assert sorted(p.name for p in root.glob("b*.txt")) == [f"b{i}.txt" for i in made]


@pytest.mark.anyio
async def test_readonly(root: Path) -> None:
    async with Client(stdio_params(root, "--readonly")) as client:
        assert ok(await client.call_tool("read_file", {"path": "a.txt"}))["content"] == "alpha\n"
        for tool, arguments in [
            ("write_file", {"path": "a.txt", "content": "x"}),
            ("delete_file", {"path": "a.txt"}),
            ("create_directory", {"path": "d"}),
            ("batch", {"operations": [{"op": "mkdir", "path": "d"}]}),
            ("undo", {"transaction": 1}),
        ]:
            envelope(await client.call_tool(tool, arguments), "READONLY")
    assert (root / "a.txt").read_text() == "alpha\n"


@pytest.mark.anyio
async def test_legacy_handshake_protocol(root: Path) -> None:
    async with Client(stdio_params(root), mode="legacy") as client:
        assert client.protocol_version != "2026-07-28"
        h = ok(await client.call_tool("read_file", {"path": "a.txt"}))["content_hash"]
        done = ok(
            await client.call_tool(
                "edit_file",
                {
                    "path": "a.txt",
                    "edits": [{"old_text": "alpha", "new_text": "beta"}],
                    "expected_hash": h,
                },
            )
        )
        assert done["transaction"]
        envelope(await client.call_tool("read_file", {"path": "zzz"}), "NOT_FOUND")
    async with Client(stdio_params(root), mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert ok(await client.call_tool("read_file", {"path": "a.txt"}))["content"] == "beta\n"


@pytest.mark.anyio
async def test_two_servers_on_one_journal(root: Path, tmp_path: Path) -> None:
    journal = tmp_path / "shared" / "journal.db"
    params = stdio_params(root, "--journal", journal)
    async with Client(params) as one, Client(params) as two:
        h1 = ok(await one.call_tool("read_file", {"path": "a.txt"}))["content_hash"]
        h2 = ok(await two.call_tool("read_file", {"path": "a.txt"}))["content_hash"]
        assert h1 == h2
        first = ok(
            await one.call_tool(
                "write_file", {"path": "a.txt", "content": "one\n", "expected_hash": h1}
            )
        )
        body = envelope(
            await two.call_tool(
                "write_file", {"path": "a.txt", "content": "two\n", "expected_hash": h2}
            ),
            "OCC_MISMATCH",
        )
        assert body["expected_hash"] == h2
        assert body["current_hash"] == first["files"][0]["content_hash"]
        # The second server rebases and succeeds; both see one shared history.
        ok(
            await two.call_tool(
                "write_file",
                {"path": "a.txt", "content": "two\n", "expected_hash": body["current_hash"]},
            )
        )
        history = ok(await one.call_tool("history", {"path": "a.txt"}))
        assert len({e["session"] for e in history["entries"]}) == 2
    assert (root / "a.txt").read_text() == "two\n"
    assert journal.exists() and not (root / ".ledgerfs" / "journal.db").exists()


def _roots_callback(folder: Path) -> Any:
    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=folder.as_uri())])  # type: ignore[arg-type]

    return list_roots


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["replace", "union", "ignore"])
async def test_roots_mode(root: Path, tmp_path: Path, mode: str) -> None:
    theirs = tmp_path / "client-root"
    theirs.mkdir()
    (theirs / "c.txt").write_text("client\n")
    theirs = theirs.resolve()
    async with Client(
        stdio_params(root, "--roots-mode", mode),
        mode="legacy",
        list_roots_callback=_roots_callback(theirs),
    ) as client:
        dirs = ok(await client.call_tool("list_allowed_directories", {}))["directories"]
        expected = {
            "replace": [str(theirs)],
            "union": [str(root), str(theirs)],
            "ignore": [str(root)],
        }
        assert dirs == expected[mode]
        result = await client.call_tool("read_file", {"path": str(theirs / "c.txt")})
        if mode == "ignore":
            envelope(result, "NOT_ALLOWED")
        else:
            assert ok(result)["content"] == "client\n"
            ok(
                await client.call_tool(
                    "write_file", {"path": str(theirs / "n.txt"), "content": "n"}
                )
            )


@pytest.mark.anyio
async def test_rollback_complete_through_the_server(root: Path) -> None:
    """An immutable file (chattr +i refuses even root's rename) fails a batch midway."""
    locked = root / "locked.txt"
    locked.write_text("frozen\n")
    subprocess.run(["chattr", "+i", str(locked)], check=True)
    try:
        async with Client(stdio_params(root, "--auto-occ", "off")) as client:
            result = await client.call_tool(
                "batch",
                {
                    "operations": [
                        {"op": "write", "path": "a.txt", "content": "changed\n"},
                        {"op": "write", "path": "locked.txt", "content": "thawed\n"},
                    ]
                },
            )
            body = envelope(result, "ROLLBACK_COMPLETE")
            assert (body["retryable"], body["recovery"]) == (False, "check_already_applied")
            assert body["details"]["cause"]["errno"] == "EPERM"
            assert str(root / "a.txt") in body["details"]["restored"]
            assert (root / "a.txt").read_text() == "alpha\n"
            assert locked.read_text() == "frozen\n"
            assert not list(root.glob(".ledgerfs-*.tmp"))
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
