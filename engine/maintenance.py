"""Engine-level maintenance: verify files against the journal, gc, show a transaction.

These are what `ledgerfs verify`, `ledgerfs gc` and `ledgerfs show` call; they
read the journal through its public API and the files through the engine's
workspace, and change nothing but the journal (gc). `verify` and `show` need only
a `JournalView`: an open `Engine`, or a read-only `Inspection`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Protocol

import anyio
import msgspec

from ledgerfs.journal import Journal, JournalError, MutationRecord, TxRecord, content_hash

from .core import Engine
from .diffs import unified_diff
from .errors import Code, LedgerError
from .paths import Workspace
from .planning import is_link_mode
from .transaction import journal_error

__all__ = [
    "Drift",
    "GcResult",
    "JournalView",
    "Progress",
    "VerifyReport",
    "diff_of",
    "gc",
    "show",
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


class GcResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a gc run dropped."""

    transactions_dropped: int
    blobs_dropped: int
    bytes_freed: int


def _in_effect(record: TxRecord) -> bool:
    return record.state in _IN_EFFECT or (
        record.state == "recovered" and record.outcome == "rolled_forward"
    )


def _expectations(records: list[TxRecord]) -> dict[str, tuple[int, str, str | None]]:
    """path -> (transaction, kind, hash) left by the newest in-effect mutation.

    `kind` is "file" (hash is the content hash), "link" (the hash of its target
    text), "dir" or "absent".
    Records come newest first, so the first sighting of a path wins.
    """
    expected: dict[str, tuple[int, str, str | None]] = {}

    def note(path: str, tx: int, kind: str, digest: str | None) -> None:
        expected.setdefault(path, (tx, kind, digest))

    for record in records:
        if not _in_effect(record):
            continue
        for m in sorted(record.mutations, key=lambda m: m.ordinal, reverse=True):
            _note_mutation(m, record.id, note)
    return expected


def _note_mutation(
    m: MutationRecord, tx: int, note: Callable[[str, int, str, str | None], None]
) -> None:
    if m.op == "move" and m.destination is not None:
        kind = "dir" if m.kind == "dir" else "link" if is_link_mode(m.after_mode) else "file"
        note(m.destination, tx, kind, m.after_hash if kind != "dir" else None)
        note(m.path, tx, "absent", None)
    elif m.op == "mkdir" or (m.kind == "dir" and m.op != "rmdir"):
        note(m.path, tx, "dir", None)
    elif m.op == "rmdir" or m.after_hash is None:
        note(m.path, tx, "absent", None)
    else:
        note(m.path, tx, "link" if is_link_mode(m.after_mode) else "file", m.after_hash)


def _current(path: str) -> tuple[str, str | None]:
    """(kind, hash) of what is on disk now; a link's hash is its target's text's."""
    if os.path.islink(path):
        return "link", content_hash(os.fsencode(os.readlink(path)))
    if os.path.isdir(path):
        return "dir", None
    try:
        with open(path, "rb") as f:
            return "file", content_hash(f.read())
    except FileNotFoundError:
        return "absent", None


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


async def verify(view: JournalView, progress: Progress | None = None) -> VerifyReport:
    """Check the journal's integrity and every journaled file's current hash.

    A file whose bytes differ from the after image of the newest committed mutation
    touching it was changed outside ledgerfs; it is reported, never touched.
    `progress` hears ("journal", 0, None), then ("files", n, total) as files are checked.
    Raises TOOL_UNAVAILABLE when the journal cannot be read.
    """
    say = progress or _silent
    say("journal", 0, None)
    try:
        integrity = await view.journal.verify()
        records = await view.journal.history(limit=2**62)
    except JournalError as exc:
        raise LedgerError(Code.TOOL_UNAVAILABLE, exc.message, details=journal_error(exc)) from exc
    roots = list(view.workspace.roots)
    expected = {p: e for p, e in _expectations(records).items() if _inside(p, roots)}
    say("files", 0, len(expected))
    drifted: list[Drift] = []
    for index, (path, (tx, kind, digest)) in enumerate(sorted(expected.items()), 1):
        now_kind, now_hash = await anyio.to_thread.run_sync(_current, path)
        if (now_kind, now_hash) != (kind, digest) and not (kind == "dir" and now_kind == "dir"):
            drifted.append(
                Drift(
                    path=path,
                    transaction=tx,
                    expected_hash=digest,
                    current_hash=now_hash,
                    reason=f"changed outside ledgerfs (expected {kind}, found {now_kind})",
                )
            )
        say("files", index, len(expected))
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
    *,
    only: Iterable[int] | None = None,
) -> GcResult:
    """Drop finished transactions outside the keep policy and the blobs only they used.

    With both `keep_days` and `keep_last` None nothing is dropped; with `only` (the
    transactions a preview showed) nothing else is. `progress` hears ("checkpoint",
    0, 2), ("collect", 1, 2) and ("done", 2, 2). Raises TOOL_UNAVAILABLE when the
    journal cannot be written.
    """
    say = progress or _silent
    say("checkpoint", 0, 2)
    try:
        await engine.checkpoint()
        say("collect", 1, 2)
        report = await engine.journal.gc(keep_days=keep_days, keep_last=keep_last, only=only)
    except JournalError as exc:
        raise LedgerError(Code.TOOL_UNAVAILABLE, exc.message, details=journal_error(exc)) from exc
    say("done", 2, 2)
    return GcResult(
        transactions_dropped=report.transactions_dropped,
        blobs_dropped=report.blobs_dropped,
        bytes_freed=report.bytes_freed,
    )


async def transaction(view: JournalView, tx: int) -> TxRecord:
    """Transaction `tx` as the journal holds it.

    Raises NOT_FOUND when there is no such transaction, TOOL_UNAVAILABLE when the
    journal cannot be read.
    """
    try:
        record = await view.journal.transaction(tx)
    except JournalError as exc:
        raise LedgerError(Code.TOOL_UNAVAILABLE, exc.message, details=journal_error(exc)) from exc
    if record is None:
        raise LedgerError(
            Code.NOT_FOUND, f"There is no transaction {tx}.", details={"transaction": tx}
        )
    return record


async def show(view: JournalView, tx: int) -> str:
    """The unified diff of transaction `tx`, rebuilt from its stored images.

    Raises NOT_FOUND when there is no such transaction.
    """
    return await diff_of(view, await transaction(view, tx))


async def diff_of(view: JournalView, record: TxRecord) -> str:
    """The unified diff of a transaction's record, rebuilt from its stored images."""
    hashes = [h for m in record.mutations for h in (m.before_hash, m.after_hash) if h]
    try:
        blobs = await view.journal.blobs(hashes)
    except JournalError as exc:
        raise LedgerError(Code.TOOL_UNAVAILABLE, exc.message, details=journal_error(exc)) from exc
    parts: list[str] = []
    for m in sorted(record.mutations, key=lambda m: m.ordinal):
        label = view.label(m.path)
        if m.op == "move":
            parts.append(f"rename from {label}\nrename to {view.label(m.destination or '')}\n")
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
