"""The house: ledgerfs's modules in layers, each importing only its own layer and those below.

A newcomer reads the tree from the bottom up: the journal; the base every module
may use; the model of a change (pure, no disk); the file primitives; the
transaction; the route every write takes; the tools; the engine that holds them
together; the adapters at the edge. An import that goes up a layer, or a circle of
imports, fails here, with the line that makes it.

One arrow may go up: the tool registry's handlers name the `Session` that calls
them (`engine.core`) under `if TYPE_CHECKING:`, which runs nothing. Any other
module, type-only imports included, stays at its layer or below: the route names
what it needs of a session in `engine.caller`, a layer below the session.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests._imports import Arrow, arrows, modules

#: The layers, bottom first. A module imports modules of its own layer or below.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "journal",
        {
            "journal",
            "journal._audit",
            "journal._blobstore",
            "journal._chain",
            "journal._codec",
            "journal._errors",
            "journal._images",
            "journal._journal",
            "journal._loops",
            "journal._maintenance",
            "journal._marker",
            "journal._owners",
            "journal._places",
            "journal._queries",
            "journal._records",
            "journal._schema",
            "journal._sql",
            "journal._syncer",
            "journal._verified",
            "journal._walcheck",
            "journal._walspace",
            "journal._writer",
        },
    ),
    (
        "base",
        {
            "engine.binpatch",
            "engine.bounds",
            "engine.bytescan",
            "engine.credentials",
            "engine.cancel",
            "engine.changes",
            "engine.characters",
            "engine.diffs",
            "engine.discovery",
            "engine.edits",
            "engine.encodings",
            "engine.errors",
            "engine.globs",
            "engine.jsonrpc",
            "engine.nearmiss",
            "engine.nofollow",
            "engine.nonutf8",
            "engine.oserrors",
            "engine.policy",
            "engine.progress",
            "engine.rewrite",
            "engine.schemas",
            "engine.searchworker",
            "engine.textbytes",
        },
    ),
    (
        "model",
        {
            "engine.budget",
            "engine.config",
            "engine.effects",
            "engine.merge",
            "engine.notebooks",
            "engine.occ",
            "engine.pages",
            "engine.patchapply",
            "engine.patchparse",
            "engine.planning",
            "engine.requests",
            "engine.results",
        },
    ),
    (
        "files",
        {
            "engine.fileops",
            "engine.git",
            "engine.issues",
            "engine.issues._backend",
            "engine.issues._common",
            "engine.issues.github",
            "engine.issues.gitlab",
            "engine.issues.models",
            "engine.issues.remotes",
            "engine.issues.service",
            "engine.locks",
            "engine.patchplan",
            "engine.paths",
            "engine.reads",
            "engine.search",
            "engine.searchers",
            "engine.tree",
            "engine.walk",
        },
    ),
    (
        "transaction",
        {
            "engine.flush",
            "engine.history",
            "engine.incidents",
            "engine.recovery",
            "engine.transaction",
        },
    ),
    (
        "route",
        {"engine.caller", "engine.gather", "engine.pipeline", "engine.rewind", "engine.stale"},
    ),
    ("tools", {"engine.handlers", "engine.tools"}),
    ("engine", {"engine.core"}),
    (
        "adapters",
        {
            "engine",
            "engine.cli",
            "engine.exposure",
            "engine.failedstart",
            "engine.inspection",
            "engine.maintenance",
            "engine.server",
            "engine.stdio",
            "engine.tooldocs",
            "engine.ui",
            "engine.uiviews",
        },
    ),
]
LAYER = {module: index for index, (_, members) in enumerate(LAYERS) for module in members}
NAME = [name for name, _ in LAYERS]
#: The one arrow that may go up, as (source, target), and only as a type-only import.
TYPE_ONLY_UP = {("engine.handlers", "engine.core")}


def _where(arrow: Arrow) -> str:
    return f"{arrow.source} (line {arrow.line}) imports {arrow.target}"


def _allowed_up(arrow: Arrow) -> bool:
    """Whether the arrow is the handlers' type-only import of the session above them."""
    return arrow.type_only and (arrow.source, arrow.target) in TYPE_ONLY_UP


def _refused(arrow: Arrow) -> bool:
    """Whether the arrow goes up a layer and is not the one allowed to."""
    return LAYER[arrow.target] > LAYER[arrow.source] and not _allowed_up(arrow)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    # A new module is placed on purpose: add it to LAYERS where it belongs.
    assert set(modules()) == set(LAYER), {
        "unplaced": sorted(set(modules()) - set(LAYER)),
        "gone": sorted(set(LAYER) - set(modules())),
    }


def test_no_arrow_goes_up_a_layer() -> None:
    up = [
        f"{_where(a)}{' (type only)' if a.type_only else ''}: "
        f"{NAME[LAYER[a.source]]} -> {NAME[LAYER[a.target]]}"
        for a in arrows()
        if _refused(a)
    ]
    assert not up, "\n".join(up)


def test_the_one_arrow_up_is_still_taken() -> None:
    # An allowance nothing uses any more is one to delete, not to keep in reserve.
    taken = {(a.source, a.target) for a in arrows() if _allowed_up(a)}
    assert taken == TYPE_ONLY_UP


@pytest.mark.parametrize(
    ("arrow", "refused"),
    [
        (Arrow("engine.handlers", "engine.core", 1, type_only=True), False),
        (Arrow("engine.handlers", "engine.core", 1, type_only=False), True),
        (Arrow("engine.pipeline", "engine.core", 1, type_only=True), True),
        (Arrow("engine.stale", "engine.core", 1, type_only=True), True),
        (Arrow("engine.handlers", "engine.server", 1, type_only=True), True),
        (Arrow("engine.pipeline", "engine.caller", 1, type_only=False), False),
        (Arrow("journal._journal", "engine.errors", 1, type_only=True), True),
    ],
)
def test_only_the_handlers_may_name_a_type_above(arrow: Arrow, refused: bool) -> None:
    assert _refused(arrow) is refused


def test_no_circle_of_imports() -> None:
    # Type-only imports count: a circle of names is one a reader walks in circles.
    graph: dict[str, set[str]] = defaultdict(set)
    for module in modules():
        graph[module]
    for arrow in arrows():
        if not _allowed_up(arrow):
            graph[arrow.source].add(arrow.target)
    assert not _circles(graph)


@pytest.mark.parametrize(
    ("graph", "circles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
    ],
)
def test_circles_are_found(graph: dict[str, set[str]], circles: list[list[str]]) -> None:
    assert _circles(graph) == circles


def test_one_import_style_relative_inside_the_package() -> None:
    # An absolute `ledgerfs.engine...` inside the tree reads as a second way in;
    # the tree imports itself relatively, and never under a second name.
    absolute = []
    for module, file in modules().items():
        for node in ast.walk(ast.parse(file.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            absolute += [
                f"{module} (line {node.lineno}) imports {name}"
                for name in names
                if name.split(".")[0] in {"ledgerfs", "engine", "journal"}
            ]
    assert not absolute, "\n".join(absolute)


def test_the_design_page_names_the_same_layers() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "design.md").read_text()
    section = page.split("## The layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    assert rows[2:] == NAME  # after the header and its rule
