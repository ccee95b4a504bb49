"""Every tool and every reachable filesystem code through a real stdio server.

One server process per protocol era serves the whole module (tests use distinct
files): the 2026-07-28 protocol (the client's default, the SDK's whole path) and
the initialize handshake (where a plain tools/call goes straight to the tool and
its result straight out; each result is checked against the tool's result schema
in both). The SDK's stdio client is driven on asyncio only: the
subprocess-heavy tests pin `anyio_backend`, trio adds nothing here that the
engine's own tests lack.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from ledgerfs.engine.tools import find_tool

from ._support import envelope, git_repo, ok, stdio_params

EXPECTED_TOOLS = [
    "list_allowed_directories",
    "read_file",
    "list_directory",
    "read_multiple_files",
    "read_media_file",
    "search_files",
    "directory_tree",
    "get_file_info",
    "git_status",
    "history",
    "write_file",
    "edit_file",
    "edit_notebook",
    "apply_patch",
    "move_file",
    "copy_file",
    "delete_file",
    "create_directory",
    "batch",
    "undo",
    "checkpoint",
    "rewind",
    "issue_read",
    "issue_list",
    "issue_create",
    "issue_comment",
    "issue_reconcile",
]
DESTRUCTIVE = {
    "delete_file",
    "move_file",
    "write_file",
    "apply_patch",
    "batch",
    "undo",
    "rewind",
    "edit_file",
    "edit_notebook",
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, mode: str) -> Path:
    return git_repo(tmp_path_factory.mktemp(f"ws-{mode}") / "repo").resolve()


@pytest.fixture(scope="module")
async def client(root: Path, mode: str, anyio_backend: str) -> AsyncIterator[Client]:
    async with Client(stdio_params(root, "--issue-tools"), mode=mode) as c:
        yield c


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """Call `tool`; a successful result is checked against the tool's whole result
    schema (docs/tools.md's; the listing leaves result schemas out)."""
    result = await client.call_tool(tool, arguments)
    if not result.is_error:
        jsonschema.validate(result.structured_content, find_tool(tool).output_schema())
    return result


@pytest.mark.anyio
async def test_tool_list_schemas_and_annotations(client: Client) -> None:
    listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == EXPECTED_TOOLS
    by_name = {t.name: t for t in listed}
    for tool in listed:
        assert tool.description and "\n" not in tool.description
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is None  # the listing is lean: results are in docs/tools.md
        assert tool.annotations is not None
        if tool.name in DESTRUCTIVE:
            assert tool.annotations.destructive_hint is True
            assert tool.annotations.read_only_hint is False
    for read in ("read_file", "list_directory", "get_file_info", "git_status", "history"):
        assert by_name[read].annotations is not None
        assert by_name[read].annotations.read_only_hint is True
    props = {t.name: set(t.input_schema["properties"]) for t in listed}
    assert {"path", "offset", "limit"} <= props["read_file"]
    assert {"path", "content", "expected_hash", "expected_status_hash", "dry_run"} <= props[
        "write_file"
    ]
    assert {"path", "edits", "expected_hash", "allow_rewrite"} <= props["edit_file"]
    assert {"patch", "expected_hashes", "expected_status_hash", "dry_run"} <= props["apply_patch"]
    assert {"source", "destination", "expected_hash"} <= props["move_file"]
    assert {"operations", "expected_status_hash", "dry_run"} <= props["batch"]
    assert props["undo"] >= {"transaction"}
    assert props["history"] >= {"path", "transaction", "limit"}
    assert props["issue_comment"] >= {"repo_path", "number", "body"}


@pytest.mark.anyio
async def test_protocol_era(client: Client, mode: str) -> None:
    # mode="auto" (the default) probes server/discover first.
    expected = "2026-07-28" if mode == "auto" else LATEST_HANDSHAKE_VERSION
    assert client.protocol_version == expected


@pytest.mark.anyio
async def test_every_read_tool(client: Client, root: Path) -> None:
    dirs = ok(await call(client, "list_allowed_directories"))
    assert dirs == {"directories": [str(root)]}
    (root / "r.txt").write_text("a\nb\nc\n")
    read = ok(await call(client, "read_file", path="r.txt", offset=1, limit=1))
    assert read["content"] == "b\n" and read["content_hash"].startswith("blake3:")
    listing = ok(await call(client, "list_directory", path="."))
    assert "r.txt" in {e["name"] for e in listing["entries"]}
    info = ok(await call(client, "get_file_info", path="r.txt"))
    assert info["type"] == "file" and info["size"] == 6
    status = ok(await call(client, "git_status"))
    assert status["status_hash"] and status["repo_root"] == str(root)
    history = ok(await call(client, "history", limit=5))
    assert "entries" in history


@pytest.mark.anyio
async def test_every_mutation_tool_and_undo(client: Client, root: Path) -> None:
    w = ok(await call(client, "write_file", path="m/one.txt", content="alpha\nbeta\n"))
    one = str(root / "m/one.txt")
    [written] = [f for f in w["files"] if f["path"] == one and f["op"] == "write"]
    assert w["transaction"] and written["previous_hash"] is None
    assert "+alpha" in w["diff"]
    h = written["content_hash"]
    e = ok(
        await call(
            client,
            "edit_file",
            path="m/one.txt",
            edits=[{"old_text": "beta", "new_text": "gamma"}],
            expected_hash=h,
        )
    )
    assert (
        e["files"] == [{**e["files"][0], "path": one, "previous_hash": h}]
        and e["files"][0]["content_hash"] != h
    )
    patch = "--- a/m/one.txt\n+++ b/m/one.txt\n@@ -1,2 +1,2 @@\n alpha\n-gamma\n+delta\n"
    p = ok(await call(client, "apply_patch", patch=patch))
    assert (root / "m/one.txt").read_text() == "alpha\ndelta\n"
    d = ok(await call(client, "create_directory", path="m/sub"))
    assert (root / "m/sub").is_dir() and d["transaction"]
    mv = ok(await call(client, "move_file", source="m/one.txt", destination="m/sub/two.txt"))
    assert mv["files"][0]["destination"] == str(root / "m/sub/two.txt")
    b = ok(
        await call(
            client,
            "batch",
            operations=[
                {"op": "write", "path": "m/b1.txt", "content": "1\n"},
                {"op": "write", "path": "m/b2.txt", "content": "2\n"},
                {"op": "mkdir", "path": "m/bdir"},
            ],
        )
    )
    assert {f["path"] for f in b["files"]} >= {str(root / "m/b1.txt"), str(root / "m/b2.txt")}
    dry = ok(await call(client, "write_file", path="m/dry.txt", content="x", dry_run=True))
    assert dry["dry_run"] is True and dry["transaction"] is None
    assert not (root / "m/dry.txt").exists()
    rm = ok(await call(client, "delete_file", path="m/b2.txt"))
    assert not (root / "m/b2.txt").exists()
    u = ok(await call(client, "undo", transaction=rm["transaction"]))
    assert u["undo_of"] == rm["transaction"] and (root / "m/b2.txt").read_text() == "2\n"
    hist = ok(await call(client, "history", transaction=p["transaction"]))
    assert [e["transaction"] for e in hist["entries"]] == [p["transaction"]]
    by_path = ok(await call(client, "history", path="m/b2.txt"))
    assert len(by_path["entries"]) >= 3


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("issue_read", {"number": 1}),
        ("issue_list", {"state": "open", "limit": 5}),
        ("issue_create", {"title": "t", "body": "b"}),
        ("issue_comment", {"number": 1, "body": "b"}),
        ("issue_reconcile", {}),
    ],
)
async def test_issue_tools_answer_with_an_envelope(
    client: Client, tool: str, arguments: dict[str, Any]
) -> None:
    # The workspace repository has no remote: the provider cannot be resolved.
    result = await client.call_tool(tool, arguments)
    if tool == "issue_reconcile" and not result.is_error:
        assert "items" in ok(result) or ok(result)
        return
    body = envelope(result, result.structured_content["error"]["code"])
    assert body["code"].startswith(("GH_", "GL_")) or body["code"] == "TOOL_UNAVAILABLE"


