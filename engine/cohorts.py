"""Calls that arrive together run together: a few loop ticks' edits as one cohort.

When several one-file `edit_file` or `write_file` calls reach the pipeline
within a few loop ticks of each other (concurrent clients, or one client's
concurrent calls), the first gathers the others, which wait, and runs them
phase by phase: prepare every call, take every lock, load every file, plan and
check every call, record every intent in one journal group whose wake-up
applies every file, then hand each call its result. Each phase is the
pipeline's own (engine/pipeline.py) and the transactions are
`Applier.run_group`'s; what a cohort saves is each call's own orchestration (its
task's trip through the journal, its cancel scope and wake-up) and the cost of
switching between unlike code at every call: the same functions run back to
back, on warm caches.

A call fails alone: what one raises is its result only. A call that cannot
take its locks at once (another call of the cohort, or any other task or
process, holds one), that loads or writes more than `INLINE_MAX`, or a call
that arrives alone, runs the pipeline's path by itself (`pipeline.transact`),
where it waits for its locks as any call does.

A cohort is not a `batch` call: that is one transaction of several operations,
while each call of a cohort is a transaction of its own.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from . import pipeline
from .errors import LedgerError
from .locks import Held, PathLocks
from .planning import Change, Step
from .requests import EditOp, WriteOp
from .results import MutationResult
from .transaction import INLINE_MAX, Pending

if TYPE_CHECKING:
    from .core import Session

__all__ = ["Cohorts"]

#: A cohort holds at most this many calls; later ones start the next cohort.
MAX_COHORT = 256
#: A leader stops gathering once this many loop ticks have passed with nobody
#: joining. Requests that reach a served process together reach the pipeline a
#: few ticks apart (the MCP SDK starts one request's task per tick, and each
#: takes some ticks through dispatch), so a leader that waited one tick would
#: find nobody and every call would run alone.
QUIET_TICKS = 3
#: ... and after this many ticks in all, so a steady stream of arrivals cannot
#: hold a leader back.
MAX_GATHER_TICKS = 16


class _Call:
    """One call of a cohort: what it asked, how far it got, and how it ended."""

    __slots__ = (
        "alone",
        "changes",
        "error",
        "held",
        "left",
        "op",
        "result",
        "session",
        "slot",
        "step",
        "summary",
        "tool",
        "warnings",
    )

    def __init__(self, session: Session, tool: str, op: EditOp | WriteOp) -> None:
        self.session = session
        self.tool = tool
        self.op = op
        # What its waiter waits on: an asyncio future, or the waiting trio task.
        self.slot: asyncio.Future[None] | object = None
        # Set when its waiter was cancelled on trio (an asyncio waiter's future says so).
        self.left = False
        # The call leaves the cohort and runs the pipeline's path in its own task.
        self.alone = False
        self.step: Step | None = None
        self.held: Held | None = None
        self.changes: list[Change] = []
        self.warnings: list[str] = []
        self.summary = ""
        self.result: MutationResult | None = None
        self.error: BaseException | None = None

    @property
    def abandoned(self) -> bool:
        """Whether its waiter stopped waiting (cancelled): the call is dropped then,
        unless its intent is recorded already."""
        slot = self.slot
        return self.left or (isinstance(slot, asyncio.Future) and slot.cancelled())

    @property
    def live(self) -> bool:
        return self.error is None and not self.alone and not self.abandoned

    async def outcome(self) -> MutationResult:
        if self.alone:
            return await pipeline.transact(self.session, self.tool, [self.op], False, None)
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class Cohorts:
    """Gathers one event loop's concurrent one-file calls into cohorts (see the module)."""

    def __init__(self) -> None:
        self._forming: list[_Call] | None = None
        self._thread = 0
        #: Cohorts run, the calls they held, and those of them that ran alone.
        self.formed = 0
        self.gathered = 0
        self.sent_alone = 0

    async def run(self, session: Session, tool: str, op: EditOp | WriteOp) -> MutationResult:
        """Run one call, in a cohort with those arriving within a few ticks (`pipeline.mutate`)."""
        call = _Call(session, tool, op)
        forming = self._forming
        if (
            forming is not None
            and len(forming) < MAX_COHORT
            and self._thread == threading.get_ident()
        ):
            forming.append(call)
            await _wait(call)
            return await call.outcome()
        return await self._lead(call)

    async def _lead(self, call: _Call) -> MutationResult:
        """Gather the calls that arrive in the next few ticks behind `call`, then run them."""
        cohort = [call]
        if _others_ready():
            self._forming, self._thread = cohort, threading.get_ident()
            try:
                await _gather(cohort)
            finally:
                self._forming = None
        if len(cohort) == 1:
            return await pipeline.transact(call.session, call.tool, [call.op], False, None)
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            call.left = True  # cancelled before its cohort ran: dropped, as a waiter is
            await self._run(cohort)
            raise
        await self._run(cohort)
        return await call.outcome()

    async def _run(self, cohort: list[_Call]) -> None:
        """Run `cohort` to its end, whatever befalls its leader, and wake its waiters."""
        self.formed += 1
        self.gathered += len(cohort)
        try:
            with anyio.CancelScope(shield=True):
                await _phases(cohort)
        except Exception as exc:  # a fault of the cohort itself: every call not done fails
            for each in cohort:
                if each.result is None and each.error is None and not each.alone:
                    each.error = exc
        finally:
            self.sent_alone += sum(1 for each in cohort if each.alone)
            for other in cohort[1:]:
                _wake(other)


