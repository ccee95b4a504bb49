"""Commits replayed through `apply_patch` over stdio, with `git apply` as the oracle.

A scratch repository gets one commit of each kind a real history holds: links
made, retargeted and turned into files and back, folders emptied, binary files
made, changed (as a delta) and deleted, text that is not UTF-8, renames, mode
changes, CRLF files and missing final newlines. Each commit's diff (every
variant, and `git diff` without `--binary` for the binary ones) goes through the
real server onto a checkout of its parent and through `git apply` onto another;
the whole trees (type, mode, bytes) must equal each other and the commit, or
both sides must refuse and leave the parent as it was.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from benchmarks.bench_replay import (
    VARIANTS,
    Outcome,
    Replayer,
    checkout,
    diff_of,
    git,
    replayer,
    snapshot,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _write(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _rows(start: int, count: int, eol: bytes = b"\n") -> bytes:
    return b"".join(b"row %d" % i + eol for i in range(start, start + count))


BLOB = bytes(range(256)) * 64


def _base(root: Path) -> None:
    _write(
        root,
        {
            "docs/guide.txt": _rows(0, 30),
            "docs/other.txt": b"other\n",
            "old/deep/a.txt": b"a\n",
            "old/deep/b.txt": b"b\n",
            "old/keep.txt": b"keep\n",
            "gone/only.txt": b"only\n",
            "crlf.txt": _rows(0, 20, b"\r\n"),
            "tail.txt": b"no final newline",
            "latin1.txt": "caf\u00e9\nna\u00efve\n".encode("latin-1"),
            "tool.sh": b"#!/bin/sh\necho hi\n",
            "data.bin": BLOB,
            "lonely.bin": b"\x00\x01gone\x00",
            "move_me.txt": _rows(100, 25),
            "becomes_link.txt": b"a file first\n",
        },
    )
    os.symlink("docs/guide.txt", root / "guide")
    os.symlink("docs/other.txt", root / "link_becomes_file")


def _links(root: Path) -> None:
    os.symlink("docs/other.txt", root / "new_link")
    os.symlink("docs", root / "docs_link")
    (root / "guide").unlink()
    os.symlink("docs/other.txt", root / "guide")


def _types(root: Path) -> None:
    (root / "becomes_link.txt").unlink()
    os.symlink("tool.sh", root / "becomes_link.txt")
    (root / "link_becomes_file").unlink()
    (root / "link_becomes_file").write_bytes(b"a file now\n")


def _emptied(root: Path) -> None:
    for name in ("old/deep/a.txt", "old/deep/b.txt", "gone/only.txt"):
        (root / name).unlink()


def _binary(root: Path) -> None:
    data = bytearray(BLOB)
    data[1000:1010] = b"X" * 10
    (root / "data.bin").write_bytes(bytes(data) + b"\x00tail")
    (root / "new.bin").write_bytes(b"\x00\x01\x02fresh\xff")
    (root / "lonely.bin").unlink()


def _latin1(root: Path) -> None:
    (root / "latin1.txt").write_bytes("caf\u00e9\nna\u00efve!\n\u00fcber\n".encode("latin-1"))


def _texts(root: Path) -> None:
    moved = (root / "move_me.txt").read_bytes().replace(b"row 110\n", b"row ten\n")
    (root / "move_me.txt").unlink()
    (root / "moved" / "here.txt").parent.mkdir()
    (root / "moved" / "here.txt").write_bytes(moved)
    (root / "tool.sh").chmod(0o755)
    crlf = (root / "crlf.txt").read_bytes().replace(b"row 5\r\n", b"row five\r\n")
    (root / "crlf.txt").write_bytes(crlf)
    (root / "tail.txt").write_bytes(b"still no final newline")
    guide = (root / "docs/guide.txt").read_bytes()
    (root / "docs/guide.txt").write_bytes(guide.replace(b"row 3\n", b"row three\n") + b"end")


def _link_to_folder(root: Path) -> None:
    # Files made where a link to a folder was: they land in the new folder, never
    # through the link into the folder it led to (one of them moved there: -M).
    (root / "docs_link").unlink()
    (root / "docs_link").mkdir()
    (root / "docs_link/new.txt").write_bytes(b"in the new folder\n")
    (root / "old/keep.txt").rename(root / "docs_link/keep.txt")


def _folder_to_link(root: Path) -> None:
    for name in ("docs_link/new.txt", "docs_link/keep.txt"):
        (root / name).unlink()
    (root / "docs_link").rmdir()
    os.symlink("docs", root / "docs_link")


def _folder_to_file(root: Path) -> None:
    moved = (root / "moved/here.txt").read_bytes()
    (root / "moved/here.txt").unlink()
    (root / "moved").rmdir()
    (root / "moved").write_bytes(moved)


def _file_to_folder(root: Path) -> None:
    (root / "tail.txt").unlink()
    (root / "tail.txt").mkdir()
    (root / "tail.txt/inner.txt").write_bytes(b"a file in a folder that was a file\n")
    (root / "tail.txt/more.txt").write_bytes(b"still no final newline")


def _link_to_file_in_folder(root: Path) -> None:
    # A link whose name becomes a folder holding a file of the same name as its target.
    (root / "guide").unlink()
    (root / "guide").mkdir()
    (root / "guide/guide.txt").write_bytes((root / "docs/guide.txt").read_bytes())


COMMITS: list[tuple[str, Callable[[Path], None]]] = [
    ("links", _links),
    ("file and link swap types", _types),
    ("folders emptied", _emptied),
    ("binary literal and delta", _binary),
    ("not utf-8", _latin1),
    ("rename, mode, crlf, final newline", _texts),
    ("link becomes a folder", _link_to_folder),
    ("folder becomes a link", _folder_to_link),
    ("folder becomes a file", _folder_to_file),
    ("file becomes a folder", _file_to_folder),
    ("link becomes a folder of its target's copy", _link_to_file_in_folder),
]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str, str]]]:
    """The scratch repository and its (parent, commit, subject) pairs."""
    repo = tmp_path_factory.mktemp("replay") / "src"
    repo.mkdir()
    git(repo, "init", "-q")
    _base(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    pairs = []
    for subject, change in COMMITS:
        parent = git(repo, "rev-parse", "HEAD").decode().strip()
        change(repo)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        pairs.append((parent, git(repo, "rev-parse", "HEAD").decode().strip(), subject))
    return repo, pairs


History = tuple[Path, list[tuple[str, str, str]]]


@pytest.fixture(scope="module")
async def r(
    history: History, tmp_path_factory: pytest.TempPathFactory, anyio_backend: str
) -> AsyncIterator[Replayer]:
    """One server over a checkout for the whole module: each replay resets the checkout."""
    async with replayer(history[0], tmp_path_factory.mktemp("scratch")) as started:
        yield started


def _judge(outcome: Outcome, subject: str) -> None:
    assert outcome.agree, (subject, outcome.variant, outcome.error, outcome.detail)


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_every_commit_replays_as_git_applies_it(
    history: History, r: Replayer, variant: str
) -> None:
    repo, pairs = history
    for parent, commit, subject in pairs:
        diff = diff_of(repo, parent, commit, VARIANTS[variant])
        outcome = await r.replay(parent, commit, variant, diff)
        _judge(outcome, subject)
        assert outcome.ledgerfs_applied and outcome.git_applied, (subject, variant)
        tree = snapshot(r.work)
        if subject == "links":
            assert tree["new_link"] == ("link", "120000", b"docs/other.txt")
        if subject == "folders emptied":
            assert "gone" not in tree and "old/deep" not in tree and "old/keep.txt" in tree


async def test_binary_without_data_is_refused_by_both(history: History, r: Replayer) -> None:
    repo, pairs = history
    parent, commit, subject = pairs[3]
    diff = diff_of(repo, parent, commit, ())
    assert b"Binary files" in diff
    outcome = await r.replay(parent, commit, "no-binary", diff)
    _judge(outcome, subject)
    assert not outcome.ledgerfs_applied and not outcome.git_applied
    assert outcome.error is not None and '"VALIDATION"' in outcome.error


async def test_a_changed_parent_is_refused_and_kept(history: History, r: Replayer) -> None:
    """A binary delta onto bytes it was not made from: refused, nothing written."""
    repo, pairs = history
    parent, commit, _ = pairs[3]
    diff = diff_of(repo, parent, commit, VARIANTS["plain"])
    checkout(r.work, parent)
    (r.work / "data.bin").write_bytes(BLOB[::-1])
    before = snapshot(r.work)
    result = await r.client.call_tool("apply_patch", {"patch": diff.decode()})
    assert result.is_error
    assert '"PATCH_FAILED"' in result.content[0].text  # type: ignore[union-attr]
    assert snapshot(r.work) == before


TYPE_SWAPS = [subject for subject, _ in COMMITS if "becomes" in subject]


@pytest.mark.parametrize("how", ["undo", "rewind"])
@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_a_type_swap_is_undone_exactly(
    history: History, r: Replayer, variant: str, how: str
) -> None:
    # Whatever a path became in the patch (link, file or folder), undo and rewind
    # put back the parent's tree: every entry's type, mode and bytes.
    repo, pairs = history
    for parent, commit, subject in pairs:
        if subject not in TYPE_SWAPS:
            continue
        checkout(r.work, parent)
        before = snapshot(r.work)
        diff = diff_of(repo, parent, commit, VARIANTS[variant])
        applied = await r.client.call_tool("apply_patch", {"patch": diff.decode()})
        assert not applied.is_error, (subject, applied.content)
        transaction = applied.structured_content["transaction"]  # type: ignore[index]
        arguments = (
            {"transaction": transaction}
            if how == "undo"
            else {"after_transaction": transaction - 1, "sessions": "all"}
        )
        undone = await r.client.call_tool(how, arguments)
        assert not undone.is_error, (subject, undone.content)
        assert snapshot(r.work) == before, (subject, variant)
