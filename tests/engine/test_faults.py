"""Fault injection on real files: every I/O site of apply and of rollback, three errnos.

One batch touches every kind of step (rewrite, create, delete, move, mkdir, a file
in a new folder, an edit). `FaultyOps` fails a named primitive call while applying
it, and optionally while rolling it back. Each case states the ROLLBACK_ code and
which paths stay changed; the test checks the envelope, the bytes on disk, temp
files, the journal record and the budget against it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

import ledgerfs.engine.pipeline as pipeline_module
from ledgerfs.engine import Code, Engine, LedgerError

from ._faulty import FaultyOps
from .conftest import snapshot, temp_files

BUDGET = 100

BEFORE: dict[str, bytes | None] = {
    "a.txt": b"a-before\n",
    "d.txt": b"d-before\n",
    "e.txt": b"one\ntwo\nthree\nfour\nfive\n",
    "m.txt": b"m-before\n",
}

OPERATIONS: list[dict[str, Any]] = [
    {"op": "write", "path": "a.txt", "content": "a-after\n"},
    {"op": "write", "path": "new.txt", "content": "new\n"},
    {"op": "delete", "path": "d.txt"},
    {"op": "move", "source": "m.txt", "destination": "moved.txt"},
    {"op": "mkdir", "path": "dir"},
    {"op": "write", "path": "sub/x.txt", "content": "x\n"},
    {"op": "edit", "path": "e.txt", "edits": [{"old_text": "three", "new_text": "THREE"}]},
]

# The planned changes in order: (path the journal names, op, what it leaves on disk).
CHANGES: list[tuple[str, str, dict[str, bytes | bool | None]]] = [
    ("a.txt", "write", {"a.txt": b"a-after\n"}),
    ("new.txt", "write", {"new.txt": b"new\n"}),
    ("d.txt", "delete", {"d.txt": False}),
    ("m.txt", "move", {"m.txt": False, "moved.txt": b"m-before\n"}),
    ("dir", "mkdir", {"dir": None}),
    ("sub", "mkdir", {"sub": None}),
    ("sub/x.txt", "write", {"sub/x.txt": b"x\n"}),
    ("e.txt", "edit", {"e.txt": b"one\ntwo\nTHREE\nfour\nfive\n"}),
]
INDEX = {path: i for i, (path, _, _) in enumerate(CHANGES)}
LAST = len(CHANGES) - 1


@dataclass(frozen=True)
class Case:
    """Arm `faults` ((primitive, path match or None, calls)); apply fails at `failing`."""

    id: str
    faults: list[tuple[str, str | None, set[int]]]
    failing: str
    code: Code
    not_restored: tuple[str, ...] = ()
    cascaded: tuple[str, ...] = ()  # left as is because a path inside was not restored


# The rollback of a failure at e.txt (the last change) runs every inverse step:
# unlink sub/x.txt, rmdir sub, rmdir dir, rename moved.txt back to m.txt, write and
# rename d.txt, unlink new.txt, write and rename a.txt.
FAIL_LAST = ("rename", "/e.txt", {1})

CASES = [
    # Apply fails at each I/O site; everything before it is restored.
    Case("apply-write-rewrite", [("write", "/a.txt", {1})], "a.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-rename-rewrite", [("rename", "/a.txt", {1})], "a.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-write-create", [("write", "/new.txt", {1})], "new.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-rename-create", [("rename", "/new.txt", {1})], "new.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-unlink-delete", [("unlink", "/d.txt", {1})], "d.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-rename-move", [("rename", "/moved.txt", {1})], "m.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-mkdir", [("mkdir", "/dir", {1})], "dir", Code.ROLLBACK_COMPLETE),
    Case("apply-mkdir-parent", [("mkdir", "/sub", {1})], "sub", Code.ROLLBACK_COMPLETE),
    Case(
        "apply-write-in-new-folder", [("write", "/x.txt", {1})], "sub/x.txt", Code.ROLLBACK_COMPLETE
    ),
    Case(
        "apply-rename-in-new-folder",
        [("rename", "/x.txt", {1})],
        "sub/x.txt",
        Code.ROLLBACK_COMPLETE,
    ),
    Case("apply-write-edit", [("write", "/e.txt", {1})], "e.txt", Code.ROLLBACK_COMPLETE),
    Case("apply-rename-edit", [FAIL_LAST], "e.txt", Code.ROLLBACK_COMPLETE),
    # Apply fails at the last change, then one inverse step fails too.
    Case(
        "rollback-unlink-created-file",
        [FAIL_LAST, ("unlink", "/x.txt", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("sub/x.txt",),
        cascaded=("sub",),
    ),
    Case(
        "rollback-rmdir-parent",
        [FAIL_LAST, ("rmdir", "/sub", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("sub",),
    ),
    Case(
        "rollback-rmdir",
        [FAIL_LAST, ("rmdir", "/dir", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("dir",),
    ),
    Case(
        "rollback-rename-move-back",
        [FAIL_LAST, ("rename", "/m.txt", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("m.txt",),
    ),
    Case(
        "rollback-write-deleted",
        [FAIL_LAST, ("write", "/d.txt", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("d.txt",),
    ),
    Case(
        "rollback-rename-deleted",
        [FAIL_LAST, ("rename", "/d.txt", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("d.txt",),
    ),
    Case(
        "rollback-unlink-created",
        [FAIL_LAST, ("unlink", "/new.txt", {1})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("new.txt",),
    ),
    Case(
        "rollback-write-rewritten",
        [FAIL_LAST, ("write", "/a.txt", {2})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("a.txt",),
    ),
    Case(
        "rollback-rename-rewritten",
        [FAIL_LAST, ("rename", "/a.txt", {2})],
        "e.txt",
        Code.ROLLBACK_PARTIAL,
        ("a.txt",),
    ),
    # Nothing that needed restoring could be: rename calls n and n+1 fail.
    Case(
        "renames-2-and-3", [("rename", None, {2, 3})], "new.txt", Code.ROLLBACK_FAILED, ("a.txt",)
    ),
    Case(
        "unlink-then-both-restores",
        [("unlink", None, {1, 2}), ("write", "/a.txt", {2})],
        "d.txt",
        Code.ROLLBACK_FAILED,
        ("new.txt", "a.txt"),
    ),
    Case(
        "every-inverse-step",
        [
            FAIL_LAST,
            ("unlink", None, {2, 3}),
            ("rmdir", None, {1, 2}),
            ("rename", "/m.txt", {1}),
            ("write", None, {5, 6}),
        ],
        "e.txt",
        Code.ROLLBACK_FAILED,
        ("sub/x.txt", "dir", "m.txt", "d.txt", "new.txt", "a.txt"),
        cascaded=("sub",),
    ),
]

# Every errno at every site, the backends alternating (both run every code path).
ERRNO_BACKENDS = pytest.mark.parametrize(
    ("err", "anyio_backend"),
    [(errno.EIO, "asyncio"), (errno.ENOSPC, "trio"), (errno.EACCES, "asyncio")],
    ids=lambda v: errno.errorcode.get(v, v) if isinstance(v, int) else v,
)


@pytest.fixture
def engine_config(workspace: Path) -> dict[str, Any]:
    return {
        "roots": [str(workspace)],
        "durability": "full",
        "auto_occ": "off",
        "mutation_budget": BUDGET,
    }


def seed(workspace: Path) -> dict[str, bytes | None]:
    for name, data in BEFORE.items():
        assert data is not None
        (workspace / name).write_bytes(data)
    return snapshot(workspace)


def expected_disk(before: dict[str, bytes | None], changed: list[str]) -> dict[str, bytes | None]:
    """The workspace with the changes of `changed` left in effect."""
    disk = dict(before)
    for path, _, effect in CHANGES:
        if path not in changed:
            continue
        for name, value in effect.items():
            if value is False:
                disk.pop(name, None)
            else:
                assert not isinstance(value, bool)
                disk[name] = value
    return dict(sorted(disk.items()))


async def check_budget(engine: Engine, session_id: str, used: int, live: Any) -> None:
    """The session, the journal and a fresh session with the same id agree on the budget."""
    assert await engine.journal.budget_used(session_id) == used
    assert live.budget.used == used
    assert live.budget.remaining == BUDGET - used
    again = await engine.session(session_id)
    assert again.budget.used == used


def _abs(workspace: Path, rel: str) -> str:
    return str(workspace / rel)


@pytest.mark.anyio
@ERRNO_BACKENDS
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_fault_table(
    engine: Engine, faulty_ops: FaultyOps, workspace: Path, case: Case, err: int
) -> None:
    before = seed(workspace)
    for primitive, match, calls in case.faults:
        faulty_ops.fail(primitive, calls, err, match=match)
    session = await engine.session()

    with pytest.raises(LedgerError) as info:
        await session.call("batch", {"operations": OPERATIONS})

    error = info.value
    details = error.details
    name = errno.errorcode[err]
    k = INDEX[case.failing]
    attempted = [path for path, _, _ in CHANGES[: k + 1]]
    unrestored = [*case.not_restored, *case.cascaded]
    # Every armed fault fired: the case reached the I/O site it names.
    assert all(f.fired for f in faulty_ops.faults), faulty_ops.faults

    assert error.code is case.code, error.envelope
    assert error.envelope.error.recovery == "check_already_applied"
    assert error.envelope.error.retryable is False
    tx = details["transaction"]
    assert isinstance(tx, int)
    assert details["cause"] == {
        "stage": "apply",
        "op": CHANGES[k][1],
        "path": _abs(workspace, case.failing),
        "errno": name,
        "message": os.strerror(err),
    }
    assert details["restored"] == [
        _abs(workspace, p) for p in reversed(attempted) if p not in unrestored
    ]
    assert [item["path"] for item in details["not_restored"]] == [
        _abs(workspace, p) for p in reversed(attempted) if p in unrestored
    ]
    for item in details["not_restored"]:
        rel = os.path.relpath(item["path"], workspace)
        # A folder whose contents could not be restored is left as is, not tried.
        reason = "left as is: a later change at" if rel in case.cascaded else name + ": "
        assert item["reason"].startswith(reason), item

    # Restored paths hold their before state, not-restored ones their after state.
    assert snapshot(workspace) == expected_disk(before, unrestored)
    assert temp_files(workspace) == []

    record = await engine.journal.transaction(tx)
    assert record is not None
    assert record.state == "rolled_back"
    assert record.outcome == str(case.code)
    assert record.cause is not None
    assert json.loads(record.cause)["error"]["code"] == str(case.code)
    assert [m.path for m in record.mutations] == [_abs(workspace, p) for p, _, _ in CHANGES]
    assert {m.ordinal for m in record.mutations if m.applied} == {INDEX[p] for p in unrestored}
    # The journal charged the attempt; the session agrees and so does a new one.
    await check_budget(engine, session.id, len(OPERATIONS), session)

    # Nothing is left for recovery: another engine on the same journal finds no work.
    async with Engine.open(engine.config) as other:
        assert other.recovered == []
    assert snapshot(workspace) == expected_disk(before, unrestored)

    if case.code is Code.ROLLBACK_COMPLETE:
        # The workspace is exactly as before, so the same batch now goes through.
        faulty_ops.reset()
        result = await session.call("batch", {"operations": OPERATIONS})
        assert isinstance(result.transaction, int)  # type: ignore[attr-defined]
        assert snapshot(workspace) == expected_disk(before, [p for p, _, _ in CHANGES])
        await check_budget(engine, session.id, 2 * len(OPERATIONS), session)


@pytest.mark.anyio
async def test_apply_uses_no_fsync_with_full_durability(
    engine: Engine, faulty_ops: FaultyOps, workspace: Path
) -> None:
    """With durability full the apply path leaves file fsyncs to flushes (syncfs)."""
    seed(workspace)
    session = await engine.session()
    await session.call("batch", {"operations": OPERATIONS})
    assert {name for name, _ in faulty_ops.calls} == {"write", "rename", "unlink", "mkdir"}
    await engine.flush()


@pytest.mark.anyio
async def test_rollback_never_overwrites_an_external_change(
    engine: Engine, faulty_ops: FaultyOps, workspace: Path
) -> None:
    """A path changed behind the engine's back mid-apply is reported, left as it is."""
    before = seed(workspace)

    def meddle(path: str) -> None:
        if path.endswith("/e.txt"):
            (workspace / "a.txt").write_bytes(b"theirs\n")
            (workspace / "dir" / "keep").write_bytes(b"")

    faulty_ops.hooks["rename"] = meddle
    faulty_ops.fail("rename", 1, errno.EIO, match="/e.txt")
    session = await engine.session()
    with pytest.raises(LedgerError) as info:
        await session.call("batch", {"operations": OPERATIONS})
    error = info.value
    assert error.code is Code.ROLLBACK_PARTIAL
    reasons = {
        os.path.relpath(i["path"], workspace): i["reason"] for i in error.details["not_restored"]
    }
    assert set(reasons) == {"a.txt", "dir"}
    assert "changed by someone else" in reasons["a.txt"]
    assert reasons["dir"].startswith("ENOTEMPTY")
    expected = expected_disk(before, ["dir"])
    expected.update({"a.txt": b"theirs\n", "dir/keep": b""})
    assert snapshot(workspace) == dict(sorted(expected.items()))
    assert temp_files(workspace) == []
    record = await engine.journal.transaction(error.details["transaction"])
    assert record is not None and record.state == "rolled_back"
    assert record.outcome == "ROLLBACK_PARTIAL"
    assert {m.path for m in record.mutations if m.applied} == {
        _abs(workspace, "a.txt"),
        _abs(workspace, "dir"),
    }


