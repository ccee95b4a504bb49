"""The writer thread: it owns the write connection and commits requests in groups.

The async side puts lists of `Request`s on a `queue.SimpleQueue` (a list is one
item, so the thread never wakes between its requests and splits their group).
The thread blocks for the first one, drains every request already queued, runs them all inside one
``BEGIN IMMEDIATE ... COMMIT`` and wakes every waiter of the group with one
non-blocking call into each waiter's event loop. Concurrent callers therefore
share fsyncs, and the writer never waits for an event loop to run.

Every statement of the journal's writes runs in a group of this class: a
caller queues its request and, while the group commits and its fsync runs, may
do work of its own (`Journal.begin_group`'s `meanwhile`). What the thread drains
in one go is what was queued while it was busy; it never waits to gather more.
A caller with nothing else to do (`run_here`) runs its group the same way on
its own thread while this one is idle, and so pays no thread wake-up.

A begin may carry a `then` (the engine's file step): it runs on the waiter's
loop once the intent is durable, in the same callback that wakes the group, so
a transaction's work after its commit point costs no wake-up of its own.

A group first runs without savepoints (requests almost never fail). If one
fails, the whole transaction is rolled back and the group runs again with one
SAVEPOINT per request, so the failing request fails alone.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, cast

from sqlite_utils import Database

from ._blobstore import Tail
from ._errors import JournalError, make_error, map_errors
from ._loops import Slot, call_soon, new_slot, set_slot, wait_slot
from ._queries import Prepared, begin_many
from ._syncer import Syncer
from ._walcheck import WalCheckpointer

__all__ = ["Request", "Writer"]

# Bounds one group so a flood of requests cannot delay the first waiter forever.
MAX_GROUP = 1024


class Request:
    """One unit of work for the writer, with the slot its result comes back in."""

    __slots__ = (
        "after",
        "durable",
        "error",
        "event",
        "fn",
        "intent",
        "loop",
        "result",
        "then",
        "then_error",
    )

    def __init__(
        self,
        fn: Callable[[Database], Any],
        *,
        wait: bool,
        after: Callable[[], None] | None = None,
        intent: Prepared | None = None,
    ) -> None:
        self.fn = fn
        # Whether its commit must be durable before it counts as done.
        self.durable = wait
        # A begin: the group binds the rows of all its intents at once (`begin_many`).
        self.intent = intent
        # Runs in the writer thread once the request's group has committed (or failed).
        self.after = after
        # Runs once, with the result, on the waiter's loop once the commit is
        # durable, before the waiter is woken (`finish`); never after a failure.
        self.then: Callable[[Any], None] | None = None
        # What `then` raised: the waiter raises it (a wake-up must not).
        self.then_error: BaseException | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        # Waiters get an event, set in their own loop by a callback the writer schedules.
        self.event: Slot | None = None
        self.loop: object = None
        if wait:
            self.event, self.loop = new_slot()

    async def wait(self) -> None:
        """Wait until the writer has set this request's event."""
        if self.event is not None:
            await wait_slot(self.event)

    def finish(self) -> None:
        """Run `then` if it has not run and the request succeeded (the loop's thread).

        What it raises is kept in `then_error` for the waiter to raise: in a
        wake-up it would reach the event loop (and end a trio run).
        """
        then, self.then = self.then, None
        if then is None or self.error is not None:
            return
        try:
            then(self.result)
        except BaseException as exc:
            self.then_error = exc


_STOP = object()
_RESET = object()


