"""The mutation budget counts files, whatever tool changes them.

For each tool (through the real stdio server): a call that changes N files costs
N. With N - 1 left it is refused whole (BUDGET_EXCEEDED, naming the N it needs)
and nothing on disk changes; with N left it goes through and leaves nothing, so
the next one-file write is refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ._support import Server, error, ok

N = 5
FILES = [f"f{i}.txt" for i in range(N)]


def _patch_each(paths: list[str]) -> str:
    """A unified diff that changes the one line of each file."""
    return "".join(f"--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-{p}\n+{p} changed\n" for p in paths)


def _patch_deleting(paths: list[str]) -> str:
    return "".join(
        f"diff --git a/{p} b/{p}\ndeleted file mode 100644\n--- a/{p}\n+++ /dev/null\n"
        f"@@ -1 +0,0 @@\n-{p}\n"
        for p in paths
    )


def _patch_creating(paths: list[str]) -> str:
    return "".join(
        f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n"
        f"@@ -0,0 +1 @@\n+{p}\n"
        for p in paths
    )


@dataclass(frozen=True)
class Case:
    """A call that changes `cost` files, after `setup` calls made through the server
    (which cost `setup_cost`)."""

    id: str
    tool: str
    arguments: Callable[[list[Any]], dict[str, Any]]
    cost: int
    setup: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    setup_cost: int = 0


def _fixed(arguments: dict[str, Any]) -> Callable[[list[Any]], dict[str, Any]]:
    return lambda _: arguments


def _undo_first(results: list[Any]) -> dict[str, Any]:
    return {"transaction": results[0]["transaction"]}


CASES = [
    Case("write", "write_file", _fixed({"path": "new.txt", "content": "new\n"}), 1),
    Case(
        "edit",
        "edit_file",
        _fixed({"path": "f0.txt", "edits": [{"old_text": "f0", "new_text": "F0"}]}),
        1,
    ),
    Case("move", "move_file", _fixed({"source": "f0.txt", "destination": "g.txt"}), 1),
    Case("delete file", "delete_file", _fixed({"path": "f0.txt"}), 1),
    Case("create folder", "create_directory", _fixed({"path": "a/b/c"}), 1),
    Case("patch of N files", "apply_patch", _fixed({"patch": _patch_each(FILES)}), N),
    Case("patch deleting N files", "apply_patch", _fixed({"patch": _patch_deleting(FILES)}), N),
    Case(
        "patch creating N files",
        "apply_patch",
        _fixed({"patch": _patch_creating([f"n{i}.txt" for i in range(N)])}),
        N,
    ),
    Case(
        "batch of N operations",
        "batch",
        _fixed({"operations": [{"op": "write", "path": p, "content": "b\n"} for p in FILES]}),
        N,
    ),
    Case(
        "batch of one patch of N files",
        "batch",
        _fixed({"operations": [{"op": "patch", "patch": _patch_each(FILES)}]}),
        N,
    ),
    Case("delete folder", "delete_file", _fixed({"path": "folder", "recursive": True}), N),
    Case("copy file", "copy_file", _fixed({"source": "f0.txt", "destination": "c.txt"}), 1),
    Case("copy folder", "copy_file", _fixed({"source": "folder", "destination": "copy"}), N),
    Case(
        "undo of a folder copy",
        "undo",
        _undo_first,
        N,
        setup=[("copy_file", {"source": "folder", "destination": "copy"})],
        setup_cost=N,
    ),
    Case(
        "undo of an N-file patch",
        "undo",
        _undo_first,
        N,
        setup=[("apply_patch", {"patch": _patch_each(FILES)})],
        setup_cost=N,
    ),
    Case(
        "undo of an N-file batch",
        "undo",
        _undo_first,
        N,
        setup=[
            (
                "batch",
                {"operations": [{"op": "delete", "path": p} for p in FILES]},
            )
        ],
        setup_cost=N,
    ),
    Case(
        "undo of a folder delete",
        "undo",
        _undo_first,
        N,
        setup=[("delete_file", {"path": "folder", "recursive": True})],
        setup_cost=N,
    ),
]


def _layout(root: Path) -> None:
    for name in FILES:
        (root / name).write_text(f"{name}\n")
    (root / "folder" / "sub").mkdir(parents=True)
    for i in range(N):
        (root / "folder" / ("sub" if i % 2 else "") / f"x{i}.txt").write_text("x\n")


def _snapshot(root: Path) -> dict[str, str | None]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else None
        for p in sorted(root.rglob("*"))
        if ".ledgerfs" not in p.parts
    }


def _prepared(root: Path, case: Case, budget: int) -> tuple[Server, dict[str, Any]]:
    """A server with `budget`, the case's setup made through it, and its arguments."""
    _layout(root)
    server = Server(root, "--mutation-budget", str(budget))
    results = [ok(server.call(tool, arguments)) for tool, arguments in case.setup]
    return server, case.arguments(results)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_call_over_the_budget_is_refused_whole(tmp_path: Path, case: Case) -> None:
    server, arguments = _prepared(tmp_path, case, case.setup_cost + case.cost - 1)
    with server:
        before = _snapshot(tmp_path)
        body = error(server.call(case.tool, arguments), "BUDGET_EXCEEDED")
        assert (body["details"]["requested"], body["details"]["remaining"]) == (
            case.cost,
            case.cost - 1,
        )
        assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_call_costs_one_per_file(tmp_path: Path, case: Case) -> None:
    server, arguments = _prepared(tmp_path, case, case.setup_cost + case.cost)
    with server:
        ok(server.call(case.tool, arguments))
        after = _snapshot(tmp_path)
        body = error(
            server.call("write_file", {"path": "one-more.txt", "content": "x\n"}),
            "BUDGET_EXCEEDED",
        )
        assert body["details"]["remaining"] == 0
        assert _snapshot(tmp_path) == after
