"""apply_patch on real files: links, emptied folders, binary hunks, patches as bytes.

Each case checks the disk after the call (and after undo, rollback or refusal):
what the patch describes is made, nothing else is written, and a refusal
changes nothing.
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Code, Engine, LedgerError
from ledgerfs.engine.changes import is_link_mode
from ledgerfs.engine.maintenance import verify
from ledgerfs.engine.transaction import change_of
from ledgerfs.journal import content_hash

from ._faulty import FaultyOps

pytestmark = pytest.mark.anyio

Tree = dict[str, tuple[str, int | None, bytes]]


def tree(root: Path) -> Tree:
    """Every entry under `root` (the journal's folder left out): type, mode, bytes."""
    found: Tree = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".ledgerfs"]
        for name in [*dirs, *files]:
            path = Path(folder, name)
            key = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                found[key] = ("link", None, os.fsencode(os.readlink(path)))
            elif stat.S_ISDIR(st.st_mode):
                found[key] = ("dir", None, b"")
            else:
                found[key] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return found


async def patch(engine: Engine, **arguments: Any) -> Any:
    session = await engine.session()
    return await session.call("apply_patch", arguments)


async def refused(engine: Engine, root: Path, code: Code, **arguments: Any) -> LedgerError:
    before = tree(root)
    with pytest.raises(LedgerError) as caught:
        await patch(engine, **arguments)
    assert caught.value.code is code, caught.value.envelope.to_json()
    assert tree(root) == before
    return caught.value


async def undo(engine: Engine, transaction: int) -> None:
    session = await engine.session()
    await session.call("undo", {"transaction": transaction})


def new_link(name: str, target: str) -> str:
    return (
        f"diff --git a/{name} b/{name}\nnew file mode 120000\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


def deleted(name: str, lines: list[str], mode: str = "100644") -> str:
    body = "".join(f"-{line}\n" for line in lines)
    return (
        f"diff --git a/{name} b/{name}\ndeleted file mode {mode}\nindex 1111111..0000000\n"
        f"--- a/{name}\n+++ /dev/null\n@@ -1,{len(lines)} +0,0 @@\n{body}"
    )


def deleted_link(name: str, target: str) -> str:
    return (
        f"diff --git a/{name} b/{name}\ndeleted file mode 120000\nindex 1111111..0000000\n"
        f"--- a/{name}\n+++ /dev/null\n@@ -1 +0,0 @@\n-{target}\n\\ No newline at end of file\n"
    )


def created(name: str, lines: list[str]) -> str:
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{name} b/{name}\nnew file mode 100644\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def retarget(name: str, old: str, new: str, mode: str = "120000") -> str:
    return (
        f"diff --git a/{name} b/{name}\nindex 1111111..2222222 {mode}\n--- a/{name}\n+++ b/{name}\n"
        f"@@ -1 +1 @@\n-{old}\n\\ No newline at end of file\n+{new}\n"
        "\\ No newline at end of file\n"
    )


# ---------------------------------------------------------------- links


async def test_a_new_link_is_a_link_and_undo_removes_it(engine: Engine, workspace: Path) -> None:
    (workspace / "docs").mkdir()
    (workspace / "docs/a.txt").write_text("a\n")
    result = await patch(engine, patch=new_link("sub/link", "../docs/a.txt"))
    link = workspace / "sub/link"
    assert link.is_symlink() and os.readlink(link) == "../docs/a.txt"
    assert link.read_text() == "a\n"  # it leads where the patch says
    [*_, change] = result.files
    assert change.content_hash == content_hash(b"../docs/a.txt")
    report = await verify(engine)
    assert report.ok, report  # the journal's record of the link matches the disk
    await undo(engine, result.transaction)
    assert not os.path.lexists(link) and not (workspace / "sub").exists()


async def test_a_dangling_link_inside_the_root_is_made(engine: Engine, workspace: Path) -> None:
    await patch(engine, patch=new_link("later", "not/yet/there.txt"))
    assert os.readlink(workspace / "later") == "not/yet/there.txt"


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("/etc/passwd", "absolute, elsewhere"),
        ("../../outside.txt", "climbs out"),
        ("sub/../../x", "climbs out after a folder"),
        ("away/secret.txt", "through a link that leads out"),
    ],
)
async def test_a_link_leading_out_of_the_roots_is_refused(
    engine: Engine, workspace: Path, tmp_path: Path, target: str, why: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "away").symlink_to(outside)
    error = await refused(engine, workspace, Code.NOT_ALLOWED, patch=new_link("l", target))
    assert error.details["target"] == target, why
    assert target in error.envelope.error.message
    assert not (outside / "secret.txt").exists()


