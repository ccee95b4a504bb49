"""One model of a change's effects: batches, rollback, undo and verify agree on every path.

Each case is one that went wrong when these answered "what does this change
leave on this path" each their own way: a write into a folder the same batch
moved, a folder's move seen by verify, an undo run twice, a rollback's report
after a folder moved. The model itself (`effects.Tree`, `match_prefix`) is
checked on small tables too.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Code, Engine, LedgerError
from ledgerfs.engine.changes import ABSENT, Change, Entry
from ledgerfs.engine.effects import Tree, match_prefix, torn
from ledgerfs.engine.maintenance import verify
from ledgerfs.journal import content_hash

from ._faulty import FaultyOps
from .conftest import snapshot, temp_files

pytestmark = pytest.mark.anyio


def config(root: Path, **extra: Any) -> dict[str, Any]:
    return {"roots": [str(root)], "auto_occ": "off", **extra}


async def refused(engine: Engine, tool: str, **arguments: Any) -> LedgerError:
    session = await engine.session()
    with pytest.raises(LedgerError) as caught:
        await session.call(tool, arguments)
    return caught.value


def seed(root: Path) -> None:
    (root / "dirA").mkdir()
    (root / "dirA" / "f.txt").write_text("precious\n")
    (root / "dirA" / "g.txt").write_text("kept\n")


MOVE_THEN_WRITE = [
    {"op": "move", "source": "dirA", "destination": "dirB"},
    {"op": "write", "path": "dirB/f.txt", "content": "new\n"},
]


async def test_a_write_into_a_folder_the_batch_moved_overwrites_with_its_before_image(
    workspace: Path,
) -> None:
    seed(workspace)
    async with Engine.open(config(workspace)) as engine:
        session = await engine.session()
        result = await session.call("batch", {"operations": MOVE_THEN_WRITE})
        move, write = result.files
        assert (move.op, write.op) == ("move", "write")
        assert write.previous_hash == content_hash(b"precious\n")  # an overwrite, not a create
        assert snapshot(workspace) == {
            "dirB": None,
            "dirB/f.txt": b"new\n",
            "dirB/g.txt": b"kept\n",
        }
        undone = await session.call("undo", {"transaction": result.transaction})
        assert undone.undo_of == result.transaction
        assert snapshot(workspace) == {
            "dirA": None,
            "dirA/f.txt": b"precious\n",
            "dirA/g.txt": b"kept\n",
        }
        assert (await verify(engine)).ok


@pytest.mark.parametrize(
    ("expected_hash", "code"),
    [
        (None, Code.HASH_REQUIRED),
        (content_hash(b"stale\n"), Code.OCC_MISMATCH),
    ],
)
async def test_occ_of_a_write_into_a_moved_folder_judges_the_moved_file(
    workspace: Path, expected_hash: str | None, code: Code
) -> None:
    seed(workspace)
    operations = [dict(op) for op in MOVE_THEN_WRITE]
    if expected_hash is not None:
        operations[1]["expected_hash"] = expected_hash
    async with Engine.open(config(workspace, auto_occ="block")) as engine:
        before = snapshot(workspace)
        error = await refused(engine, "batch", operations=operations)
        assert error.code == code
        assert snapshot(workspace) == before
        good = dict(operations[1], expected_hash=content_hash(b"precious\n"))
        session = await engine.session()
        await session.call("batch", {"operations": [operations[0], good]})
        assert (workspace / "dirB" / "f.txt").read_text() == "new\n"


async def test_occ_of_a_write_into_a_moved_folder_finds_nothing_where_the_batch_deleted(
    workspace: Path,
) -> None:
    """A file the batch deleted before it moved the folder moved nowhere: a later
    write there with the deleted file's hash finds nothing, fails OCC and changes
    nothing (it once passed, judged against the deleted file)."""
    seed(workspace)
    precious = content_hash(b"precious\n")
    operations = [
        {"op": "delete", "path": "dirA/f.txt", "expected_hash": precious},
        *MOVE_THEN_WRITE[:1],
        dict(MOVE_THEN_WRITE[1], expected_hash=precious),
    ]
    async with Engine.open(config(workspace)) as engine:
        before = snapshot(workspace)
        error = await refused(engine, "batch", operations=operations)
        assert error.code == Code.OCC_MISMATCH
        assert snapshot(workspace) == before


async def test_verify_follows_a_folder_move(workspace: Path) -> None:
    async with Engine.open(config(workspace)) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "a/f.txt", "content": "one\n"})
        await session.call("write_file", {"path": "a/sub/g.txt", "content": "two\n"})
        await session.call("move_file", {"source": "a", "destination": "z"})
        await session.call(
            "edit_file", {"path": "z/f.txt", "edits": [{"old_text": "one", "new_text": "uno"}]}
        )
        report = await verify(engine)
        assert report.drifted == [] and report.ok, report
        (workspace / "z" / "sub" / "g.txt").write_text("theirs\n")
        [drift] = (await verify(engine)).drifted
        assert drift.path == str(workspace / "z" / "sub" / "g.txt")


async def test_undo_twice_says_who_undid_it_and_changes_nothing(workspace: Path) -> None:
    async with Engine.open(config(workspace)) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "d/f.txt", "content": "one\n"})
        moved = await session.call("move_file", {"source": "d", "destination": "e"})
        first = await session.call("undo", {"transaction": moved.transaction})
        before = snapshot(workspace)
        error = await refused(engine, "undo", transaction=moved.transaction)
        envelope = error.envelope.error
        assert (error.code, envelope.retryable, envelope.recovery) == (
            Code.VALIDATION,
            False,
            "fix_arguments",
        )
        assert envelope.details["undone_by"] == first.transaction
        assert f"already undone by transaction {first.transaction}" in envelope.message
        assert snapshot(workspace) == before
        # Undoing the undo makes the move again; then the move can be undone again.
        await session.call("undo", {"transaction": first.transaction})
        assert snapshot(workspace) == {"e": None, "e/f.txt": b"one\n"}
        await session.call("undo", {"transaction": moved.transaction})
        assert snapshot(workspace) == {"d": None, "d/f.txt": b"one\n"}


async def test_an_undo_that_finds_a_folder_changed_names_states_not_hashes(
    workspace: Path,
) -> None:
    async with Engine.open(config(workspace)) as engine:
        session = await engine.session()
        made = await session.call("create_directory", {"path": "bx"})
        (workspace / "bx" / "theirs.txt").write_text("x\n")
        error = await refused(engine, "undo", transaction=made.transaction)
        assert error.code == Code.OCC_MISMATCH and error.envelope.error.retryable
        assert "expected an empty folder, found a folder" in error.envelope.error.message


async def test_a_batch_editing_a_path_its_own_move_emptied_changes_nothing(
    workspace: Path,
) -> None:
    operations = [
        {"op": "mkdir", "path": "bx"},
        {"op": "write", "path": "bx/f", "content": "x\n"},
        {"op": "move", "source": "bx", "destination": "by"},
        {"op": "edit", "path": "bx/f", "edits": [{"old_text": "x", "new_text": "y"}]},
    ]
    async with Engine.open(config(workspace)) as engine:
        error = await refused(engine, "batch", operations=operations)
        assert error.code == Code.NOT_FOUND
        assert snapshot(workspace) == {}


async def test_a_rollback_after_a_folder_move_reports_what_the_disk_shows(
    workspace: Path,
) -> None:
    ops = FaultyOps()
    operations = [
        {"op": "mkdir", "path": "bx"},
        {"op": "write", "path": "bx/f", "content": "x\n"},
        {"op": "move", "source": "bx", "destination": "by"},
        {"op": "write", "path": "by/g", "content": "g\n"},
    ]
    async with Engine.open(config(workspace), fileops=ops) as engine:
        ops.fail("rename", 3)  # the install of by/g, after the folder's move
        error = await refused(engine, "batch", operations=operations)
        assert error.code == Code.ROLLBACK_COMPLETE, error.envelope.to_json()
        assert error.details["not_restored"] == []
        assert snapshot(workspace) == {}
        assert temp_files(workspace) == []


async def test_a_write_whose_folder_was_swapped_wrote_nothing_and_says_so(
    workspace: Path, tmp_path: Path
) -> None:
    ops = FaultyOps()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "f.txt").write_text("not ours\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("ours\n")

    def swap(_path: str) -> None:
        os.rename(workspace / "sub", workspace / "sub.old")
        os.symlink(elsewhere, workspace / "sub")

    async with Engine.open(config(workspace), fileops=ops) as engine:
        ops.hooks["rename"] = swap
        ops.fail("rename", 1, errno.EXDEV)
        error = await refused(engine, "write_file", path="sub/f.txt", content="new\n")
        assert error.code == Code.ROLLBACK_COMPLETE, error.envelope.to_json()
        assert error.details["not_restored"] == []
        assert (elsewhere / "f.txt").read_text() == "not ours\n"
        assert (workspace / "sub.old" / "f.txt").read_text() == "ours\n"


# The model on its own ------------------------------------------------------------


def file(data: bytes) -> Entry:
    return Entry(data=data, hash=content_hash(data))


def write(path: str, before: bytes | None, after: bytes | None) -> Change:
    return Change(
        op="write",
        path=path,
        label=path,
        before=before,
        after=after,
        before_hash=None if before is None else content_hash(before),
        after_hash=None if after is None else content_hash(after),
    )


def move_dir(source: str, destination: str) -> Change:
    return Change(op="move", path=source, label=source, kind="dir", destination=destination)


BASE = {"/r": Entry(is_dir=True), "/r/a": Entry(is_dir=True), "/r/a/f": file(b"one")}


@pytest.mark.parametrize(
    ("changes", "path", "holds", "came_from"),
    [
        ([move_dir("/r/a", "/r/b")], "/r/b/f", b"one", "/r/a/f"),
        ([move_dir("/r/a", "/r/b")], "/r/a/f", None, None),
        ([move_dir("/r/a", "/r/b"), move_dir("/r/b", "/r/c")], "/r/c/f", b"one", "/r/a/f"),
        ([write("/r/a/f", b"one", b"two"), move_dir("/r/a", "/r/b")], "/r/b/f", b"two", "/r/a/f"),
        ([move_dir("/r/a", "/r/b"), write("/r/b/f", b"one", b"3")], "/r/b/f", b"3", "/r/a/f"),
        # Deleted, then its folder moved: nothing there came from anywhere.
        ([write("/r/a/f", b"one", None), move_dir("/r/a", "/r/b")], "/r/b/f", None, None),
        # Written again after the delete: the name's file, as with any overwrite.
        (
            [write("/r/a/f", b"one", None), write("/r/a/f", None, b"2"), move_dir("/r/a", "/r/b")],
            "/r/b/f",
            b"2",
            "/r/a/f",
        ),
        (
            [
                Change(op="mkdir", path="/r/n", label="n", kind="dir"),
                move_dir("/r/a", "/r/n/a"),
            ],
            "/r/n/a/f",
            b"one",
            "/r/a/f",
        ),
    ],
)
def test_tree_follows_folder_moves(
    changes: list[Change], path: str, holds: bytes | None, came_from: str | None
) -> None:
    tree = Tree(lambda p: BASE.get(p, ABSENT))
    tree.apply_all(changes)
    assert tree.get(path).data == holds
    assert tree.source(path) == came_from


NEW_FOLDER = Change(op="mkdir", path="/r/n", label="n", kind="dir")


@pytest.mark.parametrize(
    "steps",
    [
        [True],
        [write("/r/n/f", None, b"x"), False],
        [True, write("/r/n/f", None, b"x"), False],
        [write("/r/n/f", None, b"x"), False, write("/r/n/f", b"x", None), True],
        [True, write("/r/n/f", None, b"x"), False, write("/r/n/f", b"x", None), True],
    ],
)
def test_a_folder_is_empty_of_what_the_changes_put_before_and_after_it_is_asked(
    steps: list[Change | bool],
) -> None:
    """`is_empty` sees every path the changes set, those put before it was first
    asked as those put after; each bool is what it answers for the new folder then."""
    tree = Tree(lambda p: BASE.get(p, ABSENT))
    tree.apply(NEW_FOLDER)
    for step in steps:
        if isinstance(step, bool):
            assert tree.is_empty("/r/n", lambda _: []) is step
        else:
            tree.apply(step)


@pytest.mark.parametrize(
    ("disk", "made", "repaired"),
    [
        ({"/r/x": b"0", "/r/y": None}, 0, []),  # nothing made
        ({"/r/x": b"1", "/r/y": None}, 1, []),  # a prefix made
        ({"/r/x": b"1", "/r/y": b"2"}, 2, []),  # everything made
        ({"/r/x": b"", "/r/y": None}, 1, ["/r/x"]),  # renamed, bytes lost
        ({"/r/x": b"1", "/r/y": b"\0"}, 2, ["/r/y"]),  # renamed, bytes zeros
    ],
)
def test_match_prefix_finds_how_far_a_chain_got(
    disk: dict[str, bytes | None], made: int, repaired: list[str]
) -> None:
    chain = [write("/r/x", b"0", b"1"), write("/r/y", None, b"2")]
    found = match_prefix(chain, lambda p: ABSENT if disk.get(p) is None else file(disk[p] or b""))
    assert found is not None
    assert (found[0], sorted(found[1])) == (made, repaired)


def test_match_prefix_refuses_what_no_prefix_explains() -> None:
    chain = [write("/r/x", b"0", b"1")]
    assert match_prefix(chain, lambda p: file(b"theirs")) is None
    assert not torn(b"1x", b"1")
