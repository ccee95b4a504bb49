"""A power-loss simulator for the engine, in the spirit of SQLite's crash VFS and ALICE.

A SIGKILL never drops the page cache, so it cannot show that a flush is missing.
This module can. `Recorder` is the engine's `FileOps` with every file-system step
(a temp file's bytes, rename, swap, unlink, mkdir, rmdir) and every flush (`syncfs`,
the journal's WAL `datasync`) recorded in program order; at each WAL flush it
also copies the journal's files as they stand (the WAL up to its size then), so
the journal a power loss can leave is known at every point.

`crash_states` then builds what a power loss at each point may leave on a
journaling file system (ext4 `data=ordered`, XFS):

- everything before the last `syncfs` is on disk;
- of the metadata steps since (creating a temp file, renames, swaps, unlinks, mkdir,
  rmdir), a prefix is on disk: these file systems commit metadata in order;
- a file created since may have lost its bytes: it comes back whole, empty, cut
  in half, or with its bytes read as zeros (delayed allocation; a file renamed
  into place before its bytes reached the disk);
- the journal is as of its last WAL flush before the point.

`check_state` writes such a state to the workspace, opens the engine on it
(recovery) and checks the promises: every acknowledged transaction is there in
full, the one in flight is all there or not at all (calls made at once each on
its own, being separate transactions), no file is torn, no temp file is left,
the journal's history matches the files and `verify` is clean.

`FLUSH_POINTS` names the engine's flushes; a `Recorder` built with `drop` leaves
one out (or, for "order", makes the checkpoint's syncfs land after the journal
mark it must precede), and the simulator must then find a violation.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine, FileOps, LedgerError, Session
from ledgerfs.engine.maintenance import verify
from ledgerfs.journal import TxRecord
from ledgerfs.journal._marker import mark_path
from ledgerfs.journal._verified import point_path
from tests._wal import log_length

#: The flushes the engine's durability rests on, each one droppable by name.
FLUSH_POINTS = ("wal", "checkpoint-syncfs", "checkpoint-order", "recovery-syncfs")

Tree = dict[str, bytes | None]  # relative path -> bytes, or None for a folder


@dataclass(frozen=True)
class Step:
    """One recorded file-system step (paths relative to the workspace)."""

    kind: str  # "create", "rename", "exchange", "unlink", "mkdir", "rmdir"
    path: str
    destination: str | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class Flush:
    """Everything before this point is on stable storage (syncfs)."""


@dataclass(frozen=True)
class WalFlush:
    """The journal is durable as far as `snapshot` (an index into Recorder.journals)."""

    snapshot: int


@dataclass(frozen=True)
class Call:
    index: int


@dataclass(frozen=True)
class Ack:
    index: int


Event = Step | Flush | WalFlush | Call | Ack


class Recorder(FileOps):
    """The real file steps, recorded in order; the flushes recorded (and dropped on demand)."""

    def __init__(self, root: Path, drop: str | None = None) -> None:
        self.root = str(root)
        self.drop = drop
        self.events: list[Event] = []
        self.journals: list[tuple[bytes, bytes]] = []
        self._lock = threading.RLock()
        self._deferred_flush = False

    def note(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def snapshot_journal(self) -> None:
        """Record the journal's files as they are now as durable (at open, after a close)."""
        with self._lock:
            self.journals.append(_journal_files(Path(self.root), wal_size=None))
            self.events.append(WalFlush(len(self.journals) - 1))

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def _at(self, dir_fd: int, name: str) -> str:
        return self._rel(os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name))

    # The file steps: each runs and is recorded under one lock, so the record's
    # order is the order the steps took effect.

    def write(self, fd: int, data: bytes) -> None:
        with self._lock:
            super().write(fd, data)
            path = self._rel(os.readlink(f"/proc/self/fd/{fd}"))
            self.events.append(Step("create", path, data=bytes(data)))

    def rename(self, src_dir: int, src: str, dst_dir: int, dst: str) -> None:
        with self._lock:
            source, target = self._at(src_dir, src), self._at(dst_dir, dst)
            super().rename(src_dir, src, dst_dir, dst)
            self.events.append(Step("rename", source, destination=target))

    def swap_in(self, dir_fd: int, tmp: str, name: str) -> bool:
        # Two metadata steps when it swaps: a power loss between them leaves the
        # replaced file under the temp name.
        with self._lock:
            source, target = self._at(dir_fd, tmp), self._at(dir_fd, name)
            swapped = super().swap_in(dir_fd, tmp, name)
            if swapped:
                self.events.append(Step("exchange", source, destination=target))
                self.events.append(Step("unlink", source))
            else:
                self.events.append(Step("rename", source, destination=target))
            return swapped

    def unlink(self, dir_fd: int, name: str) -> None:
        with self._lock:
            path = self._at(dir_fd, name)
            super().unlink(dir_fd, name)
            self.events.append(Step("unlink", path))

    def mkdir(self, dir_fd: int, name: str, mode: int) -> None:
        with self._lock:
            path = self._at(dir_fd, name)
            super().mkdir(dir_fd, name, mode)
            self.events.append(Step("mkdir", path))

    def rmdir(self, dir_fd: int, name: str) -> None:
        with self._lock:
            path = self._at(dir_fd, name)
            super().rmdir(dir_fd, name)
            self.events.append(Step("rmdir", path))

    def fsync(self, fd: int) -> None:
        raise AssertionError("the engine fsyncs no single file; the simulator models none")

    # The flushes: recorded, never run (nothing here needs the real disk).

    def syncfs(self, folders: Iterable[str]) -> None:
        if self.drop in ("checkpoint-syncfs", "recovery-syncfs"):
            return
        with self._lock:
            if self.drop == "checkpoint-order":
                # As if the journal's checkpoint mark were written before this
                # flush: the flush lands after the next WAL flush (the mark's).
                self._deferred_flush = True
                return
            self.events.append(Flush())

    def datasync(self, fd: int) -> None:
        with self._lock:
            if self.drop == "wal":
                return
            size = os.fstat(fd).st_size
            self.journals.append(_journal_files(Path(self.root), wal_size=size))
            self.events.append(WalFlush(len(self.journals) - 1))
            if self._deferred_flush:
                self._deferred_flush = False
                self.events.append(Flush())


