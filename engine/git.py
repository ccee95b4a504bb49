"""Git status and the status hash, by running the `git` CLI under anyio.

`git_status` reports a repository's branch, HEAD and changed files plus a
`status_hash` that mutations can carry as `expected_status_hash`. Every failure
of the git subprocess is translated to an envelope code in one place,
`_map_git_errors`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
from blake3 import blake3
from msgspec import Struct

from ledgerfs.engine.errors import Code, LedgerError, errno_name

__all__ = [
    "GitFileStatus",
    "GitStatus",
    "ensure_excluded",
    "git_status",
    "parse_porcelain_v2",
    "status_hash",
]

# Variables that would point git somewhere other than the path we pass with -C.
_REDIRECTING_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")
_STDERR_LIMIT = 2000


class GitFileStatus(Struct, frozen=True, kw_only=True):
    """One changed path: porcelain v2 `XY` (e.g. `.M`, `A.`), or `??` when untracked.

    `orig_path` is the source of a rename or copy, else None. Paths are relative
    to the repository root, `/`-separated, as git prints them.
    """

    path: str
    status: str
    orig_path: str | None = None


class GitStatus(Struct, frozen=True, kw_only=True):
    """A repository's status; `branch` None when detached, `head` None when unborn."""

    repo_root: str
    branch: str | None
    head: str | None
    files: list[GitFileStatus]
    status_hash: str


