"""engine.patchparse and engine.patchapply against real git: git's own diffs must apply
byte for byte, and `git apply --check` and ledgerfs must agree on which corrupted patches apply."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.patchapply import apply_hunks
from ledgerfs.engine.patchparse import parse_patch

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    # The user's own config (noprefix, autocrlf, colour) must not shape the diffs.
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
}
for _name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
    GIT_ENV.pop(_name, None)

State = dict[str, bytes]


def git(repo: Path, *args: str, check: bool = True, stdin: bytes | None = None) -> bytes:
    result = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", *args],
        cwd=repo,
        env=GIT_ENV,
        input=stdin,
        capture_output=True,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {args} failed: {result.stderr.decode()}")
    return result.stdout if result.returncode == 0 or not check else b""


_counter = itertools.count()


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("oracle")


def new_repo(base: Path, old: State) -> Path:
    """A fresh repository whose single commit holds `old`."""
    repo = base / f"r{next(_counter)}"
    repo.mkdir()
    git(repo, "init", "-q")
    write_state(repo, {}, old)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "old")
    return repo


def write_state(repo: Path, previous: State, state: State) -> None:
    for name in previous.keys() - state.keys():
        (repo / name).unlink()
    for name, content in state.items():
        (repo / name).write_bytes(content)


def diff_of(repo: Path, old: State, new: State, *, renames: bool) -> str:
    """`git diff` between the committed `old` and `new`, as text."""
    write_state(repo, old, new)
    git(repo, "add", "-A")
    flags = ["-M"] if renames else ["--no-renames"]
    raw = git(repo, "diff", "--cached", *flags)
    return raw.decode("utf-8", "surrogateescape")


def apply_all(text: str, old: State) -> State:
    """Apply every file of the patch to `old`, returning the new state."""
    state = dict(old)
    results: list[tuple[str | None, str | None, bytes | None]] = []
    for patch in parse_patch(text):
        original = None if patch.old_path is None else old.get(patch.old_path)
        results.append((patch.old_path, patch.new_path, apply_hunks(patch, original).content))
    for old_path, new_path, content in results:
        if old_path is not None and old_path != new_path:
            state.pop(old_path, None)
        if new_path is not None:
            assert content is not None
            state[new_path] = content
    return state


# ---------------------------------------------------------------- strategies

LINES = st.sampled_from(
    [b"a", b"b", b"c", b"", b"x = 1", b"  indented", b"caf\xc3\xa9", b"\xff\xfe raw", b"tab\there"]
)


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(LINES, max_size=12))
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    final_newline = draw(st.booleans())
    body = eol.join(lines)
    return body + eol if lines and final_newline else body


@st.composite
def edited(draw: st.DrawFn, content: bytes) -> bytes:
    """`content` after a few line inserts, deletes and replacements (same line ends)."""
    eol = b"\r\n" if b"\r\n" in content else b"\n"
    final_newline = content.endswith(b"\n")
    lines = content.split(eol)
    if final_newline:
        lines.pop()
    if content == b"":
        lines = []
    for op, where, line in draw(
        st.lists(st.tuples(st.sampled_from("idr"), st.integers(0, 30), LINES), max_size=4)
    ):
        if op == "i":
            lines.insert(where % (len(lines) + 1), line)
        elif lines and op == "d":
            del lines[where % len(lines)]
        elif lines:
            lines[where % len(lines)] = line
    if draw(st.integers(0, 4)) == 0:
        final_newline = not final_newline
    body = eol.join(lines)
    return body + eol if lines and final_newline else body


@st.composite
def states(draw: st.DrawFn) -> tuple[State, State]:
    """An old state of a few files and a new state made by edits, creates, deletes, renames."""
    old = {f"f{i}.txt": draw(contents()) for i in range(draw(st.integers(1, 3)))}
    new: State = {}
    for name, content in old.items():
        action = draw(st.sampled_from(["keep", "edit", "edit", "delete", "rename"]))
        if action == "keep":
            new[name] = content
        elif action == "edit":
            new[name] = draw(edited(content))
        elif action == "rename":
            new["moved-" + name] = draw(st.sampled_from([content, draw(edited(content))]))
    for i in range(draw(st.integers(0, 2))):
        new[f"new {i}.txt"] = draw(contents())
    return old, new


FAST = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FAST
@given(case=states(), renames=st.booleans())
def test_git_diff_applies_byte_for_byte(
    repos: Path, case: tuple[State, State], renames: bool
) -> None:
    old, new = case
    repo = new_repo(repos, old)
    text = diff_of(repo, old, new, renames=renames)
    if old == new:
        assert text == ""
        return
    assert apply_all(text, old) == new


def test_rename_with_edit_is_one_file_patch(repos: Path) -> None:
    content = b"".join(b"line %d\n" % i for i in range(20))
    old = {"src.txt": content}
    new = {"dst.txt": content.replace(b"line 7\n", b"line seven\n")}
    text = diff_of(new_repo(repos, old), old, new, renames=True)
    [patch] = parse_patch(text)
    assert (patch.old_path, patch.new_path, patch.rename) == ("src.txt", "dst.txt", True)
    assert apply_all(text, old) == new


# ---------------------------------------------------------------- corrupted patches

BASE = b"".join(b"row %02d\n" % i for i in range(40))


def ledgerfs_applies(text: str, old: State) -> bool:
    try:
        apply_all(text, old)
    except LedgerError as exc:
        assert exc.code in (Code.PATCH_FAILED, Code.VALIDATION)
        return False
    return True


def git_applies(repo: Path, text: str) -> bool:
    git(repo, "reset", "-q", "--hard")
    result = subprocess.run(
        ["git", "apply", "--check", "-"],
        cwd=repo,
        env=GIT_ENV,
        input=text.encode("utf-8", "surrogateescape"),
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def corrupt_line(text: str, choice: int) -> str:
    """Replace the text of one context or removed line of the patch."""
    lines = text.split("\n")
    body = [
        i for i, line in enumerate(lines) if line[:1] in (" ", "-") and not line.startswith("--- ")
    ]
    index = body[choice % len(body)]
    lines[index] = lines[index][0] + "CORRUPT"
    return "\n".join(lines)


def shift_hunk(text: str, choice: int, shift: int) -> str:
    """Move one hunk's stated position (both sides) by `shift` lines."""
    lines = text.split("\n")
    headers = [i for i, line in enumerate(lines) if line.startswith("@@ ")]
    index = headers[choice % len(headers)]

    def move(match: re.Match[str]) -> str:
        return f"{match.group(1)}{max(0, int(match.group(2)) + shift)}"

    lines[index] = re.sub(r"([-+])(\d+)", move, lines[index], count=2)
    return "\n".join(lines)


