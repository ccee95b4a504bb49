"""search_files: names by glob and contents by pattern, over the sandboxed walk.

Blocking; the handler runs a search in one worker thread. Files are opened
through the sandboxed walk (`Walk.open`): each relative to its folder's no-link
descriptor and checked as every load is (hard links, the journal; secret
content on the bytes), so what a search shows is what read_file would return,
without resolving each file's whole path again.

Content is matched by RE2, in time linear in the text whatever the pattern, and
within one line (as grep matches): a match never spans a line break, and each
matching line is a hit once. Opened files go in batches (`searchworker`) to a
worker process lent by the engine (`searchers`), which reads and matches them
on another core while this thread walks on; a batch the worker cannot take at
once, or any when there is no worker, is searched here. Hits are put back in
walk order, so a search gives the same result however its batches were shared.
A cancelled call stops between two files; a worker left with work is stopped.
"""

from __future__ import annotations

import os
import pickle
import re
import resource
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import ExitStack, closing
from typing import Any

import msgspec
import re2

from .cancel import raise_if_cancelled
from .errors import Code, LedgerError, not_a_folder
from .fileops import TooLarge
from .globs import linear_options
from .oserrors import out_of_descriptors
from .paths import Resolved, Workspace
from .progress import EVERY
from .requests import SearchFiles
from .results import SearchMatch, SearchResult
from .searchers import SearchWorkers, Worker, WorkerGone
from .searchworker import Hit, Job, search_batch
from .walk import Walk, WalkEntry, globs

__all__ = ["compile_pattern", "search_files"]


