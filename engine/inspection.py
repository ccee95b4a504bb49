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

from ledgerfs.journal import Journal, JournalError, TxRecord

from . import maintenance
from .config import Config, load_config
from .errors import Code, LedgerError
from .maintenance import Progress, VerifyReport
from .paths import Workspace, inside_root
from .results import HistoryEntry, HistoryMutation, SessionInfo
from .transaction import journal_error

__all__ = ["Inspection", "Log", "LogEntry", "LogFilter", "SessionList", "TransactionView"]


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


def entry_of(record: TxRecord, undone_by: int | None) -> LogEntry:
    """The log entry of a journal record."""
    return LogEntry(
        transaction=record.id,
        session=record.session,
        state=record.state,
        outcome=record.outcome,
        created_at=record.created_at,
        finished_at=record.finished_at,
        undo_of=record.undo_of,
        summary=record.summary,
        mutations=[HistoryMutation.of(m) for m in record.mutations],
        undone_by=undone_by,
    )


def _unavailable(exc: JournalError) -> LedgerError:
    if exc.kind == "missing":
        return LedgerError(
            Code.NOT_FOUND,
            f"There is no journal at {exc.path}.",
            path=exc.path,
            details=journal_error(exc),
            suggestion="pass --journal the path of an existing journal file",
        )
    return LedgerError(
        Code.TOOL_UNAVAILABLE, exc.message, path=exc.path, details=journal_error(exc)
    )


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
                checked.journal_path(), durability=checked.durability, readonly=True
            )
        except JournalError as exc:
            raise _unavailable(exc) from exc
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
        try:
            undone = await self.journal.undone_by(r.id for r in records)
        except JournalError as exc:
            raise _unavailable(exc) from exc
        return [entry_of(r, undone.get(r.id)) for r in records]

    async def log(self, which: LogFilter | None = None) -> Log:
        """Transactions matching `which`, newest first.

        Raises VALIDATION or NOT_ALLOWED for a path outside the workspace,
        TOOL_UNAVAILABLE when the journal cannot be read.
        """
        which = which or LogFilter()
        path = None
        if which.path is not None:
            path = self.workspace.resolve(which.path, must_exist=False).path
        try:
            records = await self.journal.history(
                path=path,
                session=which.session,
                since=which.since,
                until=which.until,
                limit=which.limit,
            )
        except JournalError as exc:
            raise _unavailable(exc) from exc
        return Log(entries=await self._entries(records))

    async def sessions(self, limit: int = 20) -> SessionList:
        """The sessions the journal recorded, newest first, at most `limit`.

        Raises TOOL_UNAVAILABLE when the journal cannot be read.
        """
        try:
            records = await self.journal.sessions(limit=limit + 1)
        except JournalError as exc:
            raise _unavailable(exc) from exc
        listed = [SessionInfo.of(r) for r in records[:limit]]
        return SessionList(sessions=listed, truncated=len(records) > limit)

    async def show(self, tx: int) -> TransactionView:
        """Transaction `tx`: its header and its diff. Raises NOT_FOUND for no such transaction."""
        record = await maintenance.transaction(self, tx)
        [entry] = await self._entries([record])
        return TransactionView(transaction=entry, diff=await maintenance.diff_of(self, record))

    async def verify(self, progress: Progress | None = None) -> VerifyReport:
        """The journal's integrity and every journaled file against the disk (see maintenance)."""
        return await maintenance.verify(self, progress)

    async def gc_preview(self, keep_days: float | None, keep_last: int | None) -> Log:
        """What `gc` with this policy would drop now, oldest first; drops nothing."""
        try:
            records = await self.journal.gc_candidates(keep_days=keep_days, keep_last=keep_last)
        except JournalError as exc:
            raise _unavailable(exc) from exc
        return Log(entries=await self._entries(records))