async def test_a_file_becomes_a_link_and_back_and_undo_restores_each(
    engine: Engine, workspace: Path
) -> None:
    (workspace / "f.txt").write_text("one\ntwo\n")
    (workspace / "f.txt").chmod(0o640)
    (workspace / "g.txt").write_text("g\n")
    before = tree(workspace)
    to_link = deleted("f.txt", ["one", "two"]) + new_link("f.txt", "g.txt")
    first = await patch(engine, patch=to_link)
    assert os.readlink(workspace / "f.txt") == "g.txt"
    to_file = deleted_link("f.txt", "g.txt") + created("f.txt", ["a file again"])
    second = await patch(engine, patch=to_file)
    assert not (workspace / "f.txt").is_symlink()
    assert (workspace / "f.txt").read_text() == "a file again\n"
    await undo(engine, second.transaction)
    assert os.readlink(workspace / "f.txt") == "g.txt"
    await undo(engine, first.transaction)
    assert tree(workspace) == before


async def test_a_link_is_retargeted_in_place(engine: Engine, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("b\n")
    (workspace / "l").symlink_to("a.txt")
    result = await patch(engine, patch=retarget("l", "a.txt", "b.txt"))
    assert os.readlink(workspace / "l") == "b.txt"
    assert (workspace / "a.txt").read_text() == "a\n"  # the file it led to is untouched
    await undo(engine, result.transaction)
    assert os.readlink(workspace / "l") == "a.txt"


async def test_a_text_patch_through_a_link_edits_what_it_leads_to(
    engine: Engine, workspace: Path
) -> None:
    """Without a link mode in the patch, a change in place follows the link, as edits do."""
    (workspace / "a.txt").write_text("one\n")
    (workspace / "l").symlink_to("a.txt")
    await patch(engine, patch="--- a/l\n+++ b/l\n@@ -1 +1 @@\n-one\n+two\n")
    assert os.readlink(workspace / "l") == "a.txt"
    assert (workspace / "a.txt").read_text() == "two\n"


@pytest.mark.parametrize(
    ("text", "code", "reason"),
    [
        (retarget("f.txt", "a.txt", "b.txt"), Code.PATCH_FAILED, "wrong_type"),
        (deleted_link("f.txt", "x"), Code.PATCH_FAILED, "wrong_type"),
    ],
    ids=["link-patch-on-file", "link-deletion-on-file"],
)
async def test_a_patch_of_the_wrong_type_changes_nothing(
    engine: Engine, workspace: Path, text: str, code: Code, reason: str
) -> None:
    (workspace / "f.txt").write_text("x")
    (workspace / "a.txt").write_text("a.txt")
    (workspace / "l").symlink_to("a.txt")
    error = await refused(engine, workspace, code, patch=text)
    assert error.details["reason"] == reason


SUBMODULE_ADDED = (
    "diff --git a/lib b/lib\nnew file mode 160000\nindex 0000000..1111111\n"
    "--- /dev/null\n+++ b/lib\n@@ -0,0 +1 @@\n+Subproject commit 1111111\n"
)
SUBMODULE_REMOVED = (
    "diff --git a/lib b/lib\ndeleted file mode 160000\nindex 1111111..0000000\n"
    "--- a/lib\n+++ /dev/null\n@@ -1 +0,0 @@\n-Subproject commit 1111111\n"
)
SUBMODULE_MOVED = (
    "diff --git a/lib b/lib\nindex 1111111..2222222 160000\n--- a/lib\n+++ b/lib\n"
    "@@ -1 +1 @@\n-Subproject commit 1111111\n+Subproject commit 2222222\n"
)


@pytest.mark.parametrize("text", [SUBMODULE_ADDED, SUBMODULE_REMOVED], ids=["added", "removed"])
async def test_a_submodule_added_or_removed_is_refused(
    engine: Engine, workspace: Path, text: str
) -> None:
    (workspace / "lib").mkdir()
    error = await refused(engine, workspace, Code.VALIDATION, patch=text)
    assert error.details["mode"] == "160000" and error.details["file"] == "lib"


async def test_a_submodule_commit_moving_changes_nothing(engine: Engine, workspace: Path) -> None:
    # As git apply does in a working tree: the submodule's checkout is its own.
    (workspace / "lib").mkdir()
    (workspace / "lib/inside.txt").write_text("its own checkout\n")
    (workspace / "a.txt").write_text("a\n")
    edit = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n"
    session = await engine.session()
    result = await session.call("apply_patch", {"patch": SUBMODULE_MOVED + edit})
    assert [f.path for f in result.files] == [str(workspace / "a.txt")]  # type: ignore[attr-defined]
    assert (workspace / "lib/inside.txt").read_text() == "its own checkout\n"


async def test_a_renamed_link_is_checked_where_it_lands(engine: Engine, workspace: Path) -> None:
    (workspace / "deep").mkdir()
    (workspace / "deep/l").symlink_to("../x.txt")
    (workspace / "x.txt").write_text("x")
    rename = "diff --git a/deep/l b/l\nsimilarity index 100%\nrename from deep/l\nrename to l\n"
    error = await refused(engine, workspace, Code.NOT_ALLOWED, patch=rename)
    assert error.details["target"] == "../x.txt"


async def test_a_failed_link_install_rolls_the_whole_patch_back(
    engine: Engine, workspace: Path, faulty_ops: FaultyOps
) -> None:
    (workspace / "f.txt").write_text("one\n")
    before = tree(workspace)
    faulty_ops.fail("rename", 1, match="f.txt")
    error = await refused(
        engine,
        workspace,
        Code.ROLLBACK_COMPLETE,
        patch=created("new.txt", ["n"]) + deleted("f.txt", ["one"]) + new_link("f.txt", "new.txt"),
    )
    assert error.details["cause"]["op"] == "patch"
    assert tree(workspace) == before
    assert not [p for p in workspace.iterdir() if p.name.startswith(".ledgerfs-")]


# ---------------------------------------------------------------- emptied folders


async def test_folders_a_patch_empties_are_removed_and_undo_brings_them_back(
    engine: Engine, workspace: Path
) -> None:
    for name in ("a/b/one.txt", "a/b/two.txt", "c/three.txt", "kept/four.txt", "kept/own.txt"):
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(name + "\n")
    before = tree(workspace)
    text = (
        deleted("a/b/one.txt", ["a/b/one.txt"])
        + deleted("a/b/two.txt", ["a/b/two.txt"])
        + "diff --git a/c/three.txt b/moved.txt\nsimilarity index 100%\n"
        "rename from c/three.txt\nrename to moved.txt\n"
        + deleted("kept/four.txt", ["kept/four.txt"])
    )
    result = await patch(engine, patch=text)
    after = tree(workspace)
    assert "a" not in after and "a/b" not in after and "c" not in after
    assert after["kept/own.txt"][2] == b"kept/own.txt\n"  # the patch did not touch it
    assert [f.op for f in result.files].count("rmdir") == 3
    await undo(engine, result.transaction)
    assert tree(workspace) == before


async def test_a_folder_refilled_by_the_same_patch_stays(engine: Engine, workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "d/old.txt").write_text("old\n")
    await patch(engine, patch=deleted("d/old.txt", ["old"]) + created("d/new.txt", ["new"]))
    assert (workspace / "d/new.txt").read_text() == "new\n"


async def test_a_folder_made_and_emptied_in_one_batch_is_removed(
    engine: Engine, workspace: Path
) -> None:
    """The folder exists only in the batch's planned state, never on disk before."""
    session = await engine.session()
    result = await session.call(
        "batch",
        {
            "operations": [
                {"op": "patch", "patch": created("d/e.txt", ["alpha"])},
                {"op": "patch", "patch": deleted("d/e.txt", ["alpha"])},
            ]
        },
    )
    assert [(f.op, Path(f.path).name) for f in result.files] == [
        ("mkdir", "d"),
        ("patch", "e.txt"),
        ("patch", "e.txt"),
        ("rmdir", "d"),
    ]
    assert not (workspace / "d").exists()
    # Its undo makes d again, fills it, empties it and removes it: d never was on disk.
    undone = await session.call("undo", {"transaction": result.transaction})
    assert [f.op for f in undone.files] == ["mkdir", "patch", "patch", "rmdir"]
    assert not (workspace / "d").exists()


# ---------------------------------------------------------------- binary hunks


def git_diff(tmp: Path, old: dict[str, bytes], new: dict[str, bytes]) -> str:
    """`git diff --binary` from `old` to `new` (files by name), made by git itself."""
    repo = tmp / "diffrepo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

    def run(*args: str) -> bytes:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
        ).stdout

    run("init", "-q")
    for name, data in old.items():
        (repo / name).write_bytes(data)
    run("add", "-A")
    run("commit", "-q", "--allow-empty", "-m", "old")
    for name in old.keys() - new.keys():
        (repo / name).unlink()
    for name, data in new.items():
        (repo / name).write_bytes(data)
    run("add", "-A")
    return run("diff", "--cached", "--binary", "--no-renames").decode()


