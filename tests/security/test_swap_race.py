"""A folder swapped for a symlink to an outside folder, in a tight loop, leaks nothing.

A separate swapper process exchanges `inside/` (a real folder) with a symlink to
an outside folder as fast as it can, while every tool that touches a root's
contents runs against `inside/` through the engine and through the real stdio
server. No reply, and no journal record, may hold a byte or a name from outside;
nothing outside changes; every failure is an envelope with a code that says the
path moved (never an unmapped error).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine, LedgerError, nofollow
from tests.server._support import REPO

from ._support import Server, error
from .test_git_exec import git

OUTSIDE = "OUTSIDE-BYTES"
OUTSIDE_NAME = "outside-only.txt"
# What a call may answer while its path is being swapped: the path left the root,
# or it changed between the check and the access (NOT_ALLOWED), or a write found
# its folder swapped after its intent was journaled and rolled back (ROLLBACK_COMPLETE),
# or a file another call of the loop moved or deleted is not there (NOT_FOUND).
RACE_CODES = {"NOT_ALLOWED", "ROLLBACK_COMPLETE", "NOT_FOUND"}
# git is a program of its own: a folder swapped while it walks the work tree can
# make it fail (three times in a row); that is reported as a git failure.
GIT_RACE = {"TOOL_UNAVAILABLE"}


def allowed(tool: str) -> set[str]:
    return RACE_CODES | GIT_RACE if tool == "git_status" else RACE_CODES


PATCH = "--- /dev/null\n+++ b/inside/p.txt\n@@ -0,0 +1 @@\n+patched\n"


def calls(i: int) -> list[tuple[str, dict[str, Any]]]:
    """One round: every tool that reads or changes something under `inside/`."""
    return [
        ("read_file", {"path": "inside/f.txt"}),
        ("get_file_info", {"path": "inside/f.txt"}),
        ("get_file_info", {"path": "inside"}),
        ("list_directory", {"path": "inside"}),
        ("write_file", {"path": "inside/f.txt", "content": f"inside {i}\n", "dry_run": True}),
        (
            "edit_file",
            {
                "path": "inside/f.txt",
                "edits": [{"old_text": "inside", "new_text": "in"}],
                "dry_run": True,
            },
        ),
        ("write_file", {"path": "inside/f.txt", "content": f"inside {i}\n"}),
        ("write_file", {"path": f"inside/new{i}.txt", "content": f"new {i}\n"}),
        ("move_file", {"source": f"inside/new{i}.txt", "destination": f"inside/moved{i}.txt"}),
        ("delete_file", {"path": f"inside/moved{i}.txt"}),
        ("create_directory", {"path": f"inside/d{i}"}),
        ("apply_patch", {"patch": PATCH, "dry_run": True}),
        (
            "batch",
            {
                "operations": [{"op": "write", "path": "inside/b.txt", "content": "b"}],
                "dry_run": True,
            },
        ),
        ("git_status", {"path": "inside"}),
        ("search_files", {"path": ".", "pattern": "**/*.txt"}),
        ("search_files", {"path": "inside", "content": "BYTES"}),
        ("directory_tree", {"path": "."}),
        ("read_multiple_files", {"paths": ["inside/f.txt", "inside/x.txt"]}),
        ("history", {"path": "inside/f.txt", "limit": 3}),
    ]


@pytest.fixture
def swapped(tmp_path: Path) -> Iterator[Path]:
    """A root (a git repository) whose `inside/` a swapper process keeps swapping."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(OUTSIDE + "\n")
    (outside / OUTSIDE_NAME).write_text(OUTSIDE + "\n")
    git(outside, "init", "-q")
    git(outside, "add", ".")
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    (root / "inside" / "f.txt").write_text("inside\n")
    git(root, "init", "-q")
    (root / "alt").symlink_to(outside)
    yield root