async def _gather(cohort: list[_Call]) -> None:
    """Let the loop run other tasks, which join `cohort`, until `QUIET_TICKS` ticks
    pass with nobody joining, no other task is ready, or `MAX_GATHER_TICKS` pass."""
    quiet = 0
    for _ in range(MAX_GATHER_TICKS):
        size = len(cohort)
        # Not a cancellation point: the followers are woken by the leader in any case.
        await anyio.lowlevel.cancel_shielded_checkpoint()
        quiet = 0 if len(cohort) > size else quiet + 1
        if quiet >= QUIET_TICKS or len(cohort) >= MAX_COHORT or not _others_ready():
            return


async def _phases(cohort: list[_Call]) -> None:
    """The pipeline's phases, each for every call of the cohort in turn."""
    calls = [call for call in cohort if not call.abandoned]
    if not calls:
        return
    engine = calls[0].session.engine
    for call in calls:
        try:
            call.step = await pipeline.prepare_op(call.session, call.op)
        except Exception as exc:  # a call fails alone, whatever it raises
            call.error = exc
    taken: dict[int, set[str]] = {}
    try:
        for call in calls:
            if call.live:
                _lock(engine.locks, call, taken)
        for call in calls:
            if call.live:
                await _plan(call)
        await _commit([call for call in calls if call.live])
    finally:
        for call in calls:
            if call.held is not None:
                call.held.release()


def _lock(locks: PathLocks, call: _Call, taken: dict[int, set[str]]) -> None:
    """Take the call's locks now, or send it off alone.

    A bucket the cohort holds already is the call's too, unless an earlier call
    of the cohort names one of its files (the call must see that one's result):
    then, as when another task or process holds a bucket, the call runs alone.
    """
    assert call.step is not None
    names = {path.casefold() for path in call.step.paths}
    buckets = locks.buckets(call.step.paths)
    if any(not names.isdisjoint(taken[b]) for b in buckets if b in taken):
        call.alone = True
        return
    new = [b for b in buckets if b not in taken]
    try:
        held = locks.hold_nowait(new)
    except Exception as exc:  # a call fails alone, whatever it raises
        call.error = exc
        return
    if held is None:
        call.alone = True
        return
    call.held = held
    for bucket in buckets:
        taken.setdefault(bucket, set()).update(names)