class _GitFailed(Exception):
    """git exited non-zero; translated by `_map_git_errors`."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(stderr)
        self.returncode = returncode
        self.stderr = stderr


class _PathMissing(Exception):
    """The path given to a git call does not exist; translated by `_map_git_errors`."""


def _git_env() -> dict[str, str]:
    """The environment for git: C locale, no optional locks, no redirection, no prompts."""
    env = {k: v for k, v in os.environ.items() if k not in _REDIRECTING_ENV}
    env.update(LC_ALL="C", GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0")
    return env


@contextlib.contextmanager
def _map_git_errors(path: str, timeout: float) -> Iterator[None]:
    """Translate every failure of running git into a LedgerError, most specific first.

    Raises NOT_FOUND (the path is missing, or vanished before git ran),
    TOOL_UNAVAILABLE (git missing, timeout, other git or OS failures) and
    VALIDATION (not a repository).
    """
    try:
        yield
    except _PathMissing as exc:
        raise LedgerError(Code.NOT_FOUND, f"{path} does not exist", path=path, details={}) from exc
    except FileNotFoundError as exc:
        # Raised by the spawn itself: the executable is missing, not the path.
        raise LedgerError(
            Code.TOOL_UNAVAILABLE,
            "git is not installed or not on PATH",
            path=path,
            details={"reason": "git not found"},
        ) from exc
    except TimeoutError as exc:
        raise LedgerError(
            Code.TOOL_UNAVAILABLE,
            f"git did not answer within {timeout} seconds",
            path=path,
            details={"reason": "timeout", "seconds": timeout},
        ) from exc
    except _GitFailed as exc:
        stderr = exc.stderr.strip()[:_STDERR_LIMIT]
        if exc.returncode == 128 and "not a git repository" in stderr:
            raise LedgerError(
                Code.VALIDATION,
                f"{path} is not inside a git repository",
                path=path,
                details={"reason": "not_a_repository"},
            ) from exc
        if "cannot change to" in stderr and "No such file or directory" in stderr:
            raise LedgerError(
                Code.NOT_FOUND, f"{path} does not exist", path=path, details={}
            ) from exc
        raise LedgerError(
            Code.TOOL_UNAVAILABLE,
            f"git failed with exit code {exc.returncode}",
            path=path,
            details={"reason": "git failed", "returncode": exc.returncode, "stderr": stderr},
        ) from exc
    except OSError as exc:
        raise LedgerError(
            Code.TOOL_UNAVAILABLE,
            f"git could not be run: {exc.strerror or exc}",
            path=path,
            details={"reason": "os_error", "errno": errno_name(exc)},
        ) from exc


async def _run_git(directory: str, args: Sequence[str], timeout: float) -> bytes:
    """Run `git -C directory args...` and return its stdout; raises `_GitFailed`."""
    with anyio.fail_after(timeout):
        result = await anyio.run_process(
            ["git", "-C", directory, *args],
            check=False,
            env=_git_env(),
            stdin=subprocess.DEVNULL,
        )
    if result.returncode != 0:
        raise _GitFailed(result.returncode, result.stderr.decode("utf-8", "replace"))
    return result.stdout


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def parse_porcelain_v2(raw: bytes) -> tuple[str | None, str | None, list[GitFileStatus]]:
    """(branch, head, files) from `git status --porcelain=v2 -z --branch` output.

    Ignored entries (`!`) are dropped; unknown entry kinds are skipped.

    >>> out = b"# branch.oid (initial)\\0# branch.head main\\0? new.txt\\0"
    >>> parse_porcelain_v2(out)
    ('main', None, [GitFileStatus(path='new.txt', status='??', orig_path=None)])
    """
    branch: str | None = None
    head: str | None = None
    files: list[GitFileStatus] = []
    entries = raw.split(b"\0")
    index = 0
    while index < len(entries):
        entry = _decode(entries[index])
        index += 1
        if entry.startswith("# branch.oid "):
            oid = entry.removeprefix("# branch.oid ")
            head = None if oid == "(initial)" else oid
        elif entry.startswith("# branch.head "):
            name = entry.removeprefix("# branch.head ")
            branch = None if name == "(detached)" else name
        elif entry.startswith("1 "):
            fields = entry.split(" ", 8)
            files.append(GitFileStatus(path=fields[8], status=fields[1]))
        elif entry.startswith("2 "):
            # A rename or copy: its source path is the next NUL-separated entry.
            fields = entry.split(" ", 9)
            orig = _decode(entries[index]) if index < len(entries) else None
            index += 1
            files.append(GitFileStatus(path=fields[9], status=fields[1], orig_path=orig))
        elif entry.startswith("u "):
            fields = entry.split(" ", 10)
            files.append(GitFileStatus(path=fields[10], status=fields[1]))
        elif entry.startswith("? "):
            files.append(GitFileStatus(path=entry[2:], status="??"))
    return branch, head, files


def status_hash(head: str | None, branch: str | None, porcelain: bytes) -> str:
    """`blake3:` + hex over HEAD, branch and the raw porcelain output, NUL-separated.

    An unborn HEAD hashes as `(unborn)`, a detached branch as `(detached)`.

    >>> status_hash(None, "main", b"")[:15]
    'blake3:126418ee'
    """
    hasher = blake3()
    hasher.update((head or "(unborn)").encode())
    hasher.update(b"\0")
    hasher.update((branch or "(detached)").encode("utf-8", "surrogateescape"))
    hasher.update(b"\0")
    hasher.update(porcelain)
    return "blake3:" + hasher.hexdigest()


async def _directory_of(path: str) -> str:
    """The directory to run git in: the path itself, or a file's folder.

    Raises `_PathMissing` when the path does not exist.
    """
    try:
        info = await anyio.Path(path).stat()
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise _PathMissing(path) from exc
    return path if stat.S_ISDIR(info.st_mode) else os.path.dirname(path) or "."


async def git_status(path: str | os.PathLike[str], *, timeout: float = 10.0) -> GitStatus:
    """The status of the repository containing `path`, with its `status_hash`.

    Untracked files are listed one by one; ignored files are left out. The index
    is never locked or refreshed (GIT_OPTIONAL_LOCKS=0), so the call is read-only.

    Raises NOT_FOUND (path missing), VALIDATION (not inside a repository) and
    TOOL_UNAVAILABLE (git missing, `timeout` seconds exceeded, other git failures).
    """
    text_path = os.fspath(path)
    with _map_git_errors(text_path, timeout):
        directory = await _directory_of(text_path)
        root = _decode(await _run_git(directory, ["rev-parse", "--show-toplevel"], timeout))
        root = root.rstrip("\n")
        # Always from the root, so every path inside one repository hashes the same.
        raw = await _run_git(
            root,
            ["status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all"],
            timeout,
        )
    branch, head, files = parse_porcelain_v2(raw)
    return GitStatus(
        repo_root=root,
        branch=branch,
        head=head,
        files=files,
        status_hash=status_hash(head, branch, raw),
    )


_EXCLUDE_LOCK = threading.Lock()


def _append_exclude_line(exclude: Path, entry: str) -> None:
    """Add `entry` as a line of the exclude file unless a line already equals it."""
    with _EXCLUDE_LOCK:  # two callers must not both see it missing and both append
        try:
            current = exclude.read_bytes().decode("utf-8", "surrogateescape")
        except FileNotFoundError:
            current = ""
        if entry in (line.strip() for line in current.splitlines()):
            return
        exclude.parent.mkdir(parents=True, exist_ok=True)
        separator = "" if current == "" or current.endswith("\n") else "\n"
        with exclude.open("ab") as handle:
            handle.write((separator + entry + "\n").encode("utf-8", "surrogateescape"))


async def ensure_excluded(
    repo_root: str | os.PathLike[str], entry: str = ".ledgerfs/", *, timeout: float = 10.0
) -> None:
    """Add `entry` to the repository's `info/exclude` once; calling again changes nothing.

    The file is found with `git rev-parse --git-path info/exclude`, so linked
    worktrees (where `.git` is a file) use their common exclude file.

    Raises VALIDATION (empty or multi-line entry, not a repository), NOT_FOUND
    and TOOL_UNAVAILABLE as `git_status` does, and TOOL_UNAVAILABLE when the
    exclude file cannot be written.
    """
    root = os.fspath(repo_root)
    if not entry.strip() or "\n" in entry or "\r" in entry:
        raise LedgerError(
            Code.VALIDATION,
            "the exclude entry must be one non-empty line",
            details={"argument": "entry"},
        )
    with _map_git_errors(root, timeout):
        directory = await _directory_of(root)
        raw = await _run_git(directory, ["rev-parse", "--git-path", "info/exclude"], timeout)
    # A relative answer is relative to the directory git ran in.
    exclude = Path(directory) / _decode(raw).rstrip("\n")
    try:
        await anyio.to_thread.run_sync(_append_exclude_line, exclude, entry.strip())
    except OSError as exc:
        raise LedgerError(
            Code.TOOL_UNAVAILABLE,
            f"cannot update {exclude}: {exc.strerror or exc}",
            path=str(exclude),
            details={"reason": "exclude_not_writable", "errno": errno_name(exc)},
        ) from exc
