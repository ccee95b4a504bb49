"""Bounded results, through the real stdio server and the official client: a folder
made thousands of levels deep is treed, searched, deleted, undone and listed in
history with replies every client parses; a 5,000-file batch, its undo and the
history after them stay under a stated size, and paging reaches every
transaction and every mutation exactly once.

Before, a tree of a 100-deep folder nested its reply past pydantic's JSON limit
(the client dropped it and waited forever), 300 was "Internal server error",
1,000 a RecursionError; after the batch `history` returned 1.8 MB.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from tests.server._support import envelope, ok, stdio_params

#: The deepest a reply may nest: System.Text.Json's default limit, the lowest of
#: the JSON parsers MCP clients use (serde_json's is 128, pydantic's 200).
MAX_NESTING = 64
#: A mutation result or a history page (without a diff), in characters of JSON.
MAX_REPLY = 128 * 1024
#: directory_tree's max_depth at most, and unless asked.
MAX_TREE_DEPTH = 25
TREE_DEPTH = 10
#: Generous: a call that takes a second or two answers; a dropped reply does not.
CALL_TIMEOUT = 60
BATCH_FILES = 5_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    folder = (tmp_path / "ws").resolve()
    folder.mkdir()
    yield folder
    remove_deep(folder)


def remove_deep(folder: Path) -> None:
    """Remove `folder` and what it holds, without recursion (shutil.rmtree and
    os.walk recurse, and fail at depth 1,000)."""
    folders, todo = [], [str(folder)]
    while todo:
        path = todo.pop()
        folders.append(path)
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                else:
                    os.unlink(entry.path)
    for path in reversed(folders):  # each after what it held
        os.rmdir(path)


@pytest.fixture
def stderr() -> Iterator[TextIO]:
    with tempfile.TemporaryFile("w+") as file:
        yield file


@asynccontextmanager
async def served(root: Path, stderr: TextIO) -> AsyncIterator[Client]:
    async with Client(stdio_client(stdio_params(root), errlog=stderr)) as client:
        yield client
    stderr.seek(0)
    text = stderr.read()
    for sign in ("Traceback", "RecursionError", "Internal server error", "depth exceeded"):
        assert sign not in text, text[-3000:]


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """The call's result, which must come back and parse (else the test fails here)."""
    with anyio.fail_after(CALL_TIMEOUT):
        return await client.call_tool(tool, arguments)


def nesting(value: Any) -> int:
    """How many objects and arrays deep `value` nests (iteratively: it may be deep)."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            todo.extend((child, level + 1) for child in children)
    return deepest


def bounded(result: Any) -> dict[str, Any]:
    """A successful result whose reply nests within MAX_NESTING levels."""
    structured = ok(result)
    # The JSON-RPC reply and its result hold structuredContent.
    assert 2 + nesting(structured) <= MAX_NESTING
    return structured


def make_deep(root: Path, depth: int) -> Path:
    """`d/d/.../d` `depth` levels under root with `leaf.txt` at the bottom."""
    folder = str(root)
    for _ in range(depth):
        folder = os.path.join(folder, "d")
        os.mkdir(folder)
    leaf = Path(folder) / "leaf.txt"
    leaf.write_text("needle\n")
    return leaf


def chain(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The folders of a one-folder-per-level tree, top first."""
    found = []
    while nodes:
        [node] = [n for n in nodes if n["type"] == "directory"] or [None]
        if node is None:
            break
        found.append(node)
        nodes = node["children"]
    return found


# Deep folders ------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("depth", [100, 300, 1000])
async def test_a_deep_folder_answers_every_tool(root: Path, stderr: TextIO, depth: int) -> None:
    leaf = make_deep(root, depth)
    async with served(root, stderr) as client:
        # The tree stops at its default depth, and at the deepest it may go; the
        # folder where it stopped says it holds more.
        for asked, levels in (({}, TREE_DEPTH), ({"max_depth": MAX_TREE_DEPTH}, MAX_TREE_DEPTH)):
            tree = bounded(await call(client, "directory_tree", path=".", **asked))
            folders = chain(tree["tree"])
            assert len(folders) == levels and tree["entries"] == levels
            assert [f["truncated"] for f in folders] == [False] * (levels - 1) + [True]
            assert folders[-1]["children"] == [] and not tree["truncated"]
        envelope(
            await call(client, "directory_tree", path=".", max_depth=MAX_TREE_DEPTH + 1),
            "VALIDATION",
        )
        # Near the bottom the tree is whole: nothing is marked cut.
        near = leaf.parents[2]
        tree = bounded(await call(client, "directory_tree", path=str(near)))
        assert [f["truncated"] for f in chain(tree["tree"])] == [False, False]

        found = bounded(await call(client, "search_files", path=".", pattern="leaf.txt"))
        assert found["files"] == [str(leaf)]
        found = bounded(await call(client, "search_files", path=".", content="needle"))
        assert [m["path"] for m in found["matches"]] == [str(leaf)]

        deleted = bounded(await call(client, "delete_file", path="d", recursive=True))
        assert not (root / "d").exists()
        assert deleted["files_total"] == depth + 1
        assert len(json.dumps(deleted)) <= MAX_REPLY
        listed = bounded(await call(client, "history"))
        assert [e["transaction"] for e in listed["entries"]] == [deleted["transaction"]]
        assert len(json.dumps(listed)) <= MAX_REPLY

        undone = bounded(await call(client, "undo", transaction=deleted["transaction"]))
        assert leaf.read_text() == "needle\n"
        assert undone["files_total"] == depth + 1
        assert len(json.dumps(undone)) <= MAX_REPLY
        paged = await every_transaction(client, limit=1)
        assert [e["transaction"] for e in paged] == [undone["transaction"], deleted["transaction"]]
        for entry in paged:
            paths = await every_mutation(client, entry["transaction"])
            assert len(paths) == len(set(paths)) == depth + 1


