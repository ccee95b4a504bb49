"""engine.git against real git repositories in temporary folders."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.git import (
    GitFileStatus,
    ensure_excluded,
    git_status,
    parse_porcelain_v2,
    status_hash,
)

pytestmark = pytest.mark.anyio

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")},
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git_sync(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )


async def git(repo: Path, *args: str) -> None:
    await anyio.run_process(["git", "-C", str(repo), *args], env=GIT_ENV, check=True)


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder git will not look above, so no enclosing repository leaks into a test."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    return tmp_path


@pytest.fixture
def repo(isolated: Path) -> Path:
    """A repository on `main` with one commit of `tracked.txt`."""
    root = isolated / "repo"
    root.mkdir()
    git_sync(root, "init", "-q")
    (root / "tracked.txt").write_text("one\n")
    git_sync(root, "add", "tracked.txt")
    git_sync(root, "commit", "-q", "-m", "first")
    return root


async def test_status_fields(repo: Path) -> None:
    (repo / "tracked.txt").write_text("two\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "new file.txt").write_text("x\n")
    status = await git_status(repo)
    assert status.repo_root == str(repo)
    assert status.branch == "main"
    assert status.head is not None and len(status.head) == 40
    assert status.files == [
        GitFileStatus(path="tracked.txt", status=".M"),
        GitFileStatus(path="sub/new file.txt", status="??"),
    ]
    assert status.status_hash.startswith("blake3:") and len(status.status_hash) == 7 + 64


async def test_status_of_unborn_repository(isolated: Path) -> None:
    git_sync(isolated, "init", "-q")
    status = await git_status(isolated)
    assert (status.branch, status.head, status.files) == ("main", None, [])
    assert status.status_hash == status_hash(
        None, "main", b"# branch.oid (initial)\0# branch.head main\0"
    )


async def test_status_reports_staged_rename(repo: Path) -> None:
    await git(repo, "mv", "tracked.txt", "renamed.txt")
    status = await git_status(repo)
    assert status.files == [GitFileStatus(path="renamed.txt", status="R.", orig_path="tracked.txt")]


async def test_hash_is_stable_and_the_same_from_anywhere_inside(repo: Path) -> None:
    (repo / "sub").mkdir()
    (repo / "sub" / "f.txt").write_text("x\n")
    first = await git_status(repo)
    again = await git_status(repo)
    from_subdir = await git_status(repo / "sub")
    from_file = await git_status(repo / "sub" / "f.txt")
    assert first == again
    assert first.status_hash == from_subdir.status_hash == from_file.status_hash
    assert from_subdir.repo_root == str(repo)


async def commit_externally(repo: Path) -> None:
    (repo / "tracked.txt").write_text("changed\n")
    await git(repo, "commit", "-q", "-am", "external")


async def commit_same_tree(repo: Path) -> None:
    # Only HEAD moves: the working tree and index look exactly as before.
    await git(repo, "commit", "-q", "--allow-empty", "-m", "empty")


async def add_untracked(repo: Path) -> None:
    (repo / "deep" / "er").mkdir(parents=True)
    (repo / "deep" / "er" / "new.txt").write_text("x\n")


async def switch_branch(repo: Path) -> None:
    await git(repo, "switch", "-q", "-c", "other")


async def detach(repo: Path) -> None:
    await git(repo, "switch", "-q", "--detach")


async def modify_tracked(repo: Path) -> None:
    (repo / "tracked.txt").write_text("edited\n")


async def stage(repo: Path) -> None:
    (repo / "tracked.txt").write_text("edited\n")
    await git(repo, "add", "tracked.txt")


@pytest.mark.parametrize(
    "change",
    [
        commit_externally,
        commit_same_tree,
        add_untracked,
        switch_branch,
        detach,
        modify_tracked,
        stage,
    ],
)
async def test_hash_changes(repo: Path, change: Any) -> None:
    before = await git_status(repo)
    await change(repo)
    assert (await git_status(repo)).status_hash != before.status_hash


async def test_excluded_ledgerfs_folder_does_not_change_the_hash(repo: Path) -> None:
    await ensure_excluded(repo)
    await ensure_excluded(repo)  # idempotent
    before = await git_status(repo)
    (repo / ".ledgerfs").mkdir()
    (repo / ".ledgerfs" / "journal.db").write_bytes(b"\0sqlite")
    after = await git_status(repo)
    assert after.status_hash == before.status_hash
    lines = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert lines.count(".ledgerfs/") == 1


async def test_unexcluded_ledgerfs_folder_shows_up(repo: Path) -> None:
    before = await git_status(repo)
    (repo / ".ledgerfs").mkdir()
    (repo / ".ledgerfs" / "journal.db").write_bytes(b"\0sqlite")
    after = await git_status(repo)
    assert after.status_hash != before.status_hash
    assert GitFileStatus(path=".ledgerfs/journal.db", status="??") in after.files


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        pytest.param(None, ".ledgerfs/\n", id="missing-file"),
        pytest.param("", ".ledgerfs/\n", id="empty"),
        pytest.param("*.o", "*.o\n.ledgerfs/\n", id="no-final-newline"),
        pytest.param("*.o\n", "*.o\n.ledgerfs/\n", id="final-newline"),
        pytest.param("*.o\n  .ledgerfs/  \n", "*.o\n  .ledgerfs/  \n", id="already-there"),
    ],
)
async def test_ensure_excluded_edits_the_file(
    repo: Path, existing: str | None, expected: str
) -> None:
    exclude = repo / ".git" / "info" / "exclude"
    if existing is None:
        exclude.unlink(missing_ok=True)
    else:
        exclude.write_text(existing)
    await ensure_excluded(repo)
    assert exclude.read_text() == expected


async def test_ensure_excluded_in_a_linked_worktree(repo: Path) -> None:
    worktree = repo.parent / "wt"
    await git(repo, "worktree", "add", "-q", str(worktree))
    assert (worktree / ".git").is_file()
    await ensure_excluded(worktree)
    before = await git_status(worktree)
    (worktree / ".ledgerfs").mkdir()
    (worktree / ".ledgerfs" / "journal.db").write_bytes(b"x")
    assert (await git_status(worktree)).status_hash == before.status_hash
    assert ".ledgerfs/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()


@pytest.mark.parametrize("entry", ["", "  ", "a\nb"])
async def test_ensure_excluded_rejects_bad_entries(repo: Path, entry: str) -> None:
    with pytest.raises(LedgerError) as caught:
        await ensure_excluded(repo, entry)
    assert caught.value.code is Code.VALIDATION


# ---------------------------------------------------------------- failures


def envelope(caught: pytest.ExceptionInfo[LedgerError]) -> dict[str, Any]:
    body: dict[str, Any] = caught.value.envelope.to_builtins()["error"]
    return body


async def test_not_a_repository(isolated: Path) -> None:
    with pytest.raises(LedgerError) as caught:
        await git_status(isolated)
    error = envelope(caught)
    assert error["code"] == "VALIDATION"
    assert error["message"] == f"{isolated} is not inside a git repository"
    assert error["details"] == {"reason": "not_a_repository"}
    assert error["path"] == str(isolated)


async def test_ensure_excluded_outside_a_repository(isolated: Path) -> None:
    with pytest.raises(LedgerError) as caught:
        await ensure_excluded(isolated)
    assert envelope(caught)["details"] == {"reason": "not_a_repository"}


@pytest.mark.parametrize("call", [git_status, ensure_excluded])
async def test_missing_path(isolated: Path, call: Any) -> None:
    with pytest.raises(LedgerError) as caught:
        await call(isolated / "nope")
    assert envelope(caught)["code"] == "NOT_FOUND"
    assert envelope(caught)["path"] == str(isolated / "nope")


async def test_git_not_installed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(LedgerError) as caught:
        await git_status(repo)
    assert envelope(caught)["code"] == "TOOL_UNAVAILABLE"
    assert envelope(caught)["details"] == {"reason": "git not found"}


async def test_timeout(repo: Path) -> None:
    with pytest.raises(LedgerError) as caught:
        await git_status(repo, timeout=1e-9)
    assert envelope(caught)["code"] == "TOOL_UNAVAILABLE"
    assert envelope(caught)["details"] == {"reason": "timeout", "seconds": 1e-9}


async def test_other_git_failure_carries_stderr(repo: Path) -> None:
    (repo / ".git" / "index").write_bytes(b"garbage that is not an index file at all")
    with pytest.raises(LedgerError) as caught:
        await git_status(repo)
    error = envelope(caught)
    assert error["code"] == "TOOL_UNAVAILABLE"
    assert error["details"]["reason"] == "git failed"
    assert "index" in error["details"]["stderr"]
    assert error["details"]["stderr"] == error["details"]["stderr"].strip()


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            b"# branch.oid abc\0# branch.head (detached)\0",
            (None, "abc", []),
            id="detached",
        ),
        pytest.param(
            b"# branch.oid abc\0# branch.head main\0# branch.upstream origin/main\0"
            b"# branch.ab +1 -0\0"
            b"1 .M N... 100644 100644 100644 h1 h2 with space.txt\0"
            b"2 R. N... 100644 100644 100644 h1 h2 R100 new name\0old name\0"
            b"u UU N... 100644 100644 100644 100644 h1 h2 h3 both.txt\0"
            b"? caf\xc3\xa9.txt\0! ignored.o\0",
            (
                "main",
                "abc",
                [
                    GitFileStatus(path="with space.txt", status=".M"),
                    GitFileStatus(path="new name", status="R.", orig_path="old name"),
                    GitFileStatus(path="both.txt", status="UU"),
                    GitFileStatus(path="café.txt", status="??"),
                ],
            ),
            id="all-kinds",
        ),
    ],
)
def test_parse_porcelain_v2(raw: bytes, expected: tuple[Any, ...]) -> None:
    assert parse_porcelain_v2(raw) == expected


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param(("abc", "main", b""), ("abc", "mai", b"n"), id="branch-vs-output"),
        pytest.param(("abc", None, b""), ("abc", "other", b""), id="detached-vs-branch"),
        pytest.param((None, "main", b""), ("abc", "main", b""), id="unborn-vs-head"),
    ],
)
def test_status_hash_separates_its_parts(
    left: tuple[Any, Any, bytes], right: tuple[Any, Any, bytes]
) -> None:
    assert status_hash(*left) != status_hash(*right)