# Codes ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_not_allowed(client: Client) -> None:
    body = envelope(await call(client, "read_file", path="/etc/hostname"), "NOT_ALLOWED")
    assert body["path"]


@pytest.mark.anyio
async def test_not_found(client: Client) -> None:
    envelope(await call(client, "read_file", path="missing.txt"), "NOT_FOUND")


@pytest.mark.anyio
async def test_secret_denied(client: Client, root: Path) -> None:
    (root / ".env").write_text("TOKEN=1\n")
    envelope(await call(client, "read_file", path=".env"), "SECRET_DENIED")
    envelope(await call(client, "write_file", path=".env.local", content="x"), "SECRET_DENIED")


@pytest.mark.anyio
async def test_file_policy_denied(client: Client) -> None:
    envelope(await call(client, "write_file", path=".git/evil", content="x"), "FILE_POLICY_DENIED")
    envelope(
        await call(client, "write_file", path=".ledgerfs/evil", content="x"), "FILE_POLICY_DENIED"
    )


@pytest.mark.anyio
async def test_validation_unknown_argument_and_wrong_type(client: Client) -> None:
    body = envelope(await call(client, "read_file", path="r.txt", bogus=1), "VALIDATION")
    assert "bogus" in body["message"]
    body = envelope(await call(client, "read_file", path=5), "VALIDATION")
    assert "$.path" in body["message"]
    envelope(await call(client, "write_file", path="v.txt"), "VALIDATION")
    envelope(await call(client, "undo", transaction="one"), "VALIDATION")