async def _plan(call: _Call) -> None:
    """Load, plan and check one call, as `pipeline.transact` does under its locks."""
    step = call.step
    assert step is not None
    try:
        tree = pipeline.view_inline(call.session, step.paths)
        if tree is None or not pipeline.plans_inline(tree, [step]):
            call.alone = True  # a big file loads, and long searches run, in a worker thread
            return
        changes, checks, failure = pipeline.plan(call.session, tree, [step])
        call.warnings = await pipeline.check(call.session, checks) if checks else []
        if failure is not None:
            raise failure
    except Exception as exc:  # a call fails alone, whatever it raises
        call.error = exc
        return
    if sum(len(c.after) for c in changes if c.after is not None) > INLINE_MAX:
        call.alone = True  # its file step leaves the loop
        return
    call.changes = changes
    call.summary = pipeline.summarize(call.tool, changes)


async def _commit(calls: list[_Call]) -> None:
    """Reserve each call's budget, record and apply the calls as one journal group,
    and give each its result, as `pipeline.transact` does for one."""
    ready: list[tuple[_Call, pipeline.Shown]] = []
    for call in calls:
        if call.abandoned:
            continue  # nothing of it is recorded: it changes nothing
        try:
            shown = pipeline.show(call.changes, call.warnings)
            if not call.changes:  # nothing would change: no transaction, no budget
                call.result = pipeline.mutation_result(call.session.id, None, shown, None, 0)
                continue
            call.session.budget.reserve(_weight(call))
        except Exception as exc:  # a call fails alone, whatever it raises
            call.error = exc
            continue
        ready.append((call, shown))
    if not ready:
        return
    group = [Pending(c.session.id, c.changes, c.summary, _weight(c)) for c, _ in ready]
    outcomes = await ready[0][0].session.engine.applier.run_group(group)
    for (call, shown), outcome in zip(ready, outcomes, strict=True):
        session = call.session
        if isinstance(outcome, int):
            session.budget.release(_weight(call), charged=True)
            for change in call.changes:
                session.remember(change)
            call.result = pipeline.mutation_result(
                session.id, outcome, shown, None, len(call.changes)
            )
        else:
            # Charged once its intent was recorded, as `pipeline.transact` says it.
            charged = (
                isinstance(outcome, LedgerError) and outcome.details.get("transaction") is not None
            )
            session.budget.release(_weight(call), charged=charged)
            call.error = outcome


def _weight(call: _Call) -> int:
    assert call.step is not None
    return call.step.weight


async def _wait(call: _Call) -> None:
    """Wait until the cohort's leader has run `call` (or sent it off alone).

    A waiter that is cancelled abandons its call: the leader drops it unless its
    intent is recorded already. On asyncio the wait is a bare future of the loop
    (an anyio Event costs several times more), cancelled with its waiter; on trio
    the task itself waits, and its abort says at once that it left.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no asyncio loop runs this thread: trio
        await _wait_trio(call)
        return
    future = loop.create_future()
    call.slot = future
    await future


async def _wait_trio(call: _Call) -> None:
    import trio.lowlevel

    call.slot = trio.lowlevel.current_task()

    def leave(_: object) -> trio.lowlevel.Abort:
        call.left = True
        return trio.lowlevel.Abort.SUCCEEDED

    await trio.lowlevel.wait_task_rescheduled(leave)


def _wake(call: _Call) -> None:
    slot = call.slot
    if isinstance(slot, asyncio.Future):
        if not slot.done():  # a cancelled waiter's is
            slot.set_result(None)
    elif slot is not None and not call.left:
        import trio.lowlevel

        trio.lowlevel.reschedule(slot)  # type: ignore[arg-type]


def _others_ready() -> bool:
    """Whether another task of the running loop is ready (True if the loop cannot say);
    the journal's begins ask the same (journal/_journal.py)."""
    loop = asyncio._get_running_loop()  # None under trio; in asyncio.events.__all__
    ready = getattr(loop, "_ready", None)
    return ready is None or len(ready) > 0
