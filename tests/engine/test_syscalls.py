"""The durability argument, checked on the system calls of the real server.

`tests/engine/test_powerloss.py` proves the protocol with the flushes replaced
by recorders; here nothing is replaced. The real `ledgerfs serve` (production
`FileOps`, the journal's own flushes, SQLite as configured) runs a short
workload under strace (`_syscall_workload`), and each test reads one step of
docs/design.md's "durability argument" off the trace: which call flushed which
file, before which reply or which journal write. A flush dropped anywhere in
engine/ or journal/ breaks one of them (`python -m tests.mutate_flushes`).

Each test names the step it guards:

- point 1: a reply only after a WAL flush that began after its intent's commit;
- point 2: a checkpoint mark only after `syncfs` of every root's file system;
- point 4: recovery's records only after `syncfs` of what it wrote;
- SQLite's promise: the database is synced before the WAL starts over or goes;
  the pragmas the argument relies on are those in force;
- `normal` (and `full`): the documented flushes, no more.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledgerfs import Engine
from ledgerfs.engine.fileops import temp_name
from tests.server._support import REPO, server_env

from . import _strace
from ._journal_child import DURABLE_CALLS
from ._syscall_workload import (
    Session,
    Traced,
    Workspace,
    edit,
    run_mixed,
    state_dir,
)

_WHY = _strace.unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")

ROUNDS = 4  # about 120 calls a run
PAUSE = 1.3  # longer than the checkpoint interval (1 s)


@dataclass
class FullRun:
    ws: Workspace
    served: Session  # the workload, closed cleanly
    killed: Session  # concurrent edits, then SIGKILL
    recovering: Session  # the next start, without syncfs: recovery, edits, a clean close
    reverted: tuple[int, str]  # the killed transaction whose file lost its rename


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> FullRun:
    ws = _workspace(tmp_path_factory.mktemp("full"), "full")
    traces = tmp_path_factory.mktemp("full-traces")
    served = Traced(ws, traces / "served")
    run_mixed(served, ws, rounds=ROUNDS, pause=PAUSE)
    served_session = served.close()

    killed = Traced(ws, traces / "killed")
    paths = sorted(ws.text)[:16]
    before = {p: list(ws.text[p]) for p in paths}
    txs = killed.mutate([edit(ws, p) for p in paths])
    killed_session = killed.kill()
    # Like a power loss that kept the intent but not the rename: one transaction
    # the dead process never checkpointed finds its file at its before image.
    marked = _marked(_strace.wal_frames(killed_session.calls, ws.wal))
    tx = next(tx for tx in reversed(txs) if tx not in marked)
    [path] = killed_session.paths[tx]
    Path(path).write_text("\n".join(before[path]) + "\n")

    # Where syncfs fails (ENOSYS here), the checkpoint and recovery fall back to sync().
    recovering = Traced(ws, traces / "recovering", extra=("-e", "inject=syncfs:error=ENOSYS"))
    recovering.mutate([edit(ws, p) for p in paths[:4]])
    recovering_session = recovering.close()
    return FullRun(ws, served_session, killed_session, recovering_session, (tx, path))


@pytest.fixture(scope="module")
def normal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, Session]:
    ws = _workspace(tmp_path_factory.mktemp("normal"), "normal")
    served = Traced(ws, tmp_path_factory.mktemp("normal-traces") / "served")
    run_mixed(served, ws, rounds=ROUNDS, pause=0)
    return ws, served.close()


def _workspace(base: Path, durability: str) -> Workspace:
    """Two roots; the journal made by a first, untraced start (its creation is
    SQLite's own business, traced by nobody)."""
    roots = [base / "a", base / "b"]
    for root in roots:
        root.mkdir()
    ws = Workspace(roots, durability)
    Traced(ws, base / "unused", traced=False).close()
    return ws


def _sessions(run: FullRun) -> Iterator[tuple[str, Session]]:
    yield "served", run.served
    yield "killed", run.killed
    yield "recovering", run.recovering  # syncfs fails: sync() instead


# Point 1: nothing acknowledged is lost.


def test_every_reply_follows_a_wal_flush_that_began_after_its_intent_was_committed(
    full: FullRun,
) -> None:
    """Point 1: a result is returned only after the WAL flush that covers the intent."""
    checked = 0
    for name, session in _sessions(full):
        unseen = set(session.transactions) - set(session.reply_calls)
        assert not unseen, f"{name}: no write(2) found for the replies to {sorted(unseen)}"
        frames = _strace.wal_frames(session.calls, full.ws.wal)
        intents = _intent_commits(frames)
        syncs = [c for c in session.calls if _is_sync_of(c, full.ws.wal)]
        for ident, tx in session.transactions.items():
            reply = session.reply_calls[ident]
            commit = intents[tx]
            covering = [s for s in syncs if s.entry > commit.page.exit and s.exit < reply.entry]
            assert covering, (
                f"{name}: the reply to request {ident} (transaction {tx}, trace line "
                f"{reply.entry}) was written with no fdatasync of {full.ws.wal} begun after "
                f"its intent's commit (line {commit.page.exit})"
            )
            checked += 1
    assert checked >= 120


# Point 2: a checkpoint mark only after its files are on stable storage.


def test_a_checkpoint_marks_transactions_only_after_syncfs_of_every_roots_file_system(
    full: FullRun,
) -> None:
    """Point 2: a transaction is marked checkpointed only after a `syncfs` of each
    root's file system that began after its files were written."""
    devices = {os.stat(root).st_dev: str(root) for root in full.ws.roots}
    for name, session in _sessions(full):
        frames = _strace.wal_frames(session.calls, full.ws.wal)
        intents = _intent_commits(frames)
        marks = _marked(frames)
        if name == "served":
            assert len({frames[i].header.entry for i in marks.values()}) >= 2, (
                "the workload makes a periodic and a closing checkpoint"
            )
        for tx, index in marks.items():
            if tx not in session.paths:
                continue  # another process's transaction, marked by recovery
            mark = frames[index].header
            last = _last_file_step(session, tx, intents)
            for device, root in devices.items():
                assert any(
                    s.entry > last and s.exit < mark.entry
                    for s in _syncfs_of(session.calls, device)
                ), (
                    f"{name}: transaction {tx} was marked checkpointed (trace line "
                    f"{mark.entry}) with no syncfs of {root}'s file system between its "
                    f"last file step (line {last}) and the mark"
                )


def test_without_syncfs_a_checkpoint_marks_transactions_only_after_sync(full: FullRun) -> None:
    """Point 2 on a system without `syncfs` (the recovering server's fails with
    ENOSYS, injected by strace): the documented fallback, `sync()`, runs before
    the checkpoint mark."""
    session = full.recovering
    frames = _strace.wal_frames(session.calls, full.ws.wal)
    intents = _intent_commits(frames)
    marks = _marked(frames)
    assert session.paths and set(session.paths) <= set(marks), "the closing checkpoint marks all"
    assert not [c for c in session.calls if c.name == "syncfs" and c.ok]
    syncs = [c for c in session.calls if c.name == "sync" and c.ok]
    for tx in session.paths:
        last, mark = _last_file_step(session, tx, intents), frames[marks[tx]].header
        assert any(s.entry > last and s.exit < mark.entry for s in syncs), (
            f"transaction {tx} was marked checkpointed (line {mark.entry}) with no sync() "
            f"after its last file step (line {last})"
        )


# Point 4: recovery's writes are flushed before its records.


def test_recovery_flushes_what_it_rolled_forward_before_it_records_that(full: FullRun) -> None:
    """Point 4: recovery's own writes are flushed before it records its outcomes."""
    session = full.recovering
    frames = _strace.wal_frames(session.calls, full.ws.wal)
    recorded = {tx: i for i, tx, state, _ in _strace.first_seen(frames) if state == "recovered"}
    tx, path = full.reverted
    assert tx in recorded, "the killed server's unfinished transactions were recovered"
    first_record = min(frames[i].header.entry for i in recorded.values())
    rewrites = [
        c
        for c in session.calls
        if c.name in ("rename", "renameat", "renameat2") and path in c.paths()
    ]
    assert rewrites and rewrites[0].exit < first_record, "recovery rewrote the lost file"
    roots = tuple(str(root) + os.sep for root in full.ws.roots)
    journal_dir = str(full.ws.journal.parent) + os.sep
    for i in recorded.values():
        record = frames[i].header
        steps = [
            c.exit
            for c in session.calls
            if c.name in _strace.FILE_STEPS
            and c.exit < record.entry
            and any(p.startswith(roots) and not p.startswith(journal_dir) for p in c.paths())
        ]
        last = max(steps)
        for device in {os.stat(root).st_dev for root in full.ws.roots}:
            assert any(
                s.entry > last and s.exit < record.entry for s in _syncfs_of(session.calls, device)
            ), (
                f"a recovery record (line {record.entry}) was written with no syncfs (or sync()) "
                f"after recovery's last file step (line {last})"
            )
    assert Path(path).read_text() == "\n".join(full.ws.text[path]) + "\n"


# SQLite's promise: frames survive until the database holds them durably.


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_sqlite_syncs_the_database_before_the_wal_starts_over_or_goes(
    durability: str, full: FullRun, normal: tuple[Workspace, Session]
) -> None:
    """SQLite keeps its promise: the WAL's frames are given up (the log started
    over, cut or removed) only once the database holding them is synced."""
    sessions = list(_sessions(full)) if durability == "full" else [("served", normal[1])]
    ws = full.ws if durability == "full" else normal[0]
    db, wal = str(ws.journal), ws.wal
    ends = copied = 0
    for name, session in sessions:
        unsynced: _strace.Call | None = None
        for call in session.calls:
            path = call.paths()[0] if call.paths() else None
            if call.name in ("pwrite64", "ftruncate") and path == db and call.ok:
                unsynced, copied = call, copied + 1
            elif _is_sync_of(call, db) and unsynced is not None and call.entry > unsynced.exit:
                unsynced = None
            elif _gives_up_wal(call, wal):
                ends += 1
                assert unsynced is None or unsynced.exit > call.entry, (
                    f"{name}: the WAL was started over or removed (trace line {call.entry}) "
                    f"while the database write at line {unsynced.entry} was not synced"
                )
    assert copied, "a WAL checkpoint copied frames into the database"
    assert ends >= 2


@pytest.mark.anyio
@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_the_pragmas_the_durability_argument_relies_on_are_in_force(
    durability: str, tmp_path: Path
) -> None:
    """Read back from the live connections: WAL mode; the write connection at
    `NORMAL` (under `full` the syncer's fdatasync makes each commit durable, as
    `FULL` would); the WAL checkpoint's connection at `NORMAL` or more, so a
    checkpoint syncs the WAL before it copies and the database before the WAL
    starts over; automatic checkpoints off the write connection."""
    root = tmp_path / "root"
    root.mkdir()
    async with Engine.open({"roots": [str(root)], "durability": durability}) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": str(root / "a.txt"), "content": "a\n"})
        writer = engine.journal._writer
        assert writer is not None and writer.walcheck is not None
        with writer.lock:
            write = _pragmas(writer.db.conn)
        check = _pragmas(writer.walcheck.db.conn)
        syncer = writer.syncer
    assert write["journal_mode"] == check["journal_mode"] == "wal"
    assert write["synchronous"] == 1  # NORMAL: COMMIT leaves the fsync to the syncer
    assert write["wal_autocheckpoint"] == 0
    assert check["synchronous"] >= 1  # checkpoints sync the WAL and the database
    if durability == "full":
        assert syncer is not None, "under full, a syncer flushes the WAL for every commit"
        assert syncer._datasync == engine.fileops.datasync
        assert check["synchronous"] == 2
    else:
        assert syncer is None


def _pragmas(conn: Any) -> dict[str, Any]:
    return {
        name: conn.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("journal_mode", "synchronous", "wal_autocheckpoint")
    }


# Exactly the documented flushes.


def test_under_normal_the_only_flushes_are_sqlites_own(
    normal: tuple[Workspace, Session],
) -> None:
    """`normal`: nothing is fsynced by the engine; SQLite syncs a new WAL's header
    and its checkpoints, and no commit (docs/design.md, "Durability")."""
    ws, session = normal
    kinds = _flush_kinds(session.calls, ws.journal)
    assert set(kinds) <= {"sqlite header", "sqlite folder", "sqlite checkpoint"}, kinds
    assert kinds.get("sqlite checkpoint")


def test_under_full_the_flushes_are_the_documented_ones(full: FullRun) -> None:
    """`full`: the WAL flushed by the engine's own descriptor (the commit point),
    written ahead and flushed once at open, `syncfs` at checkpoints and recovery,
    SQLite's header and checkpoint syncs; never a file or folder of a root, and no
    flush inside SQLite's COMMIT ("The fsync leaves COMMIT", docs/journal.md)."""
    for name, session in _sessions(full):
        kinds = _flush_kinds(session.calls, full.ws.journal)
        documented = {
            "engine wal",
            "wal written ahead",
            "syncfs",
            "sqlite header",
            "sqlite folder",
            "sqlite checkpoint",
        }
        assert set(kinds) <= documented, kinds
        assert kinds.get("engine wal"), name
        assert name == "killed" or kinds.get("syncfs"), name
    served = _flush_kinds(full.served.calls, full.ws.journal)
    assert served.get("wal written ahead") == 1
    # SQLite made the WAL at the start and synced its folder: the WAL's name, which
    # every commit in it needs, survives a power loss.
    assert served.get("sqlite folder")


# The journal alone, with its default flushes.


@pytest.mark.parametrize("group_commit", [True, False], ids=["group-commit", "no-group-commit"])
def test_the_journals_default_flush_covers_every_begin(group_commit: bool, tmp_path: Path) -> None:
    """Point 1 for the journal alone (`Journal.open` with its default `datasync`,
    and SQLite's own `FULL` without group commit): `begin` returns only after a
    flush of the WAL that began after its commit, lazy groups in between too."""
    journal = tmp_path / "journal.db"
    trace = tmp_path / "trace"
    child = "tests.engine._journal_child"
    argv = [sys.executable, "-m", child, str(journal), str(int(group_commit))]
    env = {**server_env(), **state_dir()}
    subprocess.run([*argv, "create"], check=True, cwd=str(REPO), env=env, timeout=120)
    subprocess.run(_strace.command(trace, argv), check=True, cwd=str(REPO), env=env, timeout=120)
    calls = _strace.read(trace)
    wal = str(journal) + "-wal"
    frames = _strace.wal_frames(calls, wal)
    intents = _intent_commits(frames)
    syncs = [c for c in calls if _is_sync_of(c, wal)]
    begun = {
        int(m.group(1)): c
        for c in calls
        if c.name == "write" and c.args[0].startswith("1<")
        for m in [re.match(rb"begun (\d+)", c.string(1))]
        if m
    }
    assert len(begun) == 31
    # Exactly the documented flushes: with group commit none inside SQLite's COMMIT
    # (the syncer's instead); without, one per durable commit at most, none for a
    # group nobody waits on (the lone begins' `mark_applied`s).
    kinds = _flush_kinds(calls, journal)
    if group_commit:
        assert "sqlite commit" not in kinds and kinds.get("engine wal"), kinds
    else:
        assert 0 < kinds.get("sqlite commit", 0) <= DURABLE_CALLS, kinds
    for tx, told in begun.items():
        commit = intents[tx]
        assert any(s.entry > commit.page.exit and s.exit < told.entry for s in syncs), (
            f"begin returned transaction {tx} (trace line {told.entry}) with no WAL flush "
            f"begun after its commit (line {commit.page.exit})"
        )


# Reading the trace.


def _is_sync_of(call: _strace.Call, path: str) -> bool:
    return call.name in ("fsync", "fdatasync") and call.ok and call.fd_path(0) == path


def _syncfs_of(calls: list[_strace.Call], device: int) -> list[_strace.Call]:
    """The calls that flush the file system `device`: its syncfs, or a sync()."""
    found = []
    for call in calls:
        if call.name == "sync":
            found.append(call)
        elif call.name == "syncfs" and call.ok:
            path = call.fd_path(0)
            if path is not None and os.stat(path).st_dev == device:
                found.append(call)
    return found


def _gives_up_wal(call: _strace.Call, wal: str) -> bool:
    """The WAL started over (a new header at its start), cut, or removed."""
    if call.name == "pwrite64" and call.fd_path(0) == wal:
        return call.number(3) == 0 and call.number(2) == 32
    if call.name == "ftruncate":
        return call.fd_path(0) == wal
    return call.name in ("unlink", "unlinkat", "rename", "renameat", "renameat2") and (
        wal in call.paths()
    )


def _intent_commits(frames: list[_strace.Frame]) -> dict[int, _strace.Frame]:
    """Each transaction's intent: the frame that committed its row's first write."""
    found: dict[int, _strace.Frame] = {}
    for index, tx, _, _ in _strace.first_seen(frames):
        if tx not in found:
            found[tx] = _strace.commit_of(frames, index)
    return found


def _marked(frames: list[_strace.Frame]) -> dict[int, int]:
    """The frame index that first wrote each transaction's checkpoint mark."""
    return {
        tx: index
        for index, tx, state, checkpointed in _strace.first_seen(frames)
        if state == "committed" and checkpointed == 1
    }


def _last_file_step(session: Session, tx: int, intents: dict[int, _strace.Frame]) -> int:
    """Where the last write, rename, unlink or mkdir of `tx`'s files returned.

    A transaction's steps come after its intent's commit and before its reply,
    and before the intent of the next transaction on one of its paths (the
    locks keep them apart), so that window holds them and no other's.
    """
    paths = session.paths[tx]
    start = intents[tx].page.exit
    end = min(
        [session.reply_calls[i].entry for i, t in session.transactions.items() if t == tx]
        + [
            intents[other].page.entry
            for other, others in session.paths.items()
            if other > tx and others & paths and other in intents
        ]
    )
    temps = {os.path.join(os.path.dirname(p), temp_name(os.path.basename(p), "")) for p in paths}
    tags = {t.rsplit("-", 1)[1] for t in temps}

    def ours(path: str) -> bool:
        if path in paths:
            return True
        name = os.path.basename(path)
        return name.startswith(".ledgerfs-") and name.rsplit("-", 1)[-1] in tags

    steps = [
        c.exit
        for c in session.calls
        if c.name in _strace.FILE_STEPS
        and start < c.entry < end
        and any(ours(p) for p in c.paths())
    ]
    assert steps, f"transaction {tx} made no file step between its intent and its reply"
    return max(steps)


def _flush_kinds(calls: list[_strace.Call], journal: Path) -> dict[str, int]:
    """Every flush of a trace, by what it is (a kind the docs name, or the path)."""
    wal, db, folder = f"{journal}-wal", str(journal), str(journal.parent)
    opened: dict[int, str] = {}  # fd: who opened the WAL through it
    last_wal_write: dict[int, tuple[int, int]] = {}  # tid: (size, offset)
    kinds: dict[str, int] = {}
    for i, call in enumerate(calls):
        if call.name == "openat" and call.ok and call.paths() == [wal]:
            flags = call.args[2]
            fd = call.result or 0
            opened[fd] = (
                "sqlite" if "O_RDWR" in flags else "reserve" if "O_WRONLY" in flags else "engine"
            )
            continue
        if call.name == "pwrite64" and call.fd_path(0) == wal:
            last_wal_write[call.tid] = (call.number(2), call.number(3))
            continue
        if call.name not in _strace.FLUSHES or not call.ok:
            continue
        path = call.fd_path(0) if call.name != "sync" else None
        if call.name in ("syncfs", "sync"):
            kind = "syncfs"
        elif path == wal:
            who = opened.get(call.number(0), "sqlite")
            if who == "engine":
                kind = "engine wal"
            elif who == "reserve":
                kind = "wal written ahead"
            elif last_wal_write.get(call.tid, (0, -1))[1] == 0:
                kind = "sqlite header"
            elif _checkpoint_follows(calls, i, db, wal):
                kind = "sqlite checkpoint"
            else:
                kind = "sqlite commit"
        elif path == db:
            kind = "sqlite checkpoint"
        elif path == folder:
            kind = "sqlite folder"
        else:
            kind = f"{call.name} of {path}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _checkpoint_follows(calls: list[_strace.Call], at: int, db: str, wal: str) -> bool:
    """Whether the thread of `calls[at]` next copies into or syncs the database
    (a checkpoint's WAL sync) rather than writing the WAL again."""
    tid = calls[at].tid
    for call in calls[at + 1 :]:
        if call.tid != tid:
            continue
        path = call.fd_path(0) if call.args else None
        if path == db and call.name in ("pwrite64", "fsync", "fdatasync", "ftruncate"):
            return True
        if path == wal and call.name == "pwrite64":
            return False
    return False