def _journal_files(root: Path, wal_size: int | None) -> tuple[bytes, bytes]:
    """The journal file and its WAL as far as `wal_size`, the WAL cut after its
    log: the zeros the journal writes ahead (megabytes) read as its end anyway,
    and keeping them in every snapshot would only cost memory."""
    db = root / ".ledgerfs" / "journal.db"
    wal = root / ".ledgerfs" / "journal.db-wal"
    data = db.read_bytes() if db.exists() else b""
    log = wal.read_bytes() if wal.exists() else b""
    if wal_size is not None:
        log = log[:wal_size]
    return data, log[: log_length(log)]


# Workloads -------------------------------------------------------------------------


@dataclass
class Run:
    """A recorded workload: its events, the journals, and the tree after each call."""

    root: Path
    start: Tree
    events: list[Event]
    journals: list[tuple[bytes, bytes]]
    trees: list[Tree] = field(default_factory=list)  # trees[i]: after call i
    transactions: list[int | None] = field(default_factory=list)  # call i's transaction
    separate: list[bool] = field(default_factory=list)  # call i's calls land one by one


def config(root: Path) -> dict[str, Any]:
    # Checkpoints only when the workload asks (and on close): the order is the workload's.
    return {
        "roots": [str(root)],
        "auto_occ": "off",
        "durability": "full",
        "checkpoint_interval": 3600,
    }


#: One call of a workload: (session, transactions of the calls so far) -> its transaction.
Action = Callable[[Session, list[int | None]], Awaitable[int | None]]


def tool(name: str, **arguments: Any) -> Action:
    async def run(session: Session, made: list[int | None]) -> int | None:
        try:
            result = await session.call(name, arguments)
        except LedgerError:
            return None
        transaction = getattr(result, "transaction", None)
        return transaction if isinstance(transaction, int) else None

    return run


def undo_of_call(index: int) -> Action:
    """Undo the transaction call `index` made (the run's transactions, by call)."""

    async def run(session: Session, made: list[int | None]) -> int | None:
        if made[index] is None:
            return None
        return await tool("undo", transaction=made[index])(session, made)

    return run


