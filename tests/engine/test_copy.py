"""copy_file: files, links and folders copied as one journaled, undoable transaction,
with every policy of the sandbox applied to what is read and what is made."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Code, Engine, LedgerError, Session
from ledgerfs.journal import content_hash

pytestmark = pytest.mark.anyio

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"


def tree(root: Path) -> dict[str, Any]:
    """Every entry under `root`: a file's bytes and mode, a link's target, a folder."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] == ".ledgerfs":
            continue
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir",)
        elif path.is_fifo():
            found[rel] = ("fifo",)  # never opened: reading it would wait for a writer
        else:
            found[rel] = ("file", path.read_bytes(), path.stat().st_mode & 0o777)
    return found


def under(entries: dict[str, Any], folder: str) -> dict[str, Any]:
    prefix = folder + "/"
    return {k[len(prefix) :]: v for k, v in entries.items() if k.startswith(prefix)}


def make_project(root: Path) -> None:
    """A folder with nested files, an empty folder, an executable and two links
    inside (to a file and to a folder, both relative and inside)."""
    (root / "proj" / "src" / "deep").mkdir(parents=True)
    (root / "proj" / "empty").mkdir()
    (root / "proj" / "README.md").write_text("# proj\n")
    (root / "proj" / "src" / "main.py").write_text("print('hi')\n")
    (root / "proj" / "src" / "deep" / "data.bin").write_bytes(bytes(range(256)))
    run = root / "proj" / "run.sh"
    run.write_text("#!/bin/sh\n")
    run.chmod(0o755)
    (root / "proj" / "latest").symlink_to("src/main.py")
    (root / "proj" / "code").symlink_to("src")


@pytest.fixture
async def session(workspace: Path, engine: Engine) -> AsyncIterator[Session]:
    make_project(workspace)
    yield await engine.session()


async def copy(session: Session, source: str, destination: str, **more: Any) -> Any:
    return await session.call("copy_file", {"source": source, "destination": destination, **more})


async def test_a_file_is_copied_with_its_mode_and_undo_removes_the_copy(
    workspace: Path, session: Session
) -> None:
    before = tree(workspace)
    result = await copy(session, "proj/run.sh", "bin/run.sh")
    assert [(f.op, f.content_hash) for f in result.files] == [
        ("mkdir", None),
        ("copy", content_hash(b"#!/bin/sh\n")),
    ]
    after = tree(workspace)
    assert after["bin/run.sh"] == before["proj/run.sh"]
    assert {k: v for k, v in after.items() if not k.startswith("bin")} == before
    await session.call("undo", {"transaction": result.transaction})
    assert tree(workspace) == before


async def test_a_folder_is_copied_whole_links_as_links_and_undone_whole(
    workspace: Path, session: Session
) -> None:
    before = tree(workspace)
    result = await copy(session, "proj", "copy/of/proj")
    after = tree(workspace)
    assert under(after, "copy/of/proj") == under(before, "proj")
    assert after["copy/of/proj/latest"] == ("link", "src/main.py")
    assert (workspace / "copy/of/proj/code/main.py").read_text() == "print('hi')\n"
    # One change per file or link, in one transaction; folders made first.
    ops = [f.op for f in result.files]
    assert ops.count("copy") == 6 and ops.count("mkdir") == 6
    assert ops.index("copy") > max(i for i, op in enumerate(ops) if op == "mkdir")
    history = await session.call("history", {"transaction": result.transaction})
    assert len(history.entries[0].mutations) == len(result.files)
    await session.call("undo", {"transaction": result.transaction})
    assert tree(workspace) == before


async def test_a_link_is_copied_as_the_link_itself(workspace: Path, session: Session) -> None:
    await copy(session, "proj/latest", "proj/src/again")
    assert os.readlink(workspace / "proj/src/again") == "src/main.py"


async def test_a_copy_is_charged_per_file(workspace: Path, engine: Engine) -> None:
    make_project(workspace)
    session = await engine.session()
    used = session.budget.used
    await copy(session, "proj", "twin")
    assert session.budget.used - used == 6
    await copy(session, "proj/README.md", "twin.md")
    assert session.budget.used - used == 7


def _setup_secret_inside(root: Path) -> None:
    (root / "proj" / ".env").write_text("TOKEN=1\n")


def _setup_key_content(root: Path) -> None:
    (root / "proj" / "notes.txt").write_text(KEY)


def _setup_hard_link(root: Path) -> None:
    os.link(root / "proj" / "README.md", root / "elsewhere.md")


def _setup_link_outside(root: Path) -> None:
    (root / "proj" / "out").symlink_to("/etc/hostname")


def _setup_link_leaving_from_its_new_place(root: Path) -> None:
    # Inside from proj/src; from a folder one level up it leads out of the root.
    (root / "proj" / "src" / "up").symlink_to("../../README.md")


