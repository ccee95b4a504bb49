"""Jupyter notebooks changed cell by cell, and written back in their file's layout.

nbformat (the Jupyter project's notebook library) reads, models and validates a
notebook; cells are made with its constructors, so a new cell has the fields and
the kind of id the format asks for. What nbformat does not keep is the file's
layout: it always writes one space of indentation and sorted keys. A notebook is
written back as its file was laid out (indentation, key order, ASCII escapes,
sources as lists of lines or as strings, line endings, final newline and BOM), so
a change to one cell is a diff of that cell; a notebook whose cells come out as
they were is not rewritten at all, however nbformat would lay it out.

Nothing here touches a disk: bytes in, bytes out (the planner's contract).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec

from .errors import Code, LedgerError
from .results import FileContent, NotebookCell

__all__ = [
    "CellEdit",
    "Layout",
    "cells_page",
    "edit_cells",
    "is_notebook",
    "notebook_cells",
    "render",
    "require_notebook",
]

_BOM = codecs.BOM_UTF8
#: At most this many characters of a cell's outputs in short.
OUTPUTS_SUMMARY = 200
#: A page of cells holds at most this many characters of source (at least one cell).
MAX_CELLS_TEXT = 256 * 1024


class CellEdit(Protocol):
    """One cell operation, as edit_notebook's request carries it (requests.CellOperation)."""

    @property
    def op(self) -> str: ...
    @property
    def cell(self) -> int | str: ...
    @property
    def source(self) -> str | None: ...
    @property
    def cell_type(self) -> str | None: ...


def is_notebook(path: str) -> bool:
    """Whether `path` names a notebook file.

    >>> is_notebook("/w/Analysis.IPYNB"), is_notebook("/w/notes.json")
    (True, False)
    """
    return path.lower().endswith(".ipynb")


def require_notebook(path: str, label: str, field: str, instead: str) -> None:
    """Raise VALIDATION (argument `field`) unless `path` names a notebook;
    `instead` tells the client what to do."""
    if not is_notebook(path):
        raise LedgerError(
            Code.VALIDATION,
            f"{label} is not a notebook (.ipynb); {instead}",
            path=path,
            details={"field": field, "reason": "not_a_notebook"},
        )


class Named(NamedTuple):
    """A notebook's path (for envelopes) and its label (for messages)."""

    path: str
    label: str


class Layout(msgspec.Struct, frozen=True, kw_only=True):
    """How a notebook's file is laid out, beyond what nbformat models."""

    indent: int | str | None = 1
    sort_keys: bool = True
    ensure_ascii: bool = False
    #: Sources and text outputs as lists of lines (nbformat's way) or as strings.
    split_lines: bool = True
    final_newline: bool = True
    crlf: bool = False
    bom: bool = False


def edit_cells(
    path: str, label: str, data: bytes, operations: Sequence[CellEdit], field: str = "operations"
) -> bytes:
    """The notebook `data` with `operations` applied in order, each to the cells
    the ones before it left; `data` itself when the cells come out as they were.

    A code cell whose source changes loses its outputs and execution count. In a
    notebook of nbformat 4.5 or later, cells the file gives no id get one when
    the notebook is written (as nbformat's `normalize` does), so it is valid.
    Raises VALIDATION naming the field (`operations[1].cell`) for a cell that is
    not there or an operation that lacks what it needs, and for a file that is
    not a valid version 4 notebook (`details.reason`: `invalid_notebook`).
    """
    from nbformat.notebooknode import NotebookNode

    name = Named(path, label)
    before, raw, layout = _parse(name, data, validate=True)
    # Operations change the list of cells, never the notebook around it: the
    # edited notebook shares every cell no operation replaced (see `_replaced`).
    after = NotebookNode(before)
    after["cells"] = list(before.cells)
    for index, operation in enumerate(operations):
        _apply(name, after, operation, f"{field}[{index}]")
    if after.cells == before.cells:
        return data
    _give_ids(after)
    kept = {id(cell): index for index, cell in enumerate(before.cells)}
    made = [cell for cell in after.cells if id(cell) not in kept]
    # The file was valid; what is new in it is each cell made and the ids.
    for cell in made:
        kind = f"{cell.cell_type}_cell"
        _check_valid(name, cell, "the edited notebook", ref=kind, minor=after.nbformat_minor)
    _check_unique_ids(name, after.cells, "the edited notebook")
    if layout.split_lines:
        from nbformat.v4.rwbase import split_lines

        split_lines(NotebookNode(cells=made))  # only their sources: a made cell has no outputs
    cells = []
    for cell in after.cells:
        position = kept.get(id(cell))
        if position is None:
            cells.append(cell)
            continue
        # A cell kept is written as the file held it, in its own form.
        was = raw["cells"][position]
        cells.append({**was, "id": cell["id"]} if "id" in cell and "id" not in was else was)
    return render({**raw, "cells": cells}, layout)


