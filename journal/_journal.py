"""The `Journal`: the async face of the writer thread and the read connection."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Generator, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import msgspec
from sqlite_utils import Database

from . import _maintenance, _queries, _schema
from ._errors import make_error, map_errors
from ._owners import OwnerLock, owners_dir
from ._records import (
    Durability,
    GcReport,
    IntegrityReport,
    IssueWrite,
    JournalStatistics,
    MutationRecord,
    TxIntent,
    TxRecord,
    Unfinished,
)
from ._writer import Request, Writer

__all__ = ["Journal"]

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT = 5.0
# Above this many blob bytes, hashing for the check leaves the event loop thread.
_HASH_INLINE_MAX = 256 * 1024


class Journal:
    """One open journal file: a writer thread (group commit) and a read connection.

    Open with ``j = await Journal.open(path)`` or ``async with Journal.open(path) as j``.
    Opened with ``readonly=True`` it has no writer and no owner lock: reads only.
    """

    path: Path
    owner: str
    durability: Durability

    def __init__(
        self,
        path: Path,
        durability: Durability,
        writer: Writer | None,
        reader: Database,
        lock: OwnerLock | None,
    ) -> None:
        self.path = path
        # A read-only journal owns nothing: it records and claims no transactions.
        self.owner = lock.owner if lock is not None else ""
        self.readonly = writer is None
        self.durability = durability
        self._label = str(path)
        self._writer = writer
        self._reader = reader
        self._lock = lock
        self._owners = owners_dir(path)
        # One reader at a time: the read connection is not shared between threads at once.
        self._read_limiter = anyio.CapacityLimiter(1)
        self._reads = 0
        self._closed = False
        # Transactions whose commit mark is queued (commit_nowait) but not yet written.
        self._committing: set[int] = set()

    # -- opening and closing -----------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "full",
        create: bool = True,
        group_commit: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        readonly: bool = False,
    ) -> _Opener:
        """Open (or create) the journal at `path`; await it or use it as ``async with``.

        `readonly` opens an existing journal for reading only (inspection): nothing is
        created, migrated or locked, and every write raises JournalError(io, EROFS).
        Raises JournalError: missing (create=False or readonly, and no file), corrupt
        (not a journal, malformed), newer_schema, locked (busy past `busy_timeout`
        seconds), io (OS or disk errors, with errno name).
        """
        if readonly:
            return _Opener(lambda: _open_readonly(Path(path), durability, busy_timeout))
        return _Opener(lambda: _open(Path(path), durability, create, group_commit, busy_timeout))

    async def aclose(self) -> None:
        """Finish queued writes, stop the writer, close connections, release the owner lock.

        Shielded from cancellation; idempotent.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._writer is not None:
                self._writer.stop()
                await anyio.to_thread.run_sync(self._writer.join)
            async with self._read_limiter:
                self._reader.conn.close()
            if self._lock is not None:
                self._lock.release()

    async def __aenter__(self) -> Journal:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plumbing ----------------------------------------------------------------

    def _check_open(self) -> None:
        """Raise JournalError(closed) after aclose()."""
        if self._closed:
            raise make_error("closed", self._label, "this Journal instance was closed")

    def _writer_nowait(self) -> Writer:
        """The writer thread; JournalError(closed, or io EROFS when opened read-only)."""
        self._check_open()
        if self._writer is None:
            raise make_error(
                "io", self._label, "this Journal was opened read-only", errno_name="EROFS"
            )
        return self._writer

    async def _write(
        self, fn: Callable[[Database], T], while_waiting: Callable[[], object] | None = None
    ) -> T:
        """Queue `fn` for the writer and wait for its group to commit.

        If the caller is cancelled the request still runs; only the waiting stops.
        `while_waiting` runs once the request is queued, so its work overlaps the
        commit and its fsync; like a cancellation, an exception from it stops
        only the waiting.
        """
        writer = self._writer_nowait()
        request = Request(fn, wait=True)
        writer.submit(request)
        assert request.event is not None
        if while_waiting is not None:
            while_waiting()
        await request.event.wait()
        if request.error is not None:
            raise request.error
        result: T = request.result
        return result

    def _write_nowait(self, fn: Callable[[Database], object]) -> None:
        """Queue `fn` without waiting; a failure is only counted in statistics()."""
        self._writer_nowait().submit(Request(fn, wait=False))

    async def _read(self, fn: Callable[[Database], T], *, snapshot: bool = True) -> T:
        """Run `fn` on the read connection in a worker thread, as one read transaction."""
        self._check_open()

        def run() -> T:
            with map_errors(self._label):
                if not snapshot:
                    return fn(self._reader)
                self._reader.conn.execute("BEGIN")
                try:
                    return fn(self._reader)
                finally:
                    self._reader.conn.execute("COMMIT")

        result = await anyio.to_thread.run_sync(run, limiter=self._read_limiter)
        self._reads += 1
        return result

    # -- the transaction protocol --------------------------------------------------

    async def begin(
        self, intent: TxIntent, *, while_waiting: Callable[[], object] | None = None
    ) -> int:
        """Record `intent` (mutations, blobs, budget charge) as a pending transaction.

        Durable (per durability) when it returns. `while_waiting`, if given, runs
        on the caller's thread while the intent is committed (work that does not
        depend on it, done in the time the fsync takes); it must not raise, for
        the intent is recorded whatever it does. Raises
        TransactionStateError if a blob does not hash to its key or a referenced
        blob is neither given nor stored; JournalError (locked, io, closed).
        """
        self._check_open()
        if sum(len(b) for b in intent.blobs.values()) > _HASH_INLINE_MAX:
            await anyio.to_thread.run_sync(_queries.check_blobs, intent)
        else:
            _queries.check_blobs(intent)
        owner, now = self.owner, _queries.now()
        return await self._write(lambda db: _queries.begin(db, intent, owner, now), while_waiting)

    async def commit(self, tx: int) -> None:
        """Mark `tx` committed with every mutation applied; durable when it returns.

        Raises TransactionStateError if `tx` is not pending; JournalError.
        """
        now = _queries.now()
        await self._write(lambda db: _queries.commit(db, tx, now))

    def commit_nowait(self, tx: int) -> None:
        """Queue marking `tx` committed; returns at once, durable with a later group.

        For callers whose durable intent is already the commit point. Raises
        JournalError(closed).
        """
        now = _queries.now()
        writer = self._writer_nowait()
        # Until the mark is committed, this journal's reads show `tx` as committed.
        self._committing.add(tx)
        request = Request(
            lambda db: _queries.commit(db, tx, now),
            wait=False,
            after=lambda: self._committing.discard(tx),
        )
        writer.submit(request)

    def _as_seen(self, records: list[TxRecord], committing: set[int]) -> list[TxRecord]:
        """Records with the commit marks this journal has queued applied to them."""
        return [
            msgspec.structs.replace(r, state="committed")
            if r.state == "pending" and r.id in committing
            else r
            for r in records
        ]

    async def mark_applied(self, tx: int, ordinal: int) -> None:
        """Queue setting one mutation's applied flag; returns once queued, not durable."""
        self._write_nowait(lambda db: _queries.mark_applied(db, tx, ordinal))

    async def rollback(
        self, tx: int, *, outcome: str, cause: str | None, applied: list[int]
    ) -> None:
        """Mark `tx` rolled back with its outcome and cause; durable when it returns.

        `applied` lists the ordinals whose changes are still in effect (could not be
        restored). Raises TransactionStateError if `tx` is not pending; JournalError.
        """
        now, still = _queries.now(), list(applied)
        await self._write(
            lambda db: _queries.rollback(
                db, tx, outcome=outcome, cause=cause, applied=still, now=now
            )
        )

    async def checkpoint(self, up_to: int) -> None:
        """Mark this owner's committed transactions with id <= `up_to` checkpointed."""
        owner = self.owner
        await self._write(lambda db: _queries.checkpoint(db, owner, up_to))

    async def claim_unfinished(self) -> list[Unfinished]:
        """Claim the unfinished transactions of dead owners, ordered by id.

        Pending ones come back as roll_back, committed and not checkpointed ones as
        roll_forward. A transaction whose owner is alive is never returned; two
        journals never claim the same one. Raises JournalError.
        """
        owner, folder = self.owner, self._owners
        return await self._write(lambda db: _queries.claim_unfinished(db, owner, folder))

    async def finish_recovery(
        self,
        tx: int,
        *,
        state: str,
        outcome: str,
        cause: str | None,
        applied: list[int] | None = None,
    ) -> None:
        """Record how a claimed transaction was recovered (also sets checkpointed).

        Raises TransactionStateError if `tx` is not claimed by this journal or is
        already finished; JournalError.
        """
        owner, now = self.owner, _queries.now()
        still = None if applied is None else list(applied)
        await self._write(
            lambda db: _queries.finish_recovery(
                db, tx, owner, state=state, outcome=outcome, cause=cause, applied=still, now=now
            )
        )

    # -- reading -------------------------------------------------------------------

    async def transaction(self, tx: int) -> TxRecord | None:
        """Return transaction `tx`, or None."""
        committing = set(self._committing)
        found = await self._read(lambda db: _queries.load_transactions(db, [tx]))
        return self._as_seen(found, committing)[0] if found else None

    async def history(
        self,
        *,
        path: str | None = None,
        tx: int | None = None,
        session: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
    ) -> list[TxRecord]:
        """Return transactions matching every filter given, newest first.

        `path` matches a mutation's path or destination; `since` and `until` bound
        `created_at` (seconds since the epoch, `since` included, `until` not).
        """
        committing = set(self._committing)
        window = _queries.Window(since=since, until=until)
        found = await self._read(
            lambda db: _queries.history(
                db, path=path, tx=tx, session=session, window=window, limit=limit
            )
        )
        return self._as_seen(found, committing)

    async def undone_by(self, txs: Iterable[int]) -> dict[int, int]:
        """Return {tx: the undo that reverted it} for each of `txs` an in-effect undo reverted."""
        wanted = list(dict.fromkeys(txs))
        return await self._read(lambda db: _queries.undone_by(db, wanted))

    async def last_change(self, path: str) -> tuple[TxRecord, MutationRecord] | None:
        """Return the newest committed (or rolled-forward) mutation of `path`."""
        committing = frozenset(self._committing)
        found = await self._read(lambda db: _queries.last_change(db, path, committing))
        if found is None:
            return None
        record, mutation = found
        return self._as_seen([record], set(committing))[0], mutation

    async def blob(self, hash: str) -> bytes | None:
        """Return the bytes stored under `hash`, or None."""
        found = await self.blobs([hash])
        return found.get(hash)

    async def blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """Return the stored bytes of every hash in `hashes` that is stored."""
        wanted = list(dict.fromkeys(hashes))

        def load(db: Database) -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for digest, data in db.execute(
                    f"SELECT hash, data FROM blobs WHERE hash IN ({marks})", chunk
                ).fetchall():
                    found[str(digest)] = bytes(data)
            return found

        return await self._read(load)

    async def budget_used(self, session: str) -> int:
        """Return the budget `session` has used (0 for an unknown session)."""

        def load(db: Database) -> int:
            row = db.execute("SELECT budget_used FROM sessions WHERE id = ?", (session,)).fetchone()
            return 0 if row is None else int(row[0])

        return await self._read(load, snapshot=False)

    async def statistics(self) -> JournalStatistics:
        """Return this instance's counters (group sizes, commits, failures)."""
        return self.statistics_nowait()

    def statistics_nowait(self) -> JournalStatistics:
        """Return this instance's counters without awaiting."""
        w = self._writer
        if w is None:
            return JournalStatistics(
                durability=self.durability,
                group_commit=False,
                records=0,
                commits=0,
                groups=0,
                largest_group=0,
                failed_requests=0,
                failed_commits=0,
                queued=0,
                reads=self._reads,
            )
        return JournalStatistics(
            durability=self.durability,
            group_commit=w.group_commit,
            records=w.records,
            commits=w.commits,
            groups=w.groups,
            largest_group=w.largest_group,
            failed_requests=w.failed_requests,
            failed_commits=w.failed_commits,
            queued=w.queue.qsize(),
            reads=self._reads,
        )

    # -- maintenance -----------------------------------------------------------------

    async def gc(
        self,
        *,
        keep_days: float | None = None,
        keep_last: int | None = None,
        only: Iterable[int] | None = None,
    ) -> GcReport:
        """Drop finished transactions outside the keep policy and unreferenced blobs.

        A transaction is kept if it is among the `keep_last` newest or younger than
        `keep_days`; with both None nothing is dropped. Pending and not-checkpointed
        transactions (and their blobs) are always kept, and so is the newest
        transaction, so ids are never reused. With `only` (the ids a preview by
        `gc_candidates` showed), no other transaction is dropped. Raises JournalError.
        """
        now = _queries.now()
        allowed = None if only is None else list(only)
        return await self._write(lambda db: _maintenance.gc(db, keep_days, keep_last, now, allowed))

    async def gc_candidates(
        self, *, keep_days: float | None = None, keep_last: int | None = None
    ) -> list[TxRecord]:
        """Return the transactions `gc` with the same policy would drop now, oldest first."""
        now = _queries.now()

        def load(db: Database) -> list[TxRecord]:
            ids = _maintenance.gc_candidates(db, keep_days, keep_last, now)
            return _queries.load_transactions(db, ids)

        return await self._read(load)

    async def verify(self, *, full: bool = False) -> IntegrityReport:
        """Check SQLite's integrity (quick_check, or integrity_check if `full`) and every blob."""
        return await self._read(lambda db: _maintenance.verify(db, full))

    # -- issue-tool writes -----------------------------------------------------------

    async def record_issue_write(
        self, *, key: str, provider: str, repo: str, kind: str, payload: str, marker: str
    ) -> int:
        """Record an issue write before sending it; durable, state "pending"; returns its id."""
        fields = {
            "key": key,
            "provider": provider,
            "repo": repo,
            "kind": kind,
            "payload": payload,
            "marker": marker,
        }
        now = _queries.now()
        return await self._write(lambda db: _queries.record_issue_write(db, fields, now))

    async def finish_issue_write(self, id: int, *, state: str, result: str | None) -> None:
        """Record an issue write's outcome ("done" or "unknown"); durable."""
        now = _queries.now()
        await self._write(lambda db: _queries.finish_issue_write(db, id, state, result, now))

    async def issue_writes(
        self, *, state: str | None = None, key: str | None = None
    ) -> list[IssueWrite]:
        """Return recorded issue writes, oldest first, filtered by state and key."""
        return await self._read(lambda db: _queries.issue_writes(db, state, key))