BLOB = bytes(range(256)) * 32


async def test_binary_literal_delta_and_deletion_apply_and_undo(
    engine: Engine, workspace: Path, tmp_path: Path
) -> None:
    changed = bytearray(BLOB)
    changed[500:505] = b"\x00\x00\x00\x00\x00"
    old = {"a.bin": BLOB, "gone.bin": b"\x00gone"}
    new = {"a.bin": bytes(changed), "b.bin": b"\x00\xffnew"}
    text = git_diff(tmp_path, old, new)
    assert "delta " in text and "literal " in text
    for name, data in old.items():
        (workspace / name).write_bytes(data)
    before = tree(workspace)
    result = await patch(engine, patch=text, expected_hashes={"a.bin": content_hash(BLOB)})
    assert (workspace / "a.bin").read_bytes() == bytes(changed)
    assert (workspace / "b.bin").read_bytes() == b"\x00\xffnew"
    assert not (workspace / "gone.bin").exists()
    await undo(engine, result.transaction)
    assert tree(workspace) == before


async def test_binary_patch_checks_the_before_image(
    engine: Engine, workspace: Path, tmp_path: Path
) -> None:
    text = git_diff(tmp_path, {"a.bin": BLOB}, {"a.bin": BLOB + b"\x00more"})
    (workspace / "a.bin").write_bytes(BLOB[::-1])
    error = await refused(engine, workspace, Code.PATCH_FAILED, patch=text)
    assert error.details["reason"] == "index_mismatch"
    stale = {"a.bin": content_hash(BLOB)}
    await refused(engine, workspace, Code.OCC_MISMATCH, patch=text, expected_hashes=stale)