@pytest.mark.anyio
async def test_a_rollback_that_breaks_is_an_incident(
    engine: Engine,
    faulty_ops: FaultyOps,
    workspace: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rollback that raises what it does not handle is ROLLBACK_FAILED naming the
    incident under which its traceback is logged."""
    seed(workspace)

    def broken(path: str) -> None:
        if path.endswith("/sub/x.txt"):  # the rollback's first step
            raise RuntimeError("a defect of the rollback")

    faulty_ops.hooks["unlink"] = broken
    faulty_ops.fail(*FAIL_LAST[:1], 1, errno.EIO, match=FAIL_LAST[1])
    caplog.set_level(logging.ERROR, logger="ledgerfs")
    session = await engine.session()
    with pytest.raises(LedgerError) as info:
        await session.call("batch", {"operations": OPERATIONS})
    error = info.value
    assert error.code is Code.ROLLBACK_FAILED
    incident = error.details["incident"]
    [record] = [r for r in caplog.records if f"incident {incident}:" in r.getMessage()]
    assert "a rollback failed unexpectedly: RuntimeError" in record.getMessage()
    assert "in broken" in record.getMessage()


@pytest.mark.anyio
@ERRNO_BACKENDS
@pytest.mark.parametrize("mkdir_fails", [False, True], ids=["restored", "mkdir-fails"])
async def test_undo_rolls_back_through_rmdir_and_mkdir(
    engine: Engine, faulty_ops: FaultyOps, workspace: Path, err: int, mkdir_fails: bool
) -> None:
    """Undo turns mkdir into rmdir, so its rollback runs mkdir: both sites on real folders."""
    (workspace / "f.txt").write_bytes(b"f\n")
    session = await engine.session()
    made = await session.call(
        "batch",
        {
            "operations": [
                {"op": "write", "path": "f.txt", "content": "g\n"},
                {"op": "mkdir", "path": "p"},
            ]
        },
    )
    tx = made.transaction  # type: ignore[attr-defined]
    assert snapshot(workspace) == {"f.txt": b"g\n", "p": None}

    # rmdir fails in apply: nothing was changed yet.
    faulty_ops.fail("rmdir", 1, err)
    with pytest.raises(LedgerError) as info:
        await session.call("undo", {"transaction": tx})
    assert info.value.code is Code.ROLLBACK_COMPLETE, info.value.envelope
    assert info.value.details["cause"]["errno"] == errno.errorcode[err]
    assert info.value.details["cause"]["op"] == "rmdir"
    assert snapshot(workspace) == {"f.txt": b"g\n", "p": None}

    # Undo runs rmdir p, then rewrites f.txt; the rewrite fails and p is made again,
    # unless that mkdir fails too (then nothing that needed restoring could be).
    faulty_ops.reset()
    faulty_ops.fail("rename", 1, err, match="/f.txt")
    if mkdir_fails:
        faulty_ops.fail("mkdir", 1, err)
    with pytest.raises(LedgerError) as info:
        await session.call("undo", {"transaction": tx})
    error = info.value
    assert all(f.fired for f in faulty_ops.faults)
    if mkdir_fails:
        assert error.code is Code.ROLLBACK_FAILED, error.envelope
        assert error.details["restored"] == [str(workspace / "f.txt")]
        assert [i["path"] for i in error.details["not_restored"]] == [str(workspace / "p")]
        assert snapshot(workspace) == {"f.txt": b"g\n"}
    else:
        assert error.code is Code.ROLLBACK_COMPLETE, error.envelope
        assert error.details["restored"] == [str(workspace / "f.txt"), str(workspace / "p")]
        assert snapshot(workspace) == {"f.txt": b"g\n", "p": None}
    assert temp_files(workspace) == []
    record = await engine.journal.transaction(error.details["transaction"])
    assert record is not None and record.state == "rolled_back"
    assert record.outcome == str(error.code)
    assert record.undo_of == tx
    assert [m.applied for m in record.mutations] == [mkdir_fails, False]
    assert await engine.journal.budget_used(session.id) == session.budget.used


@pytest.mark.anyio
async def test_cancelled_call_is_not_applied_later(
    workspace: Path, engine_config: dict[str, Any]
) -> None:
    """A call cancelled while its intent is queued never turns into a surprise write.

    The writer thread is held, the call queues its intent and is cancelled while it
    waits. Whatever the call left (applied or not), the next open must not change it.
    """
    (workspace / "a.txt").write_bytes(b"a\n")
    release = threading.Event()
    async with Engine.open(engine_config) as engine:
        journal = engine.journal
        entered = anyio.Event()
        original = journal.begin_group

        async def begin_group(*args: Any, **options: Any) -> Any:
            entered.set()
            return await original(*args, **options)

        journal.begin_group = begin_group  # type: ignore[method-assign]
        session = await engine.session()  # opening it is a journal write
        # Hold the writer thread, so the intent waits in its queue.
        journal._write_nowait(lambda db: release.wait())
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(session.call, "write_file", {"path": "a.txt", "content": "b\n"})
                await entered.wait()
                scope.cancel()
                release.set()
        journal.begin_group = original  # type: ignore[method-assign]
        await journal.checkpoint(0)  # a writer round trip: queued records went through
        left = (workspace / "a.txt").read_bytes()
        history = await journal.history(path=str(workspace / "a.txt"))
        assert [r.state for r in history] in ([], ["committed"], ["rolled_back"])
    async with Engine.open(engine_config) as reopened:
        assert (workspace / "a.txt").read_bytes() == left
        assert [o.action for o in reopened.recovered] != ["roll_forward"]


@pytest.mark.anyio
async def test_a_result_that_fails_to_build_does_not_hide_a_committed_change(
    workspace: Path, engine_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The diff is built while the intent is made durable; if building it fails, the
    change still completes and is committed, and the failure is raised after it."""

    def broken(changes: Any) -> str:
        raise RuntimeError("no diff today")

    (workspace / "a.txt").write_bytes(b"a\n")
    async with Engine.open(engine_config) as engine:
        session = await engine.session()
        monkeypatch.setattr(pipeline_module, "changes_diff", broken)
        with pytest.raises(RuntimeError, match="no diff today"):
            await session.call("write_file", {"path": "a.txt", "content": "b\n"})
        assert (workspace / "a.txt").read_bytes() == b"b\n"
        history = await engine.journal.history(path=str(workspace / "a.txt"))
        assert [r.state for r in history] == ["committed"]
        assert temp_files(workspace) == []


@pytest.mark.anyio
async def test_a_rollback_the_journal_could_not_record_is_recorded_later(
    engine: Engine, faulty_ops: FaultyOps, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else the next open would roll forward a change the client was told failed."""
    from ledgerfs.journal import JournalError

    (workspace / "r.txt").write_text("before\n")
    journal = engine.journal
    real_rollback = journal.rollback
    calls = 0

    async def failing_once(*args: object, **kwargs: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise JournalError("io", str(journal.path), "disk full", errno_name="ENOSPC")
        await real_rollback(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(journal, "rollback", failing_once)
    faulty_ops.fail("rename", 1, errno.ENOSPC)
    session = await engine.session()
    with pytest.raises(LedgerError) as caught:
        await session.call("write_file", {"path": "r.txt", "content": "after\n"})
    assert caught.value.code is Code.ROLLBACK_COMPLETE
    assert caught.value.details["journal_error"]["errno"] == "ENOSPC"
    tx = caught.value.details["transaction"]
    faulty_ops.reset()
    await session.call("write_file", {"path": "other.txt", "content": "x\n"})
    record = await journal.transaction(tx)
    assert record is not None and record.state == "rolled_back"
    assert (workspace / "r.txt").read_text() == "before\n"


@pytest.mark.anyio
async def test_a_rollback_reports_a_deleted_file_it_did_not_keep(
    faulty_ops: FaultyOps, workspace: Path
) -> None:
    """A file over max_file_size deleted without its bytes cannot be put back: said so."""
    (workspace / "big.bin").write_bytes(b"x" * 4096)
    config = {"roots": [str(workspace)], "auto_occ": "off", "max_file_size": 1024}
    async with Engine.open(config, fileops=faulty_ops) as engine:
        faulty_ops.fail("rename", 1, errno.EIO, match="/new.txt")
        session = await engine.session()
        operations = [
            {"op": "delete", "path": "big.bin"},
            {"op": "write", "path": "new.txt", "content": "new\n"},
        ]
        with pytest.raises(LedgerError) as info:
            await session.call("batch", {"operations": operations})
        error = info.value
        assert error.code is Code.ROLLBACK_FAILED
        [item] = error.details["not_restored"]
        assert item["path"] == str(workspace / "big.bin")
        assert "not kept" in item["reason"]
        assert snapshot(workspace) == {}
        assert temp_files(workspace) == []
        assert (await engine.journal.verify()).ok
