"""edit_notebook and read_file's cells, on notebooks nbformat makes in each test.

Every edit is checked on the file: nbformat reads it back valid against the
schema, the cells are what the operations asked for (outputs cleared where a
code cell's source changed, kept elsewhere), the file keeps its layout, and an
undo (or a rewind) puts back the exact bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from ledgerfs.engine import Code, Engine, LedgerError, Session
from ledgerfs.engine.notebooks import edit_cells
from ledgerfs.engine.requests import CellOperation

pytestmark = pytest.mark.anyio

NB = "analysis.ipynb"


def made_notebook(minor: int = 5) -> Any:
    """A notebook with a code cell that ran (outputs, count), markdown, another
    code cell that ran, and a raw cell; metadata at every level."""
    nb = new_notebook(
        cells=[
            new_code_cell(
                "import math\nprint(math.pi)",
                execution_count=1,
                outputs=[new_output("stream", name="stdout", text="3.14159\n")],
                metadata={"tags": ["setup"]},
            ),
            new_markdown_cell("# Results\nThe value is *pi*.", metadata={"slideshow": {}}),
            new_code_cell(
                "2 + 2",
                execution_count=2,
                outputs=[new_output("execute_result", data={"text/plain": "4"}, execution_count=2)],
            ),
            new_raw_cell("raw text"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    if minor < 5:
        nb.nbformat_minor = minor
        for cell in nb.cells:
            del cell["id"]
    nbformat.validate(nb)
    return nb


@pytest.fixture
async def session(workspace: Path, engine: Engine) -> AsyncIterator[Session]:
    nbformat.write(made_notebook(), str(workspace / NB))
    yield await engine.session()


def read_back(path: Path) -> Any:
    """The notebook on disk, read by nbformat and valid against its schema."""
    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    return nb


async def edit(session: Session, *operations: dict[str, Any], **more: Any) -> Any:
    return await session.call("edit_notebook", {"path": NB, "operations": list(operations), **more})


def ids(nb: Any) -> list[str]:
    return [cell.get("id") for cell in nb.cells]


# Each operation: what it leaves, checked cell by cell --------------------------------

ORIGINAL = made_notebook()


def cells_of(nb: Any) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def with_cells(*changes: tuple[int, tuple[str, str] | None]) -> list[tuple[str, str]]:
    """The original cells with each (index, cell or None for deleted) applied."""
    cells: list[tuple[str, str] | None] = list(cells_of(ORIGINAL))
    for index, cell in changes:
        cells[index] = cell
    return [c for c in cells if c is not None]


# (operation with `{id2}` standing for cell 2's id, the cells after, the
# original cell indexes whose outputs the operation clears)
OPERATIONS = [
    (
        {"op": "replace", "cell": 0, "source": "print(1)"},
        with_cells((0, ("code", "print(1)"))),
        {0},
    ),
    (
        {"op": "replace", "cell": "{id2}", "source": "3 + 3"},
        with_cells((2, ("code", "3 + 3"))),
        {2},
    ),
    (
        {"op": "replace", "cell": 1, "source": "## Renamed"},
        with_cells((1, ("markdown", "## Renamed"))),
        set(),
    ),
    (
        {"op": "replace", "cell": 2, "cell_type": "markdown"},
        with_cells((2, ("markdown", "2 + 2"))),
        {2},
    ),
    (
        {"op": "replace", "cell": 1, "cell_type": "code", "source": "x = 1"},
        with_cells((1, ("code", "x = 1"))),
        set(),
    ),
    (
        {"op": "insert", "cell": 0, "source": "# Top", "cell_type": "markdown"},
        [("markdown", "# Top"), *cells_of(ORIGINAL)],
        set(),
    ),
    (
        {"op": "insert", "cell": "{id2}", "source": "y = 2"},
        [*cells_of(ORIGINAL)[:2], ("code", "y = 2"), *cells_of(ORIGINAL)[2:]],
        set(),
    ),
    (
        {"op": "insert", "cell": 4, "source": "end", "cell_type": "raw"},
        [*cells_of(ORIGINAL), ("raw", "end")],
        set(),
    ),
    ({"op": "delete", "cell": 3}, with_cells((3, None)), set()),
    ({"op": "delete", "cell": "{id2}"}, with_cells((2, None)), set()),
]


@pytest.mark.parametrize(("operation", "expected", "cleared"), OPERATIONS)
async def test_each_operation_leaves_a_valid_notebook_and_undo_puts_back_every_byte(
    workspace: Path,
    session: Session,
    operation: dict[str, Any],
    expected: list[tuple[str, str]],
    cleared: set[int],
) -> None:
    path = workspace / NB
    original = path.read_bytes()
    before = read_back(path)
    if operation["cell"] == "{id2}":
        operation = {**operation, "cell": before.cells[2].id}
    result = await edit(session, operation)
    assert [f.op for f in result.files] == ["edit_notebook"]
    after = read_back(path)
    assert cells_of(after) == expected
    assert after.metadata == before.metadata
    for old_index, cell in enumerate(before.cells):
        kept = [c for c in after.cells if c.get("id") == cell.id]
        if not kept:
            continue  # deleted
        [now] = kept
        assert now.metadata == cell.metadata
        if now.cell_type == "code" and cell.cell_type == "code":
            if old_index in cleared:
                assert (now.outputs, now.execution_count) == ([], None)
            else:
                assert (now.outputs, now.execution_count) == (cell.outputs, cell.execution_count)
    # Inserted cells get an id of the schema's shape that no other cell has.
    assert len(set(ids(after))) == len(after.cells)
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", i) for i in ids(after))
    await session.call("undo", {"transaction": result.transaction})
    assert path.read_bytes() == original


async def test_operations_apply_in_order_in_one_transaction(
    workspace: Path, session: Session
) -> None:
    path = workspace / NB
    original = path.read_bytes()
    result = await edit(
        session,
        {"op": "delete", "cell": 0},
        {"op": "insert", "cell": 0, "source": "import os"},
        {"op": "replace", "cell": 1, "source": "# Now second"},
    )
    after = read_back(path)
    assert cells_of(after)[:2] == [("code", "import os"), ("markdown", "# Now second")]
    history = await session.call("history", {"path": NB})
    assert [e.transaction for e in history.entries] == [result.transaction]
    await session.call("undo", {"transaction": result.transaction})
    assert path.read_bytes() == original


async def test_a_source_left_as_it_was_keeps_the_outputs_and_the_file(
    workspace: Path, session: Session
) -> None:
    path = workspace / NB
    original = path.read_bytes()
    result = await edit(session, {"op": "replace", "cell": 0, "source": ORIGINAL.cells[0].source})
    assert result.transaction is None
    assert path.read_bytes() == original


async def test_rewind_of_the_session_puts_back_every_byte(
    workspace: Path, session: Session
) -> None:
    path = workspace / NB
    original = path.read_bytes()
    await edit(session, {"op": "replace", "cell": 0, "source": "print(2)"})
    await edit(session, {"op": "delete", "cell": 1})
    await session.call("rewind", {"session": session.id})
    assert path.read_bytes() == original


async def test_dry_run_shows_the_diff_and_changes_nothing(
    workspace: Path, session: Session
) -> None:
    path = workspace / NB
    original = path.read_bytes()
    result = await edit(session, {"op": "replace", "cell": 2, "source": "5 * 5"}, dry_run=True)
    assert result.dry_run and result.transaction is None
    assert '+    "5 * 5"' in result.diff
    assert path.read_bytes() == original


async def test_a_stale_expected_hash_is_refused(workspace: Path, session: Session) -> None:
    path = workspace / NB
    read = await session.call("read_file", {"path": NB})
    path.write_text(path.read_text().replace("2 + 2", "2 + 3"))
    changed = path.read_bytes()
    with pytest.raises(LedgerError) as caught:
        await edit(session, {"op": "delete", "cell": 0}, expected_hash=read.content_hash)
    assert caught.value.code is Code.OCC_MISMATCH
    assert path.read_bytes() == changed


async def test_cells_of_a_notebook_before_4_5_get_no_ids(workspace: Path, engine: Engine) -> None:
    path = workspace / "old.ipynb"
    nbformat.write(made_notebook(minor=4), str(path))
    session = await engine.session()
    operations = [{"op": "insert", "cell": 1, "source": "new", "cell_type": "markdown"}]
    await session.call("edit_notebook", {"path": "old.ipynb", "operations": operations})
    after = read_back(path)
    assert after.nbformat_minor == 4
    assert all("id" not in cell for cell in after.cells)
    assert after.cells[1].source == "new"
    with pytest.raises(LedgerError) as caught:
        await session.call(
            "edit_notebook",
            {"path": "old.ipynb", "operations": [{"op": "delete", "cell": "abc"}]},
        )
    assert caught.value.details["field"] == "operations[0].cell"
    assert caught.value.details["reason"] == "no_cell_ids"


async def test_cells_a_4_5_file_gives_no_id_get_one_when_it_is_written(
    workspace: Path, engine: Engine
) -> None:
    raw = json.loads(nbformat.writes(made_notebook()))
    for cell in raw["cells"]:
        del cell["id"]
    path = workspace / "no-ids.ipynb"
    text = json.dumps(raw, indent=1, sort_keys=True) + "\n"
    path.write_text(text)
    session = await engine.session()
    same = [
        {"op": "replace", "cell": 1, "source": raw["cells"][1]["source"][0] + "The value is *pi*."}
    ]
    result = await session.call("edit_notebook", {"path": "no-ids.ipynb", "operations": same})
    assert result.transaction is None and path.read_text() == text
    operations = [{"op": "replace", "cell": 1, "source": "# Other"}]
    await session.call("edit_notebook", {"path": "no-ids.ipynb", "operations": operations})
    after = read_back(path)
    assert len(set(ids(after))) == len(after.cells) == 4
    assert after.cells[1].source == "# Other"


# The file's layout --------------------------------------------------------------------


def laid_out(
    indent: int | str | None = 1,
    sort_keys: bool = True,
    ensure_ascii: bool = False,
    split: bool = True,
    newline: str = "\n",
    final: bool = True,
) -> Callable[[Any], bytes]:
    """A writer of notebooks in one layout, as other tools than Jupyter write them."""

    def write(nb: Any) -> bytes:
        node = json.loads(json.dumps(nb))
        if split:
            node = nbformat.v4.rwbase.split_lines(nbformat.from_dict(node))
        text = json.dumps(
            node,
            indent=indent,
            sort_keys=sort_keys,
            ensure_ascii=ensure_ascii,
            separators=(",", ": ") if indent is not None else None,
        )
        text = (text + "\n" if final else text).replace("\n", newline)
        return text.encode("utf-8")

    return write


LAYOUTS = {
    "nbformat": laid_out(),
    "two spaces, keys as written": laid_out(indent=2, sort_keys=False),
    "four spaces, ascii escapes": laid_out(indent=4, ensure_ascii=True),
    "tabs": laid_out(indent="\t"),
    "sources as strings": laid_out(split=False),
    "crlf, no final newline": laid_out(newline="\r\n", final=False),
    "one line": laid_out(indent=None),
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=list(LAYOUTS))
async def test_the_file_keeps_its_layout(
    workspace: Path, engine: Engine, layout: Callable[[Any], bytes]
) -> None:
    nb = made_notebook()
    nb.cells[1].source = "# Résumé: π ≈ 3.14"
    path = workspace / "laid.ipynb"
    path.write_bytes(layout(nb))
    session = await engine.session()
    operations = [
        {"op": "replace", "cell": 0, "source": "print('é')"},
        {"op": "insert", "cell": 4, "source": "last"},
    ]
    await session.call("edit_notebook", {"path": "laid.ipynb", "operations": operations})
    after = read_back(path)
    # What nbformat read back, written in the same layout, is the file byte for byte.
    assert path.read_bytes() == layout(after)
    assert after.cells[0].source == "print('é')" and after.cells[0].outputs == []
    assert [c.source for c in after.cells[1:4]] == [c.source for c in nb.cells[1:4]]


async def test_a_notebook_nbformat_would_lay_out_otherwise_is_not_rewritten(
    workspace: Path, engine: Engine
) -> None:
    path = workspace / "vscode.ipynb"
    nb = made_notebook()
    text = laid_out(indent=2, sort_keys=False, split=False)(nb)
    assert nbformat.writes(nbformat.reads(text.decode(), as_version=4)).encode() != text
    path.write_bytes(text)
    session = await engine.session()
    operations = [{"op": "replace", "cell": 1, "source": nb.cells[1].source}]
    result = await session.call("edit_notebook", {"path": "vscode.ipynb", "operations": operations})
    assert result.transaction is None
    assert path.read_bytes() == text


# Refusals: the right code, the field named, nothing changed --------------------------

REFUSALS = [
    (
        NB,
        [{"op": "replace", "cell": 9, "source": "x"}],
        Code.VALIDATION,
        "operations[0].cell",
        "no_such_cell",
    ),
    (
        NB,
        [{"op": "delete", "cell": "no-such-id"}],
        Code.VALIDATION,
        "operations[0].cell",
        "no_such_cell",
    ),
    (
        NB,
        [{"op": "delete", "cell": 3}, {"op": "delete", "cell": 3}],
        Code.VALIDATION,
        "operations[1].cell",
        "no_such_cell",
    ),
    (NB, [{"op": "replace", "cell": 0}], Code.VALIDATION, "operations[0].source", "missing"),
    (
        NB,
        [{"op": "delete", "cell": 0, "source": "x"}],
        Code.VALIDATION,
        "operations[0].source",
        "not_with_delete",
    ),
    (NB, [{"op": "move", "cell": 0}], Code.VALIDATION, None, None),
    (NB, [{"op": "insert", "cell": -1, "source": "x"}], Code.VALIDATION, None, None),
    (NB, [{"op": "insert", "cell": 0, "cell_type": "sql"}], Code.VALIDATION, None, None),
    (NB, [], Code.VALIDATION, None, None),
    ("notes.txt", [{"op": "delete", "cell": 0}], Code.VALIDATION, "path", "not_a_notebook"),
    ("broken.ipynb", [{"op": "delete", "cell": 0}], Code.VALIDATION, None, "invalid_notebook"),
    ("schema.ipynb", [{"op": "delete", "cell": 0}], Code.VALIDATION, None, "invalid_notebook"),
    ("v3.ipynb", [{"op": "delete", "cell": 0}], Code.VALIDATION, None, "invalid_notebook"),
    ("missing.ipynb", [{"op": "delete", "cell": 0}], Code.NOT_FOUND, None, None),
]


@pytest.mark.parametrize(("path", "operations", "code", "field", "reason"), REFUSALS)
async def test_bad_input_is_refused_and_changes_nothing(
    workspace: Path,
    session: Session,
    path: str,
    operations: list[dict[str, Any]],
    code: Code,
    field: str | None,
    reason: str | None,
) -> None:
    (workspace / "notes.txt").write_text("not a notebook\n")
    (workspace / "broken.ipynb").write_text('{"cells": [')
    bad = json.loads(nbformat.writes(made_notebook()))
    bad["cells"][0]["outputs"] = [{"output_type": "bogus"}]
    (workspace / "schema.ipynb").write_text(json.dumps(bad))
    (workspace / "v3.ipynb").write_text(
        json.dumps({"nbformat": 3, "nbformat_minor": 0, "cells": [], "worksheets": []})
    )
    before = {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()}
    with pytest.raises(LedgerError) as caught:
        await session.call("edit_notebook", {"path": path, "operations": operations})
    error = caught.value
    assert error.code is code
    if field is not None:
        assert error.details["field"] == field
    if reason is not None:
        assert error.details["reason"] == reason
    if code is Code.VALIDATION and field is None and reason is None:
        assert "$.operations" in error.details["reason"]  # msgspec names it by path
    assert {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()} == before
    assert (await session.call("history", {})).entries == []


# read_file's cells ------------------------------------------------------------------


async def test_read_file_returns_the_cells_in_short(workspace: Path, session: Session) -> None:
    read = await session.call("read_file", {"path": NB, "format": "cells"})
    nb = read_back(workspace / NB)
    assert read.content == "" and read.cells is not None
    assert [(c.index, c.id, c.cell_type, c.source) for c in read.cells] == [
        (i, cell.id, cell.cell_type, cell.source) for i, cell in enumerate(nb.cells)
    ]
    assert read.cells[0].outputs == "stdout: '3.14159'"
    assert read.cells[2].outputs == "execute_result [text/plain]: '4'"
    assert read.cells[1].outputs is None
    assert read.content_hash == (await session.call("read_file", {"path": NB})).content_hash
    page = await session.call("read_file", {"path": NB, "format": "cells", "offset": 1, "limit": 2})
    assert [c.index for c in page.cells] == [1, 2]
    assert (page.truncated, page.next_offset, page.total_lines) == (True, 3, 4)


async def test_read_file_cells_of_a_file_that_is_no_notebook_is_refused(
    workspace: Path, session: Session
) -> None:
    (workspace / "notes.txt").write_text("text\n")
    with pytest.raises(LedgerError) as caught:
        await session.call("read_file", {"path": "notes.txt", "format": "cells"})
    assert caught.value.code is Code.VALIDATION
    assert caught.value.details == {"field": "format", "reason": "not_a_notebook"}


# Any sequence of operations, against a model of the cells -----------------------------


def _base() -> Any:
    nb = made_notebook()
    # A character beyond ASCII shows whether the file escapes such characters.
    nb.cells[1].source = "# Résumé: π ≈ 3.14"
    return nb


BASE = _base()
_SOURCES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_KINDS = st.sampled_from(["code", "markdown", "raw"])


@st.composite
def _operations(draw: st.DrawFn) -> list[CellOperation]:
    count = len(BASE.cells)
    operations = []
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["replace", "insert", "delete"] if count else ["insert"]))
        if op == "insert":
            cell = draw(st.integers(0, count))
            operations.append(
                CellOperation(
                    op="insert",
                    cell=cell,
                    source=draw(_SOURCES),
                    cell_type=draw(st.none() | _KINDS),
                )
            )
            count += 1
        elif op == "delete":
            operations.append(CellOperation(op="delete", cell=draw(st.integers(0, count - 1))))
            count -= 1
        else:
            source, kind = draw(
                st.one_of(
                    st.tuples(_SOURCES, st.none()),
                    st.tuples(st.none(), _KINDS),
                    st.tuples(_SOURCES, _KINDS),
                )
            )
            operations.append(
                CellOperation(
                    op="replace",
                    cell=draw(st.integers(0, count - 1)),
                    source=source,
                    cell_type=kind,
                )
            )
    return operations


@settings(max_examples=150, deadline=None)
@given(operations=_operations(), layout=st.sampled_from(list(LAYOUTS.values())))
def test_any_operations_leave_the_modelled_cells_in_a_valid_notebook(
    operations: list[CellOperation], layout: Callable[[Any], bytes]
) -> None:
    data = layout(BASE)
    edited = edit_cells("/w/n.ipynb", "n.ipynb", data, operations)
    nb = nbformat.reads(edited.decode("utf-8"), as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    # The model: (type, source, outputs) of each cell, and what each operation does.
    model = [(c.cell_type, c.source, c.get("outputs")) for c in BASE.cells]
    for operation in operations:
        assert isinstance(operation.cell, int)
        if operation.op == "insert":
            kind = operation.cell_type or "code"
            model.insert(operation.cell, (kind, operation.source, [] if kind == "code" else None))
        elif operation.op == "delete":
            del model[operation.cell]
        else:
            kind, source, outputs = model[operation.cell]
            new_kind = operation.cell_type or kind
            new_source = source if operation.source is None else operation.source
            if new_kind != "code":
                outputs = None
            elif kind != "code" or new_source != source:
                outputs = []
            model[operation.cell] = (new_kind, new_source, outputs)
    assert [(c.cell_type, c.source, c.get("outputs")) for c in nb.cells] == model
    assert len({c.id for c in nb.cells}) == len(nb.cells)
    assert nb.metadata == BASE.metadata
    # Nothing changed is nothing written; anything else is laid out as the file was.
    assert edited == (data if nb == BASE else layout(nb))