def notebook_cells(path: str, label: str, data: bytes) -> list[NotebookCell]:
    """The cells of notebook `data`: index, id, type, source and outputs in short.

    Raises VALIDATION (`details.reason`: `invalid_notebook`) for bytes that are
    not a version 4 notebook; a notebook that breaks its schema is still shown.
    """
    node, _, _ = _parse(Named(path, label), data, validate=False)
    return [
        NotebookCell(
            index=index,
            id=cell.get("id"),
            cell_type=str(cell.get("cell_type", "")),
            source=str(cell.get("source", "")),
            outputs=_outputs_summary(cell.get("outputs") or []),
        )
        for index, cell in enumerate(node.cells)
    ]


def cells_page(
    path: str, label: str, data: bytes, digest: str, bounds: Callable[[int], tuple[int, int]]
) -> FileContent:
    """read_file's `format: "cells"` result: the cells `bounds` (given the count)
    selects, at most MAX_CELLS_TEXT characters of source but at least one cell."""
    cells = notebook_cells(path, label, data)
    start, end = bounds(len(cells))
    used = 0
    for index in range(start, end):
        used += len(cells[index].source)
        if used > MAX_CELLS_TEXT and index > start:
            end = index
            break
    following = end if end < len(cells) else None
    return FileContent(
        path=path,
        content="",
        cells=cells[start:end],
        encoding="utf-8",
        content_hash=digest,
        size=len(data),
        total_lines=len(cells),
        offset=start,
        lines=end - start,
        truncated=following is not None,
        next_offset=following,
    )


def render(node: Any, layout: Layout) -> bytes:
    """The bytes of notebook `node`, in the form it is to be written (sources
    split into lines or not), laid out as `layout` says.

    >>> render({"cells": [], "nbformat": 4}, Layout(indent=2, final_newline=False))
    b'{\\n  "cells": [],\\n  "nbformat": 4\\n}'
    """
    from nbformat.v4.nbjson import BytesEncoder

    text = json.dumps(
        node,
        cls=BytesEncoder,
        indent=layout.indent,
        sort_keys=layout.sort_keys,
        ensure_ascii=layout.ensure_ascii,
        separators=(",", ": ") if layout.indent is not None else None,
    )
    if layout.final_newline:
        text += "\n"
    if layout.crlf:
        # JSON strings escape their line breaks: every one in the text is layout.
        text = text.replace("\n", "\r\n")
    encoded = text.encode("utf-8")
    return _BOM + encoded if layout.bom else encoded


# Reading ---------------------------------------------------------------------


