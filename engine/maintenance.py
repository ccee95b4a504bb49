"""Engine-level maintenance: verify files against the journal, gc, read a transaction.

These are what `ledgerfs verify`, `ledgerfs gc` and `ledgerfs show` call (a diff is
rendered by `history`, as the `history` tool renders it); they read the journal
through its public API and the files through the engine's workspace, and change
nothing but the journal (gc). `verify` and `transaction` need only a `JournalView`:
an open `Engine`, or a read-only `Inspection`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Protocol

import anyio
import msgspec

from ..journal import GcReport, Journal, TxRecord, VerifiedPoint, content_hash
from .changes import ABSENT
from .core import Engine
from .effects import ABSENT_STATE, FOLDER, State, Tree, file_state, state_of
from .errors import Code, LedgerError
from .history import reading_journal
from .paths import Workspace
from .transaction import change_of

__all__ = [
    "Drift",
    "JournalView",
    "Progress",
    "VerifyReport",
    "gc",
    "transaction",
    "verify",
]

#: Called as work advances: (what is being done, how many done, of how many or None).
Progress = Callable[[str, int, "int | None"], None]


class JournalView(Protocol):
    """What reading a journal against a workspace needs: an Engine or an Inspection."""

    @property
    def journal(self) -> Journal: ...

    @property
    def workspace(self) -> Workspace: ...

    def label(self, path: str) -> str: ...


def _silent(_what: str, _done: int, _total: int | None) -> None:
    return None


#: Transactions whose mutations are in effect on disk.
_IN_EFFECT = ("committed",)


class Drift(msgspec.Struct, frozen=True, kw_only=True):
    """A file that does not hold what the journal's newest change left there."""

    path: str
    transaction: int
    expected_hash: str | None
    current_hash: str | None
    reason: str


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The journal's integrity plus every journaled file checked against the disk."""

    ok: bool
    journal_ok: bool
    blobs_checked: int
    missing_blobs: list[str]
    corrupt_blobs: list[str]
    problems: list[str]
    files_checked: int
    drifted: list[Drift]
    #: Transactions a dead process left unfinished: `ledgerfs recover` finishes them.
    #: Each is also in exactly one of the two lists below, which say what it is.
    awaiting_recovery: list[int] = msgspec.field(default_factory=list)
    #: Acknowledged (their commit mark is written) and waiting for their files: their
    #: process stopped before a checkpoint made the files durable (a checkpoint that
    #: failed, e.g. on a full disk at exit). Recovery rolls them forward.
    acknowledged: list[int] = msgspec.field(default_factory=list)
    #: Their process died before writing their commit mark: it may have died before
    #: acknowledging them, or after (the mark is written lazily). Their durable intent
    #: is the commit point, so recovery rolls them forward too, or back where a file
    #: changed since.
    interrupted: list[int] = msgspec.field(default_factory=list)
    #: Whether only what came after the last verified point was checked (no --full).
    incremental: bool = False
    #: The audit chain's position the check started after (0: its start).
    since_position: int = 0
    #: Audit-chain links recomputed.
    links_checked: int = 0
    #: The chain's head now, position and link: keep the link elsewhere to anchor it.
    chain_position: int = 0
    chain_head: str = ""


def _in_effect(record: TxRecord) -> bool:
    return record.state in _IN_EFFECT or (
        record.state == "recovered" and record.outcome == "rolled_forward"
    )


def _expectations(
    records: list[TxRecord], in_flight: frozenset[int] = frozenset()
) -> dict[str, tuple[int, State]]:
    """path -> (transaction, state) left by the in-effect transactions, replayed in order.

    Records come newest first; `in_flight` names pending ones counted in effect too.
    The replay follows folder moves: a file journaled at `a/f.txt` is expected at
    `z/f.txt` once `a` moved to `z`.
    """
    tree = Tree(lambda _path: ABSENT)
    for record in reversed(records):
        if _in_effect(record) or record.id in in_flight:
            for m in sorted(record.mutations, key=lambda m: m.ordinal):
                tree.apply(change_of(m, {}, os.path.basename), record.id)
    expected: dict[str, tuple[int, State]] = {}
    for path, entry in tree.changed().items():
        tag = tree.tag(path)
        assert isinstance(tag, int)
        expected[path] = (tag, state_of(entry))
    return expected


def _current(path: str) -> State:
    """What is on disk now (a folder, a link's target's hash, a file's hash, or nothing)."""
    if os.path.islink(path):
        return State("link", content_hash(os.fsencode(os.readlink(path))))
    if os.path.isdir(path):
        return FOLDER
    try:
        with open(path, "rb") as f:
            return file_state(content_hash(f.read()))
    except FileNotFoundError:
        return ABSENT_STATE


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


