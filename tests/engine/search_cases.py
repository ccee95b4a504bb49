"""A tree with every kind of file a search meets, and a table of searches over it.

Shared by the search tests: tests/engine/test_search_cases.py pins each case's
result, and tests/security/test_search_sandbox.py attacks the same tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ledgerfs.engine import SearchFiles
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.search import search_files
from ledgerfs.engine.searchers import SearchWorkers

#: A mark that only what a search must never show holds.
HIDDEN = "HIDDEN-MARK"

TEXT: dict[str, bytes] = {
    "a.py": b"def f():\n    return 1\nclass FooError(Exception):\n    pass\n",
    "b.txt": b"Alpha\nalpha\nALPHA beta\r\n\nlast alpha, no newline",
    "sub/c.py": b"x = 1\nalpha = 2\n# alpha\n",
    "sub/deep/d.md": b"# title\nalpha line\n\nmore\n",
    "sub/deep/empty.txt": b"",
    ".gitignore": b"*.log\nbuild/\n",
    "app.log": b"alpha in a log\n",
    "build/out.txt": b"alpha built\n",
    "long.txt": b"alpha " + b"x" * 2000 + b"\n",
    "many.txt": b"alpha\n" * 30,
    "crlf.txt": b"alpha one\r\nalpha two\r\n",
    # Never searched: binary, not UTF-8.
    "bin.dat": b"alpha\x00\x01binary\nalpha\n",
    "late-nul.txt": b"alpha\n" * 2000 + b"\x00",
    "latin.txt": b"alpha caf\xe9\n",
    # Never shown: secrets by name, by content, git's and the engine's internals.
    ".env": f"alpha={HIDDEN}\n".encode(),
    "deploy.pem": f"alpha {HIDDEN}\n".encode(),
    "creds.txt": f"-----BEGIN RSA PRIVATE KEY-----\nalpha {HIDDEN}\n".encode(),
    ".ssh/config": f"alpha {HIDDEN}\n".encode(),
    ".git/config": f"alpha {HIDDEN}\n".encode(),
    ".ledgerfs/notes": f"alpha {HIDDEN}\n".encode(),
}

#: Links: name -> target (relative to the root, or outside it).
LINKS: dict[str, str] = {
    "link-in.txt": "b.txt",
    "link-out.txt": "../outside/o.txt",
    "link-out-dir": "../outside",
    "link-secret.txt": ".env",
    "link-dir": "sub",
}


def build(tmp_path: Path) -> Path:
    """The tree (in tmp_path/root) and an outside folder full of the mark."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.txt").write_text(f"alpha {HIDDEN}\n")
    root = tmp_path / "root"
    for name, data in TEXT.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for name, target in LINKS.items():
        (root / name).symlink_to(target)
    # A hard link gives a secret an innocent second name.
    os.link(root / ".env", root / "innocent.txt")
    os.mkfifo(root / "pipe.txt")
    return root


#: (case name, search_files arguments): each kind of search on the tree.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("literal", {"content": "alpha"}),
    ("ignore_case", {"content": "alpha", "case_sensitive": False}),
    ("regex", {"content": r"^\w+ = \d", "regex": True}),
    ("regex_class", {"content": r"class \w+error\b", "regex": True, "case_sensitive": False}),
    ("regex_every_line", {"content": "^", "regex": True, "pattern": "sub/deep/*"}),
    ("context", {"content": "alpha", "context": 2, "pattern": "*.md"}),
    ("context_edges", {"content": "alpha", "context": 1, "pattern": "b.txt"}),
    ("exclude", {"content": "alpha", "exclude": ["deep/", "many.txt", "l*.txt"]}),
    ("no_gitignore", {"content": "alpha", "respect_gitignore": False}),
    ("glob", {"content": "alpha", "pattern": "sub/**/*.md"}),
    ("truncated", {"content": "alpha", "max_results": 5}),
    ("truncated_at_file_end", {"content": "alpha", "max_results": 30, "pattern": "many.txt"}),
    ("absent", {"content": "xyzzy"}),
    ("names", {}),
    ("names_glob", {"pattern": "*.py"}),
    ("names_truncated", {"max_results": 3}),
]


def run(
    root: Path, arguments: dict[str, Any], workers: SearchWorkers | None = None
) -> dict[str, Any]:
    """A search of `root` as plain data: paths relative to the root."""
    workspace = Workspace([str(root)])
    request = SearchFiles(path=".", **arguments)
    result = search_files(workspace, workspace.resolve("."), request, 1 << 20, workers=workers)

    def rel(path: str) -> str:
        return Path(path).relative_to(root).as_posix()

    return {
        "files": [rel(path) for path in result.files],
        "matches": None
        if result.matches is None
        else [[rel(m.path), m.line, m.text[:40], m.before, m.after] for m in result.matches],
        "truncated": result.truncated,
        "files_searched": result.files_searched,
    }