async def test_binary_and_text_hunks_are_one_transaction(
    engine: Engine, workspace: Path, tmp_path: Path
) -> None:
    text = git_diff(
        tmp_path,
        {"a.bin": BLOB, "t.txt": b"one\n"},
        {"a.bin": BLOB + b"\x00more", "t.txt": b"two\n"},
    )
    (workspace / "a.bin").write_bytes(BLOB)
    (workspace / "t.txt").write_bytes(b"changed meanwhile\n")
    await refused(engine, workspace, Code.PATCH_FAILED, patch=text)


# ---------------------------------------------------------------- patches as bytes


async def test_a_patch_that_is_not_utf8_is_sent_as_base64(engine: Engine, workspace: Path) -> None:
    (workspace / "l1.txt").write_bytes(b"caf\xe9\nna\xefve\n")
    text = b"--- a/l1.txt\n+++ b/l1.txt\n@@ -1,2 +1,2 @@\n caf\xe9\n-na\xefve\n+\xfcber\n"
    await patch(engine, patch_base64=base64.b64encode(text).decode())
    assert (workspace / "l1.txt").read_bytes() == b"caf\xe9\n\xfcber\n"


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"patch": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "patch_base64": "LS0t"},
        {"patch_base64": "not base64!"},
    ],
    ids=["neither", "both", "malformed"],
)
async def test_patch_and_patch_base64_are_exclusive(
    engine: Engine, workspace: Path, arguments: dict[str, Any]
) -> None:
    await refused(engine, workspace, Code.VALIDATION, **arguments)


# ---------------------------------------------------------------- recovery


async def test_recovery_rolls_a_file_to_link_change_forward_and_back(
    engine: Engine, workspace: Path
) -> None:
    """The journal's images of a file turned into a link, as recovery sees them."""
    (workspace / "f.txt").write_text("one\n")
    (workspace / "g.txt").write_text("g\n")
    result = await patch(
        engine, patch=deleted("f.txt", ["one"]) + new_link("f.txt", "g.txt"), dry_run=True
    )
    assert result.transaction is None and not (workspace / "f.txt").is_symlink()
    record = await patch(engine, patch=deleted("f.txt", ["one"]) + new_link("f.txt", "g.txt"))
    journal = engine.journal
    tx = await journal.transaction(record.transaction)
    assert tx is not None
    blobs = await journal.blobs(
        {h for m in tx.mutations for h in (m.before_hash, m.after_hash) if h}
    )
    changes = [change_of(m, blobs, str) for m in tx.mutations]
    assert [is_link_mode(m.after_mode) for m in tx.mutations] == [False, True]
    # As if the process died before applying: the file is back, recovery rolls forward.
    (workspace / "f.txt").unlink()
    (workspace / "f.txt").write_text("one\n")
    finished = engine.applier.finish([changes])
    assert (finished.action, finished.restorations[0].not_restored) == ("roll_forward", [])
    assert os.readlink(workspace / "f.txt") == "g.txt"
    # A rollback from the after images puts the file back, bytes and all.
    restored = engine.applier.restore(changes)
    assert restored.not_restored == []
    assert not (workspace / "f.txt").is_symlink()
    assert (workspace / "f.txt").read_text() == "one\n"