def together(*actions: Action) -> Action:
    """Calls made at once (engine/gather.py may journal them in one group, or the
    first alone and the others after it); the first one's transaction. Each call is
    its own transaction, so a power loss may keep any of them and not the others."""

    async def run(session: Session, made: list[int | None]) -> int | None:
        found: list[int | None] = [None] * len(actions)

        async def one(index: int) -> None:
            found[index] = await actions[index](session, made)

        async with anyio.create_task_group() as group:
            for index in range(len(actions)):
                group.start_soon(one, index)
        return found[0]

    run.separate = True  # type: ignore[attr-defined]
    return run


async def checkpoint(session: Session, made: list[int | None]) -> int | None:
    await session.engine.flush()
    return None


def workload(rng: random.Random) -> list[Action]:
    """Edits, batches, moves of files and folders, deletes, undos, calls made at
    once and checkpoints."""
    actions: list[Action] = [
        tool("write_file", path="a.txt", content="a1\n"),
        tool("edit_file", path="b.txt", edits=[{"old_text": "b0", "new_text": "b1"}]),
        tool(
            "batch",
            operations=[
                {"op": "move", "source": "d", "destination": "e"},
                {"op": "write", "path": "e/f.txt", "content": "f1\n"},
                {"op": "write", "path": "e/n/new.txt", "content": "new\n"},
            ],
        ),
        tool("move_file", source="a.txt", destination="e/a.txt"),
        tool("delete_file", path="c.txt"),
        undo_of_call(2),
        tool("write_file", path="d/g.txt", content="g2\n" * rng.randint(1, 3)),
        undo_of_call(5),
        tool("create_directory", path="m/k"),
        tool(
            "batch",
            operations=[
                {"op": "mkdir", "path": "bx"},
                {"op": "write", "path": "bx/f", "content": "x\n"},
                {"op": "move", "source": "bx", "destination": "by"},
                {"op": "write", "path": "by/f", "content": "y\n"},
            ],
        ),
        undo_of_call(4),
        tool("move_file", source="e", destination="m/k/e"),
        together(
            tool("write_file", path="p.txt", content="p1\n"),
            tool("edit_file", path="b.txt", edits=[{"old_text": "b1", "new_text": "b2"}]),
            tool("write_file", path="m/q.txt", content="q1\n" * rng.randint(1, 3)),
        ),
    ]
    # A checkpoint now and then, at places the seed picks.
    for _ in range(3):
        actions.insert(rng.randint(1, len(actions)), checkpoint)
    return actions


SEED: Tree = {
    "b.txt": b"b0\n",
    "c.txt": b"c0\n",
    "d": None,
    "d/f.txt": b"f0\n",
    "d/g.txt": b"g0\n",
}


def write_tree(root: Path, tree: Tree) -> None:
    for rel, data in sorted(tree.items()):
        path = root / rel
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def read_tree(root: Path) -> Tree:
    """Every file and folder under `root` but the journal's folder (temp files included)."""
    found: Tree = {}
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        if rel_folder == ".ledgerfs" or rel_folder.startswith(".ledgerfs/"):
            continue
        for name in dirs:
            rel = os.path.normpath(os.path.join(rel_folder, name))
            if rel != ".ledgerfs":
                found[rel] = None
        for name in files:
            rel = os.path.normpath(os.path.join(rel_folder, name))
            found[rel] = Path(folder, name).read_bytes()
    return dict(sorted(found.items()))


def clear(root: Path) -> None:
    for entry in os.listdir(root):
        path = root / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


async def record(root: Path, actions: list[Action], drop: str | None = None) -> Run:
    """Run `actions` on a seeded workspace through a Recorder; return what it saw."""
    clear(root)
    write_tree(root, SEED)
    recorder = Recorder(root, drop)
    run = Run(root, read_tree(root), recorder.events, recorder.journals)
    async with Engine.open(config(root), fileops=recorder) as engine:
        recorder.snapshot_journal()  # the empty journal, as created, is durable
        session = await engine.session("powerloss")
        for index, action in enumerate(actions):
            recorder.note(Call(index))
            run.separate.append(getattr(action, "separate", False))
            run.transactions.append(await action(session, run.transactions))
            recorder.note(Ack(index))
            run.trees.append(read_tree(root))
    recorder.snapshot_journal()  # closing checkpointed the WAL into the file, synced
    return run


