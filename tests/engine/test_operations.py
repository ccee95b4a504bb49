"""Each mutation's behaviour through a session: results, policies, guards and undo."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Code, Engine, LedgerError, MutationResult, Session
from ledgerfs.journal import content_hash

pytestmark = pytest.mark.anyio

Opener = Callable[..., Coroutine[Any, Any, Session]]


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Opener]:
    """Open sessions on engines over `tmp_path/root` with extra config; closes them all."""
    root = tmp_path / "root"
    root.mkdir()
    stack: list[Any] = []

    async def open_session(**config: Any) -> Session:
        session_id = config.pop("session_id", None)
        manager = Engine.open({"roots": [str(root)], "auto_occ": "off", **config})
        engine = await manager.__aenter__()
        stack.append(manager)
        return await engine.session(session_id)

    yield open_session
    for manager in reversed(stack):
        await manager.__aexit__(None, None, None)


def root_of(session: Session) -> Path:
    return Path(session.engine.workspace.roots[0])


async def call(session: Session, tool: str, **arguments: Any) -> Any:
    return await session.call(tool, arguments)


async def fails(session: Session, tool: str, **arguments: Any) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        await session.call(tool, arguments)
    return caught.value


async def test_write_creates_and_replaces_with_hashes_and_diff(opened: Opener) -> None:
    s = await opened()
    created: MutationResult = await call(s, "write_file", path="a.txt", content="one\n")
    assert created.transaction is not None
    [change] = created.files
    assert (change.previous_hash, change.content_hash) == (None, content_hash(b"one\n"))
    assert "+one" in created.diff
    replaced = await call(s, "write_file", path="a.txt", content="two\n")
    assert replaced.files[0].previous_hash == content_hash(b"one\n")
    assert "-one\n+two" in replaced.diff
    assert (root_of(s) / "a.txt").read_text() == "two\n"


async def test_write_creates_missing_folders_in_the_same_transaction(opened: Opener) -> None:
    s = await opened()
    result = await call(s, "write_file", path="x/y/z.txt", content="deep\n")
    assert [f.op for f in result.files] == ["mkdir", "mkdir", "write"]
    assert (root_of(s) / "x/y/z.txt").read_text() == "deep\n"
    undone = await call(s, "undo", transaction=result.transaction)
    assert undone.undo_of == result.transaction
    assert not (root_of(s) / "x").exists()


async def test_binary_write_round_trips_and_text_edit_refuses_it(opened: Opener) -> None:
    s = await opened()
    blob = bytes(range(256))
    await call(
        s, "write_file", path="b.bin", content=base64.b64encode(blob).decode(), encoding="base64"
    )
    assert (root_of(s) / "b.bin").read_bytes() == blob
    read = await call(s, "read_file", path="b.bin")
    assert (read.encoding, base64.b64decode(read.content)) == ("base64", blob)
    error = await fails(s, "edit_file", path="b.bin", edits=[{"old_text": "a", "new_text": "b"}])
    assert (error.code, error.details["reason"]) == (Code.VALIDATION, "binary_file")


async def test_read_ranges_keep_the_whole_file_hash(opened: Opener) -> None:
    s = await opened()
    text = "".join(f"line {i}\n" for i in range(10))
    (root_of(s) / "r.txt").write_text(text)
    part = await call(s, "read_file", path="r.txt", offset=2, limit=3)
    assert part.content == "line 2\nline 3\nline 4\n"
    assert part.content_hash == content_hash(text.encode())
    assert (part.total_lines, part.truncated) == (10, True)


@pytest.mark.parametrize(
    ("edits", "matches", "lines"),
    [
        ([{"old_text": "absent", "new_text": "x"}], 0, []),
        ([{"old_text": "dup", "new_text": "x"}], 3, [1, 3, 5]),
    ],
)
async def test_edit_old_text_must_match_once(
    opened: Opener, edits: list[dict[str, str]], matches: int, lines: list[int]
) -> None:
    s = await opened()
    (root_of(s) / "e.txt").write_text("dup\nb\ndup\nc\ndup\n")
    error = await fails(s, "edit_file", path="e.txt", edits=edits)
    assert error.code is Code.VALIDATION
    assert (error.details["matches"], error.details["lines"]) == (matches, lines)
    assert error.details["field"] == "edits[0].old_text"
    assert (root_of(s) / "e.txt").read_text() == "dup\nb\ndup\nc\ndup\n"


async def test_edit_of_multibyte_text_counts_lines_and_keeps_characters(opened: Opener) -> None:
    s = await opened()
    path = root_of(s) / "u.txt"
    path.write_text("héllo ✓\nnaïve 🙂\nhéllo ✓\n", encoding="utf-8")
    error = await fails(
        s, "edit_file", path="u.txt", edits=[{"old_text": "héllo ✓", "new_text": "x"}]
    )
    assert (error.details["matches"], error.details["lines"]) == (2, [1, 3])
    await call(s, "edit_file", path="u.txt", edits=[{"old_text": "ï", "new_text": "i→"}])
    assert path.read_text(encoding="utf-8") == "héllo ✓\nnai→ve 🙂\nhéllo ✓\n"


@pytest.mark.parametrize("field", ["old_text", "new_text"])
async def test_edit_text_that_is_not_unicode_is_refused(opened: Opener, field: str) -> None:
    s = await opened()
    (root_of(s) / "e.txt").write_text("abc\n")
    edit = {"old_text": "b", "new_text": "B", field: "b\ud800"}
    error = await fails(s, "edit_file", path="e.txt", edits=[edit])
    assert (error.code, error.details["field"]) == (Code.VALIDATION, f"edits[0].{field}")
    assert (root_of(s) / "e.txt").read_text() == "abc\n"


async def test_edit_keeps_crlf_and_permissions(opened: Opener) -> None:
    s = await opened()
    path = root_of(s) / "w.txt"
    path.write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    path.chmod(0o751)
    await call(
        s, "edit_file", path="w.txt", edits=[{"old_text": "beta\ngamma", "new_text": "B\nG"}]
    )
    assert path.read_bytes() == b"alpha\r\nB\r\nG\r\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o751


async def test_rewrite_guard_blocks_unless_allowed(opened: Opener) -> None:
    s = await opened()
    text = "".join(f"row {i}\n" for i in range(20))
    (root_of(s) / "g.txt").write_text(text)
    whole = text[: len(text) - 8]
    error = await fails(s, "edit_file", path="g.txt", edits=[{"old_text": whole, "new_text": "x"}])
    assert error.code is Code.REWRITE_BLOCKED
    assert error.details["lines_replaced"] > 0.75
    ok = await call(
        s,
        "edit_file",
        path="g.txt",
        edits=[{"old_text": whole, "new_text": "x"}],
        allow_rewrite=True,
    )
    assert ok.transaction is not None
    small = "".join(f"row {i}\n" for i in range(3))
    (root_of(s) / "small.txt").write_text(small)
    await call(s, "edit_file", path="small.txt", edits=[{"old_text": small, "new_text": "y\n"}])


async def test_occ_mismatch_names_the_transaction_that_changed_it(opened: Opener) -> None:
    s = await opened()
    first = await call(s, "write_file", path="o.txt", content="v1\n")
    old = first.files[0].content_hash
    second = await call(s, "write_file", path="o.txt", content="v2\n", expected_hash=old)
    error = await fails(s, "write_file", path="o.txt", content="v3\n", expected_hash=old)
    body = error.envelope.error
    assert error.code is Code.OCC_MISMATCH and body.retryable
    assert (body.expected_hash, body.current_hash) == (old, second.files[0].content_hash)
    assert body.conflict["source"] == "transaction"
    assert body.conflict["transaction"] == second.transaction
    assert "-v1\n+v2" in body.conflict["diff"]
    assert (root_of(s) / "o.txt").read_text() == "v2\n"


async def test_occ_mismatch_after_an_external_change(opened: Opener) -> None:
    s = await opened()
    first = await call(s, "write_file", path="o.txt", content="v1\n")
    (root_of(s) / "o.txt").write_text("outside\n")
    error = await fails(s, "delete_file", path="o.txt", expected_hash=first.files[0].content_hash)
    assert error.envelope.error.conflict["source"] == "external"
    assert (root_of(s) / "o.txt").exists()


@pytest.mark.parametrize("value", ["abc", "blake3:XYZ", "sha256:" + "0" * 64])
async def test_malformed_expected_hash_is_validation(opened: Opener, value: str) -> None:
    s = await opened()
    (root_of(s) / "h.txt").write_text("x")
    error = await fails(s, "write_file", path="h.txt", content="y", expected_hash=value)
    assert error.code is Code.VALIDATION


async def test_auto_occ_block_requires_a_hash_for_existing_files(opened: Opener) -> None:
    s = await opened(auto_occ="block")
    await call(s, "write_file", path="new.txt", content="created without a hash\n")
    error = await fails(s, "write_file", path="new.txt", content="again\n")
    assert error.code is Code.HASH_REQUIRED and error.envelope.error.retryable
    current = content_hash(b"created without a hash\n")
    await call(s, "write_file", path="new.txt", content="again\n", expected_hash=current)


async def test_auto_occ_warn_allows_with_a_warning(opened: Opener) -> None:
    s = await opened(auto_occ="warn")
    await call(s, "write_file", path="w.txt", content="1\n")
    result = await call(s, "write_file", path="w.txt", content="2\n")
    assert result.warnings and "expected_hash" in result.warnings[0]


async def test_dry_run_changes_nothing_and_charges_nothing(opened: Opener) -> None:
    s = await opened(mutation_budget=1)
    preview = await call(s, "write_file", path="d.txt", content="hi\n", dry_run=True)
    assert (preview.dry_run, preview.transaction) == (True, None)
    assert preview.files[0].content_hash == content_hash(b"hi\n")
    assert not (root_of(s) / "d.txt").exists()
    await call(s, "write_file", path="d.txt", content="hi\n")


async def test_budget_counts_batch_operations_and_survives_restart(opened: Opener) -> None:
    s = await opened(mutation_budget=3, session_id="agent-1")
    await call(
        s,
        "batch",
        operations=[
            {"op": "write", "path": "1.txt", "content": "1"},
            {"op": "write", "path": "2.txt", "content": "2"},
        ],
    )
    error = await fails(
        s,
        "batch",
        operations=[
            {"op": "write", "path": "3.txt", "content": "3"},
            {"op": "write", "path": "4.txt", "content": "4"},
        ],
    )
    assert error.code is Code.BUDGET_EXCEEDED
    assert error.details["remaining"] == 1
    assert not (root_of(s) / "3.txt").exists()
    await s.engine.aclose()
    again = await opened(mutation_budget=3, session_id="agent-1")
    await call(again, "write_file", path="3.txt", content="3")
    error = await fails(again, "write_file", path="4.txt", content="4")
    assert error.code is Code.BUDGET_EXCEEDED


async def test_readonly_refuses_every_mutation(opened: Opener) -> None:
    s = await opened(readonly=True)
    (root_of(s) / "r.txt").write_text("x")
    for tool, arguments in [
        ("write_file", {"path": "r.txt", "content": "y"}),
        ("edit_file", {"path": "r.txt", "edits": [{"old_text": "x", "new_text": "y"}]}),
        ("delete_file", {"path": "r.txt"}),
        ("move_file", {"source": "r.txt", "destination": "s.txt"}),
        ("create_directory", {"path": "d"}),
        ("batch", {"operations": [{"op": "mkdir", "path": "d"}]}),
        ("apply_patch", {"patch": "--- a/r.txt\n+++ b/r.txt\n@@ -1 +1 @@\n-x\n+y\n"}),
        ("undo", {"transaction": 1}),
    ]:
        error = await fails(s, tool, **arguments)
        assert error.code is Code.READONLY, tool
    assert (root_of(s) / "r.txt").read_text() == "x"
    assert (await call(s, "read_file", path="r.txt")).content == "x"


async def test_tools_left_out_are_unavailable(opened: Opener) -> None:
    s = await opened(tools=["read_file"])
    error = await fails(s, "write_file", path="t.txt", content="x")
    assert error.code is Code.TOOL_UNAVAILABLE
    error = await fails(s, "no_such_tool")
    assert error.code is Code.TOOL_UNAVAILABLE


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("write_file", {"path": "a", "content": 3}, "$.content"),
        ("write_file", {"path": "a", "content": "x", "surprise": 1}, "surprise"),
        ("edit_file", {"path": "a", "edits": [{"old_text": "x"}]}, "$.edits[0]"),
        ("edit_file", {"path": "a", "edits": []}, "$.edits"),
        ("read_file", {"path": "a", "offset": -1}, "$.offset"),
        ("batch", {"operations": [{"op": "explode", "path": "a"}]}, "$.operations[0]"),
        ("undo", {"transaction": "1"}, "$.transaction"),
        ("write_file", {"content": "x"}, "path"),
    ],
)
async def test_wrong_arguments_name_the_field(
    opened: Opener, tool: str, arguments: dict[str, Any], field: str
) -> None:
    s = await opened()
    error = await fails(s, tool, **arguments)
    assert error.code is Code.VALIDATION
    assert field in error.envelope.error.message


async def test_move_never_overwrites_and_checks_the_destination(opened: Opener) -> None:
    s = await opened()
    (root_of(s) / "a.txt").write_text("a")
    (root_of(s) / "b.txt").write_text("b")
    error = await fails(s, "move_file", source="a.txt", destination="b.txt")
    assert (error.code, error.details["reason"]) == (Code.VALIDATION, "destination_exists")
    error = await fails(s, "move_file", source="a.txt", destination=".env")
    assert error.code is Code.SECRET_DENIED
    moved = await call(s, "move_file", source="a.txt", destination="sub/c.txt")
    assert (root_of(s) / "sub/c.txt").read_text() == "a" and not (root_of(s) / "a.txt").exists()
    await call(s, "undo", transaction=moved.transaction)
    assert (root_of(s) / "a.txt").read_text() == "a"


async def test_delete_and_undo_restore_bytes_and_mode(opened: Opener) -> None:
    s = await opened()
    path = root_of(s) / "x.sh"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    deleted = await call(s, "delete_file", path="x.sh")
    assert not path.exists()
    await call(s, "undo", transaction=deleted.transaction)
    assert path.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


async def test_undo_refuses_when_a_file_changed_since(opened: Opener) -> None:
    s = await opened()
    done = await call(
        s,
        "batch",
        operations=[
            {"op": "write", "path": "u1.txt", "content": "1"},
            {"op": "write", "path": "u2.txt", "content": "2"},
        ],
    )
    (root_of(s) / "u2.txt").write_text("changed")
    error = await fails(s, "undo", transaction=done.transaction)
    assert error.code is Code.OCC_MISMATCH
    assert error.envelope.error.path == str(root_of(s) / "u2.txt")
    assert (root_of(s) / "u1.txt").read_text() == "1"


async def test_undo_of_unknown_transaction_is_not_found(opened: Opener) -> None:
    s = await opened()
    assert (await fails(s, "undo", transaction=999)).code is Code.NOT_FOUND


async def test_batch_is_all_or_nothing_on_a_planning_failure(opened: Opener) -> None:
    s = await opened()
    (root_of(s) / "keep.txt").write_text("k")
    error = await fails(
        s,
        "batch",
        operations=[
            {"op": "write", "path": "new.txt", "content": "n"},
            {"op": "edit", "path": "keep.txt", "edits": [{"old_text": "zzz", "new_text": "y"}]},
        ],
    )
    assert error.code is Code.VALIDATION
    assert not (root_of(s) / "new.txt").exists()


async def test_batch_sees_its_own_earlier_operations(opened: Opener) -> None:
    s = await opened()
    result = await call(
        s,
        "batch",
        operations=[
            {"op": "write", "path": "c.txt", "content": "alpha\n"},
            {"op": "edit", "path": "c.txt", "edits": [{"old_text": "alpha", "new_text": "beta"}]},
            {"op": "move", "source": "c.txt", "destination": "d.txt"},
        ],
    )
    assert (root_of(s) / "d.txt").read_text() == "beta\n"
    history = await call(s, "history", transaction=result.transaction)
    assert [m.op for m in history.entries[0].mutations] == ["write", "edit", "move"]


async def test_create_directory_is_idempotent(opened: Opener) -> None:
    s = await opened()
    made = await call(s, "create_directory", path="p/q")
    assert made.transaction is not None and (root_of(s) / "p/q").is_dir()
    again = await call(s, "create_directory", path="p/q")
    assert (again.transaction, again.files) == (None, [])
    (root_of(s) / "file").write_text("x")
    assert (await fails(s, "create_directory", path="file")).code is Code.VALIDATION


async def test_files_over_the_size_limit_are_refused(opened: Opener) -> None:
    s = await opened(max_file_size=1024)
    error = await fails(s, "write_file", path="big.txt", content="x" * 2000)
    assert (error.code, error.details["reason"]) == (Code.VALIDATION, "file_too_large")
    (root_of(s) / "big2.txt").write_text("y" * 2000)
    error = await fails(s, "read_file", path="big2.txt")
    assert error.details["reason"] == "file_too_large"


async def test_patch_applies_to_several_files_or_none(opened: Opener) -> None:
    s = await opened()
    (root_of(s) / "p1.txt").write_text("a\nb\nc\n")
    (root_of(s) / "p2.txt").write_text("x\ny\nz\n")
    good = (
        "diff --git a/p1.txt b/p1.txt\n--- a/p1.txt\n+++ b/p1.txt\n"
        "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        "diff --git a/p2.txt b/p2.txt\n--- a/p2.txt\n+++ b/p2.txt\n"
        "@@ -1,3 +1,3 @@\n x\n-y\n+Y\n z\n"
    )
    bad = good.replace("-y\n+Y", "-nope\n+Y")
    error = await fails(s, "apply_patch", patch=bad)
    assert error.code is Code.PATCH_FAILED and not error.envelope.error.retryable
    assert error.envelope.error.path == str(root_of(s) / "p2.txt")
    assert (root_of(s) / "p1.txt").read_text() == "a\nb\nc\n"
    result = await call(s, "apply_patch", patch=good)
    assert len(result.files) == 2
    assert (root_of(s) / "p1.txt").read_text() == "a\nB\nc\n"
    assert (root_of(s) / "p2.txt").read_text() == "x\nY\nz\n"


async def test_patch_expected_hashes_are_checked(opened: Opener) -> None:
    s = await opened()
    (root_of(s) / "q.txt").write_text("1\n")
    patch = "--- a/q.txt\n+++ b/q.txt\n@@ -1 +1 @@\n-1\n+2\n"
    stale = {"q.txt": content_hash(b"0\n")}
    error = await fails(s, "apply_patch", patch=patch, expected_hashes=stale)
    assert error.code is Code.OCC_MISMATCH
    error = await fails(
        s, "apply_patch", patch=patch, expected_hashes={"other.txt": stale["q.txt"]}
    )
    assert error.code is Code.VALIDATION
    await call(s, "apply_patch", patch=patch, expected_hashes={"q.txt": content_hash(b"1\n")})
    assert (root_of(s) / "q.txt").read_text() == "2\n"


async def test_begin_patch_is_recognised(opened: Opener) -> None:
    s = await opened()
    error = await fails(s, "apply_patch", patch="*** Begin Patch\n*** Update File: a\n")
    assert error.code is Code.BEGIN_PATCH


async def test_history_by_path_lists_newest_first(opened: Opener) -> None:
    s = await opened()
    for n in range(3):
        await call(s, "write_file", path="h.txt", content=f"{n}\n")
    history = await call(s, "history", path="h.txt", limit=2)
    assert [e.summary for e in history.entries] == ["write_file h.txt"] * 2
    assert history.entries[0].transaction > history.entries[1].transaction


async def test_file_info_and_allowed_directories(opened: Opener) -> None:
    s = await opened()
    (root_of(s) / "i.txt").write_text("info")
    info = await call(s, "get_file_info", path="i.txt")
    assert (info.type, info.size, info.content_hash) == ("file", 4, content_hash(b"info"))
    allowed = await call(s, "list_allowed_directories")
    assert allowed.directories == [os.path.realpath(root_of(s))]


async def test_a_write_that_changes_nothing_is_not_a_transaction(opened: Opener) -> None:
    s = await opened(mutation_budget=1)
    await call(s, "write_file", path="same.txt", content="same\n")
    again = await call(s, "write_file", path="same.txt", content="same\n")
    assert (again.transaction, again.files, again.diff) == (None, [], "")
    assert s.budget.remaining == 0


async def test_an_error_inside_the_engine_block_is_raised_as_itself(tmp_path: Path) -> None:
    with pytest.raises(LedgerError):
        async with Engine.open({"roots": [str(tmp_path)]}) as engine:
            session = await engine.session()
            await session.call("read_file", {"path": "missing.txt"})


async def test_undo_makes_again_a_folder_removed_since(opened: Opener) -> None:
    s = await opened()
    made = await call(s, "create_directory", path="m")
    (root_of(s) / "m" / "n.txt").write_text("n\n")
    moved = await call(
        s,
        "batch",
        operations=[
            {"op": "move", "source": "m/n.txt", "destination": "e.txt"},
            {"op": "delete", "path": "e.txt"},
        ],
    )
    await call(s, "undo", transaction=made.transaction)
    assert not (root_of(s) / "m").exists()
    undone = await call(s, "undo", transaction=moved.transaction)
    assert next(f.op for f in undone.files) == "mkdir"
    assert (root_of(s) / "m" / "n.txt").read_text() == "n\n"
    assert not (root_of(s) / "e.txt").exists()


async def test_undo_of_a_change_in_a_folder_then_its_move(opened: Opener) -> None:
    """The folder the undo moves back is the one its change goes into, not a new one."""
    s = await opened()
    await call(s, "write_file", path="x/a.txt", content="one\n")
    batch = await call(
        s,
        "batch",
        operations=[
            {"op": "write", "path": "x/a.txt", "content": "two\n"},
            {"op": "move", "source": "x", "destination": "y"},
        ],
    )
    undone = await call(s, "undo", transaction=batch.transaction)
    assert [f.op for f in undone.files] == ["move", "write"]
    assert (root_of(s) / "x" / "a.txt").read_text() == "one\n"
    assert not (root_of(s) / "y").exists()


#: Edits each refused for a field of the edit list: (edits, the field named in edit_file).
EDIT_REFUSALS = [
    ([{"old_text": "absent", "new_text": "x"}], "edits[0].old_text"),
    ([{"old_text": "dup", "new_text": "x"}], "edits[0].old_text"),
    ([{"old_text": "", "new_text": "x"}], "edits[0].old_text"),
    (
        [{"old_text": "b\n", "new_text": "B\n"}, {"old_text": "b\n", "new_text": "x"}],
        "edits[1].old_text",
    ),
    ([{"old_text": "b", "new_text": "B\ud800"}], "edits[0].new_text"),
    ([{"old_text": "b", "new_text": "x" * 70_000}], "edits"),
]


@pytest.mark.parametrize(("edits", "field"), EDIT_REFUSALS)
async def test_a_batch_names_an_edits_field_under_its_operation(
    opened: Opener, edits: list[dict[str, str]], field: str
) -> None:
    s = await opened(max_file_size=65_536)
    path = root_of(s) / "e.txt"
    path.write_text("dup\nb\ndup\nc\ndup\n")
    alone = await fails(s, "edit_file", path="e.txt", edits=edits)
    in_batch = await fails(
        s,
        "batch",
        operations=[
            {"op": "mkdir", "path": "made"},
            {"op": "edit", "path": "e.txt", "edits": edits},
        ],
    )
    assert alone.details["field"] == field
    assert in_batch.details["field"] == "operations[1]." + field
    assert (in_batch.code, in_batch.details.get("reason")) == (
        alone.code,
        alone.details.get("reason"),
    )
    assert path.read_text() == "dup\nb\ndup\nc\ndup\n" and not (root_of(s) / "made").exists()