@pytest.fixture
def swapper(swapped: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.security._swapper",
            str(swapped / "inside"),
            str(swapped / "alt"),
        ],
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    if proc.poll() is None:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> int:
    """Stop the swapper; the number of swaps it made (it leaves inside/ real)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    swaps = int(proc.stdout.readline())
    proc.stdout.close()
    proc.wait(10)
    return swaps


def check_outside(tmp_path: Path, journal: Path) -> None:
    outside = tmp_path / "outside"
    assert sorted(p.name for p in outside.iterdir()) == sorted([".git", "f.txt", OUTSIDE_NAME])
    assert (outside / "f.txt").read_text() == OUTSIDE + "\n"
    records = b"".join(p.read_bytes() for p in journal.parent.glob(journal.name + "*"))
    assert OUTSIDE.encode() not in records and OUTSIDE_NAME.encode() not in records


ROUNDS = 25


def test_server_under_a_swap_race_leaks_nothing(
    tmp_path: Path, swapped: Path, swapper: subprocess.Popen[str]
) -> None:
    journal = tmp_path / "j.db"
    seen: Counter[str] = Counter()
    with Server(swapped, "--journal", journal) as server:
        for i in range(ROUNDS):
            for tool, arguments in calls(i):
                result = server.call(tool, arguments)
                text = str(result)
                assert OUTSIDE not in text and OUTSIDE_NAME not in text, (tool, result)
                if result.get("isError"):
                    body = error(result, *allowed(tool))
                    seen[body["code"]] += 1
                    seen[str(body["details"].get("reason"))] += 1
                else:
                    seen["ok"] += 1
    assert stop(swapper) > 1000
    assert seen["NOT_ALLOWED"] > 0 and seen["ok"] > 0, seen
    check_outside(tmp_path, journal)


@pytest.mark.anyio
async def test_engine_under_a_swap_race_leaks_nothing(
    tmp_path: Path, swapped: Path, swapper: subprocess.Popen[str]
) -> None:
    journal = tmp_path / "j.db"
    seen: Counter[str] = Counter()
    async with Engine.open({"roots": [str(swapped)], "journal": str(journal)}) as engine:
        session = await engine.session()
        for i in range(ROUNDS):
            for tool, arguments in calls(i):
                try:
                    result = await session.call(tool, arguments)
                except LedgerError as exc:
                    assert exc.code.value in allowed(tool), exc.envelope.to_json()
                    text = exc.envelope.to_json()
                    seen[exc.code.value] += 1
                else:
                    text = repr(result)
                    seen["ok"] += 1
                assert OUTSIDE not in text and OUTSIDE_NAME not in text, (tool, text)
    assert stop(swapper) > 1000
    assert seen["NOT_ALLOWED"] > 0 and seen["ok"] > 0, seen
    check_outside(tmp_path, journal)


# The walk runs everywhere; openat2 where the kernel has it.
RESOLVERS = [pytest.param(False, id="walk")] + (
    [pytest.param(True, id="openat2")] if nofollow.OPENAT2 else []
)


@pytest.mark.parametrize("openat2", RESOLVERS)
@pytest.mark.parametrize(
    ("path", "flags", "opens"),
    [
        ("root/inside/f.txt", os.O_RDONLY, True),
        ("root/inside", os.O_RDONLY | os.O_DIRECTORY, True),
        ("root/inside", os.O_PATH, True),
        ("root/alt/f.txt", os.O_RDONLY, False),  # a link on the way
        ("root/alt", os.O_RDONLY | os.O_DIRECTORY, False),  # the last name a link
        ("root/alt", os.O_PATH, False),
        ("root/file-link", os.O_RDONLY, False),
    ],
)
def test_the_resolver_follows_no_link_either_way(
    swapped: Path,
    monkeypatch: pytest.MonkeyPatch,
    openat2: bool,
    path: str,
    flags: int,
    opens: bool,
) -> None:
    """openat2 and the per-component walk (kernels without openat2) agree: a link
    anywhere on the way is ELOOP, never the file behind it."""
    monkeypatch.setattr(nofollow, "OPENAT2", openat2)
    (swapped / "file-link").symlink_to(swapped / "inside" / "f.txt")
    target = str(swapped.parent / path)
    if opens:
        os.close(nofollow.open_beneath(target, flags))
    else:
        with pytest.raises(OSError) as caught:
            nofollow.open_beneath(target, flags)
        assert caught.value.errno == errno.ELOOP
