"""search_files and directory_tree against oracles: grep's line numbering, git's
.gitignore semantics (nested files, negation, folders above the searched one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import SearchFiles
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.requests import DirectoryTree
from ledgerfs.engine.search import search_files
from ledgerfs.engine.tree import directory_tree
from ledgerfs.engine.walk import Walk

LINE = st.text(alphabet="ab\r\t x", max_size=8)


def search(root: Path, **arguments: object) -> list[tuple[str, int, str]]:
    workspace = Workspace([str(root)])
    request = SearchFiles(path=".", max_results=10_000, **arguments)  # type: ignore[arg-type]
    result = search_files(workspace, workspace.resolve("."), request, 1 << 20)
    assert result.matches is not None
    return [(Path(m.path).name, m.line, m.text) for m in result.matches]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, max_size=12), end=st.sampled_from(["", "\n"]))
def test_content_matches_are_grep_lines(tmp_path: Path, lines: list[str], end: str) -> None:
    text = "\n".join(lines) + end
    (tmp_path / "f.txt").write_bytes(text.encode())
    expected = [
        ("f.txt", number, line.removesuffix("\r"))
        for number, line in enumerate(text.split("\n"), start=1)
        if "ab" in line
    ]
    assert search(tmp_path, content="ab") == expected
    grep = subprocess.run(
        ["grep", "-n", "-F", "ab", str(tmp_path / "f.txt")], capture_output=True, check=False
    )
    numbers = [int(row.split(b":", 1)[0]) for row in grep.stdout.split(b"\n") if row]
    assert [line for _, line, _ in expected] == numbers


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_gitignore_as_git_reads_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(
        root,
        {
            ".gitignore": "*.log\n!keep.log\n/top.txt\n",
            "top.txt": "x",
            "keep.log": "x",
            "drop.log": "x",
            "a/top.txt": "x",
            "a/.gitignore": "local/\n*.tmp\n",
            "a/local/x.py": "x",
            "a/b/c.tmp": "x",
            "a/b/c.py": "x",
            "b/c.tmp": "x",
        },
    )
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    workspace = Workspace([str(root)])
    found = search_files(workspace, workspace.resolve("."), SearchFiles(path="."), 1 << 20)
    assert sorted(Path(p).relative_to(root).as_posix() for p in found.files) == sorted(listed)
    # A search below the root still honours the .gitignore files above it.
    below = search_files(workspace, workspace.resolve("a"), SearchFiles(path="a"), 1 << 20)
    assert sorted(Path(p).relative_to(root).as_posix() for p in below.files) == sorted(
        name for name in listed if name.startswith("a/")
    )


def test_tree_nests_in_walk_order_and_stops_at_depth(tmp_path: Path) -> None:
    write(tmp_path, {"a/b/c/d.txt": "x", "a/e.txt": "yy", "f.txt": ""})
    workspace = Workspace([str(tmp_path)])
    tree = directory_tree(workspace, workspace.resolve("."), DirectoryTree(path=".", max_depth=2))
    [a, f] = tree.tree
    assert (a.name, f.name, f.size) == ("a", "f.txt", 0)
    assert a.children is not None
    assert [(n.name, n.type, n.children) for n in a.children] == [
        ("b", "directory", []),
        ("e.txt", "file", None),
    ]
    assert tree.entries == 4 and not tree.truncated


@pytest.mark.anyio
@pytest.mark.parametrize("respect_gitignore", [True, False])
async def test_a_cancelled_search_stops_at_the_next_entry(
    tmp_path: Path, respect_gitignore: bool
) -> None:
    # The call is cancelled from inside its first progress report (500 files): the
    # walk stops at the next entry rather than searching the other 1,500 files.
    for i in range(2000):
        (tmp_path / f"f{i:04d}.txt").write_text("needle\n")
    workspace = Workspace([str(tmp_path)])
    request = SearchFiles(
        path=".", content="needle", max_results=10_000, respect_gitignore=respect_gitignore
    )
    reports: list[int] = []
    with anyio.CancelScope() as scope:

        def progress(files: int) -> None:
            reports.append(files)
            anyio.from_thread.run_sync(scope.cancel)

        await anyio.to_thread.run_sync(
            search_files, workspace, workspace.resolve("."), request, 1 << 20, progress
        )
    assert scope.cancelled_caught
    assert reports == [500]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("max_results", [1, 10_000])
def test_a_search_holds_one_folder_open_and_leaves_none(tmp_path: Path, max_results: int) -> None:
    # 300 folders deep, a file in each: the walk holds at most one folder open
    # (more would run out of descriptors in a deep tree), and none once it ends,
    # stopped early at max_results or not.
    folder = tmp_path
    for depth in range(300):
        folder = folder / "d"
        folder.mkdir()
        (folder / "f.txt").write_text(f"needle {depth}\n")
    workspace = Workspace([str(tmp_path)])
    request = SearchFiles(path=".", content="needle", max_results=max_results)
    before = open_descriptors()
    result = search_files(workspace, workspace.resolve("."), request, 1 << 20)
    assert result.matches is not None and len(result.matches) == min(300, max_results)
    assert open_descriptors() == before
    most = 0
    walk = Walk(workspace, workspace.resolve("."))
    for entry in walk.entries():
        if not entry.is_dir:
            os.close(walk.open(entry, 1 << 20)[0])
        most = max(most, open_descriptors() - before)
    assert most <= 1
    assert open_descriptors() == before