@pytest.mark.anyio
async def test_unknown_tool_is_tool_unavailable(client: Client) -> None:
    envelope(await call(client, "format_disk"), "TOOL_UNAVAILABLE")


@pytest.mark.anyio
async def test_rewrite_blocked(client: Client, root: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(10))
    (root / "rw.txt").write_text(text)
    edit = {"old_text": text, "new_text": "something else entirely\n"}
    envelope(await call(client, "edit_file", path="rw.txt", edits=[edit]), "REWRITE_BLOCKED")
    ok(await call(client, "edit_file", path="rw.txt", edits=[edit], allow_rewrite=True))


@pytest.mark.anyio
async def test_occ_mismatch(client: Client, root: Path) -> None:
    read = ok(await call(client, "write_file", path="occ.txt", content="v1\n"))
    stale = read["files"][0]["content_hash"]
    (root / "occ.txt").write_text("changed behind our back\n")
    body = envelope(
        await call(client, "write_file", path="occ.txt", content="v2\n", expected_hash=stale),
        "OCC_MISMATCH",
    )
    assert body["expected_hash"] == stale
    assert body["current_hash"] != stale and body["current_hash"].startswith("blake3:")
    assert "conflict" in body
    assert (root / "occ.txt").read_text() == "changed behind our back\n"


@pytest.mark.anyio
async def test_patch_failed_and_begin_patch(client: Client, root: Path) -> None:
    (root / "p.txt").write_text("one\ntwo\n")
    bad = "--- a/p.txt\n+++ b/p.txt\n@@ -1,2 +1,2 @@\n one\n-three\n+four\n"
    envelope(await call(client, "apply_patch", patch=bad), "PATCH_FAILED")
    codex = "*** Begin Patch\n*** Update File: p.txt\n@@\n-one\n+uno\n*** End Patch\n"
    envelope(await call(client, "apply_patch", patch=codex), "BEGIN_PATCH")
    assert (root / "p.txt").read_text() == "one\ntwo\n"


@pytest.mark.anyio
async def test_stale_git(client: Client, root: Path) -> None:
    status = ok(await call(client, "git_status"))
    (root / "tracked.txt").write_text("changed outside\n")
    body = envelope(
        await call(
            client,
            "write_file",
            path="sg.txt",
            content="x",
            expected_status_hash=status["status_hash"],
        ),
        "STALE_GIT",
    )
    assert "diff" not in body["details"]
    assert not (root / "sg.txt").exists()
    fresh = ok(await call(client, "git_status"))
    ok(
        await call(
            client,
            "write_file",
            path="sg.txt",
            content="x",
            expected_status_hash=fresh["status_hash"],
        )
    )


@pytest.mark.anyio
async def test_concurrent_calls_from_one_client(client: Client, root: Path) -> None:
    results: dict[int, Any] = {}

    async def write(i: int) -> None:
        results[i] = await call(client, "write_file", path=f"conc/{i}.txt", content=f"{i}\n")

    async with anyio.create_task_group() as tg:
        for i in range(24):
            tg.start_soon(write, i)
    txs = {ok(r)["transaction"] for r in results.values()}
    assert len(txs) == 24
    assert sorted(os.listdir(root / "conc")) == sorted(f"{i}.txt" for i in range(24))