# A big batch and its undo ------------------------------------------------------


async def every_transaction(client: Client, **arguments: Any) -> list[dict[str, Any]]:
    """Every history entry, page by page through next_before; each page bounded."""
    entries: list[dict[str, Any]] = []
    before = None
    while True:
        page = bounded(await call(client, "history", before=before, **arguments))
        assert len(json.dumps(page)) <= MAX_REPLY
        assert page["entries"], page
        entries.extend(page["entries"])
        assert page["truncated"] is (page["next_before"] is not None)
        if page["next_before"] is None:
            return entries
        assert page["next_before"] == page["entries"][-1]["transaction"]
        before = page["next_before"]


async def every_mutation(client: Client, transaction: int) -> list[str]:
    """Every path a transaction's mutations name, page by page; each page bounded."""
    paths: list[str] = []
    offset = 0
    while True:
        page = bounded(
            await call(client, "history", transaction=transaction, mutations_offset=offset)
        )
        assert len(json.dumps(page)) <= MAX_REPLY
        [entry] = page["entries"]
        assert entry["mutations"]
        paths.extend(m["path"] for m in entry["mutations"])
        if entry["mutations_next_offset"] is None:
            assert len(paths) == entry["mutations_total"]
            return paths
        offset = entry["mutations_next_offset"]
        assert offset == len(paths)


@pytest.mark.anyio
async def test_a_big_batch_its_undo_and_history_stay_bounded(root: Path, stderr: TextIO) -> None:
    names = [f"many/{i:05d}.txt" for i in range(BATCH_FILES)]
    async with served(root, stderr) as client:
        small = [
            bounded(await call(client, "write_file", path=f"small{i}.txt", content="x\n"))
            for i in range(5)
        ]
        operations = [{"op": "write", "path": name, "content": f"{name}\n"} for name in names]
        batch = bounded(await call(client, "batch", operations=operations))
        undone = bounded(await call(client, "undo", transaction=batch["transaction"]))
        listed = bounded(await call(client, "history"))
        assert len(json.dumps(listed)) <= MAX_REPLY and listed["truncated"]
        changed = BATCH_FILES + 1  # and the folder they are in
        for result in (batch, undone):
            assert len(json.dumps(result)) <= MAX_REPLY
            assert result["files_total"] == changed and result["files_truncated"]
            assert 0 < len(result["files"]) <= 200 and result["diff_truncated"]
        # Every transaction once, newest first, whatever the page size.
        expected = [undone["transaction"], batch["transaction"]]
        expected += [r["transaction"] for r in reversed(small)]
        for limit in (1, 3, 50):
            paged = await every_transaction(client, limit=limit)
            assert [e["transaction"] for e in paged] == expected
            totals = [e["mutations_total"] for e in paged]
            assert totals == [changed, changed] + [1] * len(small)
            for entry in paged:
                assert 0 < len(entry["mutations"]) <= 200
                shown_all = len(entry["mutations"]) == entry["mutations_total"]
                assert (entry["mutations_next_offset"] is None) is shown_all
        # Every mutation of the batch once.
        paths = await every_mutation(client, batch["transaction"])
        assert len(paths) == len(set(paths)) == changed
        assert set(paths) == {str(root / "many"), *(str(root / name) for name in names)}
        # The path filter pages the same way.
        by_path = await every_transaction(client, path=names[-1], limit=1)
        assert [e["transaction"] for e in by_path] == expected[:2]


# A long chain of undos -----------------------------------------------------------

UNDO_CHAIN = 1_000


@pytest.mark.anyio
async def test_an_undo_under_a_long_chain_of_undos(root: Path, stderr: TextIO) -> None:
    """Undo of an undo of an undo...: whether each is in effect is answered
    down the whole chain, which an agent makes as long as it likes."""
    async with served(root, stderr) as client:
        first = bounded(await call(client, "write_file", path="a.txt", content="x\n"))
        latest = first["transaction"]
        for _ in range(UNDO_CHAIN):
            latest = bounded(await call(client, "undo", transaction=latest))["transaction"]
        # An even number of undos leaves the write in effect: it can be undone.
        assert (root / "a.txt").read_text() == "x\n"
        undone = bounded(await call(client, "undo", transaction=first["transaction"]))
        assert undone["undo_of"] == first["transaction"] and not (root / "a.txt").exists()
        paged = await every_transaction(client, limit=1000)
        assert len(paged) == UNDO_CHAIN + 2
