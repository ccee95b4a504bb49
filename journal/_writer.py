"""The writer thread: it owns the write connection and commits requests in groups.

The async side puts `Request`s on a `queue.Queue`. The thread blocks for the first
one, drains every request already queued, runs them all inside one
``BEGIN IMMEDIATE ... COMMIT`` (one SAVEPOINT each, so a failing request fails
alone) and then hands the group to a waker thread, which wakes every waiter of
the group with one `anyio.from_thread.run_sync` call. Concurrent callers
therefore share fsyncs, and the writer never waits for an event loop to run.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from sqlite_utils import Database

from ._errors import JournalError, make_error, map_errors

__all__ = ["Request", "Writer"]

# Bounds one group so a flood of requests cannot delay the first waiter forever.
MAX_GROUP = 1024
# How long a group of only *_nowait requests waits for a request someone awaits.
LAZY_WAIT = 0.003


class Request:
    """One unit of work for the writer, with the slot its result comes back in."""

    __slots__ = ("after", "error", "event", "fn", "result", "token")

    def __init__(
        self,
        fn: Callable[[Database], Any],
        *,
        wait: bool,
        after: Callable[[], None] | None = None,
    ) -> None:
        self.fn = fn
        # Runs in the writer thread once the request's group has committed (or failed).
        self.after = after
        self.result: Any = None
        self.error: BaseException | None = None
        # Waiters get an Event set from the writer thread through their loop's token.
        self.event: anyio.Event | None = anyio.Event() if wait else None
        self.token: anyio.lowlevel.EventLoopToken | None = (
            anyio.lowlevel.current_token() if wait else None
        )


_STOP = object()


class Writer:
    """The thread that owns `db` and executes queued requests in groups."""

    def __init__(self, db: Database, label: str, *, group_commit: bool) -> None:
        self.db = db
        self.label = label
        self.group_commit = group_commit
        # 2 is FULL: every commit fsyncs the WAL (see _execute for the exception).
        self.synchronous_full = int(db.execute("PRAGMA synchronous").fetchone()[0]) == 2
        self.queue: queue.Queue[Request | object] = queue.Queue()
        self.records = 0
        self.commits = 0
        self.groups = 0
        self.largest_group = 0
        self.failed_requests = 0
        self.failed_commits = 0
        # Plain threads: a long-lived `to_thread.run_sync` would need a task that
        # outlives `Journal.open`; waiters are woken through their loop token instead.
        self.thread = threading.Thread(
            target=self._run, name=f"journal-writer {label}", daemon=True
        )
        # from_thread.run_sync blocks until the loop runs the callback (about a
        # millisecond under load); a second thread takes that wait off the writer.
        self.wakeups: queue.Queue[list[Request] | None] = queue.Queue()
        self.waker = threading.Thread(
            target=self._run_waker, name=f"journal-waker {label}", daemon=True
        )

    def start(self) -> None:
        """Start the threads."""
        self.thread.start()
        self.waker.start()

    def join(self) -> None:
        """Wait until both threads have finished (blocking; call after stop())."""
        self.thread.join()
        self.waker.join()

    def submit(self, request: Request) -> None:
        """Queue `request`; never blocks (the queue is unbounded)."""
        self.queue.put(request)

    def stop(self) -> None:
        """Ask the thread to finish what is queued and exit."""
        self.queue.put(_STOP)

    # -- the thread --------------------------------------------------------------

    def _run(self) -> None:
        """Loop: take a group, execute it, wake its waiters; exit after _STOP."""
        stopping = False
        try:
            while not stopping:
                group, stopping = self._take_group()
                if group:
                    self._execute(group)
                    for request in group:
                        if request.after is not None:
                            request.after()
                    self.wakeups.put(group)
        finally:
            self.wakeups.put(None)
            self.db.conn.close()

    def _run_waker(self) -> None:
        """Wake the waiters of each executed group, in order, until the writer ends."""
        while (group := self.wakeups.get()) is not None:
            self._wake(group)

    def _take_group(self) -> tuple[list[Request], bool]:
        """Block for one request, then drain what is already queued."""
        first = self.queue.get()
        if first is _STOP:
            return [], True
        group: list[Request] = [first]  # type: ignore[list-item]
        limit = MAX_GROUP if self.group_commit else 1
        lingered = False
        while len(group) < limit:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                # Nobody waits on a group of only *_nowait requests (commit marks):
                # give a waited request (the next begin) a moment to share its commit.
                if lingered or any(request.event is not None for request in group):
                    break
                lingered = True
                try:
                    item = self.queue.get(timeout=LAZY_WAIT)
                except queue.Empty:
                    break
            if item is _STOP:
                return group, True
            group.append(item)  # type: ignore[arg-type]
        return group, False

    def _execute(self, group: list[Request]) -> None:
        """Run `group` in one SQLite transaction; requests that fail are retried alone."""
        self.groups += 1
        self.largest_group = max(self.largest_group, len(group))
        # Nobody waits on a group of *_nowait requests, so its commit skips the WAL
        # fsync (synchronous NORMAL for this one commit): the next durable commit's
        # fsync covers its frames too, as the WAL is written in order.
        lazy = self.synchronous_full and all(request.event is None for request in group)
        if lazy:
            self.db.conn.execute("PRAGMA synchronous = NORMAL")
        try:
            pending = group
            while pending:
                pending = self._transaction(pending)
        finally:
            if lazy:
                self.db.conn.execute("PRAGMA synchronous = FULL")

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

    def _commit(self, done: list[Request]) -> None:
        """COMMIT the group; if that fails, every request in it fails."""
        try:
            with map_errors(self.label):
                self.db.conn.execute("COMMIT")
        except BaseException as exc:
            self.failed_commits += 1
            if self.db.conn.in_transaction:
                with contextlib.suppress(Exception):
                    self.db.conn.execute("ROLLBACK")
            self._fail_all(done, exc)
            return
        self.commits += 1
        self.records += len(done)

    def _fail_all(self, requests: list[Request], exc: BaseException | None) -> None:
        """Give every request in `requests` the error `exc`."""
        for request in requests:
            request.error = _as_journal_error(exc, self.label)
            request.result = None
            self.failed_requests += 1

    def _wake(self, group: list[Request]) -> None:
        """Set every waiter's event: one call into each event loop for the whole group."""
        by_token: dict[int, tuple[anyio.lowlevel.EventLoopToken, list[anyio.Event]]] = {}
        for request in group:
            if request.event is None or request.token is None:
                continue
            entry = by_token.setdefault(id(request.token.native_token), (request.token, []))
            entry[1].append(request.event)
        for token, events in by_token.values():
            # The loop may be gone (its caller was cancelled and the run ended).
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(_set_all, events, token=token)


def _set_all(events: list[anyio.Event]) -> None:
    """Set every event (runs in the event loop thread)."""
    for event in events:
        event.set()


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
