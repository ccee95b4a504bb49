"""A read-only view of a workspace's journal: what `ledgerfs log`, `show` and `verify` read.

Opening an `Inspection` opens the journal read-only: it creates, migrates, locks and
recovers nothing, so it is safe beside a running server and never leaves a journal
where there was none. It answers with the same records a server's `history` tool
returns, plus which transactions an undo reverted.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec

from ..journal import (
    AuditRecord,
    Journal,
    JournalError,
    TxRecord,
    check_export,
    stored_path,
)
from . import maintenance
from .config import Config
from .core import load_config
from .errors import Code, LedgerError
from .history import entry_of, journal_unavailable, reading_journal, transaction_diff
from .maintenance import Progress, VerifyReport
from .paths import Workspace, inside_root
from .results import HistoryEntry, SessionInfo
from .transaction import journal_error

__all__ = [
    "Inspection",
    "Log",
    "LogEntry",
    "LogFilter",
    "SessionList",
    "TransactionView",
    "check_export",
]


class LogEntry(HistoryEntry, frozen=True):
    """A history entry and, when an undo reverted it, that undo's transaction."""

    undone_by: int | None = None


class Log(msgspec.Struct, frozen=True, kw_only=True):
    """Transactions, newest first."""

    entries: list[LogEntry]


class SessionList(msgspec.Struct, frozen=True, kw_only=True):
    """Sessions, newest first (by when they started)."""

    sessions: list[SessionInfo]
    #: Whether older sessions were left out (past the limit).
    truncated: bool = False


class TransactionView(msgspec.Struct, frozen=True, kw_only=True):
    """One transaction: its entry (the header) and its diff rebuilt from stored images."""

    transaction: LogEntry
    diff: str


class LogFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which transactions `Inspection.log` lists; every filter given must match."""

    path: str | None = None
    session: str | None = None
    #: Seconds since the epoch: created at or after `since`, before `until`.
    since: float | None = None
    until: float | None = None
    limit: int = 20


def _open_error(exc: JournalError) -> LedgerError:
    if exc.kind == "missing":
        return LedgerError(
            Code.NOT_FOUND,
            f"There is no journal at {exc.path}.",
            path=exc.path,
            details=journal_error(exc),
            suggestion="pass --journal the path of an existing journal file",
        )
    return journal_unavailable(exc)


class Inspection:
    """A workspace's journal, opened for reading only."""

    def __init__(self, config: Config, journal: Journal) -> None:
        self.config = config
        # Nothing is read through these roots, so a secret's name may be looked up.
        self.workspace = Workspace(config.roots, allow_secrets=True)
        self.journal = journal

    @classmethod
    @asynccontextmanager
    async def open(cls, config: Config | dict[str, Any]) -> AsyncIterator[Inspection]:
        """Open the configured journal read-only; close it on exit.

        Raises ROOTS_EMPTY, VALIDATION or NOT_FOUND for a bad configuration, NOT_FOUND
        when the journal file does not exist, TOOL_UNAVAILABLE when it cannot be read.
        """
        checked = load_config(config)
        try:
            journal = await Journal.open(
                checked.journal_path(),
                durability=checked.durability,
                readonly=True,
                roots=[os.path.realpath(root) for root in checked.roots],
            )
        except JournalError as exc:
            raise _open_error(exc) from exc
        try:
            yield cls(checked, journal)
        finally:
            await journal.aclose()

    def label(self, path: str) -> str:
        """A path as diffs show it: relative to its root."""
        for root in self.workspace.roots:
            if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
                return inside_root(path, root)
        return path

    async def _entries(self, records: list[TxRecord]) -> list[LogEntry]:
        with reading_journal():
            undone = await self.journal.undone_by(r.id for r in records)
        return [entry_of(r, LogEntry, bounded=False, undone_by=undone.get(r.id)) for r in records]

    async def log(self, which: LogFilter | None = None) -> Log:
        """Transactions matching `which`, newest first.

        Raises VALIDATION or NOT_ALLOWED for a path outside the workspace,
        TOOL_UNAVAILABLE when the journal cannot be read.
        """
        which = which or LogFilter()
        path = None
        if which.path is not None:
            path = self.workspace.resolve(which.path, must_exist=False).path
        with reading_journal():
            records = await self.journal.history(
                path=path,
                session=which.session,
                since=which.since,
                until=which.until,
                limit=which.limit,
            )
        return Log(entries=await self._entries(records))

    async def audit(self, which: LogFilter | None = None) -> AsyncIterator[AuditRecord]:
        """Every transaction matching `which` as an export record, in the audit chain's
        order (gc runs too), then those not finished yet; `which.limit` is ignored.

        Raises VALIDATION or NOT_ALLOWED for a path outside the workspace,
        TOOL_UNAVAILABLE when the journal cannot be read.
        """
        which = which or LogFilter()
        path = None
        if which.path is not None:
            path = stored_path(self.workspace.resolve(which.path, must_exist=False).path)

        def wanted(record: AuditRecord) -> bool:
            if which.session is not None and record.session != which.session:
                return False
            return path is None or path in record.paths

        after: int | None = 0
        while after is not None:
            with reading_journal():
                page, after = await self.journal.audit(
                    after=after, since=which.since, until=which.until
                )
            for record in page:
                if wanted(record):
                    yield record
        with reading_journal():
            rest = await self.journal.audit_unchained(since=which.since, until=which.until)
        for record in rest:
            if wanted(record):
                yield record

    async def sessions(self, limit: int = 20) -> SessionList:
        """The sessions the journal recorded, newest first, at most `limit`.

        Raises TOOL_UNAVAILABLE when the journal cannot be read.
        """
        with reading_journal():
            records = await self.journal.sessions(limit=limit + 1)
        listed = [SessionInfo.of(r) for r in records[:limit]]
        return SessionList(sessions=listed, truncated=len(records) > limit)

    async def show(self, tx: int) -> TransactionView:
        """Transaction `tx`: its header and its diff. Raises NOT_FOUND for no such transaction."""
        record = await maintenance.transaction(self, tx)
        [entry] = await self._entries([record])
        diff = await transaction_diff(self.journal, record, self.label)
        return TransactionView(transaction=entry, diff=diff)

    async def verify(self, progress: Progress | None = None, *, full: bool = False) -> VerifyReport:
        """The journal's integrity, its audit chain and the journaled files against the
        disk: what changed since the last clean verify, or everything with `full`
        (see maintenance)."""
        return await maintenance.verify(self, progress, full=full)

    async def gc_preview(self, keep_days: float | None, keep_last: int | None) -> Log:
        """What `gc` with this policy would drop now, oldest first; drops nothing."""
        with reading_journal():
            records = await self.journal.gc_candidates(keep_days=keep_days, keep_last=keep_last)
        return Log(entries=await self._entries(records))