@st.composite
def base_edits(draw: st.DrawFn) -> bytes:
    lines = BASE.split(b"\n")[:-1]
    for where in sorted(draw(st.sets(st.integers(0, 39), min_size=1, max_size=4)), reverse=True):
        op = draw(st.sampled_from("idr"))
        if op == "i":
            lines.insert(where, b"inserted")
        elif op == "d":
            del lines[where]
        else:
            lines[where] = b"replaced %d" % where
    return b"\n".join(lines) + b"\n"


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    new=base_edits(),
    kind=st.sampled_from(["line", "shift", "shift"]),
    choice=st.integers(0, 1000),
    shift=st.integers(-6, 6).filter(bool),
)
def test_git_apply_and_ledgerfs_agree_on_corruption(
    repos: Path, new: bytes, kind: str, choice: int, shift: int
) -> None:
    old = {"file.txt": BASE}
    repo = new_repo(repos, old)
    text = diff_of(repo, old, {"file.txt": new}, renames=False)
    broken = corrupt_line(text, choice) if kind == "line" else shift_hunk(text, choice, shift)
    assert ledgerfs_applies(broken, old) == git_applies(repo, broken)
    if kind == "line":
        assert not ledgerfs_applies(broken, old)


def test_shifted_hunk_reports_its_offset(repos: Path) -> None:
    old = {"file.txt": BASE}
    new = {"file.txt": BASE.replace(b"row 20\n", b"row twenty\n")}
    repo = new_repo(repos, old)
    text = diff_of(repo, old, new, renames=False)
    moved = shift_hunk(text, 0, 5)
    assert git_applies(repo, moved)
    [patch] = parse_patch(moved)
    applied = apply_hunks(patch, BASE)
    assert applied.content == new["file.txt"]
    assert applied.offsets == [-5]


def test_git_apply_and_ledgerfs_reject_wrong_counts(repos: Path) -> None:
    old = {"file.txt": BASE}
    new = {"file.txt": BASE.replace(b"row 20\n", b"row twenty\n")}
    repo = new_repo(repos, old)
    text = diff_of(repo, old, new, renames=False).replace("@@ -18,7", "@@ -18,8")
    assert not git_applies(repo, text)
    with pytest.raises(LedgerError) as caught:
        parse_patch(text)
    assert caught.value.code is Code.VALIDATION