class _Opener:
    """What `Journal.open` returns: awaitable, and an async context manager."""

    def __init__(self, factory: Callable[[], Awaitable[Journal]]) -> None:
        self._factory = factory
        self._journal: Journal | None = None

    def __await__(self) -> Generator[Any, None, Journal]:
        return self._factory().__await__()

    async def __aenter__(self) -> Journal:
        self._journal = await self._factory()
        return self._journal

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._journal is not None:
            await self._journal.aclose()


async def _open(
    path: Path, durability: Durability, create: bool, group_commit: bool, busy_timeout: float
) -> Journal:
    """Open the journal file in a worker thread and start its writer."""
    if durability not in ("full", "normal"):
        raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
    path = path.absolute()
    parts = await anyio.to_thread.run_sync(_open_sync, path, durability, create, busy_timeout)
    writer_db, reader_db, lock = parts
    writer = Writer(writer_db, str(path), group_commit=group_commit)
    writer.start()
    return Journal(path, durability, writer, reader_db, lock)


async def _open_readonly(path: Path, durability: Durability, busy_timeout: float) -> Journal:
    """Open an existing journal for reading only: no writer thread, no owner lock."""
    if durability not in ("full", "normal"):
        raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
    path = path.absolute()
    reader_db = await anyio.to_thread.run_sync(_open_readonly_sync, path, busy_timeout)
    return Journal(path, durability, None, reader_db, None)