async def verify(
    view: JournalView, progress: Progress | None = None, *, full: bool = False
) -> VerifyReport:
    """Check the journal's integrity, its audit chain and the journaled files.

    Incremental unless `full`: from the point the last clean verify of this
    journal reached, it checks the links chained since, the blobs their records
    need and the blobs stored since, that the chain still holds the point's link,
    and the files those records changed; what came before is trusted. With `full`
    (or no point kept yet) it checks everything: SQLite's `integrity_check`, every
    blob, every link, every journaled file. A report that finds nothing wrong
    moves the point.

    A file whose bytes differ from the after image of the newest committed mutation
    touching it was changed outside ledgerfs; it is reported, never touched.
    `progress` hears ("journal", 0, None), then ("files", n, total) as files are checked.
    Nothing is repaired: transactions a dead process left unfinished are reported
    (`awaiting_recovery`; their files may differ until `ledgerfs recover`), each as
    `acknowledged` (committed, its files waiting for a checkpoint) or `interrupted`
    (no commit mark), and make the report not ok. Raises TOOL_UNAVAILABLE when the
    journal cannot be read.
    """
    say = progress or _silent
    say("journal", 0, None)
    journal = view.journal
    point = None if full else await anyio.to_thread.run_sync(journal.verified_point)
    with reading_journal():
        integrity = await journal.verify(full=True, since=point)
        awaiting = await journal.unfinished()
        if point is not None:
            # The records chained since the point, and those not finished yet.
            records = await journal.records([*integrity.transactions, *await journal.unchained()])
            if any(_moves_a_folder(r) for r in records):
                point = None  # the files kept with the point may have moved: replay all
        if point is None:
            records = await journal.history(limit=2**62)
    # A live process's pending transaction is being applied, or is applied and its
    # commit mark not written yet: its paths may hold either side of it.
    live = await anyio.to_thread.run_sync(journal.live_owners)
    in_flight = frozenset(r.id for r in records if r.state == "pending" and r.owner in live)
    acknowledged = _acknowledged(records, awaiting)
    roots = list(view.workspace.roots)
    kept = {} if point is None else _kept_files(point)
    every = {**kept, **_expectations(records)}
    expected = {p: e for p, e in every.items() if _inside(p, roots)}
    applied = {**kept, **_expectations(records, in_flight)} if in_flight else expected
    say("files", 0, len(expected))
    drifted: list[Drift] = []
    for index, (path, (tx, state)) in enumerate(sorted(expected.items()), 1):
        now = await anyio.to_thread.run_sync(_current, path)
        if now != state and (path not in applied or now != applied[path][1]):
            drifted.append(
                Drift(
                    path=path,
                    transaction=tx,
                    expected_hash=state.hash,
                    current_hash=now.hash,
                    reason=f"changed outside ledgerfs (expected {state.kind}, found {now.kind})",
                )
            )
        say("files", index, len(expected))
    ok = integrity.ok and not drifted and not awaiting
    reached = integrity.point
    if ok and reached is not None:
        # Kept outside the journal's folder: a read-only journal moves it too.
        files = {path: (tx, state.kind, state.hash) for path, (tx, state) in every.items()}
        kept_point = msgspec.structs.replace(reached, files=files)
        await anyio.to_thread.run_sync(journal.save_verified_point, kept_point)
    return VerifyReport(
        ok=ok,
        journal_ok=integrity.ok,
        blobs_checked=integrity.blobs_checked,
        missing_blobs=list(integrity.missing),
        corrupt_blobs=list(integrity.corrupt),
        problems=list(integrity.problems),
        files_checked=len(expected),
        drifted=drifted,
        awaiting_recovery=awaiting,
        acknowledged=acknowledged,
        interrupted=[tx for tx in awaiting if tx not in acknowledged],
        incremental=point is not None,
        since_position=0 if point is None else point.seq,
        links_checked=integrity.links_checked,
        chain_position=0 if reached is None else reached.seq,
        chain_head="" if reached is None else reached.link,
    )


def _moves_a_folder(record: TxRecord) -> bool:
    """Whether `record` moves or deletes a folder (what it holds goes with it)."""
    return any(m.kind == "dir" and m.op in ("move", "delete") for m in record.mutations)


def _kept_files(point: VerifiedPoint) -> dict[str, tuple[int, State]]:
    """The expectations a point kept, as `_expectations` makes them."""
    return {path: (tx, State(kind, digest)) for path, (tx, kind, digest) in point.files.items()}  # type: ignore[arg-type]


def _acknowledged(records: list[TxRecord], unfinished: list[int]) -> list[int]:
    """Of `unfinished`, those whose commit mark the journal holds (state committed, not
    checkpointed): acknowledged, only their files' durability is outstanding."""
    waiting = set(unfinished)
    return sorted(r.id for r in records if r.id in waiting and r.state == "committed")


async def gc(
    engine: Engine,
    keep_days: float | None,
    keep_last: int | None,
    progress: Progress | None = None,
    *,
    only: Iterable[int] | None = None,
) -> GcReport:
    """Drop finished transactions outside the keep policy and the blobs only they used.

    With both `keep_days` and `keep_last` None nothing is dropped; with `only` (the
    transactions a preview showed) nothing else is. `progress` hears ("checkpoint",
    0, 2), ("collect", 1, 2) and ("done", 2, 2). Raises TOOL_UNAVAILABLE when the
    journal cannot be written.
    """
    say = progress or _silent
    say("checkpoint", 0, 2)
    with reading_journal():
        await engine.flush()
        say("collect", 1, 2)
        report = await engine.journal.gc(keep_days=keep_days, keep_last=keep_last, only=only)
    say("done", 2, 2)
    return report


async def transaction(view: JournalView, tx: int) -> TxRecord:
    """Transaction `tx` as the journal holds it.

    Raises NOT_FOUND when there is no such transaction, TOOL_UNAVAILABLE when the
    journal cannot be read.
    """
    with reading_journal():
        record = await view.journal.transaction(tx)
    if record is None:
        raise LedgerError(
            Code.NOT_FOUND, f"There is no transaction {tx}.", details={"transaction": tx}
        )
    return record