async def record_recovery(run: Run, state: CrashState, drop: str | None = None) -> Run:
    """Recover `state` through a Recorder: the steps a power loss during recovery can cut."""
    materialize(run, state)
    recorder = Recorder(run.root, drop)
    recorder.snapshot_journal()  # the state's journal, as the power loss left it
    async with Engine.open(config(run.root), fileops=recorder):
        pass
    recorder.snapshot_journal()
    return Run(run.root, dict(state.tree), recorder.events, recorder.journals)


# Crash states ----------------------------------------------------------------------


@dataclass(frozen=True)
class CrashState:
    """What a power loss at one point may leave: files, journal, and what was promised."""

    tree: Frozen
    journal: int  # index into the run's journals
    before: Frozen  # the files once every acknowledged call is made
    after: Frozen  # ... and the call in flight too (`before` when none is)
    acknowledged: tuple[int, ...]  # transactions acknowledged before the point
    in_flight: int | None  # the call in flight's transaction, if it made one
    #: The call in flight is several calls made at once: each path may hold its
    #: `before` or its `after`, and `in_flight` landed where its own paths did.
    separate: bool = False


Frozen = tuple[tuple[str, bytes | None], ...]


def frozen(tree: Tree) -> Frozen:
    return tuple(sorted(tree.items()))


class _Model:
    """The file system's logical state: paths to inodes, inodes to bytes."""

    def __init__(self, tree: Tree) -> None:
        self.paths: dict[str, int] = {}
        self.data: dict[int, bytes | None] = {}
        for rel, data in tree.items():
            self._new(rel, data)

    def _new(self, rel: str, data: bytes | None) -> int:
        inode = len(self.data) + 1
        self.data[inode] = data
        self.paths[rel] = inode
        return inode

    def copy(self) -> _Model:
        other = _Model({})
        other.paths, other.data = dict(self.paths), dict(self.data)
        return other

    def apply(self, step: Step) -> int | None:
        """Make `step`; return the inode it created, if any."""
        match step.kind:
            case "create":
                return self._new(step.path, step.data)
            case "mkdir":
                self._new(step.path, None)
            case "unlink" | "rmdir":
                del self.paths[step.path]
            case "exchange":  # two files (swap_in never leaves a folder swapped)
                assert step.destination is not None
                one, other = step.path, step.destination
                self.paths[one], self.paths[other] = self.paths[other], self.paths[one]
            case "rename":
                assert step.destination is not None
                source, target = step.path, step.destination
                moved = {
                    p: i for p, i in self.paths.items() if p == source or p.startswith(source + "/")
                }
                for p in moved:
                    del self.paths[p]
                for p, inode in moved.items():
                    self.paths[target + p[len(source) :]] = inode
        return None

    def tree(self, contents: dict[int, bytes]) -> Tree:
        return {p: contents.get(i, self.data[i]) for p, i in sorted(self.paths.items())}


