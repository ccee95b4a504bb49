"""Through the real client, on both protocol versions: deleting a folder (recursive,
journaled, undoable, charged by files), bounded mutation results with the rest in
`history`, and suggestions that fit their code."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

MODES = ["auto", "legacy"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    write(
        folder,
        {
            "doomed/a.txt": "a\n",
            "doomed/sub/b.txt": "b\n",
            "doomed/sub/deeper/c.txt": "c\n",
            "keep.txt": "keep\n",
        },
    )
    (folder / "doomed" / "empty").mkdir()
    (folder / "hollow").mkdir()
    return folder.resolve()


@pytest.fixture(params=MODES)
async def client(root: Path, request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    async with Client(stdio_params(root), mode=request.param) as c:
        yield c


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def snapshot(root: Path) -> dict[str, str | None]:
    """Every file's text and every folder (None) under root, but the journal."""
    return {
        p.relative_to(root).as_posix(): (p.read_text() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
        if ".ledgerfs" not in p.parts
    }


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    return ok(await client.call_tool(tool, arguments))


# delete_file of a folder -------------------------------------------------------


@pytest.mark.anyio
async def test_delete_a_folder_recursively_and_undo_it(client: Client, root: Path) -> None:
    before = snapshot(root)
    body = envelope(await client.call_tool("delete_file", {"path": "doomed"}), "VALIDATION")
    assert body["details"] == {"field": "recursive", "reason": "folder_not_empty"}
    preview = await call(client, "delete_file", path="doomed", recursive=True, dry_run=True)
    assert preview["transaction"] is None and snapshot(root) == before
    done = await call(client, "delete_file", path="doomed", recursive=True)
    assert not (root / "doomed").exists() and (root / "keep.txt").exists()
    ops = sorted((f["op"], Path(f["path"]).relative_to(root).as_posix()) for f in done["files"])
    assert ops == [
        ("delete", "doomed/a.txt"),
        ("delete", "doomed/sub/b.txt"),
        ("delete", "doomed/sub/deeper/c.txt"),
        ("rmdir", "doomed"),
        ("rmdir", "doomed/empty"),
        ("rmdir", "doomed/sub"),
        ("rmdir", "doomed/sub/deeper"),
    ]
    assert done["files_total"] == 7 and "-c" in done["diff"]
    [entry] = (await call(client, "history", transaction=done["transaction"]))["entries"]
    assert len(entry["mutations"]) == 7
    undone = await call(client, "undo", transaction=done["transaction"])
    assert undone["undo_of"] == done["transaction"]
    assert snapshot(root) == before
    emptied = await call(client, "delete_file", path="hollow")
    assert [f["op"] for f in emptied["files"]] == ["rmdir"] and not (root / "hollow").exists()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("inside", "code"),
    [
        ({"doomed/.env": "TOKEN=1\n"}, "SECRET_DENIED"),
        ({"doomed/sub/id_rsa": "key\n"}, "SECRET_DENIED"),
        ({"doomed/.git/config": "[core]\n"}, "FILE_POLICY_DENIED"),
    ],
)
async def test_a_folder_holding_what_may_not_change_is_refused_whole(
    client: Client, root: Path, inside: dict[str, str], code: str
) -> None:
    write(root, inside)
    before = snapshot(root)
    envelope(await client.call_tool("delete_file", {"path": "doomed", "recursive": True}), code)
    assert snapshot(root) == before


@pytest.mark.anyio
async def test_a_folder_holding_a_link_or_given_a_hash_is_refused(
    client: Client, root: Path
) -> None:
    (root / "doomed" / "link").symlink_to(root / "keep.txt")
    before = snapshot(root)
    body = envelope(
        await client.call_tool("delete_file", {"path": "doomed", "recursive": True}),
        "FILE_POLICY_DENIED",
    )
    assert body["details"]["reason"] == "not_a_regular_file"
    body = envelope(
        await client.call_tool(
            "delete_file", {"path": "hollow", "expected_hash": "blake3:" + "0" * 64}
        ),
        "VALIDATION",
    )
    assert body["details"]["field"] == "expected_hash"
    assert snapshot(root) == before


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("budget", "deleted"), [(2, False), (3, True)])
async def test_a_folder_delete_is_charged_one_per_file(
    root: Path, mode: str, budget: int, deleted: bool
) -> None:
    before = snapshot(root)
    params = stdio_params(root, "--mutation-budget", str(budget))
    async with Client(params, mode=mode) as client:
        result = await client.call_tool("delete_file", {"path": "doomed", "recursive": True})
        if not deleted:
            envelope(result, "BUDGET_EXCEEDED")
            assert snapshot(root) == before
            return
        ok(result)
        assert not (root / "doomed").exists()
        envelope(
            await client.call_tool("write_file", {"path": "n.txt", "content": "n"}),
            "BUDGET_EXCEEDED",
        )


