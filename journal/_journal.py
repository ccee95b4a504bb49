"""The `Journal`: the async face of the writer thread and the read connection."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import msgspec
from sqlite_utils import Database

from . import (
    _audit,
    _blobstore,
    _chain,
    _codec,
    _maintenance,
    _owners,
    _places,
    _queries,
    _schema,
    _verified,
    _walspace,
)
from ._audit import AuditRecord
from ._errors import JournalError, TransactionStateError, make_error, map_errors
from ._marker import mark_path, read_mark, write_mark
from ._owners import OwnerLock, owners_dir
from ._records import (
    CheckpointRecord,
    Durability,
    GcReport,
    IntegrityReport,
    IssueWrite,
    JournalLoss,
    JournalStatistics,
    MutationRecord,
    PathSeen,
    Relocation,
    SessionRecord,
    TxIntent,
    TxRecord,
    Unfinished,
    VerifiedPoint,
)
from ._writer import Request, Writer

__all__ = ["Journal", "recorded_roots"]

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT = 5.0
# Commit marks noted beyond this many are written without waiting for a checkpoint.
_MARKS_MAX = 4096
# A begin takes the noted marks along once the oldest is this old (seconds): a
# stream of lone edits then writes them a few to an UPDATE, not one an edit (the
# engine's flusher writes what no begin took within a few milliseconds).
_MARKS_RIDE_AGE = 0.002
# Above this many blob bytes, preparing an intent (hashing its blobs for the check,
# cutting its big images into chunks) leaves the event loop's thread.
_INLINE_MAX = 256 * 1024


class Journal:
    """One open journal file: a writer thread (group commit) and a read connection.

    Open with ``j = await Journal.open(path)`` or ``async with Journal.open(path) as j``.
    Opened with ``readonly=True`` it has no writer and no owner lock: reads only.
    """

    path: Path
    owner: str
    durability: Durability
    #: Set when opened with accept_loss over a journal that lost transactions.
    loss: JournalLoss | None = None
    #: Set when the journal is opened from another place than the one it recorded last.
    relocation: Relocation | None = None

    def __init__(
        self,
        path: Path,
        durability: Durability,
        writer: Writer | None,
        reader: Database,
        lock: OwnerLock | None,
        bound: _places.Bound,
    ) -> None:
        self.path = path
        self._places = _places.Places(bound.places, bound.first)
        self.relocation = bound.relocation
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
        # The read connection's cache of the blob store's tail (used under that limiter).
        self._reader_tail = _blobstore.Tail()
        self._reads = 0
        self._closed = False
        # Commit marks not written yet ({tx: when}): commit_nowait only notes them,
        # the next checkpoint writes them (committed and checkpointed) in one statement.
        self._committing: dict[int, float] = {}
        self._marks_queued = False

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
        datasync: Callable[[int], None] = os.fdatasync,
        accept_loss: bool = False,
        roots: Sequence[str] = (),
    ) -> _Opener:
        """Open (or create) the journal at `path`; await it or use it as ``async with``.

        `readonly` opens an existing journal for reading only (inspection): nothing is
        created, migrated or locked, and every write raises JournalError(io, EROFS).
        Raises JournalError: missing (create=False or readonly, and no file), corrupt
        (not a journal, malformed), newer_schema, locked (busy past `busy_timeout`
        seconds), io (OS or disk errors, with errno name), lost (the journal holds
        fewer transactions than its mark outside its folder says it had: deleted,
        truncated, or its WAL lost; `accept_loss` opens it anyway, lowers the mark
        and sets `loss`; a read-only open always refuses). `datasync` flushes the
        WAL at each group commit (the caller may wrap it to observe or test its
        flushes).

        `roots` (resolved absolute folders) are the workspace's: a path inside one is
        stored relative to it, so the journal keeps its history and undo when the
        workspace moves (`_places`). A writable open records the roots it is given
        for the first time and where the journal is; `relocation` says when it was
        opened from another place than the one it recorded last.
        """
        given = [os.fspath(root) for root in roots]
        if readonly:
            return _Opener(lambda: _open_readonly(Path(path), durability, busy_timeout, given))
        return _Opener(
            lambda: _open(
                Path(path),
                durability,
                create,
                group_commit,
                busy_timeout,
                datasync,
                accept_loss,
                given,
            )
        )

    async def aclose(self) -> None:
        """Finish queued writes, stop the writer, close connections, release the owner lock.

        Shielded from cancellation; idempotent.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._writer is not None:
                await self._flush_marks(self._writer)
                self._writer.stop()
                await anyio.to_thread.run_sync(self._writer.join)
            async with self._read_limiter:
                self._reader.conn.close()
            if self._lock is not None:
                self._lock.release()

    async def __aenter__(self) -> Journal:
        return self

    async def __aexit__(self, *exc: object) -> None:
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

    async def _write(self, fn: Callable[[Database], T]) -> T:
        """Queue `fn` for the writer and wait for its group to commit.

        If the caller is cancelled the request still runs; only the waiting stops.
        """
        result: T = await self._wait(self._writer_nowait(), Request(fn, wait=True))
        return result

    async def _wait(self, writer: Writer, request: Request) -> Any:
        """Queue `request`, wait for its group to commit, return its result or raise."""
        writer.submit([request])
        await request.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def _write_nowait(self, fn: Callable[[Database], object]) -> None:
        """Queue `fn` without waiting; a failure is only counted in statistics()."""
        self._writer_nowait().submit([Request(fn, wait=False)])

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
        self,
        intent: TxIntent,
        *,
        meanwhile: Callable[[], object] | None = None,
        trusted: bool = False,
        then: Callable[[int], None] | None = None,
        here: bool = False,
    ) -> int:
        """Record `intent` (mutations, blobs, budget charge) as a pending transaction:
        `begin_group` for a group of one, raising what it would return for it.

        Raises TransactionStateError if a hash is not a content hash, a blob does
        not hash to its key (unless `trusted`) or a referenced blob is neither
        given nor stored; JournalError (locked, io, closed); what `then` raised.
        """
        [outcome] = await self.begin_group(
            [intent], [then], trusted=trusted, meanwhile=meanwhile, here=here
        )
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def begin_group(
        self,
        intents: Sequence[TxIntent],
        thens: Sequence[Callable[[int], None] | None],
        *,
        trusted: bool = False,
        meanwhile: Callable[[], object] | None = None,
        here: bool = False,
    ) -> list[int | BaseException]:
        """Record `intents` as pending transactions, in one commit and one fsync.

        Durable (per durability) when it returns. Returns, in order, each intent's
        transaction id, or the exception that refused it (TransactionStateError:
        a hash that is not a content hash, a blob that does not hash to its key
        unless `trusted`, a referenced blob neither given nor stored; JournalError:
        locked, io), or what its `then` raised.

        Every statement runs on the writer thread (unless `here`, below).
        `meanwhile`, if given, runs on the caller's thread once the group is
        queued, while it commits and its fsync runs (work that does not depend on
        it); it must not raise, for the intents are recorded whatever it does.
        Each `then` (if not None) runs once with its transaction's id on the
        caller's event loop thread, after the intent is durable and before this
        returns, in the one callback that wakes the group (work that follows the
        commit point, such as applying the files, without a wake-up of its own);
        it runs only if its intent was recorded, for a cancelled caller too.
        `trusted` says the caller made every blob's key by hashing its bytes (as
        the engine does), so they are not hashed again here. If the caller is
        cancelled, the intents are recorded all the same; only the waiting
        stops. Raises JournalError(closed).

        With `here` (the caller's loop has nothing else to run until this
        returns), the group commits on the caller's thread, its fsync included,
        whenever the writer thread is idle (`Writer.run_here`): a lone caller then
        pays no thread wake-up, while a busy writer still takes the group in turn.
        `meanwhile` then runs once the group is durable.
        """
        self._check_open()
        writer = self._writer_nowait()
        now = _queries.now()
        prepare = partial(_prepare_all, intents, self.owner, now, trusted, self._places)
        size = sum(len(b) for intent in intents for b in intent.blobs.values())
        # Hashing and cutting big images leaves the loop's thread.
        made = prepare() if size <= _INLINE_MAX else await anyio.to_thread.run_sync(prepare)
        outcomes: list[int | BaseException] = []
        requests: list[tuple[int, Request]] = []
        for index, (prepared, then) in enumerate(zip(made, thens, strict=True)):
            if isinstance(prepared, TransactionStateError):
                outcomes.append(prepared)
                continue
            outcomes.append(0)  # the id, once the group has committed
            request = Request(partial(_begin_one, prepared), wait=True, intent=prepared)
            request.then = then
            requests.append((index, request))
        if requests:
            submitted = [request for _, request in requests]
            if self._marks_ride(writer, now):
                # The marks noted so far share this commit: no group of their own.
                # (Without group commit every request commits alone: they would not.)
                submitted.append(self._marks_request())
            if not (here and writer.run_here(submitted)):
                writer.submit(submitted)
        if meanwhile is not None:
            meanwhile()
        for index, request in requests:
            await request.wait()
            request.finish()  # a no-op after the wake-up that ran it
            error = request.error or request.then_error
            outcomes[index] = request.result if error is None else error
        return outcomes

    def _marks_ride(self, writer: Writer, now: float) -> bool:
        """Whether a begin takes the marks noted so far into its commit: with group
        commit (else every request commits alone), none queued, and the oldest at
        least `_MARKS_RIDE_AGE` old."""
        committing = self._committing
        if not committing or self._marks_queued or not writer.group_commit:
            return False
        return now - min(committing.values()) >= _MARKS_RIDE_AGE

    async def commit(self, tx: int) -> None:
        """Mark `tx` committed with every mutation applied; durable when it returns.

        Raises TransactionStateError if `tx` is not pending; JournalError.
        """
        now = _queries.now()
        await self._write(lambda db: _queries.commit(db, tx, now))

    def commit_nowait(self, *txs: int) -> None:
        """Note `txs` committed; returns at once, writes nothing now.

        For callers whose durable intent is already the commit point (recovery
        finishes a transaction whose mark was lost). This journal's reads show
        them committed from now on; other processes read them committed once the
        marks are written: by `write_marks_nowait` (the engine calls it a few
        milliseconds after a commit, for all the marks noted meanwhile), by a
        `record_checkpoint`, by the next `checkpoint` covering them (committed
        and checkpointed in one statement), or on `aclose`. Raises
        JournalError(closed).
        """
        self._writer_nowait()
        now = _queries.now()
        for tx in txs:
            self._committing[tx] = now
        if len(self._committing) >= _MARKS_MAX:
            # Nobody writes them (a caller of the journal alone): write them lazily.
            self.write_marks_nowait()

    def write_marks_nowait(self, *, age: float = 0.0) -> None:
        """Write every commit mark noted so far, so other processes read those
        transactions committed; returns once they are written or queued.

        Queued for the writer thread, which writes them in its next group (no
        fsync of their own: the next durable commit's covers them); a queued
        write takes every mark noted by the time it runs, and while one is
        queued no other is. With group commit, the next `begin_group` takes them
        along in its own commit as well once the oldest is `_MARKS_RIDE_AGE`
        old, so under a stream of writes they cost no group of their own and a
        few share one statement. With `age`, nothing is queued unless the
        oldest mark noted is at least `age` seconds old (younger ones are left
        for the next begin). A failure is only counted in statistics(); the
        marks stay noted. Raises JournalError(closed).
        """
        writer = self._writer_nowait()
        committing = self._committing
        if not committing or self._marks_queued:
            return
        if age and _queries.now() - min(committing.values()) < age:
            return
        writer.submit([self._marks_request()])

    def _marks_request(self) -> Request:
        """The writer's request that writes every mark noted when it runs, then
        forgets them; while it is queued no other is (`_marks_queued`)."""
        self._marks_queued = True
        owner = self.owner
        taken: dict[int, float] = {}

        def write(db: Database) -> int:  # runs on the writer thread
            self._marks_queued = False
            taken.update(self._committing)  # a copy of a dict is one step under the GIL
            return _queries.write_marks(db, owner, taken, checkpointed=False)

        request = Request(write, wait=False)

        def written() -> None:  # runs on the writer thread
            if request.error is None:
                self._forget_marks(taken)

        request.after = written
        return request

    def _forget_marks(self, marks: dict[int, float]) -> None:
        """Drop marks that are written now (only those, and only if unchanged).

        It may run on the writer thread: every reader of `_committing` copies it
        first (a copy of a dict is one step under the GIL).
        """
        for tx, when in marks.items():
            if self._committing.get(tx) == when:
                del self._committing[tx]

    async def _flush_marks(self, writer: Writer) -> None:
        """Write every commit mark still only noted (on close); a failure is dropped:
        the durable intents are the commit points."""
        if not self._committing:
            return
        marks, owner = dict(self._committing), self.owner
        request = Request(
            lambda db: _queries.write_marks(db, owner, marks, checkpointed=False), wait=True
        )
        with contextlib.suppress(JournalError):
            await self._wait(writer, request)
            self._forget_marks(marks)

    def _as_seen(self, records: list[TxRecord], committing: dict[int, float]) -> list[TxRecord]:
        """Records with the commit marks this journal has noted applied to them."""
        return [
            _committed(r, committing[r.id]) if r.state == "pending" and r.id in committing else r
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
        """Mark this owner's committed transactions with id <= `up_to` checkpointed.

        Also raises the journal's mark outside its folder to `up_to` (durable here).
        """
        owner = self.owner
        marks = {tx: when for tx, when in dict(self._committing).items() if tx <= up_to}
        await self._write(lambda db: _queries.checkpoint(db, owner, up_to, marks))
        self._forget_marks(marks)
        await anyio.to_thread.run_sync(write_mark, self.path, up_to)

    async def claim_unfinished(self) -> list[Unfinished]:
        """Claim the unfinished transactions of dead owners, ordered by id.

        Pending ones come back as roll_back, committed and not checkpointed ones as
        roll_forward. A transaction whose owner is alive is never returned; two
        journals never claim the same one. Raises JournalError.
        """
        owner, folder, places = self.owner, self._owners, self._places
        return await self._write(lambda db: _queries.claim_unfinished(db, owner, folder, places))

    async def unfinished(self) -> list[int]:
        """Ids of the transactions dead owners left unfinished, without claiming them."""
        owner, folder = self.owner, self._owners
        return await self._read(lambda db: _queries.unfinished_of_dead(db, owner, folder))

    def live_owners(self) -> set[str]:
        """The owners (journal instances, this one included) alive now (blocking, brief)."""
        return _owners.live_owners(self._owners)

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

    def _shown(self, db: Database) -> Callable[[str], str]:
        """A stored path as exports show it: where it is now, absolute (encoded as
        stored when it is not UTF-8)."""
        return lambda stored: _codec.stored_path(_places.loaded_key(stored, self._places, db))

    async def transaction(self, tx: int) -> TxRecord | None:
        """Return transaction `tx`, or None."""
        committing = dict(self._committing)
        found = await self._read(lambda db: _queries.load_transactions(db, [tx], self._places))
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
        before: int | None = None,
        after: int | None = None,
    ) -> list[TxRecord]:
        """Return transactions matching every filter given, newest first.

        `path` matches a mutation's path or destination; `since` and `until` bound
        `created_at` (seconds since the epoch, `since` included, `until` not);
        `before` keeps the ids below it (the next page of a listing), `after` the
        ids above it (what came after a checkpoint's transaction).
        """
        committing = dict(self._committing)
        window = _queries.Window(since=since, until=until)
        found = await self._read(
            lambda db: _queries.history(
                db,
                self._places,
                path=path,
                tx=tx,
                session=session,
                window=window,
                limit=limit,
                before=before,
                after=after,
            )
        )
        return self._as_seen(found, committing)

    async def paths_containing(self, text: str, *, limit: int = 100) -> list[PathSeen]:
        """Return the paths transactions named that contain `text`, newest change first."""
        return await self._read(lambda db: _queries.paths_containing(db, text, limit))

    # -- sessions and checkpoints ------------------------------------------------------

    async def open_session(
        self,
        session: str,
        *,
        client_name: str | None = None,
        client_version: str | None = None,
    ) -> SessionRecord:
        """Record that `session` opened, with its client when given; durable. Returns
        its record (a session opened before keeps its counts). Raises JournalError."""
        now = _queries.now()
        return await self._write(
            lambda db: _queries.open_session(db, session, client_name, client_version, now)
        )

    async def session_record(self, session: str) -> SessionRecord | None:
        """Return the record of `session`, or None if the journal never heard of it."""
        found = await self._read(lambda db: _queries.session_records(db, [session]))
        return found[0] if found else None

    async def sessions(
        self, *, limit: int = 50, started_before: float | None = None
    ) -> list[SessionRecord]:
        """Return recorded sessions, newest first by when they started (of every
        process that used this journal); `started_before` pages on."""
        return await self._read(lambda db: _queries.sessions(db, limit, started_before))

    async def record_checkpoint(self, *, session: str, label: str | None) -> CheckpointRecord:
        """Record a checkpoint of `session` at the newest transaction in effect now
        (this journal's commit marks included); durable. Raises JournalError."""
        now, owner = _queries.now(), self.owner
        marks = dict(self._committing)

        def record(db: Database) -> CheckpointRecord:
            # The transactions it covers read committed in every process from now on.
            _queries.write_marks(db, owner, marks, checkpointed=False)
            return _queries.record_checkpoint(db, session, label, frozenset(marks), now)

        made = await self._write(record)
        self._forget_marks(marks)
        return made

    async def checkpoint_record(self, id: int) -> CheckpointRecord | None:
        """Return checkpoint `id`, or None."""
        return await self._read(lambda db: _queries.checkpoint_record(db, id))

    async def checkpoints(
        self, *, session: str | None = None, limit: int = 50
    ) -> list[CheckpointRecord]:
        """Return checkpoints newest first, of `session` when given."""
        return await self._read(lambda db: _queries.checkpoints(db, session, limit))

    async def undone_by(self, txs: Iterable[int]) -> dict[int, int]:
        """Return {tx: the undo that reverted it} for each of `txs` an in-effect undo reverted."""
        wanted = list(dict.fromkeys(txs))
        committing = frozenset(self._committing)
        return await self._read(lambda db: _queries.undone_by(db, wanted, committing))

    async def last_change(self, path: str) -> tuple[TxRecord, MutationRecord] | None:
        """Return the newest committed (or rolled-forward) mutation of `path`."""
        committing = dict(self._committing)
        places = self._places
        found = await self._read(
            lambda db: _queries.last_change(db, path, places, frozenset(committing))
        )
        if found is None:
            return None
        record, mutation = found
        if record.state == "pending":
            mutation = msgspec.structs.replace(mutation, applied=True)
        return self._as_seen([record], committing)[0], mutation

    async def undos_of(self, tx: int) -> list[int]:
        """Ids of the transactions in effect or pending (commit mark queued included)
        whose `undo_of` is `tx`, oldest first."""
        committing = frozenset(self._committing)
        return await self._read(lambda db: _queries.undos_of(db, tx, committing))

    async def blob(self, hash: str) -> bytes | None:
        """Return the bytes stored under `hash`, or None."""
        found = await self.blobs([hash])
        return found.get(hash)

    async def blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """Return the stored bytes of every hash in `hashes` that is stored."""
        wanted = [key for key in map(_blob_key, dict.fromkeys(hashes)) if key is not None]

        def load(db: Database) -> dict[str, bytes]:
            tail = self._reader_tail
            tail.sync(db)
            found = _blobstore.load(db, wanted, tail)
            return {_codec.hash_text(key) or "": data for key, data in found.items()}

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
                durability=self.durability, group_commit=False, reads=self._reads
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
        `gc_candidates` showed), no other transaction is dropped. What it drops
        goes back to the file system (`bytes_returned`). Raises JournalError.
        """
        now = _queries.now()
        allowed = None if only is None else list(only)
        before = _maintenance.size_on_disk(self.path)
        report = await self._write(
            lambda db: _maintenance.gc(db, keep_days, keep_last, now, allowed)
        )
        if not (report.transactions_dropped or report.blobs_dropped):
            return report
        await self._give_back(self._writer_nowait())
        returned = max(0, before - _maintenance.size_on_disk(self.path))
        return msgspec.structs.replace(report, bytes_returned=returned)

    async def _give_back(self, writer: Writer) -> None:
        """Return the pages gc freed to the file system (`_maintenance.give_back`),
        on the writer's connection while no group runs."""

        def run() -> None:
            with writer.lock, map_errors(self._label):
                _maintenance.give_back(writer.db)

        await anyio.to_thread.run_sync(run)

    async def gc_candidates(
        self, *, keep_days: float | None = None, keep_last: int | None = None
    ) -> list[TxRecord]:
        """Return the transactions `gc` with the same policy would drop now, oldest first."""
        now = _queries.now()

        def load(db: Database) -> list[TxRecord]:
            ids = _maintenance.gc_candidates(db, keep_days, keep_last, now)
            return _queries.load_transactions(db, ids, self._places)

        return await self._read(load)

    async def verify(
        self, *, full: bool = False, since: VerifiedPoint | None = None
    ) -> IntegrityReport:
        """Check SQLite's integrity (quick_check, or integrity_check if `full`), every
        blob and the audit chain; with `since`, only what came after that point.

        With `since` (a point an earlier check reached: `verified_point`), it checks
        the links chained since, the blobs their records need, the blobs stored
        since, and that the chain still holds the point's link; SQLite's checks,
        which read the whole file, do not run. The report's `point` is where it
        got to (`save_verified_point` keeps it).
        """
        label, now = str(self.path), _queries.now()
        return await self._read(lambda db: _maintenance.verify(db, full, label, now, since))

    def verified_point(self) -> VerifiedPoint | None:
        """The point the last verify kept (`save_verified_point`), or None (blocking, brief)."""
        return _verified.read_point(self.path)

    def save_verified_point(self, point: VerifiedPoint) -> bool:
        """Keep `point` (outside the journal's folder, beside its mark) for the next
        incremental verify; False when it cannot be written (blocking, brief).

        The journal's files are flushed first: the links the point vouches for
        may be in commits that have not had an fsync of their own (a checkpoint's
        marks), and a power loss must not take back what a kept point names, or
        the next verify would report the chain rewritten.
        """
        for name in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                fd = os.open(name, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return _verified.write_point(point)

    async def audit(
        self,
        *,
        after: int = 0,
        limit: int = 512,
        since: float | None = None,
        until: float | None = None,
    ) -> tuple[list[AuditRecord], int | None]:
        """Return the audit chain's entries after position `after`, in chain order,
        as export records, and the position to page on from (None at the end).

        Up to `limit` entries are read; those made outside [`since`, `until`) (by
        `created_at`) are left out of the page. Transactions not finished yet are
        not in the chain: `audit_unchained` returns them.
        """

        def load(db: Database) -> tuple[list[AuditRecord], int | None]:
            found = list(_chain.entries(db, after, limit))
            clients = _queries.session_clients(
                db,
                list({e.record.session for e in found if isinstance(e.record, _chain.ChainedTx)}),
            )
            window = _queries.Window(since=since, until=until)
            records = [
                r
                for r in (_audit.entry_record(e, clients, self._shown(db)) for e in found)
                if _within(r, window)
            ]
            return records, (found[-1].seq if len(found) == limit else None)

        return await self._read(load)

    async def audit_unchained(
        self, *, since: float | None = None, until: float | None = None
    ) -> list[AuditRecord]:
        """Return the transactions not finished yet (so not in the chain), by id."""

        def load(db: Database) -> list[AuditRecord]:
            ids = _chain.open_ids(db)
            bodies = _chain.tx_bodies(db, ids)
            clients = _queries.session_clients(db, list({b.session for b in bodies.values()}))
            window = _queries.Window(since=since, until=until)
            records = [
                _audit.record_of(
                    bodies[tx],
                    seq=None,
                    link=None,
                    prev=None,
                    client=clients.get(bodies[tx].session, (None, None)),
                    place=self._shown(db),
                )
                for tx in sorted(bodies)
            ]
            return [r for r in records if _within(r, window)]

        return await self._read(load)

    async def records(self, ids: Iterable[int]) -> list[TxRecord]:
        """Return the stored transactions among `ids`, newest first."""
        committing = dict(self._committing)
        wanted = sorted(set(ids), reverse=True)
        found = await self._read(lambda db: _queries.load_transactions(db, wanted, self._places))
        return self._as_seen(found, committing)

    async def unchained(self) -> list[int]:
        """Ids of the transactions not finished yet (pending, or committed and not
        checkpointed): the audit chain links them when they finish."""
        return await self._read(lambda db: _chain.open_ids(db))

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


def _within(record: AuditRecord, window: _queries.Window) -> bool:
    """Whether an export record was made inside `window` (a dropped one: never)."""
    when = record.created_at
    if when is None:
        return not window.bounded
    return (window.since is None or when >= window.since) and (
        window.until is None or when < window.until
    )


def _begin_one(prepared: _queries.Prepared, db: Database) -> int:
    """A begin's own statement: what its group runs for it alone when a request fails."""
    return _queries.begin_many(db, [prepared])[0]


def _prepare_all(
    intents: Sequence[TxIntent], owner: str, now: float, trusted: bool, places: _places.Places
) -> list[_queries.Prepared | TransactionStateError]:
    """Each intent's rows, or why it is refused (its blobs checked unless `trusted`)."""
    made: list[_queries.Prepared | TransactionStateError] = []
    for intent in intents:
        try:
            if not trusted:
                _queries.check_blobs(intent)
            made.append(_queries.prepare(intent, owner, now, places))
        except TransactionStateError as exc:
            made.append(exc)
    return made


def _committed(record: TxRecord, when: float) -> TxRecord:
    """`record` as its noted commit mark will write it."""
    mutations = [msgspec.structs.replace(m, applied=True) for m in record.mutations]
    return msgspec.structs.replace(record, state="committed", finished_at=when, mutations=mutations)


def _blob_key(digest: str) -> bytes | None:
    """The stored key of a hash; None for a string that is no content hash (never stored)."""
    try:
        return _codec.hash_key(digest)
    except ValueError:
        return None


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

    async def __aexit__(self, *exc: object) -> None:
        if self._journal is not None:
            await self._journal.aclose()


async def _open(
    path: Path,
    durability: Durability,
    create: bool,
    group_commit: bool,
    busy_timeout: float,
    datasync: Callable[[int], None],
    accept_loss: bool,
    roots: list[str],
) -> Journal:
    """Open the journal file in a worker thread and start its writer."""
    if durability not in ("full", "normal"):
        raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
    path = path.absolute()
    parts = await anyio.to_thread.run_sync(
        _open_sync, path, durability, create, busy_timeout, accept_loss, roots
    )
    writer_db, reader_db, wal_db, lock, loss, bound = parts
    writer = Writer(
        writer_db, str(path), group_commit=group_commit, datasync=datasync, wal_db=wal_db
    )
    writer.start()
    journal = Journal(path, durability, writer, reader_db, lock, bound)
    journal.loss = loss
    return journal


async def _open_readonly(
    path: Path, durability: Durability, busy_timeout: float, roots: list[str]
) -> Journal:
    """Open an existing journal for reading only: no writer thread, no owner lock."""
    if durability not in ("full", "normal"):
        raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
    path = path.absolute()
    reader_db, bound = await anyio.to_thread.run_sync(
        _open_readonly_sync, path, busy_timeout, roots
    )
    return Journal(path, durability, None, reader_db, None, bound)


def _open_readonly_sync(
    path: Path, busy_timeout: float, roots: list[str]
) -> tuple[Database, _places.Bound]:
    """Blocking part of a read-only open: the file must exist and be a current journal."""
    label = str(path)
    with contextlib.ExitStack() as undo, map_errors(label):
        if not path.exists():
            _refuse_if_lost(path, 0)
            raise make_error("missing", label, "the file does not exist")
        if not path.is_file():
            raise make_error("corrupt", label, "the path is not a regular file")
        reader_db = _schema.connect_readonly(path, busy_timeout=busy_timeout)
        undo.callback(reader_db.conn.close)
        _schema.check_readable(reader_db, label)
        _refuse_if_lost(path, _newest(reader_db))
        bound = _places.bind(reader_db, roots, record=False)
        undo.pop_all()
        return reader_db, bound
    raise AssertionError("unreachable")  # pragma: no cover


def _open_sync(
    path: Path,
    durability: Durability,
    create: bool,
    busy_timeout: float,
    accept_loss: bool,
    roots: list[str],
) -> tuple[Database, Database, Database, OwnerLock, JournalLoss | None, _places.Bound]:
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
        loss = _compare_mark(writer_db, path, accept_loss)
        bound = _bind_roots(writer_db, roots)
        if durability == "full":
            _walspace.reserve(writer_db, f"{path}-wal")
        reader_db = _schema.connect(path, busy_timeout=busy_timeout, durability=durability)
        undo.callback(reader_db.conn.close)
        # The WAL checkpointer's own connection (see _walcheck).
        wal_db = _schema.connect(path, busy_timeout=busy_timeout, durability=durability)
        undo.callback(wal_db.conn.close)
        lock = OwnerLock(owners_dir(path))
        undo.pop_all()
        return writer_db, reader_db, wal_db, lock, loss, bound
    raise AssertionError("unreachable")  # pragma: no cover


def _bind_roots(db: Database, roots: list[str]) -> _places.Bound:
    """Find the roots and the journal's location (`_places.bind`) and record what
    changed, atomically; an open with nothing to record writes nothing."""
    seen = _places.bind(db, roots, record=False)
    if not seen.unrecorded:
        return seen
    db.execute("BEGIN IMMEDIATE")
    try:
        # Again inside the write lock: another process may have recorded meanwhile.
        bound = _places.bind(db, roots, record=True)
        db.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    return msgspec.structs.replace(bound, relocation=seen.relocation)


def recorded_roots(
    path: str | os.PathLike[str], *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> list[str]:
    """Where the roots the journal at `path` recorded are now, oldest first (blocking).

    A recorded root is where its place relative to the journal says, if that folder
    exists, else where it was recorded; one found at neither is left out. A journal
    that recorded no roots yet (one an older version wrote) has none. Raises
    JournalError: missing, corrupt, newer_schema, locked, io.
    """
    file = Path(path).absolute()
    label = str(file)
    with map_errors(label):
        if not file.is_file():
            raise make_error("missing", label, "the file does not exist")
        db = _schema.connect_readonly(file, busy_timeout=busy_timeout)
        try:
            try:
                _schema.check_readable(db, label)
            except JournalError as exc:
                if exc.kind == "old_schema":
                    return []
                raise
            return _places.recorded_roots(db)
        finally:
            db.conn.close()
    raise AssertionError("unreachable")  # pragma: no cover


def _newest(db: Database) -> int:
    row = db.execute("SELECT max(id) FROM transactions").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _refuse_if_lost(path: Path, newest: int) -> JournalLoss | None:
    """Raise JournalError(lost) if the journal's newest transaction is below its mark."""
    mark = read_mark(path)
    if mark is None or mark.last_tx <= newest:
        return None
    loss = JournalLoss(had=mark.last_tx, holds=newest, mark=str(mark_path(path)))
    raise make_error(
        "lost",
        str(path),
        f"it holds transactions up to {newest}, but it had transactions up to"
        f" {mark.last_tx} (recorded in {loss.mark}): the journal file, its WAL or its"
        " folder was deleted, truncated or replaced",
    )


def _compare_mark(db: Database, path: Path, accept_loss: bool) -> JournalLoss | None:
    """Raise JournalError(lost) if the journal holds less than its mark; raise the mark.

    With `accept_loss` the loss is returned instead and the mark lowered to what
    the journal holds.
    """
    newest = _newest(db)
    mark = read_mark(path)
    if mark is None or mark.last_tx <= newest:
        write_mark(path, newest)
        return None
    if not accept_loss:
        _refuse_if_lost(path, newest)
    write_mark(path, newest, lower=True)
    return JournalLoss(had=mark.last_tx, holds=newest, mark=str(mark_path(path)))