def _parse(name: Named, data: bytes, *, validate: bool) -> tuple[Any, dict[str, Any], Layout]:
    """The notebook nbformat reads from `data` (sources joined, transient fields
    dropped), its JSON as the file holds it, and the layout of its file;
    VALIDATION when it is not one."""
    from nbformat.v4.nbjson import to_notebook

    bom = data.startswith(_BOM)
    try:
        text = data[len(_BOM) if bom else 0 :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(name, f"it is not UTF-8 text (byte {exc.start})") from exc
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f": {exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise _invalid(name, f"it is not JSON{where}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        raise _invalid(name, "it has no list of cells")
    version = (raw.get("nbformat"), raw.get("nbformat_minor"))
    if version[0] != 4 or not isinstance(version[1], int):
        raise _invalid(
            name,
            f"it is nbformat {version[0]}.{version[1]}; only version 4 notebooks are read "
            "by cells (open it in Jupyter and save it to convert it)",
        )
    if not all(isinstance(cell, dict) for cell in raw["cells"]):
        raise _invalid(name, "a cell is not a JSON object")
    if validate:
        # Cells without ids are judged as they will be written: with ids.
        filled = {**raw, "cells": [dict(cell) for cell in raw["cells"]]}
        _check_valid(name, _give_ids(filled), "the file")
        _check_unique_ids(name, raw["cells"], "the file")
    return to_notebook(raw), raw, _layout_of(text, raw, bom)


def _layout_of(text: str, raw: dict[str, Any], bom: bool) -> Layout:
    """The layout of a notebook's `text` (`raw` its JSON as parsed)."""
    body = text.replace("\r\n", "\n")
    indent: int | str | None = None
    first_break = body.find("\n")
    if first_break >= 0 and first_break < len(body) - 1:
        line = body[first_break + 1 :]
        lead = line[: len(line) - len(line.lstrip(" \t"))]
        indent = lead if lead.startswith("\t") else len(lead)
    cells = raw["cells"]
    return Layout(
        indent=indent,
        sort_keys=_keys_sorted(raw),
        ensure_ascii=body.isascii() and "\\u" in body,
        split_lines=any(isinstance(c.get("source"), list) for c in cells) if cells else True,
        final_newline=body.endswith("\n"),
        crlf="\r\n" in text,
        bom=bom,
    )


def _keys_sorted(value: Any) -> bool:
    """Whether every object in a JSON value lists its keys in sorted order."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys = list(item)
            if keys != sorted(keys):
                return False
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _check_valid(
    name: Named, value: Any, whose: str, ref: str | None = None, minor: int = 5
) -> None:
    """VALIDATION unless `value`, a notebook (or, with `ref`, one of its cells), is
    valid against the schema of its version (nbformat 4.x)."""
    from nbformat.validator import iter_validate

    # iter_validate neither changes the notebook nor warns (validate() repairs ids).
    if ref is None:
        errors = iter_validate(value)
    else:
        errors = iter_validate(value, ref=ref, version=4, version_minor=minor)
    error = next(iter(errors), None)
    if error is not None:
        where = "/".join(str(part) for part in getattr(error, "absolute_path", ()))
        message = str(getattr(error, "message", error)).splitlines()[0]
        raise _invalid(
            name,
            f"{whose} breaks the notebook schema at /{where}: {message}",
            schema_error=message,
            at="/" + where,
        )


def _check_unique_ids(name: Named, cells: list[Any], whose: str) -> None:
    """VALIDATION when two cells have the same id."""
    seen: set[str] = set()
    for cell in cells:
        cell_id = cell.get("id")
        if cell_id is None:
            continue
        if cell_id in seen:
            raise _invalid(name, f"{whose} has two cells with the id {cell_id!r}")
        seen.add(cell_id)


def _give_ids(notebook: Any) -> Any:
    """`notebook` with an id on every cell that has none, when its version has ids
    (nbformat 4.5 and later; older ones have none)."""
    if notebook.get("nbformat_minor", 0) < 5:
        return notebook
    from nbformat.corpus.words import generate_corpus_id

    taken = {cell.get("id") for cell in notebook["cells"]}
    for cell in notebook["cells"]:
        if "id" not in cell:
            while (made := generate_corpus_id()) in taken:
                pass
            cell["id"] = made
            taken.add(made)
    return notebook


def _invalid(name: Named, why: str, **details: str) -> LedgerError:
    return LedgerError(
        Code.VALIDATION,
        f"{name.label} is not a notebook edit_notebook can change: {why}.",
        path=name.path,
        details={"reason": "invalid_notebook", **details},
        suggestion="read it with read_file and fix its JSON with edit_file",
    )


def _outputs_summary(outputs: list[Any]) -> str | None:
    """A cell's outputs in short: each one's kind and first line.

    >>> _outputs_summary([{"output_type": "stream", "name": "stdout", "text": "a\\nb\\n"}])
    "stdout: 'a' (+1 lines)"
    """
    if not outputs:
        return None
    parts = [_output_summary(output) for output in outputs[:5]]
    if len(outputs) > 5:
        parts.append(f"{len(outputs) - 5} more")
    summary = "; ".join(parts)
    return summary if len(summary) <= OUTPUTS_SUMMARY else summary[: OUTPUTS_SUMMARY - 3] + "..."


def _output_summary(output: Any) -> str:
    kind = output.get("output_type", "?")
    if kind == "stream":
        return f"{output.get('name', 'stream')}: {_first_line(output.get('text', ''))}"
    if kind == "error":
        return f"error {output.get('ename', '')}: {str(output.get('evalue', ''))[:60]}"
    data = output.get("data") or {}
    shown = f"{kind} [{', '.join(data)}]"
    plain = data.get("text/plain")
    return f"{shown}: {_first_line(plain)}" if plain else shown


def _first_line(text: Any) -> str:
    joined = "".join(text) if isinstance(text, list) else str(text)
    lines = joined.splitlines() or [""]
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return repr(lines[0][:60]) + more


# Operations ------------------------------------------------------------------


def _apply(name: Named, notebook: Any, operation: CellEdit, where: str) -> None:
    cells: list[Any] = notebook.cells
    with_ids = notebook.nbformat_minor >= 5
    match operation.op:
        case "delete":
            for argument in ("source", "cell_type"):
                if getattr(operation, argument) is not None:
                    raise _bad_field(where, argument, "delete takes only cell", "not_with_delete")
            del cells[_index_of(name, cells, operation.cell, where, with_ids)]
        case "replace":
            if operation.source is None and operation.cell_type is None:
                raise _bad_field(
                    where, "source", "replace needs source, cell_type or both", "missing"
                )
            index = _index_of(name, cells, operation.cell, where, with_ids)
            cells[index] = _replaced(cells[index], operation.source, operation.cell_type)
        case "insert":
            index = _insert_at(name, cells, operation.cell, where, with_ids)
            taken = {cell.get("id") for cell in cells}
            made = _new_cell(operation.cell_type or "code", operation.source or "", taken)
            if not with_ids:
                del made["id"]
            cells.insert(index, made)


def _index_of(name: Named, cells: list[Any], cell: int | str, where: str, with_ids: bool) -> int:
    """The index of the cell `cell` names (an index, or an id)."""
    if isinstance(cell, int):
        if cell < len(cells):
            return cell
        raise _no_cell(name, cells, cell, where)
    if not with_ids:
        raise _bad_field(
            where,
            "cell",
            f"{name.label}'s cells have no ids (nbformat before 4.5); name a cell by its index",
            "no_cell_ids",
        )
    for index, each in enumerate(cells):
        if each.get("id") == cell:
            return index
    raise _no_cell(name, cells, cell, where)


def _insert_at(name: Named, cells: list[Any], cell: int | str, where: str, with_ids: bool) -> int:
    """Where an inserted cell goes: at index `cell` (up to the count: appended),
    or where the cell with id `cell` is (before it)."""
    if isinstance(cell, int) and cell == len(cells):
        return cell
    return _index_of(name, cells, cell, where, with_ids)


def _no_cell(name: Named, cells: list[Any], cell: int | str, where: str) -> LedgerError:
    count = f"{len(cells)} cells, indexes 0 to {len(cells) - 1}" if cells else "no cells"
    return LedgerError(
        Code.VALIDATION,
        f"{name.label} has no cell {cell!r} ({count}).",
        path=name.path,
        details={"field": f"{where}.cell", "reason": "no_such_cell", "cells": len(cells)},
        suggestion='list its cells with read_file and format: "cells"',
    )


def _bad_field(where: str, name: str, why: str, reason: str) -> LedgerError:
    return LedgerError(
        Code.VALIDATION,
        f"{where}.{name}: {why}.",
        details={"field": f"{where}.{name}", "reason": reason},
    )


def _replaced(cell: Any, source: str | None, cell_type: str | None) -> Any:
    """`cell` with a new source or type, its id and metadata kept; a code cell
    whose source changes, or that a cell becomes, has no outputs."""
    kind = cell_type or cell.cell_type
    text = cell.source if source is None else source
    if kind != cell.cell_type:
        made = _new_cell(kind, text, set(), metadata=cell.metadata)
        if "id" in cell:
            made["id"] = cell["id"]
        else:
            del made["id"]
        if "attachments" in cell and kind != "code":
            made["attachments"] = cell["attachments"]
        return made
    if text == cell.source:
        return cell  # the same cell: kept as the file holds it
    changed = type(cell)(cell)  # a copy: the notebook as read stays as it was
    changed.source = text
    if kind == "code":
        changed.outputs = []
        changed.execution_count = None
    return changed


def _new_cell(kind: str, source: str, taken: set[Any], metadata: Any = None) -> Any:
    """A new cell made by nbformat, with an id none of `taken` has."""
    from nbformat.corpus.words import generate_corpus_id
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_raw_cell

    make = {"code": new_code_cell, "markdown": new_markdown_cell, "raw": new_raw_cell}[kind]
    cell = make(source=source) if metadata is None else make(source=source, metadata=metadata)
    while cell["id"] in taken:
        cell["id"] = generate_corpus_id()
    return cell