# bounded results ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_big_batch_result_is_bounded_and_history_pages_the_rest(
    client: Client, root: Path
) -> None:
    body = "x" * 300 + "\n"
    operations = [{"op": "write", "path": f"many/f{n:03}.txt", "content": body} for n in range(300)]
    done = await call(client, "batch", operations=operations)
    assert done["files_total"] == 301  # and the folder many/
    assert len(done["files"]) == 200
    assert done["diff_truncated"] is True and len(done["diff"]) <= 64 * 1024
    assert done["diff"].endswith("\n") and done["diff_size"] > 64 * 1024
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        [entry] = (
            await call(
                client, "history", transaction=done["transaction"], diff=True, diff_offset=offset
            )
        )["entries"]
        pages.append(entry["diff"])
        offset = entry["diff_next_offset"]
    whole = "".join(pages)
    assert len(whole) == done["diff_size"] and whole.startswith(done["diff"])
    assert whole.count("+" + "x" * 300) == 300
    body_error = envelope(await client.call_tool("history", {"diff": True}), "VALIDATION")
    assert body_error["details"]["field"] == "transaction"


@pytest.mark.anyio
async def test_a_big_batch_reports_progress_when_asked(client: Client, root: Path) -> None:
    seen: list[tuple[float, float | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total))

    operations = [{"op": "mkdir", "path": f"d/{n:04}"} for n in range(1000)]
    result = await client.call_tool("batch", {"operations": operations}, progress_callback=progress)
    assert ok(result)["files_total"] == 1001
    assert seen == [(500, 1000), (1000, 1000)]


@pytest.mark.anyio
async def test_a_big_patch_reports_progress_when_asked(client: Client, root: Path) -> None:
    seen: list[tuple[float, float | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total))

    text = "".join(f"--- /dev/null\n+++ b/p/{n:04}.txt\n@@ -0,0 +1 @@\n+{n}\n" for n in range(1000))
    result = await client.call_tool("apply_patch", {"patch": text}, progress_callback=progress)
    assert ok(result)["files_total"] == 1001
    assert (root / "p" / "0999.txt").read_text() == "999\n"
    assert seen == [(500, 1000), (1000, 1000)]


@pytest.mark.anyio
async def test_warnings_are_capped_with_a_count(client: Client, root: Path) -> None:
    write(root, {f"w/{n:02}.txt": "old\n" for n in range(30)})
    operations = [{"op": "write", "path": f"w/{n:02}.txt", "content": "new\n"} for n in range(30)]
    done = await call(client, "batch", operations=operations)
    assert len(done["warnings"]) == 20
    assert done["warnings"][-1] == "... and 11 more warnings like these"
    assert all("expected_hash" in w for w in done["warnings"][:-1])


# suggestions -------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_unknown_transaction_suggests_history(client: Client) -> None:
    body = envelope(await client.call_tool("undo", {"transaction": 999_999}), "NOT_FOUND")
    assert "history" in body["suggestion"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_hash_required_does_not_hand_back_the_current_hash(root: Path, mode: str) -> None:
    async with Client(stdio_params(root, "--auto-occ", "block"), mode=mode) as client:
        body = envelope(
            await client.call_tool("write_file", {"path": "keep.txt", "content": "x"}),
            "HASH_REQUIRED",
        )
    assert "current_hash" not in body["details"] and "keep.txt" in body["message"]
    assert "read the file" in body["suggestion"]
    assert (root / "keep.txt").read_text() == "keep\n"