def _open_readonly_sync(path: Path, busy_timeout: float) -> Database:
    """Blocking part of a read-only open: the file must exist and be a current journal."""
    label = str(path)
    with contextlib.ExitStack() as undo, map_errors(label):
        if not path.exists():
            raise make_error("missing", label, "the file does not exist")
        if not path.is_file():
            raise make_error("corrupt", label, "the path is not a regular file")
        reader_db = _schema.connect_readonly(path, busy_timeout=busy_timeout)
        undo.callback(reader_db.conn.close)
        _schema.check_readable(reader_db, label)
        undo.pop_all()
        return reader_db
    raise AssertionError("unreachable")  # pragma: no cover


def _open_sync(
    path: Path, durability: Durability, create: bool, busy_timeout: float
) -> tuple[Database, Database, OwnerLock]:
    """Blocking part of open: file checks, migrations, owner lock, connections."""
    label = str(path)
    with contextlib.ExitStack() as undo, map_errors(label):
        if not path.exists():
            if not create:
                raise make_error("missing", label, "the file does not exist")
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.is_file():
            raise make_error("corrupt", label, "the path is not a regular file")
        writer_db = _schema.connect(path, busy_timeout=busy_timeout, durability=durability)
        undo.callback(writer_db.conn.close)
        _schema.prepare(writer_db, label)
        reader_db = _schema.connect(path, busy_timeout=busy_timeout, durability=durability)
        undo.callback(reader_db.conn.close)
        lock = OwnerLock(owners_dir(path))
        undo.pop_all()
        return writer_db, reader_db, lock
    raise AssertionError("unreachable")  # pragma: no cover