class Writer:
    """The thread that owns `db` and executes queued requests in groups."""

    def __init__(
        self,
        db: Database,
        label: str,
        *,
        group_commit: bool,
        datasync: Callable[[int], None],
        wal_db: Database | None = None,
    ) -> None:
        self.db = db
        # WAL checkpoints leave COMMIT: a thread of their own runs them (_walcheck).
        self.walcheck: WalCheckpointer | None = None
        if wal_db is not None:
            db.execute("PRAGMA wal_autocheckpoint = 0")
            self.walcheck = WalCheckpointer(wal_db, label, self._request_reset)
        self._reset_due = False
        self.label = label
        self.group_commit = group_commit
        # 2 is FULL: every commit must be durable before its waiters are woken.
        self.synchronous_full = int(db.execute("PRAGMA synchronous").fetchone()[0]) == 2
        # How long a BEGIN waits for another connection's write lock (ms).
        self._busy_ms = int(db.execute("PRAGMA busy_timeout").fetchone()[0])
        # With group commit the WAL fsync leaves COMMIT for the syncer (see _syncer).
        self.syncer: Syncer[Request] | None = None
        if group_commit and self.synchronous_full:
            db.execute("PRAGMA synchronous = NORMAL")
            self.syncer = Syncer(label + "-wal", label, self._synced, datasync)
        # SimpleQueue: a put and a get are one C call each, no Condition of Python's.
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # What a group took over its limit (a submission is queued whole), and
        # whether the stop request was taken.
        self._left: list[Request] = []
        self._stopping = False
        # What the blob store's tail holds, so a group looks its blobs up without a scan.
        self.tail = Tail()
        # Held while the write connection runs a transaction (a group, or a WAL restart).
        self.lock = threading.Lock()
        self.records = 0
        self.commits = 0
        self.groups = 0
        self.largest_group = 0
        self.failed_requests = 0
        self.failed_commits = 0
        # A plain thread: a long-lived `to_thread.run_sync` would need a task that
        # outlives `Journal.open`; waiters are woken through their loops instead.
        self.thread = threading.Thread(
            target=self._run, name=f"journal-writer {label}", daemon=True
        )

    def start(self) -> None:
        """Start the threads."""
        if self.syncer is not None:
            self.syncer.start()
        if self.walcheck is not None:
            self.walcheck.start()
        self.thread.start()

    def join(self) -> None:
        """Wait until the thread has finished (blocking; call after stop())."""
        self.thread.join()

    def submit(self, requests: list[Request]) -> None:
        """Queue `requests` together; never blocks (the queue is unbounded)."""
        self.queue.put(requests)

    def stop(self) -> None:
        """Ask the thread to finish what is queued and exit."""
        self.queue.put(_STOP)

    def run_here(self, requests: list[Request]) -> bool:
        """Run `requests` as one group on the calling thread, if the writer thread
        is idle, and return True; return False, having done nothing, if it is not.

        The same group as the thread's (`_execute`), then its fsync and its
        wake-up, all here: for a caller with nothing else to do until the group
        is durable, which saves the two thread wake-ups a queued group costs
        (most of a lone edit's CPU on a VM). The caller must be the thread of the
        requests' event loop: their `then`s run and their events are set here.
        With the thread busy, or work queued, the caller submits them instead.
        Blocking.
        """
        if not self.group_commit or self._left or not self.queue.empty():
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if not self._begin_at_once():
                return False
            self._execute(requests, begun=True)
        finally:
            self.lock.release()
        _after(requests)
        syncer = self.syncer
        if syncer is not None and any(r.durable and r.error is None for r in requests):
            broken = syncer.sync_here()
            if broken is not None:
                self._not_durable(requests, broken)
        _finish_all(requests)
        return True

    # -- the thread --------------------------------------------------------------

    def _run(self) -> None:
        """Loop: take a group, execute it, wake its waiters; exit after _STOP."""
        stopping = False
        try:
            while not stopping:
                group, stopping = self._take_group()
                if group:
                    with self.lock:
                        self._execute(group)
                if group:
                    _after(group)
                    self._acknowledge(group)
                if self._reset_due:
                    self._restart_wal()
        finally:
            if self.walcheck is not None:
                self.walcheck.stop()
            if self.syncer is not None:
                self.syncer.stop()
            self.db.conn.close()

    def _begin_at_once(self) -> bool:
        """BEGIN IMMEDIATE without waiting: False, with nothing begun, when another
        connection holds the write lock or the instance is broken.

        The caller's thread must not wait out the busy timeout (another process's
        long transaction would freeze its event loop): the writer thread waits.
        """
        if self.syncer is not None and self.syncer.broken is not None:
            return False  # the thread fails the group, as it fails every one now
        conn = self.db.conn
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:
            return False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        return True

    def _request_reset(self) -> None:
        """The checkpointer's request (its thread): restart the WAL between two groups."""
        self.queue.put(_RESET)

    def _restart_wal(self) -> None:
        """Checkpoint with nothing committing, so the next transaction starts the WAL over.

        Runs after a group's waiters were handed to the syncer, never inside a
        COMMIT. The background checkpoints copied nearly every frame already.
        """
        self._reset_due = False
        with self.lock, contextlib.suppress(Exception):
            self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _acknowledge(self, group: list[Request]) -> None:
        """Wake the group's waiters once its commit is durable."""
        if self.syncer is None or not any(request.durable for request in group):
            _wake(group)
            return
        # Nothing else queued: fsync here rather than pay a hop to the syncer.
        self.syncer.submit(group, inline=self.queue.empty())

    def _synced(self, group: list[Request], error: BaseException | None) -> None:
        """The syncer's report: the WAL fsync covering `group` is done, or failed.

        `group` is every request of the groups one fsync covered: one wake per loop.
        """
        if error is not None:
            self._not_durable(group, error)
        _wake(group)

    def _not_durable(self, requests: list[Request], cause: BaseException) -> None:
        """Fail the durable requests of `requests` that succeeded: their fsync failed."""
        for request in requests:
            if request.durable and request.error is None:
                request.error = _not_durable(cause, self.label)
                request.result = None
                self.failed_requests += 1

    def _take_group(self) -> tuple[list[Request], bool]:
        """Block for one submission, then drain what is already queued.

        A submission's requests stay together; what goes over the group's limit
        is left for the next group. Returns the group and whether to stop.
        """
        group, self._left = self._left, []
        limit = MAX_GROUP if self.group_commit else 1
        while len(group) < limit and not self._stopping:
            if not group:
                item = self.queue.get()
            elif not self.queue.empty():
                item = self.queue.get_nowait()
            else:
                break
            if item is _STOP:
                self._stopping = True
            elif item is _RESET:
                self._reset_due = True
                if not group:
                    return [], False
            else:
                group.extend(cast("list[Request]", item))
        if len(group) > limit:
            group, self._left = group[:limit], group[limit:]
        return group, self._stopping and not self._left

    def _execute(self, group: list[Request], *, begun: bool = False) -> None:
        """Run `group` in one SQLite transaction; requests that fail are retried alone.

        With `begun` (`run_here`), BEGIN IMMEDIATE has run, on an instance that
        was not broken, and the group is not lazy (that needs no group commit).
        """
        self.groups += 1
        self.largest_group = max(self.largest_group, len(group))
        if not begun and self.syncer is not None and self.syncer.broken is not None:
            self._fail_all(group, _not_durable(self.syncer.broken, self.label))
            return
        # Nobody waits on a group of *_nowait requests, so its commit skips the WAL
        # fsync (synchronous NORMAL for this one commit): the next durable commit's
        # fsync covers its frames too, as the WAL is written in order.
        lazy = (
            self.syncer is None
            and self.synchronous_full
            and not any(request.durable for request in group)
        )
        if lazy:
            self.db.conn.execute("PRAGMA synchronous = NORMAL")
        try:
            if not self._transaction_fast(group, begun=begun):
                pending = group
                while pending:
                    pending = self._transaction(pending)
        finally:
            if lazy:
                self.db.conn.execute("PRAGMA synchronous = FULL")

    def _transaction_fast(self, group: list[Request], *, begun: bool = False) -> bool:
        """Run the group in one transaction without savepoints; False if a request failed.

        On False nothing of the group is left (the transaction was rolled back) and
        the caller runs it again with a savepoint per request. With `begun`, the
        caller has run BEGIN IMMEDIATE already.
        """
        conn = self.db.conn
        try:
            if not begun:
                with map_errors(self.label):
                    conn.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._fail_all(group, exc)
            return True
        try:
            begins = [r for r in group if r.intent is not None]
            if begins:
                intents = [r.intent for r in begins if r.intent is not None]
                self.tail.sync(self.db)
                ids = begin_many(self.db, intents, self.tail)
                for request, tx in zip(begins, ids, strict=True):
                    request.result = tx
            for request in group:
                if request.intent is None:
                    request.result = request.fn(self.db)
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
            for request in group:
                request.result = None
            return False
        if self._commit(group):
            self.tail.committed()
        return True

    def _transaction(self, group: list[Request]) -> list[Request]:
        """Run requests in one transaction; return the ones still to run if it broke."""
        try:
            with map_errors(self.label):
                self.db.conn.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._fail_all(group, exc)
            return []
        done: list[Request] = []
        for index, request in enumerate(group):
            if not self._run_one(request):
                if not self.db.conn.in_transaction:
                    # SQLite ended the whole transaction (SQLITE_FULL, I/O error): the
                    # work of `done` is gone too, so they fail with the same cause.
                    self._fail_all(done, request.error)
                    return group[index + 1 :]
                continue
            done.append(request)
        self._commit(done)
        return []

    def _run_one(self, request: Request) -> bool:
        """Run one request inside its own SAVEPOINT; return whether it succeeded."""
        conn = self.db.conn
        try:
            with map_errors(self.label):
                conn.execute("SAVEPOINT request")
                request.result = request.fn(self.db)
                conn.execute("RELEASE request")
            return True
        except BaseException as exc:
            request.error = exc
            self.failed_requests += 1
            if conn.in_transaction:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK TO request")
                    conn.execute("RELEASE request")
            return False

    def _commit(self, done: list[Request]) -> bool:
        """COMMIT the group and return True; if that fails, every request in it fails."""
        try:
            with map_errors(self.label):
                self.db.conn.execute("COMMIT")
        except BaseException as exc:
            self.failed_commits += 1
            if self.db.conn.in_transaction:
                with contextlib.suppress(Exception):
                    self.db.conn.execute("ROLLBACK")
            self._fail_all(done, exc)
            return False
        self.commits += 1
        self.records += len(done)
        if self.walcheck is not None:
            self.walcheck.committed(len(done))
        return True

    def _fail_all(self, requests: list[Request], exc: BaseException | None) -> None:
        """Give every request in `requests` the error `exc`."""
        for request in requests:
            request.error = _as_journal_error(exc, self.label)
            request.result = None
            self.failed_requests += 1


