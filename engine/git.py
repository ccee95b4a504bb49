"""Git status and the status hash, by running the `git` CLI under anyio.

`git_status` reports a repository's branch, HEAD and changed files plus a
`status_hash` that mutations can carry as `expected_status_hash`. Every failure
of the git subprocess is translated to an envelope code in one place,
`_map_git_errors`.

Nothing a repository holds may make ledgerfs run a program (an agent can write a
repository's layout; a user can have a hostile one). So:

- ledgerfs finds the repository itself: a `.git` folder (or a `.git` file naming
  one) in the path's folder or above it, never above `ceiling` (the root), never
  a bare layout, owned by this user; git gets it as `--git-dir`/`--work-tree`
  and never discovers anything.
- git runs with no system or global config, none of the user's GIT_* variables,
  `--no-optional-locks`, and `-c` overrides of every setting that runs or pages
  (`_LOCKDOWN`); submodules are not entered.
- the repository's own config files are read first with `git config --file`
  (which never follows includes and runs nothing) and a repository whose config
  includes other files or names a driver, filter or helper command is refused
  with FILE_POLICY_DENIED (`_REFUSED`): those cannot be overridden by name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
from blake3 import blake3
from msgspec import Struct

from .errors import Code, LedgerError, errno_name
from .nofollow import open_beneath, stat_beneath
from .oserrors import os_error

__all__ = [
    "GitFileStatus",
    "GitStatus",
    "Repository",
    "ensure_excluded",
    "find_repository",
    "git_output",
    "git_status",
    "parse_porcelain_v2",
    "status_hash",
    "vet_config",
]

_STDERR_LIMIT = 2000

# Settings that make git run a program, page, prompt or look elsewhere, each
# neutralised on the command line (which outranks every config file).
_LOCKDOWN: tuple[str, ...] = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "pager.status=false",
    "core.editor=false",
    "sequence.editor=false",
    "core.askPass=",
    "credential.helper=",
    "core.sshCommand=false",
    "core.gitProxy=",
    "core.alternateRefsCommand=",
    "diff.external=",
    "gpg.program=false",
    "core.untrackedCache=false",
    "core.splitIndex=false",
    "safe.bareRepository=explicit",
    "protocol.allow=never",
    "submodule.recurse=false",
    "status.submoduleSummary=false",
    "diff.ignoreSubmodules=all",
)

# Config keys (lowercased section and name; `*` a subsection) a repository may not
# carry: a `-c` cannot override what it does, or names a command to run.
_REFUSED: tuple[str, ...] = (
    "include.path",
    "includeif.*.path",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "diff.*.textconv",
    "diff.*.command",
    "merge.*.driver",
    "credential.*.helper",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.vcs",
)

# Environment variables git reads; none of the caller's may reach it.
_GIT_PREFIX = "GIT_"


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


class Repository(Struct, frozen=True, kw_only=True):
    """A repository ledgerfs found itself: its work tree, git dir and common dir."""

    work_tree: str
    git_dir: str
    common_dir: str


class _Refused(Exception):
    """The repository may not be run; translated by `_map_git_errors`."""

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details


def _git_env(ceiling: str) -> dict[str, str]:
    """The environment for git: none of the caller's GIT_* variables, no config but
    the repository's, no prompts or pagers, no optional locks, C locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_GIT_PREFIX)}
    for name in ("PAGER", "EDITOR", "VISUAL", "SSH_ASKPASS", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    env.update(
        LC_ALL="C",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_OPTIONAL_LOCKS="0",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        GIT_ASKPASS="false",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_ATTR_NOSYSTEM="1",
        GIT_CEILING_DIRECTORIES=ceiling,
        GIT_PROTOCOL_FROM_USER="0",
    )
    return env


def find_repository(path: str, ceiling: str | None = None) -> Repository:
    """The repository holding `path`: the nearest `.git` at or above its folder.

    Looks no higher than `ceiling` (a root) and follows no symlink. A `.git`
    file names its git dir (linked worktrees, submodules); a bare layout is never
    a repository here. Raises `_PathMissing`, `_Refused` (not owned by this user,
    `.git` a link) and `_GitFailed`-free VALIDATION through `_NotARepository`.
    """
    # A sandboxed path (a ceiling is given) is canonical already; realpath would
    # follow a folder swapped for a link since the check.
    canonical = os.path.realpath(path) if ceiling is None else path
    try:
        st = stat_beneath(canonical)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise _PathMissing(path) from exc
    except OSError as exc:
        raise os_error(exc, path) from exc
    folder = canonical if stat.S_ISDIR(st.st_mode) else os.path.dirname(canonical)
    while True:
        found = _dot_git(folder)
        if found is not None:
            return found
        parent = os.path.dirname(folder)
        if folder == ceiling or parent == folder:
            raise _NotARepository(path)
        folder = parent


def _dot_git(folder: str) -> Repository | None:
    candidate = os.path.join(folder, ".git")
    try:
        fd = open_beneath(candidate, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(candidate):
            raise _Refused("git_dir_is_a_link", path=candidate) from exc
        # A folder on the way swapped for a link since the path was checked.
        raise os_error(exc, candidate) from exc
    try:
        st = os.fstat(fd)
        _check_owner(st, candidate)
        if stat.S_ISDIR(st.st_mode):
            git_dir = candidate
        elif stat.S_ISREG(st.st_mode):
            git_dir = _gitfile_target(os.read(fd, 4096), folder, candidate)
        else:
            return None
    finally:
        os.close(fd)
    common = git_dir
    try:
        with open(os.path.join(git_dir, "commondir"), "rb") as handle:
            common = os.path.join(git_dir, os.fsdecode(handle.read().strip()))
    except FileNotFoundError:
        pass
    common = os.path.realpath(common)
    _check_owner(os.stat(common), common)
    return Repository(work_tree=folder, git_dir=os.path.realpath(git_dir), common_dir=common)


def _gitfile_target(raw: bytes, folder: str, candidate: str) -> str:
    line = raw.split(b"\n", 1)[0].strip()
    if not line.startswith(b"gitdir:"):
        raise _Refused("not_a_gitfile", path=candidate)
    target = os.fsdecode(line.removeprefix(b"gitdir:").strip())
    git_dir = os.path.realpath(os.path.join(folder, target))
    if not os.path.isdir(git_dir):
        raise _Refused("gitfile_target_missing", path=candidate)
    return git_dir


def _check_owner(st: os.stat_result, path: str) -> None:
    # As git's safe.directory rule: a repository another user owns is not trusted.
    if st.st_uid != os.geteuid():
        raise _Refused("not_owned_by_user", path=path, uid=st.st_uid)


class _NotARepository(Exception):
    """No repository holds the path below the ceiling; translated by `_map_git_errors`."""


@contextlib.contextmanager
def _map_git_errors(path: str, timeout: float) -> Iterator[None]:
    """Translate every failure of running git into a LedgerError, most specific first.

    Raises NOT_FOUND (the path is missing, or vanished before git ran),
    TOOL_UNAVAILABLE (git missing, timeout, other git or OS failures) and
    VALIDATION (not a repository).
    """
    try:
        yield
    except _NotARepository as exc:
        raise _not_a_repository(path) from exc
    except _Refused as exc:
        raise LedgerError(
            Code.FILE_POLICY_DENIED,
            f"git is not run on this repository: {exc.reason.replace('_', ' ')}.",
            path=path,
            details={"reason": exc.reason, **exc.details},
        ) from exc
    except _PathMissing as exc:
        raise _missing(path) from exc
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
            raise _not_a_repository(path) from exc
        if "cannot change to" in stderr and "No such file or directory" in stderr:
            raise _missing(path) from exc
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


def _not_a_repository(path: str) -> LedgerError:
    return LedgerError(
        Code.VALIDATION,
        f"{path} is not inside a git repository",
        path=path,
        details={"reason": "not_a_repository"},
    )


def _missing(path: str) -> LedgerError:
    return LedgerError(Code.NOT_FOUND, f"{path} does not exist", path=path, details={})


async def _run_git(repo: Repository, args: Sequence[str], timeout: float) -> bytes:
    """Run git on `repo` with the lockdown; return its stdout; raises `_GitFailed`."""
    command = [*_locked_git(repo), f"--work-tree={repo.work_tree}", *args]
    return await _spawn(command, repo.work_tree, timeout)


def _locked_git(repo: Repository) -> list[str]:
    command = ["git", "--no-optional-locks"]
    for setting in _LOCKDOWN:
        command += ["-c", setting]
    return [*command, f"--git-dir={repo.git_dir}"]


async def _spawn(command: list[str], cwd: str, timeout: float) -> bytes:
    with anyio.fail_after(timeout):
        result = await anyio.run_process(
            command,
            check=False,
            cwd=cwd,
            env=_git_env(os.path.dirname(cwd)),
            stdin=subprocess.DEVNULL,
        )
    if result.returncode != 0:
        raise _GitFailed(result.returncode, result.stderr.decode("utf-8", "replace"))
    return result.stdout


async def vet_config(repo: Repository, timeout: float) -> None:
    """Refuse a repository whose config includes files or names a command to run.

    Each config file is read by `git config --file`, which follows no include
    and runs nothing, so ledgerfs and git agree on what the file says.
    """
    files = [os.path.join(repo.common_dir, "config")]
    worktree_config = os.path.join(repo.git_dir, "config.worktree")
    if os.path.exists(worktree_config):
        files.append(worktree_config)
    for config in files:
        if not os.path.exists(config):
            continue
        raw = await _spawn(
            [*_locked_git(repo), "config", "--no-includes", "--null", "--list", "--file", config],
            repo.work_tree,
            timeout,
        )
        for entry in raw.split(b"\0"):
            key = _decode(entry.split(b"\n", 1)[0]).lower()
            if key and _refused_key(key):
                raise _Refused("config_runs_programs", config=config, key=key)


def _refused_key(key: str) -> bool:
    """Whether a config key (lowercased) is one a repository may not carry.

    >>> _refused_key("include.path"), _refused_key("filter.lfs.clean"), _refused_key("user.name")
    (True, True, False)
    """
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    for pattern in _REFUSED:
        p_section, _, p_rest = pattern.partition(".")
        p_sub, _, p_name = p_rest.rpartition(".")
        if p_section != section or p_name != name:
            continue
        if (p_sub == "*" and subsection) or p_sub == subsection:
            return True
    return False


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


_STATUS = (
    "status",
    "--porcelain=v2",
    "-z",
    "--branch",
    "--untracked-files=all",
    "--ignore-submodules=all",
)


async def _status(repo: Repository, timeout: float) -> bytes:
    """`git status`, asked again (twice at most) when it fails: a folder of the work
    tree swapped while git walks it makes git itself fail, and the next walk may not."""
    for _ in range(2):
        try:
            return await _run_git(repo, _STATUS, timeout)
        except _GitFailed:
            continue
    return await _run_git(repo, _STATUS, timeout)


def _only_reachable(raw: bytes, work_tree: str) -> bytes:
    """The porcelain output without untracked entries that are not in the work tree.

    git lists untracked files by walking folders with opendir, which follows a
    folder swapped for a link while it walks; such an entry names a file
    outside. Each untracked entry is checked to exist without following a link.
    (Tracked entries name the index, not the walk.)
    """
    entries = raw.split(b"\0")
    kept: list[bytes] = []
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if entry.startswith(b"2 ") and index < len(entries):
            kept += [entry, entries[index]]  # a rename's source follows it
            index += 1
        elif not entry.startswith(b"? ") or _lexists_beneath(work_tree, entry[2:]):
            kept.append(entry)
    return b"\0".join(kept)


def _lexists_beneath(work_tree: str, relative: bytes) -> bool:
    folder, name = os.path.split(os.path.join(work_tree, os.fsdecode(relative)))
    try:
        fd = open_beneath(folder, os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


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


async def git_status(
    path: str | os.PathLike[str], *, ceiling: str | None = None, timeout: float = 10.0
) -> GitStatus:
    """The status of the repository containing `path`, with its `status_hash`.

    The repository is the nearest one at or above `path` and not above
    `ceiling`. Untracked files are listed one by one; ignored files and
    submodules' insides are left out. The index is never locked or refreshed, so
    the call is read-only; nothing in the repository runs a program.

    Raises NOT_FOUND (path missing), VALIDATION (not inside a repository),
    FILE_POLICY_DENIED (a repository git may not be run on) and TOOL_UNAVAILABLE
    (git missing, `timeout` seconds exceeded, other git failures).
    """
    text_path = os.fspath(path)
    with _map_git_errors(text_path, timeout):
        repo = find_repository(text_path, ceiling)
        await vet_config(repo, timeout)
        raw = await _status(repo, timeout)
    raw = await anyio.to_thread.run_sync(_only_reachable, raw, repo.work_tree)
    branch, head, files = parse_porcelain_v2(raw)
    return GitStatus(
        repo_root=repo.work_tree,
        branch=branch,
        head=head,
        files=files,
        status_hash=status_hash(head, branch, raw),
    )


async def git_output(
    path: str | os.PathLike[str],
    args: Sequence[str],
    *,
    ceiling: str | None = None,
    timeout: float = 10.0,
) -> bytes:
    """The output of `git args...` on the repository holding `path`, run as
    `git_status` runs git (found by ledgerfs, config vetted, locked down).

    Raises what `git_status` raises.
    """
    text_path = os.fspath(path)
    with _map_git_errors(text_path, timeout):
        repo = find_repository(text_path, ceiling)
        await vet_config(repo, timeout)
        return await _run_git(repo, args, timeout)


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
        repo = find_repository(root)
        # git itself says where (and whether: a `.git` that is not a repository
        # fails here); linked worktrees share the common dir's exclude file.
        raw = await _run_git(repo, ["rev-parse", "--git-path", "info/exclude"], timeout)
    exclude = Path(repo.work_tree) / _decode(raw).rstrip("\n")
    try:
        await anyio.to_thread.run_sync(_append_exclude_line, exclude, entry.strip())
    except OSError as exc:
        raise LedgerError(
            Code.TOOL_UNAVAILABLE,
            f"cannot update {exclude}: {exc.strerror or exc}",
            path=str(exclude),
            details={"reason": "exclude_not_writable", "errno": errno_name(exc)},
        ) from exc
