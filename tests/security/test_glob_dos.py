"""Globs are matched in bounded work wherever they come from: a search's `pattern`,
an `exclude`, or a `.gitignore` line an agent writes. Each glob below backtracks
for hours in the regular expression pathspec makes of it, against a 200-character
name or a folder 60 levels deep; here each call answers, with the right files, and
an unrelated call sent beside it answers too (through the real stdio server).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security._matching import together
from tests.security._support import Server, ok

LONG = "a" * 200
SHORT = "a" * 10 + "zz"
DEEP = "/".join(["deep", *["a"] * 60, "zz"])
DEEP_MISS = "/".join(["deep", *["a"] * 60, "zy"])
FILES = {f"long/{LONG}", f"long/{SHORT}", DEEP, DEEP_MISS}

#: (glob, the files it matches).
BOMBS = [
    pytest.param("*a*a*a*a*a*a*zz", {f"long/{SHORT}"}, id="six-stars"),
    pytest.param("*a*a*a*a*a*a*a*a*zz", {f"long/{SHORT}"}, id="eight-stars"),
    pytest.param("a*a*a*a*a*a*a*z", {f"long/{SHORT}"}, id="anchored-stars"),
    pytest.param("*?*?*?*?*?*?*zz", {f"long/{SHORT}"}, id="star-question"),
    pytest.param("*[a]*[a]*[a]*[a]*[a]*zz", {f"long/{SHORT}"}, id="star-class"),
    pytest.param("long/*a*a*a*a*a*a*zz", {f"long/{SHORT}"}, id="anchored-folder-stars"),
    pytest.param("**/*a*a*a*a*a*zz/**", set(), id="stars-inside-double-stars"),
    pytest.param("**/a/**/a/**/a/**/a/**/a/**/zz", {DEEP}, id="double-star-chain"),
    pytest.param("deep/**/a/**/a/**/a/**/a/**/a/**/zz", {DEEP}, id="anchored-double-star-chain"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("glob-dos")
    for case in range(len(BOMBS)):
        for name in FILES:
            path = folder / f"case{case}" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("needle\n")
    (folder / "other.txt").write_text("unrelated\n")
    return folder


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[Server]:
    with Server(root, "--auto-occ", "off") as running:
        yield running


def files_found(server: Server, root: Path, folder: Path, arguments: dict[str, Any]) -> set[str]:
    """The files search_files finds under `folder`, relative to it, checked beside
    an unrelated call."""
    search, info = together(
        server,
        ("search_files", {"path": str(folder), "max_results": 100, **arguments}),
        ("get_file_info", {"path": str(root / "other.txt")}),
    )
    assert ok(info)["size"] == len("unrelated\n")
    result = ok(search)
    assert result["truncated"] is False
    return {str(Path(path).relative_to(folder)) for path in result["files"]}


#: The deepest directory_tree descends: its DEEP files lie further down.
TREE_DEPTH = 25


def within_tree(files: set[str]) -> set[str]:
    """The files of `files` that a tree at TREE_DEPTH shows."""
    return {name for name in files if name.count("/") < TREE_DEPTH}


def tree_files(server: Server, root: Path, folder: Path, arguments: dict[str, Any]) -> set[str]:
    """The files directory_tree shows under `folder`, checked beside an unrelated call."""
    tree, info = together(
        server,
        ("directory_tree", {"path": str(folder), "max_depth": TREE_DEPTH, **arguments}),
        ("get_file_info", {"path": str(root / "other.txt")}),
    )
    assert ok(info)["size"] == len("unrelated\n")
    found: set[str] = set()

    def visit(nodes: list[dict[str, Any]], prefix: str) -> None:
        for node in nodes:
            if node["type"] == "file":
                found.add(prefix + node["name"])
            else:
                visit(node["children"], f"{prefix}{node['name']}/")

    visit(ok(tree)["tree"], "")
    return found


def case_folder(root: Path, glob: str) -> Path:
    index = [param.values[0] for param in BOMBS].index(glob)
    return root / f"case{index}"


@pytest.mark.parametrize(("glob", "matched"), BOMBS)
def test_a_glob_bomb_as_pattern_finds_the_right_files(
    server: Server, root: Path, glob: str, matched: set[str]
) -> None:
    folder = case_folder(root, glob)
    assert files_found(server, root, folder, {"pattern": glob}) == matched


@pytest.mark.parametrize(("glob", "matched"), BOMBS)
def test_a_glob_bomb_in_exclude_leaves_out_the_right_files(
    server: Server, root: Path, glob: str, matched: set[str]
) -> None:
    folder = case_folder(root, glob)
    assert files_found(server, root, folder, {"exclude": [glob]}) == FILES - matched
    assert tree_files(server, root, folder, {"exclude": [glob]}) == within_tree(FILES - matched)


@pytest.mark.parametrize(("glob", "matched"), BOMBS)
def test_a_glob_bomb_written_into_gitignore_is_honoured_by_later_calls(
    server: Server, root: Path, glob: str, matched: set[str]
) -> None:
    folder = case_folder(root, glob)
    ignore = folder / ".gitignore"
    ok(server.call("write_file", {"path": str(ignore), "content": f"{glob}\n!other.txt\n"}))
    try:
        expected = (FILES - matched) | {".gitignore"}
        assert files_found(server, root, folder, {}) == expected
        assert files_found(server, root, folder, {"content": "needle"}) == FILES - matched
        assert tree_files(server, root, folder, {}) == within_tree(expected)
    finally:
        ok(server.call("delete_file", {"path": str(ignore)}))