def _batch_files() -> int:
    """Files in a batch: 32, or fewer under a low limit of open descriptors
    (macOS starts processes at 256): up to QUEUED + IN_FLIGHT + 1 batches are
    open at once, and a thirty-second of the limit each leaves the rest to the
    server."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 32 if soft == resource.RLIM_INFINITY else max(1, min(32, soft // 32))


#: A batch closes at this many files or bytes, whichever comes first: small
#: enough to share a search between the two sides, large enough that handing it
#: over costs little beside reading it.
BATCH_FILES = _batch_files()
BATCH_BYTES = 4 << 20

#: Batches a worker holds at once.
IN_FLIGHT = 4

#: Batches opened and waiting for the worker while this thread walks on; past
#: that, this thread searches the oldest itself. When the walk ends, both sides
#: take what waits (the worker from the front, this thread from the back).
QUEUED = 4

#: Seconds between two looks for a cancellation while waiting for a worker.
WAIT = 0.05

#: The glob that matches every file.
EVERY_NAME = "*"

#: A compiled RE2 pattern (google-re2 has no type information).
Pattern = Any


def compile_pattern(content: str, *, regex: bool, case_sensitive: bool) -> Pattern:
    """The pattern for a content search, matched within one line.

    Raises VALIDATION naming `content` for a line break in it, a bad regular
    expression, or one that needs backtracking (backreferences, lookaround).

    >>> compile_pattern("a.b", regex=False, case_sensitive=True).search(b"xa.b").span()
    (1, 4)
    """
    if "\n" in content:
        raise _bad_content(
            "content matches within one line; it cannot hold a line break.", "line_break"
        )
    options = linear_options(case_sensitive=case_sensitive, never_nl=True)
    options.literal = not regex
    source = f"(?m){content}" if regex else content
    try:
        return re2.compile(source.encode("utf-8", "surrogatepass"), options)
    except re2.error as exc:
        raise _bad_content(*_why_refused(content, str(exc))) from exc


def _why_refused(content: str, reason: str) -> tuple[str, str]:
    """The message and reason for a regex RE2 refused: invalid anywhere, or valid
    only for a backtracking engine."""
    try:
        re.compile(content)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"content is not a valid regular expression: {exc}.", str(exc)
    return (
        "content uses a feature that needs backtracking (a backreference, lookahead or "
        f"lookbehind, or a pattern too large), which search_files does not run: {reason}. "
        "Search with a pattern without it.",
        f"unsupported: {reason}",
    )


def _bad_content(message: str, reason: str) -> LedgerError:
    return LedgerError(Code.VALIDATION, message, details={"field": "content", "reason": reason})


def search_files(
    workspace: Workspace,
    folder: Resolved,
    request: SearchFiles,
    max_size: int,
    progress: Callable[[int], None] | None = None,
    workers: SearchWorkers | None = None,
) -> SearchResult:
    """Files under `folder` whose path matches `request.pattern` and, when
    `request.content` is given, the lines that match it, up to `max_results`;
    contents are shared with a worker of `workers` when one is free.

    Raises VALIDATION for a file given as the folder or a content pattern
    `compile_pattern` refuses.
    """
    if not folder.is_dir:
        raise not_a_folder(folder.path)
    # "*" (the default) matches every name: no glob to run on each file.
    names = None if request.pattern == EVERY_NAME else globs([request.pattern])
    pattern = (
        None
        if request.content is None
        else compile_pattern(
            request.content, regex=request.regex, case_sensitive=request.case_sensitive
        )
    )
    # A content search learns each size where it opens the file.
    walk = Walk(
        workspace,
        folder,
        gitignore=request.respect_gitignore,
        exclude=request.exclude,
        sizes=request.content is None,
    )
    entries = walk.entries()
    files = (
        entry
        for entry in entries
        if not entry.is_dir and (names is None or names.match_file(entry.relative))
    )
    with closing(entries):
        if pattern is None:
            return _named(folder, files, request.max_results)
        with ExitStack() as stack:
            worker = workers.take() if workers is not None else None
            search = _Contents(walk, pattern, request, max_size, worker)
            if worker is not None:
                assert workers is not None
                stack.callback(lambda: workers.give_back(worker, reusable=search.reusable))
            stack.callback(search.close)
            for entry in files:
                if search.add(entry) and search.enough():
                    break
                if progress is not None and search.searched % EVERY == 0:
                    progress(search.searched)
            search.finish()
            return search.result(folder)


def _named(folder: Resolved, files: Iterable[WalkEntry], max_results: int) -> SearchResult:
    """The result of a search by name alone: the first `max_results` files."""
    found: list[str] = []
    truncated = False
    for entry in files:
        if len(found) == max_results:
            truncated = True
            break
        found.append(entry.path)
    return SearchResult(path=folder.path, files=found, matches=None, truncated=truncated)


class _Batch(msgspec.Struct, kw_only=True):
    """Files opened for searching, in walk order, and their hits once searched."""

    number: int
    entries: list[WalkEntry] = msgspec.field(default_factory=list)
    fds: list[int] = msgspec.field(default_factory=list)
    #: Each file's size when it was opened.
    sizes: list[int] = msgspec.field(default_factory=list)
    #: Each file's count among the files searched (what `files_searched` says
    #: when the search stops at it).
    ordinals: list[int] = msgspec.field(default_factory=list)
    hits: list[Hit] | None = None


class _Contents:
    """One content search: its files in batches, each searched here or by the worker."""

    def __init__(
        self,
        walk: Walk,
        pattern: Pattern,
        request: SearchFiles,
        max_size: int,
        worker: Worker | None,
    ) -> None:
        self.walk = walk
        self.pattern = pattern
        self.context = request.context
        self.max_results = request.max_results
        self.max_size = max_size
        self.allow_secrets = walk.workspace.allow_secrets
        self.worker = worker
        #: Files that matched the name pattern (those not opened included).
        self.searched = 0
        self._batches: list[_Batch] = []
        self._open: _Batch | None = None
        self._open_bytes = 0
        self._in_flight: dict[int, _Batch] = {}
        self._queued: deque[_Batch] = deque()
        self._pickled = pickle.dumps(pattern) if worker is not None else b""
        # The batches searched from the first on, and their hits: what a batch
        # handed out now need not find again.
        self._done_to = 0
        self._hits_before = 0

    @property
    def reusable(self) -> bool:
        """Whether the worker may serve another search: alive, with nothing in flight."""
        return self.worker is not None and not self._in_flight

    def add(self, entry: WalkEntry) -> bool:
        """Count `entry`, open it as the sandbox lets it be read, and batch it:
        whether that closed a batch (and so perhaps finished searching one)."""
        self.searched += 1
        try:
            fd, size = self.walk.open(entry, self.max_size)
        except OSError as exc:
            if out_of_descriptors(exc):
                raise
            return False  # gone, or replaced by a link or a special file since listed
        except (LedgerError, TooLarge):
            return False  # refused, or too large
        batch = self._open
        if batch is None:
            batch = self._open = _Batch(number=len(self._batches))
            self._batches.append(batch)
            self._open_bytes = 0
        batch.entries.append(entry)
        batch.fds.append(fd)
        batch.sizes.append(size)
        batch.ordinals.append(self.searched)
        self._open_bytes += size
        if len(batch.fds) < BATCH_FILES and self._open_bytes < BATCH_BYTES:
            return False
        self._open = None
        self._queue(batch)
        return True

    def enough(self) -> bool:
        """Whether the batches searched from the first on hold more than
        `max_results` hits: a later file cannot be among those shown."""
        batches = self._batches
        while self._done_to < len(batches) and batches[self._done_to].hits is not None:
            self._hits_before += len(batches[self._done_to].hits or ())
            self._done_to += 1
        return self._hits_before > self.max_results

    def finish(self) -> None:
        """Search what waits, here and in the worker, and wait for the worker."""
        batch, self._open = self._open, None
        if batch is not None:
            self._queued.append(batch)
        while self._queued and not self.enough():
            raise_if_cancelled()
            self._hand_to_worker()
            if self._queued:
                self._search_here(self._queued.pop())
        while self._in_flight:
            raise_if_cancelled()
            self._collect(WAIT)

    def result(self, folder: Resolved) -> SearchResult:
        """The hits in walk order, the first `max_results` of them."""
        files: list[str] = []
        matches: list[SearchMatch] = []
        for batch in self._batches:
            for hit in batch.hits or ():
                if len(matches) == self.max_results:
                    return self._result(folder, files, matches, batch.ordinals[hit.file])
                path = batch.entries[hit.file].path
                if not files or files[-1] != path:
                    files.append(path)
                matches.append(
                    SearchMatch(
                        path=path, line=hit.line, text=hit.text, before=hit.before, after=hit.after
                    )
                )
        return self._result(folder, files, matches, None)

    def _result(
        self, folder: Resolved, files: list[str], matches: list[SearchMatch], stopped_at: int | None
    ) -> SearchResult:
        return SearchResult(
            path=folder.path,
            files=files,
            matches=matches,
            truncated=stopped_at is not None,
            files_searched=self.searched if stopped_at is None else stopped_at,
        )

    def close(self) -> None:
        """Close every descriptor still open (a search stopped early or failed)."""
        for batch in self._batches:
            self._close(batch)

    def _queue(self, batch: _Batch) -> None:
        """Queue a full batch for the worker; search the oldest here past QUEUED
        (or at once with no worker)."""
        self._queued.append(batch)
        self._hand_to_worker()
        limit = QUEUED if self.worker is not None else 0
        while len(self._queued) > limit:
            self._search_here(self._queued.popleft())

    def _hand_to_worker(self) -> None:
        """Give the worker the oldest batches waiting, as many as it has room for."""
        if self.worker is None:
            return
        self._collect(0)
        while self._queued and self.worker is not None and self.worker.ready:
            if len(self._in_flight) == IN_FLIGHT:
                return
            batch = self._queued.popleft()
            job = Job(
                batch=batch.number,
                sizes=batch.sizes,
                pattern=self._pickled,
                context=self.context,
                room=self._room(),
                max_size=self.max_size,
                allow_secrets=self.allow_secrets,
            )
            try:
                self.worker.send(job, batch.fds)
            except WorkerGone:
                self._queued.appendleft(batch)
                self._lose_worker()
            else:
                self._in_flight[batch.number] = batch

    def _room(self) -> int:
        """The most hits a batch searched now must give: one past `max_results`,
        less those of the batches searched from the first on."""
        return self.max_results + 1 - self._hits_before

    def _search_here(self, batch: _Batch) -> None:
        batch.hits = search_batch(
            batch.fds,
            batch.sizes,
            self.pattern,
            context=self.context,
            room=self._room(),
            max_size=self.max_size,
            allow_secrets=self.allow_secrets,
        )
        self._close(batch)

    def _collect(self, timeout: float) -> None:
        """Take the worker's finished batches, waiting up to `timeout` for one."""
        if self.worker is None:
            return
        try:
            done = self.worker.replies(timeout)
        except WorkerGone:
            self._lose_worker()
            return
        for reply in done:
            batch = self._in_flight.pop(reply.batch)
            batch.hits = reply.hits
            self._close(batch)

    def _lose_worker(self) -> None:
        """The worker is gone: search its batches here (their descriptors are ours)."""
        self.worker = None
        lost, self._in_flight = self._in_flight, {}
        for batch in lost.values():
            self._search_here(batch)

    @staticmethod
    def _close(batch: _Batch) -> None:
        fds, batch.fds = batch.fds, []
        for fd in fds:
            os.close(fd)
