"""search_files finds the lines ripgrep finds, on a tree of real source and prose.

The tree is a copy of this project's own modules and documentation (UTF-8 text,
some of it beyond ASCII): nothing in it is a secret, an internal folder or a
link, so nothing is filtered and the two must agree line for line, through the
engine with its search worker as through the function alone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgerfs.engine import Engine
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.requests import SearchFiles
from ledgerfs.engine.search import search_files

PROJECT = Path(__file__).resolve().parents[2]


def _ripgrep() -> str | None:
    beside = Path(sys.executable).parent / "rg"
    return str(beside) if beside.exists() else shutil.which("rg")


RG = _ripgrep()
pytestmark = pytest.mark.skipif(RG is None, reason="rg not installed (the [test] extra has it)")

#: (search_files arguments, rg arguments): the same search each way.
SEARCHES: list[tuple[dict[str, Any], list[str]]] = [
    ({"content": "def "}, ["-F", "def "]),
    ({"content": "Self", "case_sensitive": False}, ["-i", "-F", "Self"]),
    ({"content": r"^\s*return\b", "regex": True}, [r"^\s*return\b"]),
    ({"content": r"\(\)$", "regex": True}, [r"\(\)$"]),
    ({"content": r"[A-Z]{3,}_[A-Z]+", "regex": True}, [r"[A-Z]{3,}_[A-Z]+"]),
    ({"content": "journal", "case_sensitive": False}, ["-i", "-F", "journal"]),
    ({"content": "\u2013"}, ["-F", "\u2013"]),  # an en dash: three bytes of UTF-8
    ({"content": "xyzzy_plugh_absent"}, ["-F", "xyzzy_plugh_absent"]),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rg") / "tree"
    for folder, pattern in (("engine", "*.py"), ("journal", "*.py"), ("docs", "*.md")):
        for source in sorted((PROJECT / folder).glob(pattern)):
            if source.name == "credentials.py":
                continue  # its examples are private keys: a secret by content, never shown
            target = root / folder / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return root


def ripgrep_lines(root: Path, arguments: list[str]) -> set[tuple[str, int]]:
    assert RG is not None
    done = subprocess.run(
        [RG, "--no-config", "-n", "-H", "--no-heading", "--null", *arguments, "--", "."],
        cwd=root,
        capture_output=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    found = set()
    for line in done.stdout.splitlines():
        path, rest = line.split(b"\0", 1)
        found.add((Path(path.decode()).as_posix().removeprefix("./"), int(rest.split(b":", 1)[0])))
    return found


def lines_of(root: Path, matches: Any) -> set[tuple[str, int]]:
    return {(Path(m.path).relative_to(root).as_posix(), m.line) for m in matches}


@pytest.mark.parametrize(("arguments", "rg"), SEARCHES, ids=[str(a) for a, _ in SEARCHES])
def test_search_files_finds_the_lines_ripgrep_finds(
    tree: Path, arguments: dict[str, Any], rg: list[str]
) -> None:
    expected = ripgrep_lines(tree, rg)
    workspace = Workspace([str(tree)])
    request = SearchFiles(path=".", max_results=10_000, **arguments)
    alone = search_files(workspace, workspace.resolve("."), request, 1 << 24)

    async def served() -> Any:
        config = {"roots": [str(tree)], "journal": str(tree.parent / "j.db")}
        async with Engine.open(config) as engine:
            session = await engine.session()
            for _ in range(20):  # the worker starts with the first search
                result = await session.call("search_files", {"path": ".", **request_args})
                assert lines_of(tree, result.matches) == expected
            return result

    request_args = {"max_results": 10_000, **arguments}
    assert lines_of(tree, alone.matches) == expected
    assert not alone.truncated
    anyio.run(served)
