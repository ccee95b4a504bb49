"""A symbolic link is a thing of its own: delete_file and move_file act on it, as `rm` and `mv` do.

For links to a file, to a folder, to nothing (dangling), and to a file or folder
outside the roots, through the real stdio server: a delete removes the link and
nothing it leads to; a move puts the link, with its target text verbatim, at the
destination (inside the roots); undo makes the link again exactly; history and
its diff show a link. A move that would make a link leading inside lead outside
from its new folder is refused. After a crash, recovery rolls such a batch
forward or back with the link restored as a link.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine
from tests.engine._child import ForkServer

from ._support import Server, error, ok

Entry = tuple[str, Any]  # ("link", target text) | ("file", bytes) | ("dir", None)


def entries(*folders: Path) -> dict[str, Entry]:
    """Every entry below the folders, links not followed."""
    found: dict[str, Entry] = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                key = os.path.relpath(path, folder.parent)
                if os.path.islink(path):
                    found[key] = ("link", os.readlink(path))
                elif os.path.isdir(path):
                    found[key] = ("dir", None)
                else:
                    found[key] = ("file", Path(path).read_bytes())
    return found


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A root with a link of each kind, and an outside folder some of them lead to."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("outside\n")
    (root / "file.txt").write_text("the file\n")
    (root / "folder").mkdir()
    (root / "folder" / "inner.txt").write_text("inner\n")
    (root / "sub").mkdir()
    (root / "to_file").symlink_to("file.txt")
    (root / "to_folder").symlink_to("folder")
    (root / "dangling").symlink_to("nothing-here.txt")
    (root / "to_outside_file").symlink_to(outside / "secret.txt")
    (root / "to_outside_folder").symlink_to(outside)
    (root / "sub" / "up").symlink_to("../file.txt")
    return root, outside


LINKS = ["to_file", "to_folder", "dangling", "to_outside_file", "to_outside_folder"]


@pytest.fixture
def server(tree: tuple[Path, Path], tmp_path: Path) -> Iterator[Server]:
    root, _ = tree
    with Server(root, "--journal", tmp_path / "j.db") as running:
        yield running


@pytest.mark.parametrize("link", LINKS)
def test_delete_removes_the_link_and_nothing_it_leads_to(
    tree: tuple[Path, Path], server: Server, link: str
) -> None:
    root, outside = tree
    before = entries(root, outside)
    result = ok(server.call("delete_file", {"path": link}))
    expected = {k: v for k, v in before.items() if k != f"root/{link}"}
    assert entries(root, outside) == expected
    assert not os.path.lexists(root / link)
    [change] = result["files"]
    assert (change["op"], change["path"]) == ("delete", str(root / link))
    # The journal kept a link: its diff says so, and undo makes the link again.
    shown = ok(server.call("history", {"transaction": result["transaction"], "diff": True}))
    [entry] = shown["entries"]
    assert entry["summary"] == f"delete_file {link}"
    assert [m["path"] for m in entry["mutations"]] == [str(root / link)]
    assert f"deleted file mode 120000\n--- a/{link}\n" in entry["diff"]
    ok(server.call("undo", {"transaction": result["transaction"]}))
    assert entries(root, outside) == before


@pytest.mark.parametrize("link", LINKS)
def test_move_moves_the_link_with_its_target_text(
    tree: tuple[Path, Path], server: Server, link: str
) -> None:
    root, outside = tree
    before = entries(root, outside)
    text = os.readlink(root / link)
    result = ok(server.call("move_file", {"source": link, "destination": f"new/{link}.moved"}))
    after = entries(root, outside)
    assert after.pop(f"root/new/{link}.moved") == ("link", text)
    assert after.pop("root/new") == ("dir", None)
    assert after == {k: v for k, v in before.items() if k != f"root/{link}"}
    [move] = [c for c in result["files"] if c["op"] == "move"]
    assert move["destination"] == str(root / "new" / f"{link}.moved")
    ok(server.call("undo", {"transaction": result["transaction"]}))
    assert entries(root, outside) == before


@pytest.mark.parametrize("link", ["to_file", "dangling", "to_outside_file"])
def test_a_batch_deletes_and_moves_links_as_one_undoable_transaction(
    tree: tuple[Path, Path], server: Server, link: str
) -> None:
    root, outside = tree
    before = entries(root, outside)
    result = ok(
        server.call(
            "batch",
            {
                "operations": [
                    {"op": "move", "source": link, "destination": "sub/moved"},
                    {"op": "delete", "path": "sub/moved"},
                    {"op": "delete", "path": "to_folder"},
                ]
            },
        )
    )
    assert not os.path.lexists(root / link)
    assert not os.path.lexists(root / "sub" / "moved")
    assert not os.path.lexists(root / "to_folder")
    assert (root / "folder" / "inner.txt").read_text() == "inner\n"
    ok(server.call("undo", {"transaction": result["transaction"]}))
    assert entries(root, outside) == before


def test_a_relative_link_keeps_its_text_and_may_lead_elsewhere(
    tree: tuple[Path, Path], server: Server
) -> None:
    root, _ = tree
    # `mv` keeps a link's text: from its new folder `file.txt` names sub/file.txt.
    ok(server.call("move_file", {"source": "to_file", "destination": "sub/to_file"}))
    assert os.readlink(root / "sub" / "to_file") == "file.txt"
    assert not (root / "sub" / "to_file").exists()  # dangling now, as with mv


def test_a_move_that_would_lead_a_link_outside_is_refused(
    tree: tuple[Path, Path], server: Server
) -> None:
    root, outside = tree
    before = entries(root, outside)
    # sub/up -> ../file.txt leads inside; from the root it would lead outside.
    body = error(server.call("move_file", {"source": "sub/up", "destination": "up"}), "NOT_ALLOWED")
    assert body["details"]["target"] == "../file.txt"
    assert entries(root, outside) == before


@pytest.mark.parametrize("link", LINKS)
def test_a_link_is_never_moved_outside_the_roots(
    tree: tuple[Path, Path], server: Server, link: str
) -> None:
    root, outside = tree
    before = entries(root, outside)
    for destination in ("../outside/moved", str(outside / "moved"), "to_outside_folder/moved"):
        error(server.call("move_file", {"source": link, "destination": destination}), "NOT_ALLOWED")
    # A link in the way at the destination is not followed: it is there.
    body = error(server.call("move_file", {"source": link, "destination": "sub/up"}), "VALIDATION")
    assert body["details"]["reason"] == "destination_exists"
    assert entries(root, outside) == before


def test_a_link_named_as_a_secret_is_still_refused(tree: tuple[Path, Path], server: Server) -> None:
    root, outside = tree
    (root / ".env").symlink_to("file.txt")
    before = entries(root, outside)
    error(server.call("delete_file", {"path": ".env"}), "SECRET_DENIED")
    error(server.call("move_file", {"source": ".env", "destination": "plain"}), "SECRET_DENIED")
    moved = {"source": "to_file", "destination": ".env.bak"}
    error(server.call("move_file", moved), "SECRET_DENIED")
    assert entries(root, outside) == before


def test_editing_through_a_link_still_edits_what_it_leads_to(
    tree: tuple[Path, Path], server: Server
) -> None:
    root, _ = tree
    edits = [{"old_text": "the", "new_text": "a"}]
    ok(server.call("edit_file", {"path": "to_file", "edits": edits}))
    assert os.readlink(root / "to_file") == "file.txt"
    assert (root / "file.txt").read_text() == "a file\n"


# ------------------------------------------------------------------ recovery

OPERATIONS = [
    {"op": "delete", "path": "to_file"},
    {"op": "move", "source": "to_folder", "destination": "new/to_folder"},
    {"op": "delete", "path": "to_outside_file"},
]


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    fork_server = ForkServer()
    yield fork_server
    fork_server.close()


def _commit_and_die(forks: ForkServer, root: Path) -> int:
    pid = forks.start("commit_and_die", root=str(root), operations=OPERATIONS)
    status, lines = forks.wait(pid)
    assert os.WTERMSIG(status) == signal.SIGKILL
    [(tag, tx, _owner)] = lines
    assert tag == "C"
    return int(tx)


def _without_journal(found: dict[str, Entry]) -> dict[str, Entry]:
    return {k: v for k, v in found.items() if not k.startswith("root/.ledgerfs")}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_recovery_rolls_a_link_batch_forward_as_links(
    tree: tuple[Path, Path], forks: ForkServer
) -> None:
    root, outside = tree
    before = entries(root, outside)
    tx = _commit_and_die(forks, root)
    after = _without_journal(entries(root, outside))
    # As a power loss that kept none of the renames and unlinks would leave it.
    os.rename(root / "new" / "to_folder", root / "to_folder")
    os.rmdir(root / "new")
    (root / "to_file").symlink_to("file.txt")
    (root / "to_outside_file").symlink_to(outside / "secret.txt")
    assert _without_journal(entries(root, outside)) == before
    async with Engine.open({"roots": [str(root)]}) as engine:
        [outcome] = engine.recovered
        assert (outcome.transaction, outcome.outcome) == (tx, "rolled_forward")
        assert _without_journal(entries(root, outside)) == after
        assert (await engine.journal.verify()).ok


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_recovery_rolls_a_link_batch_back_as_links(
    tree: tuple[Path, Path], forks: ForkServer
) -> None:
    root, outside = tree
    before = entries(root, outside)
    tx = _commit_and_die(forks, root)
    # Someone else put a file where the moved link went: the batch is rolled
    # back as far as it can be, and each deleted link comes back as a link.
    os.unlink(root / "new" / "to_folder")
    (root / "new" / "to_folder").write_text("theirs\n")
    async with Engine.open({"roots": [str(root)]}) as engine:
        [outcome] = engine.recovered
        assert outcome.transaction == tx
        assert outcome.action == "roll_back"
        found = _without_journal(entries(root, outside))
        assert found["root/to_file"] == ("link", "file.txt")
        assert found["root/to_outside_file"] == ("link", str(outside / "secret.txt"))
        assert found["root/new/to_folder"] == ("file", b"theirs\n")
        assert {k: v for k, v in found.items() if not k.startswith("root/new")} == {
            k: v for k, v in before.items() if k != "root/to_folder"
        }