def _after(group: list[Request]) -> None:
    """Run the requests' `after`s, once their group has committed (or failed)."""
    for request in group:
        if request.after is not None:
            request.after()


def _wake(group: list[Request]) -> None:
    """Set every waiter's event: one non-blocking call into each event loop.

    The writer never waits for a loop to run the callback. A loop that is gone
    (its run ended after its caller was cancelled) is skipped.
    """
    by_loop: dict[int, tuple[object, list[Request]]] = {}
    for request in group:
        if request.event is not None:
            by_loop.setdefault(id(request.loop), (request.loop, []))[1].append(request)
    for loop, requests in by_loop.values():
        with contextlib.suppress(Exception):
            call_soon(loop, _finish_all, requests)


def _finish_all(requests: list[Request]) -> None:
    """Run the requests' `then`s, then set their events (the event loop's thread):
    every `then` of a group runs before any of its waiters resumes."""
    for request in requests:
        request.finish()
    for request in requests:
        if request.event is not None:
            set_slot(request.event)


def _not_durable(cause: BaseException, label: str) -> JournalError:
    """The error of a request whose commit a failed WAL fsync left not durable."""
    error = make_error(
        "io",
        label,
        "an fsync of its WAL failed, so what reached the disk is unknown;"
        " this instance refuses further writes",
        errno_name=cause.errno_name if isinstance(cause, JournalError) else None,
    )
    error.__cause__ = cause
    return error


def _as_journal_error(exc: BaseException | None, label: str) -> BaseException:
    """Return `exc` if it is a JournalError, else a JournalError that carries it."""
    # A fresh instance per request: one exception object must not be raised in
    # several tasks at once (their tracebacks would mix).
    if isinstance(exc, JournalError):
        fresh = JournalError(exc.kind, exc.path, exc.message, errno_name=exc.errno_name)
    else:
        fresh = make_error("io", label, f"the group's transaction failed: {exc!r}")
    fresh.__cause__ = exc
    return fresh