def _setup_git_inside(root: Path) -> None:
    (root / "proj" / ".git").mkdir()
    (root / "proj" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


def _setup_fifo_inside(root: Path) -> None:
    os.mkfifo(root / "proj" / "pipe")


def _nothing(root: Path) -> None:
    pass


# (setup, source, destination, extra arguments, code, details that must be there)
REFUSALS: list[tuple[Callable[[Path], None], str, str, dict[str, Any], Code, dict[str, Any]]] = [
    (
        _nothing,
        "proj/README.md",
        "proj/src/main.py",
        {},
        Code.VALIDATION,
        {"reason": "destination_exists", "field": "destination"},
    ),
    (_nothing, "proj", "proj/src", {}, Code.VALIDATION, {"reason": "inside_source"}),
    (_nothing, "proj", "proj", {}, Code.VALIDATION, {"reason": "destination_exists"}),
    (
        _nothing,
        "proj",
        "elsewhere/proj",
        {"expected_hash": content_hash(b"x")},
        Code.VALIDATION,
        {"reason": "is_a_folder", "field": "expected_hash"},
    ),
    (
        _nothing,
        "proj/README.md",
        "r.md",
        {"expected_hash": content_hash(b"x")},
        Code.OCC_MISMATCH,
        {},
    ),
    (_nothing, "proj/missing.txt", "m.txt", {}, Code.NOT_FOUND, {}),
    (_nothing, "/etc/hostname", "h.txt", {}, Code.NOT_ALLOWED, {}),
    (_nothing, "proj/README.md", "../outside.md", {}, Code.NOT_ALLOWED, {}),
    (_nothing, "proj/README.md", ".env", {}, Code.SECRET_DENIED, {}),
    (_nothing, "proj/README.md", ".git/README.md", {}, Code.FILE_POLICY_DENIED, {}),
    (_nothing, "proj/README.md", "evil\u202etxt.md", {}, Code.VALIDATION, {}),
    (_setup_secret_inside, "proj/.env", "env.txt", {}, Code.SECRET_DENIED, {}),
    (_setup_secret_inside, "proj", "twin", {}, Code.SECRET_DENIED, {}),
    (_setup_key_content, "proj/notes.txt", "notes.txt", {}, Code.SECRET_DENIED, {}),
    (_setup_key_content, "proj", "twin", {}, Code.SECRET_DENIED, {}),
    (_setup_hard_link, "proj/README.md", "r.md", {}, Code.SECRET_DENIED, {"reason": "hard_link"}),
    (_setup_link_outside, "proj", "twin", {}, Code.NOT_ALLOWED, {"target": "/etc/hostname"}),
    (_setup_link_outside, "proj/out", "out", {}, Code.NOT_ALLOWED, {}),
    (_setup_link_leaving_from_its_new_place, "proj/src", "s", {}, Code.NOT_ALLOWED, {}),
    (_setup_git_inside, "proj", "twin", {}, Code.FILE_POLICY_DENIED, {}),
    (_setup_fifo_inside, "proj", "twin", {}, Code.FILE_POLICY_DENIED, {}),
]


@pytest.mark.parametrize(
    ("setup", "source", "destination", "extra", "code", "details"),
    REFUSALS,
    ids=[f"{r[0].__name__.removeprefix('_setup_')}:{r[1]}->{r[2]}" for r in REFUSALS],
)
async def test_a_refused_copy_changes_nothing(
    workspace: Path,
    session: Session,
    setup: Callable[[Path], None],
    source: str,
    destination: str,
    extra: dict[str, Any],
    code: Code,
    details: dict[str, Any],
) -> None:
    setup(workspace)
    before = tree(workspace)
    with pytest.raises(LedgerError) as caught:
        await copy(session, source, destination, **extra)
    assert caught.value.code is code, caught.value.envelope
    assert details.items() <= caught.value.details.items()
    assert tree(workspace) == before
    assert (await session.call("history", {})).entries == []


@pytest.fixture
def engine_config(workspace: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    extra = getattr(request, "param", {})
    return {"roots": [str(workspace)], "durability": "full", "auto_occ": "off", **extra}


@pytest.mark.parametrize(
    ("engine_config", "code"),
    # The project holds 6 files and links: a budget of 5 cannot copy it.
    [({"readonly": True}, Code.READONLY), ({"mutation_budget": 5}, Code.BUDGET_EXCEEDED)],
    indirect=["engine_config"],
)
async def test_policies_of_the_server_refuse_the_copy(
    workspace: Path, session: Session, code: Code
) -> None:
    before = tree(workspace)
    with pytest.raises(LedgerError) as caught:
        await copy(session, "proj", "twin")
    assert caught.value.code is code
    assert tree(workspace) == before


@pytest.mark.parametrize("engine_config", [{"allow_secrets": True}], indirect=True)
async def test_with_secrets_allowed_a_secret_is_copied(workspace: Path, session: Session) -> None:
    _setup_secret_inside(workspace)
    await copy(session, "proj", "twin")
    assert (workspace / "twin" / ".env").read_text() == "TOKEN=1\n"


async def test_a_copy_keeps_permissions_but_not_set_id_bits(
    workspace: Path, session: Session
) -> None:
    tool = workspace / "proj" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o6750)
    await copy(session, "proj/tool", "tool")
    assert (workspace / "tool").stat().st_mode & 0o7777 == 0o750
