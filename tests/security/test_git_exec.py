"""Nothing a repository holds makes ledgerfs run a program.

Each case plants a repository (as a user could have it, or as an agent can lay it
out with the tools) whose config, hooks, attributes or layout would make a plain
`git status` run a marker program. git_status and expected_status_hash go through
the engine and the real stdio server; the marker must never run, and the reply
is either a status of the planted repository itself or a refusal.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledgerfs.engine import Engine, LedgerError

from ._support import Server, error, ok

GIT_ENV = {
    "PATH": os.environ["PATH"],
    "HOME": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=folder,
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )


def repo(folder: Path) -> Path:
    folder.mkdir(parents=True)
    git(folder, "init", "-q")
    (folder / "tracked.txt").write_text("one\n")
    (folder / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "first")
    (folder / "tracked.txt").write_text("two\n")  # modified: status looks at it
    return folder


def config(folder: Path, *pairs: str) -> None:
    for pair in pairs:
        key, _, value = pair.partition("=")
        git(folder, "config", key, value)


# (name, plant(folder, run), expected) where `run` is a shell command that makes
# the marker, and expected is "status" (the planted repository's own status),
# or the refusal's code.
Plant = Callable[[Path, str], None]


def fsmonitor(folder: Path, run: str) -> None:
    config(repo(folder), f"core.fsmonitor={run}")


def fsmonitor_hook_version(folder: Path, run: str) -> None:
    config(repo(folder), f"core.fsmonitor={run}", "core.fsmonitorHookVersion=2")


def hooks_path(folder: Path, run: str) -> None:
    hooks = folder.parent / f"{folder.name}-hooks"
    hooks.mkdir()
    for name in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        script = hooks / name
        script.write_text(f"#!/bin/sh\n{run}\n")
        script.chmod(0o755)
    config(repo(folder), f"core.hooksPath={hooks}")


def hook_in_git_dir(folder: Path, run: str) -> None:
    repo(folder)
    for name in ("post-index-change", "reference-transaction"):
        script = folder / ".git" / "hooks" / name
        script.write_text(f"#!/bin/sh\n{run}\n")
        script.chmod(0o755)


def pagers(folder: Path, run: str) -> None:
    config(repo(folder), f"core.pager={run}", f"pager.status={run}", f"core.editor={run}")


def ssh_and_credentials(folder: Path, run: str) -> None:
    config(
        repo(folder),
        f"core.sshCommand={run}",
        f"credential.helper=!{run}",
        f"core.askPass={run}",
        f"core.gitProxy={run}",
    )


def credential_for_url(folder: Path, run: str) -> None:
    config(repo(folder), f"credential.https://example.com.helper=!{run}")


def include_path(folder: Path, run: str) -> None:
    repo(folder)
    # The included file is one an agent can write: it is in the work tree.
    (folder / "extra.cfg").write_text(f"[core]\n\tfsmonitor = {run}\n")
    config(folder, "include.path=../extra.cfg")


def include_if(folder: Path, run: str) -> None:
    repo(folder)
    (folder / "extra.cfg").write_text(f"[core]\n\tfsmonitor = {run}\n")
    config(folder, f"includeIf.gitdir:{folder}/.path={folder}/extra.cfg")


def clean_filter(folder: Path, run: str) -> None:
    config(repo(folder), f"filter.evil.clean={run}", f"filter.evil.smudge={run}")


def process_filter(folder: Path, run: str) -> None:
    config(repo(folder), f"filter.evil.process={run}", "filter.evil.required=true")


def textconv(folder: Path, run: str) -> None:
    config(repo(folder), f"diff.evil.textconv={run}")


def diff_command(folder: Path, run: str) -> None:
    config(repo(folder), f"diff.evil.command={run}", f"diff.external={run}")


def merge_driver(folder: Path, run: str) -> None:
    config(repo(folder), f"merge.evil.driver={run}")


def worktree_config(folder: Path, run: str) -> None:
    repo(folder)
    config(folder, "extensions.worktreeConfig=true")
    (folder / ".git" / "config.worktree").write_text(f'[filter "evil"]\n\tclean = {run}\n')


def worktree_elsewhere(folder: Path, run: str) -> None:
    # core.worktree pointing out of the repository: ledgerfs names the work tree.
    elsewhere = folder.parent / f"{folder.name}-elsewhere"
    elsewhere.mkdir()
    config(repo(folder), f"core.worktree={elsewhere}", f"core.fsmonitor={run}")


def gitfile(folder: Path, run: str) -> None:
    # A `.git` file naming a git dir (as linked worktrees and submodules have).
    real = repo(folder.parent / f"{folder.name}-real")
    config(real, f"core.fsmonitor={run}")
    folder.mkdir()
    (folder / ".git").write_text(f"gitdir: {real / '.git'}\n")


def gitfile_to_included(folder: Path, run: str) -> None:
    real = repo(folder.parent / f"{folder.name}-real")
    (real / "extra.cfg").write_text(f"[core]\n\tfsmonitor = {run}\n")
    config(real, f"include.path={real / 'extra.cfg'}")
    folder.mkdir()
    (folder / ".git").write_text(f"gitdir: {real / '.git'}\n")


def git_dir_symlink(folder: Path, run: str) -> None:
    real = repo(folder.parent / f"{folder.name}-real")
    config(real, f"core.fsmonitor={run}")
    folder.mkdir()
    (folder / ".git").symlink_to(real / ".git")


def bare_layout(folder: Path, run: str) -> None:
    # What an agent can write with write_file alone: no `.git` name needed.
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (folder / sub).mkdir(parents=True)
    (folder / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "config").write_text(
        f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n"
        f"\tfsmonitor = {run}\n"
    )


def bare_layout_inside(folder: Path, run: str) -> None:
    bare_layout(folder / "sub", run)
    (folder / "sub" / "objects" / "x.txt").write_text("x\n")


CASES: list[tuple[str, Plant, str, str]] = [
    # (id, plant, path asked relative to the case folder, expected)
    ("fsmonitor", fsmonitor, ".", "status"),
    ("fsmonitor-hook-version", fsmonitor_hook_version, ".", "status"),
    ("hooks-path", hooks_path, ".", "status"),
    ("hooks-in-git-dir", hook_in_git_dir, ".", "status"),
    ("pagers-editor", pagers, ".", "status"),
    ("ssh-askpass-credential-proxy", ssh_and_credentials, ".", "status"),
    ("worktree-elsewhere", worktree_elsewhere, ".", "status"),
    ("gitfile", gitfile, ".", "status"),
    ("credential-for-url", credential_for_url, ".", "FILE_POLICY_DENIED"),
    ("include-path", include_path, ".", "FILE_POLICY_DENIED"),
    ("include-if", include_if, "tracked.txt", "FILE_POLICY_DENIED"),
    ("clean-smudge-filter", clean_filter, ".", "FILE_POLICY_DENIED"),
    ("process-filter", process_filter, ".", "FILE_POLICY_DENIED"),
    ("textconv", textconv, ".", "FILE_POLICY_DENIED"),
    ("diff-command", diff_command, ".", "FILE_POLICY_DENIED"),
    ("merge-driver", merge_driver, ".", "FILE_POLICY_DENIED"),
    ("worktree-config", worktree_config, ".", "FILE_POLICY_DENIED"),
    ("gitfile-to-include", gitfile_to_included, ".", "FILE_POLICY_DENIED"),
    ("git-dir-symlink", git_dir_symlink, ".", "FILE_POLICY_DENIED"),
    ("bare-layout", bare_layout, ".", "VALIDATION"),
    ("bare-layout-from-inside", bare_layout_inside, "sub/objects", "VALIDATION"),
]


@pytest.fixture
def marker(tmp_path: Path) -> tuple[Path, str]:
    """A program that leaves a file when run, and the shell command that runs it."""
    made = tmp_path / "MARKER"
    program = tmp_path / "marker.sh"
    program.write_text(f"#!/bin/sh\ntouch {made}\nexit 1\n")
    program.chmod(0o755)
    return made, str(program)


@pytest.fixture
def planted(tmp_path: Path, marker: tuple[Path, str]) -> Path:
    """A root holding one folder per case, each planted."""
    root = tmp_path / "root"
    root.mkdir()
    for name, plant, _, _ in CASES:
        plant(root / name, marker[1])
    return root


def check_reply(name: str, expected: str, root: Path, reply: dict[str, Any], ok_: bool) -> None:
    if expected == "status":
        assert ok_, reply
        assert reply["repo_root"] == str(root / name)
        assert any(f["path"] == "tracked.txt" for f in reply["files"]), reply
    else:
        assert not ok_, reply
        assert reply["code"] == expected, reply


@pytest.mark.anyio
async def test_engine_git_status_runs_nothing(planted: Path, marker: tuple[Path, str]) -> None:
    async with Engine.open(
        {"roots": [str(planted)], "journal": str(planted.parent / "j.db")}
    ) as engine:
        session = await engine.session()
        for name, _, asked, expected in CASES:
            try:
                status = await session.call("git_status", {"path": f"{name}/{asked}"})
            except LedgerError as exc:
                check_reply(name, expected, planted, exc.envelope.to_builtins()["error"], False)
            else:
                check_reply(name, expected, planted, msgspec.to_builtins(status), True)
            assert not marker[0].exists(), name


def test_server_git_status_runs_nothing(planted: Path, marker: tuple[Path, str]) -> None:
    with Server(planted, "--journal", planted.parent / "j.db") as server:
        for name, _, asked, expected in CASES:
            result = server.call("git_status", {"path": f"{name}/{asked}"})
            if result.get("isError"):
                check_reply(name, expected, planted, error(result), False)
            else:
                check_reply(name, expected, planted, ok(result), True)
            assert not marker[0].exists(), name


def test_an_agent_laid_out_repository_is_never_run(
    tmp_path: Path, marker: tuple[Path, str]
) -> None:
    """The bare layout written with write_file only, then git_status and a guarded write."""
    root = tmp_path / "root"
    root.mkdir()
    layout = {
        "evil/HEAD": "ref: refs/heads/main\n",
        "evil/config": f"[core]\n\tbare = false\n\tworktree = ..\n\tfsmonitor = {marker[1]}\n"
        f"[include]\n\tpath = ../evil.cfg\n",
        "evil.cfg": f"[core]\n\tfsmonitor = {marker[1]}\n",
        "evil/objects/info/keep": "",
        "evil/refs/heads/keep": "",
    }
    with Server(root, "--journal", tmp_path / "j.db") as server:
        for path, content in layout.items():
            ok(server.call("write_file", {"path": path, "content": content}))
        for path in ("evil", "evil/objects", "evil/refs/heads", "."):
            body = error(server.call("git_status", {"path": path}), "VALIDATION")
            assert body["details"] == {"reason": "not_a_repository"}
        body = error(
            server.call(
                "write_file",
                {"path": "x.txt", "content": "x", "expected_status_hash": "blake3:" + "0" * 64},
            ),
            "VALIDATION",
        )
        assert not (root / "x.txt").exists()
    assert not marker[0].exists()


def test_a_repository_above_the_root_is_not_used(tmp_path: Path, marker: tuple[Path, str]) -> None:
    outer = repo(tmp_path / "outer")
    config(outer, f"core.fsmonitor={marker[1]}")
    (outer / "root").mkdir()
    with Server(outer / "root", "--journal", tmp_path / "j.db") as server:
        body = error(server.call("git_status", {}), "VALIDATION")
        assert body["details"] == {"reason": "not_a_repository"}
    assert not marker[0].exists()


def test_the_callers_git_environment_does_not_reach_git(
    tmp_path: Path, marker: tuple[Path, str]
) -> None:
    """GIT_DIR, GIT_CONFIG_* and a global config of the server's user are all ignored."""
    evil = repo(tmp_path / "evil")
    config(evil, f"core.fsmonitor={marker[1]}")
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    settings = f'[core]\n\tfsmonitor = {marker[1]}\n[filter "evil"]\n\tclean = {marker[1]}\n'
    (home / ".gitconfig").write_text(settings)
    (home / ".config" / "git" / "config").write_text(settings)
    root = repo(tmp_path / "root")
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_DIR": str(evil / ".git"),
        "GIT_WORK_TREE": str(evil),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": marker[1],
        "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{marker[1]}'",
        "GIT_EXTERNAL_DIFF": marker[1],
        "GIT_PAGER": marker[1],
    }
    with Server(root, "--journal", tmp_path / "j.db", env=env) as server:
        status = ok(server.call("git_status", {}))
        assert status["repo_root"] == str(root)
        assert [f["path"] for f in status["files"]] == ["tracked.txt"]
    assert not marker[0].exists()
