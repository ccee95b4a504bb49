"""What search_files promises on a hostile tree: it never shows what the sandbox
refuses to read, however the tree is laid out or changed while it runs.

The tree (tests/engine/search_cases.py) holds a link out of the root, to a
folder outside, to a secret; secrets by name, by content and behind a hard
link; git's and the engine's internals; a fifo. Every kind of search runs over
it through the real stdio server, and searches run while a separate process
swaps a file, then a folder, for a link to the outside as fast as it can. No
reply may hold the mark that only refused files carry, nor a refused path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from ledgerfs.engine import LedgerError
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.walk import Walk
from tests.engine.search_cases import CASES, HIDDEN, LINKS, build
from tests.server._support import REPO

from ._support import Server, error, ok

#: Paths (from the root) a search may never name, as a file or a match.
REFUSED = {
    ".env",
    "deploy.pem",
    ".ssh/config",
    ".git/config",
    ".ledgerfs/notes",
    "pipe.txt",
    *(name for name in LINKS if name != "link-in.txt"),
}
#: Searched as text, never shown: their content is a secret.
REFUSED_CONTENT = {"creds.txt", "innocent.txt"}


def shown(root: Path, reply: dict[str, object]) -> set[str]:
    """The paths a search reply names, relative to the root."""
    files = reply["files"]
    matches = reply["matches"] or []
    assert isinstance(files, list) and isinstance(matches, list)
    paths = [*files, *(match["path"] for match in matches)]
    return {Path(path).relative_to(root).as_posix() for path in paths}


def test_no_search_shows_what_the_sandbox_refuses(tmp_path: Path) -> None:
    root = build(tmp_path)
    with Server(root, "--journal", tmp_path / "j.db") as server:
        for name, arguments in CASES:
            for gitignore in (True, False):
                call = {"path": ".", **arguments, "respect_gitignore": gitignore}
                reply = ok(server.call("search_files", call))
                assert HIDDEN not in str(reply), (name, gitignore)
                names = shown(root, reply)
                assert not names & REFUSED, (name, names & REFUSED)
                if reply["matches"] is not None:
                    assert not names & REFUSED_CONTENT, name


def swapping(first: Path, second: Path) -> subprocess.Popen[str]:
    """A process that swaps `first` and `second` until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.security._swapper", str(first), str(second)],
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop(proc: subprocess.Popen[str]) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    swaps = int(proc.stdout.readline())
    proc.stdout.close()
    proc.wait(10)
    return swaps


@pytest.fixture(params=["file", "folder"])
def swapped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A root whose `inside/f.txt` (or `inside/` itself) a process keeps swapping
    with a link to the outside."""
    root = build(tmp_path)
    (root / "inside").mkdir()
    (root / "inside" / "f.txt").write_text("alpha inside\n")
    if request.param == "file":
        real, link = root / "inside" / "f.txt", root / "inside" / "g.txt"
        link.symlink_to(tmp_path / "outside" / "o.txt")
    else:
        real, link = root / "inside", root / "alt"
        link.symlink_to(tmp_path / "outside")
    proc = swapping(real, link)
    try:
        yield root
    finally:
        assert stop(proc) > 0


def test_a_link_swapped_in_mid_search_shows_nothing_outside(swapped: Path, tmp_path: Path) -> None:
    root = swapped
    with Server(root, "--journal", tmp_path / "j.db") as server:
        inside = 0
        for _ in range(30):
            for path in (".", "inside"):
                result = server.call("search_files", {"path": path, "content": "alpha"})
                if result.get("isError"):
                    # `inside` was the link when the call resolved it.
                    error(result, "NOT_ALLOWED", "NOT_FOUND")
                    continue
                reply = ok(result)
                assert HIDDEN not in str(reply)
                inside += "alpha inside" in str(reply)
    assert inside > 0  # the real file was found between swaps


def read_after(root: Path, name: str, change: Callable[[], None]) -> bytes | None:
    """Walk `root`, make `change` once the walk has listed the file `name` (from
    the root), then open it through the walk and read it: its bytes, or None if
    refused."""
    workspace = Workspace([str(root)])
    walk = Walk(workspace, workspace.resolve("."))
    with closing(walk.entries()) as entries:
        for entry in entries:
            if entry.relative == name:
                change()
                try:
                    fd, _ = walk.open(entry, 1 << 20)
                except (OSError, LedgerError):
                    return None
                try:
                    return os.read(fd, 1 << 20)
                finally:
                    os.close(fd)
    raise AssertionError(f"{name} was not listed")


def test_a_file_swapped_for_a_link_after_listing_is_not_read(tmp_path: Path) -> None:
    root = build(tmp_path)
    (root / "inside").mkdir()
    (root / "inside" / "f.txt").write_text("alpha inside\n")

    def swap() -> None:
        (root / "inside" / "f.txt").unlink()
        (root / "inside" / "f.txt").symlink_to(tmp_path / "outside" / "o.txt")

    assert read_after(root, "inside/f.txt", swap) is None


def test_a_folder_swapped_for_a_link_after_listing_reads_nothing_outside(tmp_path: Path) -> None:
    root = build(tmp_path)
    (root / "inside").mkdir()
    (root / "inside" / "f.txt").write_text("alpha inside\n")
    (tmp_path / "outside" / "f.txt").write_text(f"alpha {HIDDEN}\n")

    def swap() -> None:
        (root / "inside").rename(root / "moved")
        (root / "inside").symlink_to(tmp_path / "outside")

    # The folder the walk opened is read (it is inside the root, moved), never the
    # link's target; a folder opened again by its path would refuse the link.
    assert read_after(root, "inside/f.txt", swap) == b"alpha inside\n"


def test_a_file_replaced_by_a_hard_link_to_a_secret_after_listing_is_refused(
    tmp_path: Path,
) -> None:
    root = build(tmp_path)

    def swap() -> None:
        (root / "b.txt").unlink()
        os.link(root / ".env", root / "b.txt")

    assert read_after(root, "b.txt", swap) is None


def test_a_file_replaced_by_a_fifo_after_listing_does_not_hang(tmp_path: Path) -> None:
    root = build(tmp_path)

    def swap() -> None:
        (root / "b.txt").unlink()
        os.mkfifo(root / "b.txt")

    assert read_after(root, "b.txt", swap) is None
