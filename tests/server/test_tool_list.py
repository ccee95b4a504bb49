"""`tools/list` through the real client: what each flag lets a client see, and
schemas a model can use (a title, annotations, every property described)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ._support import envelope, ok, stdio_params

READS = [
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
]
ISSUE_READS = ["issue_read", "issue_list"]
# It records a point in the journal and changes no file: served read-only too.
CHECKPOINT = ["checkpoint"]

# (readOnly, destructive, idempotent, openWorld) of every tool.
ANNOTATIONS = {
    **{name: (True, None, True, False) for name in READS},
    "write_file": (False, True, True, False),
    "edit_file": (False, True, False, False),
    "edit_notebook": (False, True, False, False),
    "apply_patch": (False, True, False, False),
    "move_file": (False, True, False, False),
    "copy_file": (False, False, False, False),
    "delete_file": (False, True, False, False),
    "create_directory": (False, False, True, False),
    "batch": (False, True, False, False),
    "undo": (False, True, False, False),
    "checkpoint": (True, None, False, False),
    "rewind": (False, True, False, False),
    "issue_read": (True, None, True, True),
    "issue_list": (True, None, True, True),
    "issue_create": (False, False, True, True),
    "issue_comment": (False, False, True, True),
    "issue_reconcile": (False, False, True, True),
}

MODES = ["auto", "legacy"]


@pytest.fixture
def root(workspace: Path) -> Path:
    (workspace / "a.txt").write_text("alpha\n")
    return workspace


def undescribed(schema: Any, where: str = "") -> list[str]:
    """Every property anywhere in `schema` that has no description."""
    missing: list[str] = []
    if isinstance(schema, dict):
        for name, prop in schema.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(f"{where}.{name}")
        for key, value in schema.items():
            missing += undescribed(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for item in schema:
            missing += undescribed(item, where)
    return missing


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_every_tool_has_a_title_exact_annotations_and_described_properties(
    root: Path, mode: str
) -> None:
    async with Client(stdio_params(root, "--issue-tools"), mode=mode) as client:
        listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == set(ANNOTATIONS)
    for tool in listed:
        assert tool.title, tool.name
        hints = tool.annotations
        assert hints is not None
        got = (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        )
        assert got == ANNOTATIONS[tool.name], tool.name
        assert undescribed(tool.input_schema) == [], tool.name


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("flags", "listed"),
    [
        (["--readonly"], READS + CHECKPOINT),
        (["--readonly", "--issue-tools"], READS + CHECKPOINT + ISSUE_READS),
        (["--tools", "read_file,write_file"], ["read_file", "write_file"]),
        (["--readonly", "--tools", "read_file,write_file,batch"], ["read_file"]),
    ],
)
async def test_a_client_sees_exactly_the_tools_it_can_call(
    root: Path, mode: str, flags: list[str], listed: list[str]
) -> None:
    async with Client(stdio_params(root, *flags), mode=mode) as client:
        assert [t.name for t in (await client.list_tools()).tools] == listed
        assert ok(await client.call_tool("read_file", {"path": "a.txt"}))["content"] == "alpha\n"
        # A hidden tool is still answered with the envelope that says why.
        readonly = "--readonly" in flags
        served = flags[-1].split(",") if "--tools" in flags else None
        for tool, arguments in [
            ("write_file", {"path": "a.txt", "content": "x"}),
            ("list_directory", {"path": "."}),
        ]:
            if tool in listed:
                continue
            code = "TOOL_UNAVAILABLE" if served is not None and tool not in served else "READONLY"
            assert readonly or code == "TOOL_UNAVAILABLE"
            envelope(await client.call_tool(tool, arguments), code)
    assert (root / "a.txt").read_text() == "alpha\n"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_listing_is_the_first_one(root: Path, mode: str) -> None:
    # The server keeps the first listing's wire form; a later one must not differ.
    async with Client(stdio_params(root), mode=mode) as client:
        first = (await client.list_tools()).model_dump()
        assert ok(await client.call_tool("read_file", {"path": "a.txt"}))["content"] == "alpha\n"
        again = [(await client.list_tools()).model_dump() for _ in range(3)]
    assert first["tools"]
    assert all(listing == first for listing in again)


#: The most characters the default listing may take (JSON of the client's view, as
#: `json.dumps` writes it): about the reference filesystem server's 13,663 for its 14
#: tools, since every conversation carries it.
MAX_LISTING = 14_000
#: The reference server's listing of the tools both serve (its @modelcontextprotocol/
#: server-filesystem 2025 release: read_text_file counted as read_file), in characters.
REFERENCE_SHARED = {
    "read_file": 1186,
    "read_media_file": 1353,
    "read_multiple_files": 1032,
    "write_file": 838,
    "edit_file": 1140,
    "create_directory": 891,
    "list_directory": 835,
    "directory_tree": 968,
    "move_file": 946,
    "search_files": 1070,
    "get_file_info": 820,
    "list_allowed_directories": 746,
}


def listing_size(tools: list[Any]) -> int:
    return len(
        json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools])
    )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_the_default_listing_is_lean(root: Path, mode: str) -> None:
    async with Client(stdio_params(root), mode=mode) as client:
        listed = (await client.list_tools()).tools
    assert listing_size(listed) <= MAX_LISTING
    shared = [t for t in listed if t.name in REFERENCE_SHARED]
    assert len(shared) == len(REFERENCE_SHARED)
    assert listing_size(shared) <= sum(REFERENCE_SHARED.values())
    for tool in listed:  # a model still learns what each argument is
        assert undescribed(tool.input_schema) == [], tool.name
