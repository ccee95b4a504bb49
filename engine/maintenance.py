"""Engine-level maintenance: verify files against the journal, gc, show a transaction.

These are what `ledgerfs verify`, `ledgerfs gc` and `ledgerfs show` call; they
read the journal through its public API and the files through the engine's
workspace, and change nothing but the journal (gc).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import anyio
import msgspec

from ledgerfs.journal import JournalError, TxRecord, content_hash

from .core import Engine
from .diffs import unified_diff
from .effects import ABSENT_STATE, FOLDER, State, Tree, file_state, state_of
from .errors import Code, LedgerError
from .planning import ABSENT
from .transaction import change_of, journal_error

__all__ = ["Drift", "GcResult", "VerifyReport", "gc", "show", "verify"]

Progress = Callable[[str], None]

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


class GcResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a gc run dropped."""

    transactions_dropped: int
    blobs_dropped: int
    bytes_freed: int


def _in_effect(record: TxRecord) -> bool:
    return record.state in _IN_EFFECT or (
        record.state == "recovered" and record.outcome == "rolled_forward"
    )


def _expectations(records: list[TxRecord]) -> dict[str, tuple[int, State]]:
    """path -> (transaction, state) left by the in-effect transactions, replayed in order.

    Records come newest first. The replay follows folder moves: a file journaled
    at `a/f.txt` is expected at `z/f.txt` once `a` moved to `z`.
    """
    tree = Tree(lambda _path: ABSENT)
    for record in reversed(records):
        if _in_effect(record):
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


async def verify(engine: Engine, progress: Progress | None = None) -> VerifyReport:
    """Check the journal's integrity and every journaled file's current hash.

    A file whose bytes differ from the after image of the newest committed mutation
    touching it was changed outside ledgerfs; it is reported, never touched.
    Raises TOOL_UNAVAILABLE when the journal cannot be read.
    """
    say = progress or (lambda _line: None)
    say("checking journal integrity")
    try:
        integrity = await engine.journal.verify()
        say(f"journal: {integrity.blobs_checked} blobs checked")
        records = await engine.journal.history(limit=2**62)
    except JournalError as exc:
        raise LedgerError(Code.TOOL_UNAVAILABLE, exc.message, details=journal_error(exc)) from exc
    roots = list(engine.workspace.roots)
    expected = {p: e for p, e in _expectations(records).items() if _inside(p, roots)}
    say(f"checking {len(expected)} journaled paths")
    drifted: list[Drift] = []
    for index, (path, (tx, state)) in enumerate(sorted(expected.items()), 1):
        now = await anyio.to_thread.run_sync(_current, path)
        if now != state:
            drifted.append(
                Drift(
                    path=path,
                    transaction=tx,
                    expected_hash=state.hash,
                    current_hash=now.hash,
                    reason=f"changed outside ledgerfs (expected {state.kind}, found {now.kind})",
                )
            )
        if index % 500 == 0:
            say(f"checked {index}/{len(expected)} paths")
    say(f"done: {len(drifted)} changed outside ledgerfs")
    return VerifyReport(
        ok=integrity.ok and not drifted,
        journal_ok=integrity.ok,
        blobs_checked=integrity.blobs_checked,
        missing_blobs=list(integrity.missing),
        corrupt_blobs=list(integrity.corrupt),
        problems=list(integrity.problems),
        files_checked=len(expected),
        drifted=drifted,
    )


async def gc(
    engine: Engine,
    keep_days: float | None,
    keep_last: int | None,
    progress: Progress | None = None,
) -> GcResult:
    """Drop finished transactions outside the keep policy and the blobs only they used.

    With both `keep_days` and `keep_last` None nothing is dropped. Raises
    TOOL_UNAVAILABLE when the journal cannot be written.
    """
    say = progress or (lambda _line: None)
    say(f"collecting (keep_days={keep_days}, keep_last={keep_last})")
    try:
        await engine.checkpoint()
        report = await engine.journal.gc(keep_days=keep_days, keep_last=keep_last)
    except JournalError as exc:
        raise LedgerError(Code.TOOL_UNAVAILABLE, exc.message, details=journal_error(exc)) from exc
    say(
        f"dropped {report.transactions_dropped} transactions, {report.blobs_dropped} blobs, "
        f"{report.bytes_freed} bytes"
    )
    return GcResult(
        transactions_dropped=report.transactions_dropped,
        blobs_dropped=report.blobs_dropped,
        bytes_freed=report.bytes_freed,
    )


async def show(engine: Engine, tx: int) -> str:
    """The unified diff of transaction `tx`, rebuilt from its stored images.

    Raises NOT_FOUND when there is no such transaction.
    """
    record = await engine.journal.transaction(tx)
    if record is None:
        raise LedgerError(
            Code.NOT_FOUND, f"There is no transaction {tx}.", details={"transaction": tx}
        )
    hashes = [h for m in record.mutations for h in (m.before_hash, m.after_hash) if h]
    blobs = await engine.journal.blobs(hashes)
    parts: list[str] = []
    for m in sorted(record.mutations, key=lambda m: m.ordinal):
        label = engine.label(m.path)
        if m.op == "move":
            parts.append(f"rename from {label}\nrename to {engine.label(m.destination or '')}\n")
            continue
        if m.kind == "dir":
            parts.append(f"{m.op} {label}/\n")
            continue
        before = blobs.get(m.before_hash) if m.before_hash else None
        after = blobs.get(m.after_hash) if m.after_hash else None
        if (m.before_hash and before is None) or (m.after_hash and after is None):
            parts.append(f"{m.op} {label}: images dropped by gc\n")
            continue
        parts.append(unified_diff(label, before, after))
    return "".join(parts)
