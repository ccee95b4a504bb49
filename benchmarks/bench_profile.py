"""Where an edit's CPU goes: µs of CPU per edit by phase, inside a real run.

    python -m benchmarks.bench_profile [--writers 1 32] [--tmpfs] [--seconds S]
                                       [--json FILE] [--dir DIR] [--markdown]

Runs real edits (4 KiB text files, ``edit_file`` with ``expected_hash``,
durability ``full``, the engine embedded as in ``bench_engine``: one session
and one file per writer, anyio tasks on asyncio) and charges every thread's CPU
to the phase it was spent in. Each phase is a set of functions named by their
dotted path (``ledgerfs.engine.paths.Workspace.resolve``); at bench time each
is replaced by a wrapper that reads the calling thread's CPU clock
(`time.thread_time_ns`) on entry and exit. A phase is charged its own time
only: what a nested wrapped call spent goes to that call's phase. Coroutine
functions are timed step by step (each `send` into the coroutine), so time
other tasks spend on the loop while one awaits is never charged to it.

Per thread, the thread's whole CPU over the window (its own clock,
`pthread_getcpuclockid`) minus what its phases were charged is reported as that
thread's unattributed time: on the event loop that is asyncio's and anyio's
scheduling (and the bench's few lines per call), on the journal's writer
thread the writer's own Python. The process's CPU (`time.process_time`) is the
total; what threads that ended during the window spent is the difference.

The wrappers cost CPU themselves (two clock reads each, a few µs on a VM).
That cost is measured before each run (per call of an empty function, per step
of an empty coroutine) and taken off the phase it lands in and off its
thread's unattributed time; an uninstrumented run of the same configuration
right before gives the process CPU per edit without any wrapper, to compare
the corrected total with.

The production code has no hooks: a function that is renamed or removed shows
up in the report's ``missing`` list and its phase is charged nothing, so the
tool keeps running while the code under it is rebuilt.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import json
import queue
import shutil
import sqlite3
import sys
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from ._stats import write_json
from .bench_engine import bench_folder, engine_edits, machine_info, tmpfs_folder

SIZE = 4 * 1024

#: Phases in report order: (name, dotted targets). "sqlite3.connect" is special:
#: connections opened while profiling get a subclass whose execute, executemany,
#: executescript, commit and rollback are timed. "queue.SimpleQueue" is swapped
#: for a timed subclass while profiling (its methods are C, they cannot be wrapped).
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "thread hand-offs (queue put/get, call_soon_threadsafe, loop wake, to_thread)",
        (
            "queue.Queue.put",
            "queue.Queue.get",
            "queue.Queue.get_nowait",
            "queue.SimpleQueue",
            "asyncio.base_events.BaseEventLoop.call_soon_threadsafe",
            "asyncio.selector_events.BaseSelectorEventLoop._read_from_self",
            "asyncio.selector_events.BaseSelectorEventLoop._process_self_data",
            "anyio.to_thread.run_sync",
            "ledgerfs.journal._writer._finish_all",
        ),
    ),
    (
        "loop glue: anyio (cancel scopes, events, checkpoints)",
        (
            "anyio._backends._asyncio.CancelScope.__enter__",
            "anyio._backends._asyncio.CancelScope.__exit__",
            "anyio._backends._asyncio.Event.wait",
            "anyio._backends._asyncio.Event.set",
            "anyio.lowlevel.checkpoint",
        ),
    ),
    ("SQL (execute, executemany, commit)", ("sqlite3.connect",)),
    (
        "fsync / fdatasync (the WAL's, and any other)",
        ("ledgerfs.journal._syncer.Syncer._fdatasync", "os.fdatasync", "os.fsync"),
    ),
    (
        "path resolve (Workspace.resolve, without the opener)",
        ("ledgerfs.engine.paths.Workspace.resolve",),
    ),
    (
        "no-follow opener (engine/nofollow.py)",
        (
            "ledgerfs.engine.nofollow.open_beneath",
            "ledgerfs.engine.nofollow.open_dir",
            "ledgerfs.engine.nofollow.stat_beneath",
        ),
    ),
    (
        "locks (path locks, flock)",
        (
            "ledgerfs.engine.locks.PathLocks.hold",
            "ledgerfs.engine.locks.PathLocks.hold_nowait",
            "ledgerfs.engine.locks.PathLocks._flock",
            "fcntl.flock",
        ),
    ),
    ("load (open, read, stat; without hashing)", ("ledgerfs.engine.fileops.load_entry",)),
    ("hashing (every content hash)", ("ledgerfs.journal._records.content_hash",)),
    (
        "planning (Planner, OCC check)",
        (
            "ledgerfs.engine.planning.Planner.edit",
            "ledgerfs.engine.planning.Planner.write",
            "ledgerfs.engine.pipeline.check",
        ),
    ),
    ("diff (the result's unified diff)", ("ledgerfs.engine.diffs.unified_diff",)),
    (
        "file step (temp file, write, rename)",
        (
            "ledgerfs.engine.transaction.Applier._apply_all",
            "ledgerfs.engine.transaction.Applier.apply_one",
        ),
    ),
    (
        "journal calls on the loop (intent, begin, commit mark)",
        (
            "ledgerfs.engine.transaction._intent",
            "ledgerfs.journal._journal.Journal.begin",
            "ledgerfs.journal._journal.Journal.begin_group",
            "ledgerfs.journal._journal.Journal.commit_nowait",
        ),
    ),
    (
        "request decode and result (msgspec, summary, result struct)",
        (
            "ledgerfs.engine.core.decode_request",
            "ledgerfs.engine.pipeline.summarize",
            "ledgerfs.engine.pipeline.mutation_result",
        ),
    ),
    (
        "the rest of the call (dispatch, pipeline coroutines, gathering, anyio locks)",
        ("ledgerfs.engine.core.Session.call",),
    ),
    (
        "checkpointer (background)",
        (
            "ledgerfs.engine.flush.Flusher.flush",
            "ledgerfs.engine.fileops.sync_filesystems",
        ),
    ),
)

#: Threads by role, from their names (prefix match); the loop is the main thread.
ROLES: tuple[tuple[str, str], ...] = (
    ("MainThread", "event loop"),
    ("journal-writer", "journal writer"),
    ("journal-syncer", "WAL syncer"),
    ("journal-checkpointer", "WAL checkpointer"),
    ("AnyIO worker thread", "anyio workers"),
)

#: What a thread's unattributed time is called in the report, by role.
UNATTRIBUTED = {
    "event loop": "loop glue: asyncio scheduling and task steps (loop, unattributed)",
    "journal writer": "writer-thread Python (unattributed)",
    "anyio workers": "anyio workers (unattributed)",
    "WAL syncer": "WAL syncer (fdatasync, unattributed)",
}


def role_of(name: str) -> str:
    """The role of a thread named `name`.

    >>> role_of("journal-writer /x/journal.db"), role_of("Thread-7")
    ('journal writer', 'other threads')
    """
    for prefix, role in ROLES:
        if name.startswith(prefix):
            return role
    return "other threads"


# -- per-thread books -------------------------------------------------------------


@dataclass
class Book:
    """One thread's charges: per phase [self ns, calls, timed sync calls, timed
    coroutine steps]; its open frames."""

    thread: threading.Thread
    totals: dict[str, list[int]]
    stack: list[list[int]] = field(default_factory=list)


class Profiler:
    """Wrappers that charge the calling thread's CPU to phases."""

    def __init__(self, phases: tuple[tuple[str, tuple[str, ...]], ...] = PHASES) -> None:
        self.phases = phases
        self.names = [name for name, _ in phases]
        self._local = threading.local()
        self._books: list[Book] = []
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []
        self.installed: list[str] = []
        self.missing: dict[str, str] = {}

    # -- charging ----------------------------------------------------------------

    def book(self) -> Book:
        try:
            book: Book = self._local.book
        except AttributeError:
            book = Book(threading.current_thread(), {n: [0, 0, 0, 0] for n in self.names})
            with self._lock:
                self._books.append(book)
            self._local.book = book
        return book

    def enter(self, book: Book) -> None:
        book.stack.append([time.thread_time_ns(), 0])

    def leave(self, book: Book, phase: str, calls: int, step: bool = False) -> None:
        now = time.thread_time_ns()
        start, child = book.stack.pop()
        elapsed = now - start
        total = book.totals[phase]
        total[0] += elapsed - child
        total[1] += calls
        total[3 if step else 2] += 1
        if book.stack:
            book.stack[-1][1] += elapsed

    def snapshot(self) -> dict[int, tuple[threading.Thread, dict[str, list[int]]]]:
        """Every thread's charges so far (copies), by thread identity."""
        with self._lock:
            books = list(self._books)
        return {id(b): (b.thread, {n: list(v) for n, v in b.totals.items()}) for b in books}

    # -- wrappers ----------------------------------------------------------------

    def wrap_sync(self, fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        profiler = self

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            book = profiler.book()
            profiler.enter(book)
            try:
                return fn(*args, **kwargs)
            finally:
                profiler.leave(book, phase, 1)

        return timed

    def wrap_async(self, fn: Callable[..., Coroutine[Any, Any, Any]], phase: str) -> Any:
        profiler = self

        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            return await profiler.stepped(fn(*args, **kwargs), phase)

        return timed

    @types.coroutine
    def stepped(self, coro: Coroutine[Any, Any, Any], phase: str) -> Generator[Any, Any, Any]:
        """Drive `coro`, charging each of its steps (not its waits) to `phase`."""
        value: Any = None
        error: BaseException | None = None
        calls = 1
        while True:
            book = self.book()
            self.enter(book)
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.leave(book, phase, calls, step=True)
                calls = 0
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                value, error = None, exc

    def wrap_cm(self, fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        """An async context manager factory: its enter and exit are timed step by step."""
        profiler = self

        class Timed:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            async def __aenter__(self) -> Any:
                return await profiler.stepped(self.inner.__aenter__(), phase)

            async def __aexit__(self, *exc: Any) -> Any:
                return await profiler.stepped(self.inner.__aexit__(*exc), phase)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            return Timed(fn(*args, **kwargs))

        return timed

    # -- installing ----------------------------------------------------------------

    def install(self) -> None:
        for phase, targets in self.phases:
            for target in targets:
                try:
                    self._install(target, phase)
                    self.installed.append(target)
                except Exception as exc:  # a target that is gone is reported, not fatal
                    self.missing[target] = f"{type(exc).__name__}: {exc}"

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _install(self, target: str, phase: str) -> None:
        if target == "sqlite3.connect":
            self._install_sqlite(phase)
            return
        if target == "queue.SimpleQueue":
            self._install_simple_queue(phase)
            return
        owner, attr = _locate(target)
        original = inspect.getattr_static(owner, attr)
        if isinstance(original, (staticmethod, classmethod)):
            raise TypeError(f"{target} is a {type(original).__name__}")
        fn = getattr(owner, attr)
        if not callable(fn):
            raise TypeError(f"{target} is not callable")
        if inspect.isasyncgenfunction(fn):
            raise TypeError(f"{target} is an async generator")
        if getattr(fn, "__wrapped__", None) is not None and _is_asynccm(fn):
            wrapper = self.wrap_cm(fn, phase)
        elif inspect.iscoroutinefunction(fn):
            wrapper = self.wrap_async(fn, phase)
        else:
            wrapper = self.wrap_sync(fn, phase)
        self._replace(owner, attr, original, wrapper)
        if isinstance(owner, types.ModuleType):
            self._replace_aliases(original, wrapper)

    def _replace(self, owner: Any, attr: str, original: Any, wrapper: Any) -> None:
        setattr(owner, attr, wrapper)
        self._undo.append(lambda: setattr(owner, attr, original))

    def _replace_aliases(self, original: Any, wrapper: Any) -> None:
        """`from x import f` copies: every ledgerfs module's name bound to `original`."""
        for name, module in list(sys.modules.items()):
            if not name.startswith("ledgerfs") or module is None:
                continue
            for attr, value in list(vars(module).items()):
                if value is original:
                    self._replace(module, attr, original, wrapper)

    def _install_sqlite(self, phase: str) -> None:
        profiler = self
        classes: dict[type, type] = {}

        def timed_class(base: type) -> type:
            if base not in classes:
                methods = {
                    name: profiler.wrap_sync(getattr(base, name), phase)
                    for name in ("execute", "executemany", "executescript", "commit", "rollback")
                }
                classes[base] = type(f"Timed{base.__name__}", (base,), methods)
            return classes[base]

        original = sqlite3.connect

        @functools.wraps(original)
        def connect(*args: Any, **kwargs: Any) -> Any:
            kwargs["factory"] = timed_class(kwargs.get("factory") or sqlite3.Connection)
            return original(*args, **kwargs)

        self._replace(sqlite3, "connect", original, connect)

    def _install_simple_queue(self, phase: str) -> None:
        original = queue.SimpleQueue
        methods = {
            name: self.wrap_sync(getattr(original, name), phase)
            for name in ("put", "put_nowait", "get", "get_nowait")
        }
        timed = type("TimedSimpleQueue", (original,), methods)
        self._replace(queue, "SimpleQueue", original, timed)
        self._replace_aliases(original, timed)


def _locate(target: str) -> tuple[Any, str]:
    """(object holding the last name, that name) for a dotted path.

    >>> _locate("os.path.join")[1]
    'join'
    """
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        if not hasattr(owner, parts[-1]):
            raise AttributeError(f"{'.'.join(parts[:-1])} has no {parts[-1]}")
        return owner, parts[-1]
    raise ImportError(f"no module for {target}")


def _is_asynccm(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is an `@asynccontextmanager` function."""
    return inspect.isasyncgenfunction(getattr(fn, "__wrapped__", None))


# -- thread clocks ------------------------------------------------------------------


def thread_cpu() -> dict[int, tuple[threading.Thread, int]]:
    """Every live thread's CPU so far, in ns, by its ident."""
    out = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            out[thread.ident] = (thread, time.clock_gettime_ns(clock))
        except (OSError, ValueError, ProcessLookupError):
            continue
    return out


@types.coroutine
def _suspend() -> Generator[None, None, None]:
    yield


class Cost(NamedTuple):
    """What the wrappers cost, in ns: charged to the timed phase (`inside`) and to
    its caller (`outside`), per timed sync call and per timed coroutine step."""

    call_inside: float
    call_outside: float
    step_inside: float
    step_outside: float


def calibrate(rounds: int = 20_000) -> Cost:
    """Measure the wrappers on empty functions, with a throw-away profiler."""
    scratch = Profiler((("calibration", ()),))
    totals = scratch.book().totals["calibration"]

    def plain() -> None:
        return None

    timed = scratch.wrap_sync(plain, "calibration")
    t0 = time.thread_time_ns()
    for _ in range(rounds):
        plain()
    t1 = time.thread_time_ns()
    for _ in range(rounds):
        timed()
    t2 = time.thread_time_ns()
    call_inside = totals[0] / rounds
    call_outside = max(0.0, (t2 - t1) - (t1 - t0)) / rounds - call_inside

    async def steps() -> None:
        for _ in range(rounds):
            await _suspend()

    def drive(coro: Coroutine[Any, Any, Any]) -> int:
        start = time.thread_time_ns()
        with contextlib.suppress(StopIteration):
            while True:
                coro.send(None)
        return time.thread_time_ns() - start

    totals[0] = 0
    bare = drive(steps())
    wrapped = drive(scratch.stepped(steps(), "calibration"))
    step_inside = totals[0] / (rounds + 1)
    step_outside = max(0.0, (wrapped - bare) / (rounds + 1) - step_inside)
    return Cost(call_inside, max(0.0, call_outside), step_inside, step_outside)


# -- a run ----------------------------------------------------------------------------


@dataclass
class Window:
    """What one run measured between its start and end marks."""

    edits: int = 0
    seconds: float = 0.0
    process_ns: int = 0
    threads: dict[int, tuple[threading.Thread, int]] = field(default_factory=dict)
    books: dict[int, tuple[threading.Thread, dict[str, list[int]]]] = field(default_factory=dict)


async def edits(folder: Path, writers: int, seconds: float, profiler: Profiler | None) -> Window:
    """`writers` tasks edit their own file for `seconds`; the window starts when all are ready."""
    window = Window()
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}

    def take(into: dict[str, Any]) -> None:
        into["threads"] = thread_cpu()
        into["books"] = profiler.snapshot() if profiler else {}
        into["process"] = time.process_time_ns()

    sample = await engine_edits(
        folder,
        "full",
        writers,
        SIZE,
        seconds,
        on_start=lambda: take(before),
        on_stop=lambda: take(after),
    )
    window.edits, window.seconds = sample.ops, sample.elapsed
    window.process_ns = after["process"] - before["process"]
    before_threads, after_threads = before["threads"], after["threads"]
    before_books, after_books = before["books"], after["books"]
    window.threads = {
        ident: (thread, ns - before_threads.get(ident, (thread, 0))[1])
        for ident, (thread, ns) in after_threads.items()
    }
    for key, (thread, totals) in after_books.items():
        old = before_books.get(key, (thread, {}))[1]
        window.books[key] = (
            thread,
            {
                n: [v - w for v, w in zip(vals, old.get(n, [0, 0, 0, 0]), strict=True)]
                for n, vals in totals.items()
            },
        )
    return window


@contextmanager
def profiling(profiler: Profiler) -> Iterator[Profiler]:
    profiler.install()
    try:
        yield profiler
    finally:
        profiler.uninstall()


def report(window: Window, profiler: Profiler, cost: Cost) -> dict[str, Any]:
    """µs of CPU per edit by phase and by thread, corrected for the wrappers' cost."""
    per_edit = 1e3 * max(window.edits, 1)
    phases: dict[str, dict[str, Any]] = {
        name: {"us_per_edit": 0.0, "calls_per_edit": 0.0, "by_thread": {}}
        for name in profiler.names
    }
    charged_by_ident: dict[int, float] = {}
    overhead_by_ident: dict[int, float] = {}
    for thread, totals in window.books.values():
        role = role_of(thread.name)
        for name, (ns, calls, timed_calls, steps) in totals.items():
            inside = timed_calls * cost.call_inside + steps * cost.step_inside
            outside = timed_calls * cost.call_outside + steps * cost.step_outside
            net = max(0.0, ns - inside)
            phase = phases[name]
            phase["us_per_edit"] += net / per_edit
            phase["calls_per_edit"] += calls / max(window.edits, 1)
            if net:
                phase["by_thread"][role] = phase["by_thread"].get(role, 0.0) + net / per_edit
            ident = thread.ident or 0
            charged_by_ident[ident] = charged_by_ident.get(ident, 0.0) + ns
            overhead_by_ident[ident] = overhead_by_ident.get(ident, 0.0) + outside
    threads: dict[str, float] = {}
    unattributed: dict[str, float] = {}
    for ident, (thread, ns) in window.threads.items():
        role = role_of(thread.name)
        threads[role] = threads.get(role, 0.0) + ns / per_edit
        rest = ns - charged_by_ident.get(ident, 0.0) - overhead_by_ident.get(ident, 0.0)
        label = UNATTRIBUTED.get(role, f"{role} (unattributed)")
        unattributed[label] = unattributed.get(label, 0.0) + max(0.0, rest) / per_edit
    live = sum(ns for _, ns in window.threads.values())
    threads["threads that ended in the window"] = max(0.0, window.process_ns - live) / per_edit
    wrappers = sum(
        timed_calls * (cost.call_inside + cost.call_outside)
        + steps * (cost.step_inside + cost.step_outside)
        for _, totals in window.books.values()
        for _, _, timed_calls, steps in totals.values()
    )
    return {
        "edits": window.edits,
        "seconds": round(window.seconds, 3),
        "edits_per_s": round(window.edits / window.seconds, 1) if window.seconds else 0.0,
        "process_cpu_us_per_edit": window.process_ns / per_edit,
        "wrapper_cost_us_per_edit": wrappers / per_edit,
        "corrected_cpu_us_per_edit": (window.process_ns - wrappers) / per_edit,
        "phases": phases,
        "unattributed": unattributed,
        "threads": threads,
        "wrapper_ns": {name: round(value) for name, value in cost._asdict().items()},
    }


def run_one(base: Path, writers: int, seconds: float, label: str) -> dict[str, Any]:
    """An uninstrumented run, then an instrumented one, of the same configuration."""
    work = base / f"profile-{label}-plain"
    try:
        plain = anyio.run(edits, work, writers, seconds, None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    profiler = Profiler()
    cost = calibrate()
    work = base / f"profile-{label}"
    try:
        with profiling(profiler):
            window = anyio.run(edits, work, writers, seconds, profiler)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = report(window, profiler, cost)
    result["writers"] = writers
    result["plain_cpu_us_per_edit"] = plain.process_ns / 1e3 / max(plain.edits, 1)
    result["plain_edits_per_s"] = round(plain.edits / plain.seconds, 1) if plain.seconds else 0.0
    result["missing"] = profiler.missing
    return result


def table(results: dict[str, dict[str, Any]]) -> str:
    """A markdown table: one row per phase, one column per run."""
    labels = list(results)
    first = results[labels[0]]
    rows = [
        "| per edit, µs of CPU | " + " | ".join(labels) + " |",
        "| --- |" + " --- |" * len(labels),
    ]

    def row(name: str, values: list[str]) -> None:
        rows.append(f"| {name} | " + " | ".join(values) + " |")

    known = [name for name, _ in PHASES if name in first["phases"]]
    for name in [*known, *sorted(set(first["phases"]) - set(known))]:
        cells = []
        for label in labels:
            phase = results[label]["phases"][name]
            cells.append(f"{phase['us_per_edit']:.0f} ({phase['calls_per_edit']:.1f} calls)")
        row(name, cells)
    seen = {n for r in results.values() for n in r["unattributed"]}
    for name in [
        *(n for n in UNATTRIBUTED.values() if n in seen),
        *sorted(seen - set(UNATTRIBUTED.values())),
    ]:
        row(name, [f"{results[label]['unattributed'].get(name, 0.0):.0f}" for label in labels])
    row(
        "**total (process CPU, wrappers' cost taken off)**",
        [f"**{results[label]['corrected_cpu_us_per_edit']:.0f}**" for label in labels],
    )
    row(
        "process CPU in an uninstrumented run (same configuration)",
        [f"{results[label]['plain_cpu_us_per_edit']:.0f}" for label in labels],
    )
    row(
        "wrappers' cost taken off",
        [f"{results[label]['wrapper_cost_us_per_edit']:.0f}" for label in labels],
    )
    for role in sorted({r for res in results.values() for r in res["threads"]}):
        row(
            f"thread total: {role}",
            [f"{results[label]['threads'].get(role, 0.0):.0f}" for label in labels],
        )
    row(
        "edits/s (instrumented / plain)",
        [
            f"{results[label]['edits_per_s']:.0f} / {results[label]['plain_edits_per_s']:.0f}"
            for label in labels
        ],
    )
    return "\n".join(rows)


def merge(sources: list[str]) -> dict[str, dict[str, Any]]:
    """Every run of every `LABEL=FILE` (JSON written by --json), labelled
    "LABEL, N writers"."""
    merged: dict[str, dict[str, Any]] = {}
    for source in sources:
        label, _, path = source.rpartition("=")
        payload = json.loads(Path(path).read_text())
        for name, result in payload["results"].items():
            merged[f"{label or Path(path).stem}, {name}"] = result
    return merged


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, profile each writer count, print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 32], help="writer counts")
    parser.add_argument("--tmpfs", action="store_true", help="run in /dev/shm (no disk cost)")
    parser.add_argument("--seconds", type=float, default=3.0, help="window of each run")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="LABEL=FILE",
        help="print one table of earlier runs' JSON files side by side, and run nothing",
    )
    args = parser.parse_args(argv)
    if args.merge:
        merged = merge(args.merge)
        print(table(merged))
        return {"results": merged, "table": table(merged)}
    folder = bench_folder(args.dir)
    base = folder
    shm = None
    if args.tmpfs:
        shm = tmpfs_folder()
        if shm is None:
            parser.error("no tmpfs at /dev/shm")
        base = shm
    results: dict[str, dict[str, Any]] = {}
    try:
        for writers in args.writers:
            label = f"{writers} writer{'s' if writers > 1 else ''}"
            print(f"profiling {label} for {args.seconds:g} s ...", flush=True)
            results[label] = run_one(base, writers, args.seconds, f"{writers}w")
    finally:
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    print()
    print(table(results))
    missing = sorted({t for r in results.values() for t in r["missing"]})
    for target in missing:
        print(f"missing: {target}: {next(iter(results.values()))['missing'].get(target, '')}")
    payload = {
        "machine": machine_info(base, {"seconds": args.seconds, "tmpfs": args.tmpfs}),
        "results": results,
        "missing": missing,
        "table": table(results),
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
