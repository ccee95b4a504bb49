"""edit_notebook, read_file's cells and copy_file through a real stdio server.

The notebook is made by nbformat; after each call the file on disk is read back
by nbformat and validated against its schema, and undo through the server puts
back every byte. Every successful result is checked against the tool's output
schema, every failure is the envelope with the field named.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import pytest
from mcp import Client
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from ledgerfs.engine.tools import find_tool

from ._support import envelope, ok, stdio_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def root(workspace: Path) -> Path:
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Load"),
            new_code_cell(
                "rows = load()\nlen(rows)",
                execution_count=7,
                outputs=[new_output("execute_result", data={"text/plain": "120"})],
            ),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    nbformat.write(nb, str(workspace / "load.ipynb"))
    (workspace / "lib" / "sub").mkdir(parents=True)
    (workspace / "lib" / "a.py").write_text("A = 1\n")
    (workspace / "lib" / "sub" / "b.py").write_text("B = 2\n")
    (workspace / "lib" / "current").symlink_to("sub/b.py")
    return workspace


@pytest.fixture
async def client(root: Path) -> AsyncIterator[Client]:
    async with Client(stdio_params(root)) as c:
        yield c


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    body = ok(result)
    jsonschema.validate(body, find_tool(tool).output_schema())
    return body


def valid_notebook(path: Path) -> Any:
    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    return nb


async def test_a_notebook_is_read_by_cells_edited_and_undone(client: Client, root: Path) -> None:
    path = root / "load.ipynb"
    original = path.read_bytes()
    read = await call(client, "read_file", path="load.ipynb", format="cells")
    cells = read["cells"]
    assert [(c["index"], c["cell_type"]) for c in cells] == [(0, "markdown"), (1, "code")]
    assert cells[1]["outputs"] == "execute_result [text/plain]: '120'"
    edited = await call(
        client,
        "edit_notebook",
        path="load.ipynb",
        expected_hash=read["content_hash"],
        operations=[
            {"op": "replace", "cell": cells[1]["id"], "source": "rows = load()\nrows[:5]"},
            {"op": "insert", "cell": 2, "source": "## Next", "cell_type": "markdown"},
        ],
    )
    assert [f["op"] for f in edited["files"]] == ["edit_notebook"]
    nb = valid_notebook(path)
    assert [c.source for c in nb.cells] == ["# Load", "rows = load()\nrows[:5]", "## Next"]
    assert (nb.cells[1].outputs, nb.cells[1].execution_count) == ([], None)
    assert nb.metadata.kernelspec.name == "python3"
    history = await call(client, "history", path="load.ipynb")
    assert [e["transaction"] for e in history["entries"]] == [edited["transaction"]]
    await call(client, "undo", transaction=edited["transaction"])
    assert path.read_bytes() == original


async def test_a_bad_cell_is_an_envelope_naming_the_operation(client: Client, root: Path) -> None:
    original = (root / "load.ipynb").read_bytes()
    result = await client.call_tool(
        "edit_notebook",
        {
            "path": "load.ipynb",
            "operations": [{"op": "delete", "cell": 0}, {"op": "delete", "cell": 1}],
        },
    )
    body = envelope(result, "VALIDATION")
    assert body["details"] == {"field": "operations[1].cell", "reason": "no_such_cell", "cells": 1}
    assert (root / "load.ipynb").read_bytes() == original


def entries(root: Path, folder: str) -> dict[str, Any]:
    base = root / folder
    return {
        p.relative_to(base).as_posix(): ("link", os.readlink(p))
        if p.is_symlink()
        else ("dir",)
        if p.is_dir()
        else p.read_bytes()
        for p in sorted(base.rglob("*"))
    }


async def test_a_folder_is_copied_with_its_link_and_undone(client: Client, root: Path) -> None:
    copied = await call(client, "copy_file", source="lib", destination="vendor/lib")
    assert sorted(f["op"] for f in copied["files"]) == ["copy"] * 3 + ["mkdir"] * 3
    assert entries(root, "vendor/lib") == entries(root, "lib")
    assert entries(root, "vendor/lib")["current"] == ("link", "sub/b.py")
    refused = await client.call_tool("copy_file", {"source": "lib", "destination": "vendor/lib"})
    body = envelope(refused, "VALIDATION")
    assert body["details"] == {"field": "destination", "reason": "destination_exists"}
    await call(client, "undo", transaction=copied["transaction"])
    assert not (root / "vendor").exists()


async def test_copying_a_secret_is_refused_as_reading_it_is(client: Client, root: Path) -> None:
    (root / "lib" / ".env").write_text("KEY=1\n")
    read = await client.call_tool("read_file", {"path": "lib/.env"})
    envelope(read, "SECRET_DENIED")
    for source in ("lib/.env", "lib"):
        result = await client.call_tool("copy_file", {"source": source, "destination": "x"})
        envelope(result, "SECRET_DENIED")
    assert not (root / "x").exists()