def _torn_variants(data: bytes) -> list[bytes]:
    """What a power loss can leave of a file's unflushed bytes."""
    return [b"", data[: len(data) // 2], b"\0" * len(data)]


def crash_states(
    run: Run, rng: random.Random, per_point: int = 6, promised: CrashState | None = None
) -> Iterator[CrashState]:
    """Every crash point of the run, each with several states a power loss may leave.

    `promised` is the state a recovery run started from: its promises hold for
    every state that run's power loss leaves.
    """
    outcomes = [frozen(run.start), *map(frozen, run.trees)]  # [i + 1]: after call i
    durable = _Model(run.start)
    journal = -1
    acknowledged: list[int] = []
    pending: list[Step] = []
    in_call: int | None = None
    done = 0  # calls acknowledged
    for event in [*run.events, None]:
        if journal >= 0:
            before, after = outcomes[done], outcomes[done + (in_call is not None)]
            tx = run.transactions[in_call] if in_call is not None else None
            separate = in_call is not None and run.separate[in_call]
            for state in _states_at(durable, pending, rng, per_point):
                if promised is not None:
                    yield CrashState(frozen(state), journal, *_promises(promised))
                else:
                    yield CrashState(
                        frozen(state), journal, before, after, tuple(acknowledged), tx, separate
                    )
        match event:
            case Step():
                pending.append(event)
            case Flush():
                for step in pending:
                    durable.apply(step)
                pending = []
            case WalFlush(snapshot=snapshot):
                journal = snapshot
            case Call(index=index):
                in_call = index
            case Ack(index=index):
                in_call = None
                done += 1
                made = run.transactions[index]
                if made is not None:
                    acknowledged.append(made)


def _promises(
    state: CrashState,
) -> tuple[Frozen, Frozen, tuple[int, ...], int | None, bool]:
    return state.before, state.after, state.acknowledged, state.in_flight, state.separate


def _states_at(
    durable: _Model, pending: list[Step], rng: random.Random, per_point: int
) -> Iterator[Tree]:
    """States with a prefix of the pending steps made, and unflushed bytes kept or lost."""
    prefixes = list(range(len(pending) + 1))
    if len(prefixes) > per_point:
        prefixes = sorted({0, len(pending), *rng.sample(prefixes, per_point - 2)})
    for made in prefixes:
        model = durable.copy()
        created: list[int] = []
        for step in pending[:made]:
            inode = model.apply(step)
            if inode is not None:
                created.append(inode)
        yield model.tree({})
        live = [i for i in created if i in model.paths.values()]
        if live:
            # Every unflushed file lost its bytes; or one of them, cut or zeroed.
            yield model.tree({i: b"" for i in live})
            inode = rng.choice(live)
            data = model.data[inode] or b""
            yield model.tree({inode: rng.choice(_torn_variants(data))})


# Checking ---------------------------------------------------------------------------


@dataclass
class Stats:
    states: int = 0
    rolled_forward: int = 0
    rolled_back: int = 0
    repaired: int = 0
    temps: int = 0
    swaps: int = 0  # files put in place by swapping names, in the recorded runs
    violations: list[str] = field(default_factory=list)


def materialize(run: Run, state: CrashState) -> None:
    clear(run.root)
    # The journal's mark outside the workspace is never ahead of the journal's
    # durable checkpoints; a power loss may leave an older one: none at all here.
    mark_path(run.root / ".ledgerfs" / "journal.db").unlink(missing_ok=True)
    # So is the point the last verify kept: another state's is not this disk's.
    point_path(run.root / ".ledgerfs" / "journal.db").unlink(missing_ok=True)
    write_tree(run.root, dict(state.tree))
    db, wal = run.journals[state.journal]
    folder = run.root / ".ledgerfs"
    folder.mkdir(exist_ok=True)
    (folder / "journal.db").write_bytes(db)
    if wal:
        (folder / "journal.db-wal").write_bytes(wal)


class QuietOps(FileOps):
    """The real steps with flushes skipped: the states live on tmpfs, nothing to flush."""

    def syncfs(self, folders: Iterable[str]) -> None:
        return None

    def datasync(self, fd: int) -> None:
        return None


async def check_state(run: Run, state: CrashState, stats: Stats) -> list[str]:
    """Recover `state` and return every broken promise (empty when all hold)."""
    problems: list[str] = []
    materialize(run, state)
    stats.temps += any(".ledgerfs-" in p for p, _ in state.tree)
    async with Engine.open(config(run.root), fileops=QuietOps()) as engine:
        for outcome in engine.recovered:
            if outcome.not_restored:
                problems.append(f"recovery left paths: {outcome}")
            if outcome.action == "roll_back":
                stats.rolled_back += 1
                if outcome.transaction in state.acknowledged:
                    problems.append(f"acknowledged transaction {outcome.transaction} rolled back")
            else:
                stats.rolled_forward += 1
        disk = frozen(read_tree(run.root))
        if not _allowed(state, disk):
            problems.append(f"files match neither allowed outcome: {_diff(state, disk)}")
        report = await verify(engine)
        if not report.ok:
            problems.append(f"verify: {report}")
        for tx in state.acknowledged:
            record = await engine.journal.transaction(tx)
            if record is None or not _in_effect(record.state, record.outcome):
                problems.append(f"acknowledged transaction {tx} is not in effect: {record}")
        if state.in_flight is not None and state.before != state.after:
            record = await engine.journal.transaction(state.in_flight)
            landed = _landed(run, state, disk, record)
            in_effect = record is not None and _in_effect(record.state, record.outcome)
            if in_effect != landed:
                problems.append(f"in flight {state.in_flight}: landed={landed}, journal {record}")
    return problems


def _allowed(state: CrashState, disk: Frozen) -> bool:
    """Whether the files are an outcome the promises allow: the call in flight
    made or not, or, for calls made at once, each path made or not."""
    if disk in (state.before, state.after):
        return True
    if not state.separate:
        return False
    before, after, found = dict(state.before), dict(state.after), dict(disk)
    return all(
        found.get(path, ABSENT) in (before.get(path, ABSENT), after.get(path, ABSENT))
        for path in {*before, *after, *found}
    )


def _landed(run: Run, state: CrashState, disk: Frozen, record: TxRecord | None) -> bool:
    """Whether the call in flight's files hold its after images (only its own paths,
    for calls made at once: the others are separate transactions)."""
    if not state.separate or record is None:
        return disk == state.after
    after, found = dict(state.after), dict(disk)
    paths = [os.path.relpath(m.path, run.root) for m in record.mutations]
    return all(found.get(p, ABSENT) == after.get(p, ABSENT) for p in paths)


#: A path a tree does not hold.
ABSENT = "-"


def _in_effect(state: str, outcome: str | None) -> bool:
    return state == "committed" or (state == "recovered" and outcome == "rolled_forward")


def _diff(state: CrashState, disk: Frozen) -> str:
    wanted, found = dict(state.after), dict(disk)
    return ", ".join(
        f"{k}: want {wanted.get(k, '-')!r} got {found.get(k, '-')!r}"
        for k in sorted(set(wanted) | set(found))
        if wanted.get(k, "-") != found.get(k, "-")
    )


def unique(states: Iterable[CrashState]) -> list[CrashState]:
    seen: dict[CrashState, None] = {}
    for state in states:
        seen.setdefault(state, None)
    return list(seen)


async def check_all(
    run: Run, states: list[CrashState], stats: Stats, *, stop_at_first: bool
) -> None:
    # Looking for one violation (a control), the latest states first: they hold
    # the most acknowledged work a missing flush can lose.
    for state in reversed(states) if stop_at_first else states:
        stats.states += 1
        problems = await check_state(run, state, stats)
        if problems:
            stats.violations.append(f"{state}: {problems}")
            if stop_at_first:
                return


async def simulate(
    root: Path,
    seed: int,
    *,
    drop: str | None = None,
    recoveries: int = 12,
    per_point: int = 6,
    stop_at_first: bool = False,
) -> Stats:
    """Record a workload, check every state a power loss may leave, then the same for
    power losses during the recovery of `recoveries` of those states."""
    rng = random.Random(seed)
    stats = Stats()
    during_recovery = drop == "recovery-syncfs"
    run = await record(root, workload(rng), None if during_recovery else drop)
    stats.swaps += sum(isinstance(e, Step) and e.kind == "exchange" for e in run.events)
    states = unique(crash_states(run, rng, per_point))
    if not (during_recovery and stop_at_first):  # that control drops a flush of recovery only
        await check_all(run, states, stats, stop_at_first=stop_at_first)
        if stats.violations and stop_at_first:
            return stats
    # States recovery has work in: files that are neither outcome.
    busy = [s for s in states if s.tree not in (s.before, s.after)]
    for state in rng.sample(busy, min(recoveries, len(busy))):
        during = await record_recovery(run, state, drop if during_recovery else None)
        cut = unique(crash_states(during, rng, per_point, promised=state))
        await check_all(during, cut, stats, stop_at_first=stop_at_first)
        if stats.violations and stop_at_first:
            return stats
    return stats


def scratch_root(fallback: Path) -> Path:
    """A folder on tmpfs when there is one (every state is written and read back)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="ledgerfs-powerloss-", dir=shm))
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback
