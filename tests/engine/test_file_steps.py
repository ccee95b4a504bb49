"""A file goes in whole, whatever is at its name, by swap or by rename.

With durability `full` the journal holds every image durably before a file
step, so a file that replaces another is swapped in (renameat2's exchange, then
the old file unlinked) and the file system is not made to write the new bytes at
the rename; with `normal` it is renamed over. Either way readers see
the old or the new bytes, and whatever was put at the name since the check (a
folder, a link, a hard link to a file elsewhere, nothing) ends as a rename over
it would leave it: a folder stays and the step fails, anything else is replaced
without touching what it pointed to.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Code, Engine, FileOps, LedgerError, fileops
from ledgerfs.engine.paths import Workspace

from ._faulty import FaultyOps
from .conftest import snapshot, temp_files

OWNER = "0123456789abcdef" * 2

# What is at the name when the file step runs -------------------------------------


def old_file(folder: Path, outside: Path) -> None:
    (folder / "f.txt").write_bytes(b"old\n")


def hard_link_to_outside(folder: Path, outside: Path) -> None:
    os.link(outside, folder / "f.txt")


def link_to_outside(folder: Path, outside: Path) -> None:
    os.symlink(outside, folder / "f.txt")


def nothing(folder: Path, outside: Path) -> None:
    return None


def a_folder(folder: Path, outside: Path) -> None:
    (folder / "f.txt").mkdir()
    (folder / "f.txt" / "inner.txt").write_bytes(b"inner\n")


Plant = Callable[[Path, Path], None]
REPLACED: list[Plant] = [old_file, hard_link_to_outside, link_to_outside, nothing]


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    folder, outside = tmp_path / "ws", tmp_path / "outside.txt"
    folder.mkdir()
    outside.write_bytes(b"outside\n")
    return folder, outside


@pytest.mark.parametrize("journaled", [True, False], ids=["swap", "rename"])
@pytest.mark.parametrize("plant", REPLACED)
def test_a_file_step_replaces_what_is_at_the_name(
    places: tuple[Path, Path], plant: Plant, journaled: bool
) -> None:
    folder, outside = places
    plant(folder, outside)
    FileOps().install(str(folder / "f.txt"), b"new\n", 0o640, OWNER, journaled=journaled)
    target = folder / "f.txt"
    assert not target.is_symlink() and target.read_bytes() == b"new\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert outside.read_bytes() == b"outside\n" and outside.stat().st_nlink == 1
    assert sorted(p.name for p in folder.iterdir()) == ["f.txt"]


@pytest.mark.parametrize("journaled", [True, False], ids=["swap", "rename"])
def test_a_file_step_onto_a_folder_fails_and_leaves_it(
    places: tuple[Path, Path], journaled: bool
) -> None:
    folder, outside = places
    a_folder(folder, outside)
    with pytest.raises(IsADirectoryError):
        FileOps().install(str(folder / "f.txt"), b"new\n", 0o644, OWNER, journaled=journaled)
    assert (folder / "f.txt" / "inner.txt").read_bytes() == b"inner\n"
    assert sorted(p.name for p in folder.iterdir()) == ["f.txt"]


def swap_new_in(folder: Path) -> bool:
    """`swap_in` a temp file of new bytes at `folder`/f.txt; whether it swapped."""
    (folder / "t.tmp").write_bytes(b"new\n")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return FileOps().swap_in(fd, "t.tmp", "f.txt")
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("plant", "swapped"), [(old_file, True), (hard_link_to_outside, True), (nothing, False)]
)
def test_swap_in_swaps_only_where_a_file_is(
    places: tuple[Path, Path], plant: Plant, swapped: bool
) -> None:
    folder, outside = places
    plant(folder, outside)
    assert swap_new_in(folder) is swapped
    assert (folder / "f.txt").read_bytes() == b"new\n"
    assert not (folder / "t.tmp").exists()


@pytest.mark.parametrize("journaled", [True, False], ids=["swap", "rename"])
def test_a_reader_sees_the_old_or_the_new_bytes_and_never_no_file(
    places: tuple[Path, Path], journaled: bool
) -> None:
    folder, _ = places
    target = folder / "f.txt"
    versions = [bytes([65 + i]) * 4096 for i in range(2)]
    target.write_bytes(versions[1])
    seen: set[bytes] = set()
    missing: list[OSError] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                seen.add(target.read_bytes())
            except OSError as exc:
                missing.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        ops = FileOps()
        for i in range(400):
            ops.install(str(target), versions[i % 2], 0o644, OWNER, journaled=journaled)
    finally:
        done.set()
        reader.join()
    assert missing == [] and seen <= set(versions) and seen
    assert sorted(p.name for p in folder.iterdir()) == ["f.txt"]


SWAPPER = """
import sys
from ledgerfs.engine import FileOps
path, owner = sys.argv[1], sys.argv[2]
ops = FileOps()
print("ready", flush=True)
i = 0
while True:
    i += 1
    ops.install(path, b"%d\\n" % i, 0o644, owner, journaled=True)
"""


def test_a_path_resolved_while_its_file_is_swapped_names_the_file(workspace: Path) -> None:
    """While another process swaps new files in at a path, resolving the path never
    names the swapped-out file's passing temp name (the kernel's name for a
    descriptor follows the file there for a moment)."""
    target = workspace / "f.txt"
    target.write_bytes(b"0\n")
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(target), OWNER], stdout=subprocess.PIPE
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == b"ready\n"
        space = Workspace([str(workspace)])
        named = Counter(space.resolve("f.txt").path for _ in range(20_000))
    finally:
        swapper.kill()
        swapper.wait()
        if swapper.stdout is not None:
            swapper.stdout.close()
    assert set(named) == {str(target)}, named


@pytest.mark.parametrize("refusal", [errno.EINVAL, errno.EXDEV, errno.ENOSYS])
def test_where_names_cannot_be_swapped_the_file_is_renamed_over(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    """A file system without RENAME_EXCHANGE (or a kernel or C library without
    renameat2) gets the rename it got before."""

    def refuse(dir_fd: int, a: str, b: str) -> None:
        raise OSError(refusal, os.strerror(refusal), b)

    monkeypatch.setattr(fileops, "_exchange", refuse)
    folder, outside = places
    hard_link_to_outside(folder, outside)
    assert swap_new_in(folder) is False
    assert sorted(p.name for p in folder.iterdir()) == ["f.txt"]
    assert (folder / "f.txt").read_bytes() == b"new\n" and outside.read_bytes() == b"outside\n"


# Through the engine ----------------------------------------------------------------


class Steps(FileOps):
    """The real primitives, noting which one put each file in place."""

    def __init__(self) -> None:
        self.used: list[str] = []

    def rename(self, src_dir: int, src: str, dst_dir: int, dst: str) -> None:
        self.used.append("rename")
        super().rename(src_dir, src, dst_dir, dst)

    def swap_in(self, dir_fd: int, tmp: str, name: str) -> bool:
        swapped = super().swap_in(dir_fd, tmp, name)
        self.used.append("swap" if swapped else "swap-renamed")
        return swapped


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("durability", "used"),
    [("full", ["swap-renamed", "swap"]), ("normal", ["rename", "rename"])],
)
async def test_durability_full_swaps_files_in_and_normal_renames(
    workspace: Path, durability: str, used: list[str]
) -> None:
    ops = Steps()
    config = {"roots": [str(workspace)], "durability": durability, "auto_occ": "off"}
    async with Engine.open(config, fileops=ops) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "a.txt", "content": "one\n"})
        await session.call("write_file", {"path": "a.txt", "content": "two\n"})
    assert ops.used == used
    assert (workspace / "a.txt").read_text() == "two\n"
    assert temp_files(workspace) == []


@pytest.mark.anyio
@pytest.mark.parametrize("durability", ["full", "normal"])
@pytest.mark.parametrize("plant", [a_folder, link_to_outside, hard_link_to_outside, nothing])
async def test_a_name_changed_between_check_and_file_step(
    workspace: Path, tmp_path: Path, durability: str, plant: Plant
) -> None:
    """Whatever another process puts at the name after the check: a folder makes the
    edit fail and stays as it is; anything else is replaced, and what it pointed to
    is untouched."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside\n")
    (workspace / "f.txt").write_text("checked\n")
    ops = FaultyOps()

    def swap(_path: str) -> None:
        del ops.hooks["rename"]  # once: a rollback's own step runs unhindered
        os.unlink(workspace / "f.txt")
        plant(workspace, outside)

    config: dict[str, Any] = {
        "roots": [str(workspace)],
        "durability": durability,
        "auto_occ": "off",
    }
    async with Engine.open(config, fileops=ops) as engine:
        session = await engine.session()
        ops.hooks["rename"] = swap
        try:
            await session.call("write_file", {"path": "f.txt", "content": "new\n"})
        except LedgerError as error:
            assert plant is a_folder, error.envelope.to_json()
            assert error.code == Code.ROLLBACK_COMPLETE
            assert error.details["cause"]["errno"] == errno.errorcode[errno.EISDIR]
            assert snapshot(workspace) == {"f.txt": None, "f.txt/inner.txt": b"inner\n"}
        else:
            assert plant is not a_folder
            assert snapshot(workspace) == {"f.txt": b"new\n"}
            assert not (workspace / "f.txt").is_symlink()
    assert outside.read_bytes() == b"outside\n" and outside.stat().st_nlink == 1
    assert temp_files(workspace) == []
