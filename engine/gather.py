"""Calls that arrive together are written together: one journal group for all.

When several one-file `edit_file` or `write_file` calls reach the pipeline
while others are in flight (concurrent clients, or one client's concurrent
calls), the first gathers those that arrive in the next few loop ticks, which
wait, and runs them phase by phase: prepare every call, take every lock, load
every file, plan and check every call, then commit them all at once
(`pipeline.commit`: one journal group, whose wake-up applies every file), and
hand each call its result. Each phase is the pipeline's own (engine/pipeline.py);
what a group saves is each call's own trip through the journal (one commit and
one fsync for all) and the cost of switching between unlike code at every call.

This is the one layer that gathers concurrent work, for it is the one that sees
whole calls; below it, the journal's writer thread commits whatever is queued
when it is free, and waits for nothing more.

When to gather is counted here, with no loop internals: a call that arrives
while no other call of the engine is in flight, after a leader that found
nobody to gather, runs at once (a lone client's calls pay no gathering tick;
after a burst, its first call waits its quiet ticks once). Otherwise it waits
until `pipeline.QUIET_TICKS` loop ticks pass with nobody joining (at most
`MAX_GATHER_TICKS`), the same on asyncio, uvloop and trio.

A call fails alone: what one raises is its result only. A call that cannot
take its locks at once (another call of the group, or any other task or
process, holds one), that loads or writes more than `INLINE_MAX`, or a call
that arrives alone, runs the pipeline's path by itself (`pipeline.transact`),
where it waits for its locks as any call does, and commits through the same
`pipeline.commit` as a group of one.

A group is not a `batch` call: that is one transaction of several operations,
while each call of a group is a transaction of its own.
"""

from __future__ import annotations

import threading

import anyio
import anyio.lowlevel

from . import pipeline, stale
from .caller import Caller
from .changes import Change
from .locks import Held, PathLocks
from .planning import Step
from .requests import EditOp, WriteOp
from .results import MutationResult
from .transaction import INLINE_MAX

__all__ = ["Gatherer"]

#: A group holds at most this many calls; later ones start the next group.
MAX_GROUP = 256
#: A leader stops gathering once `pipeline.QUIET_TICKS` loop ticks have passed
#: with nobody joining, or after this many ticks in all, so a steady stream of
#: arrivals cannot hold a leader back.
MAX_GATHER_TICKS = 16

#: The operations a one-operation call may run in a group with others.
GROUPED_OPS = (EditOp, WriteOp)


class _Call:
    """One call of a group: what it asked, how far it got, and how it ended."""

    __slots__ = (
        "alone",
        "changes",
        "error",
        "held",
        "left",
        "op",
        "result",
        "session",
        "step",
        "summary",
        "tool",
        "warnings",
    )

    def __init__(self, session: Caller, tool: str, op: EditOp | WriteOp) -> None:
        self.session = session
        self.tool = tool
        self.op = op
        # Set when its waiter was cancelled: it stopped waiting.
        self.left = False
        # The call leaves the group and runs the pipeline's path in its own task.
        self.alone = False
        self.step: Step | None = None
        self.held: Held | None = None
        self.changes: list[Change] = []
        self.warnings: list[str] = []
        self.summary = ""
        self.result: MutationResult | None = None
        self.error: BaseException | None = None

    @property
    def weight(self) -> int:
        assert self.step is not None
        return self.step.weight

    @property
    def live(self) -> bool:
        return self.error is None and not self.alone and not self.left

    async def wait(self, woken: anyio.Event) -> None:
        """Wait until the leader has run this call (or sent it off alone): `woken`,
        its group's, is set.

        A waiter that is cancelled abandons its call: the leader drops it unless
        its intent is recorded already.
        """
        try:
            await woken.wait()
        except BaseException:
            self.left = True
            raise

    async def outcome(self) -> MutationResult:
        if self.alone:
            return await pipeline.transact(self.session, pipeline.Call(self.tool, [self.op]))
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class _Group:
    """The calls of one group, its leader's first, and what wakes its waiters."""

    __slots__ = ("calls", "woken")

    def __init__(self, leader: _Call) -> None:
        self.calls = [leader]
        # One event for the group, set once its calls are done: an event costs
        # more to make than to wait on, and every waiter wakes at the same time.
        self.woken = anyio.Event()


class Gatherer:
    """Gathers one engine's concurrent one-file calls into groups (see the module)."""

    def __init__(self) -> None:
        self._forming: _Group | None = None
        self._thread = 0
        # Calls between the pipeline's door and their result, and whether the last
        # leader found company (assumed of a fresh engine, whose first calls come
        # together often): together they say whether gathering can pay.
        self._in_flight = 0
        self._company = True

    async def mutate(self, session: Caller, call: pipeline.Call) -> MutationResult:
        """Run `call` as one transaction (or preview it with `dry_run`).

        The route's way in for every tool whose call names operations (undo and
        rewind plan their own changes and join it at `pipeline.commit`). A call
        runs in a group with others when it is one edit or write of a file and
        others are in flight, else through `pipeline.transact` (see the module);
        the same phases and `pipeline.commit` either way. Raises what preparing,
        OCC, planning, the budget and applying raise; nothing changes on any
        failure but the ROLLBACK_ ones, whose details say what is left.
        """
        self._in_flight += 1
        try:
            ops = call.ops
            if (
                len(ops) == 1
                and not call.dry_run
                and call.status_hash is None
                and isinstance(ops[0], GROUPED_OPS)
            ):
                return await self._run(session, call.tool, ops[0])
            return await pipeline.transact(session, call)
        finally:
            self._in_flight -= 1

    async def _run(self, session: Caller, tool: str, op: EditOp | WriteOp) -> MutationResult:
        call = _Call(session, tool, op)
        forming = self._forming
        if (
            forming is not None
            and len(forming.calls) < MAX_GROUP
            and self._thread == threading.get_ident()
        ):
            forming.calls.append(call)
            await call.wait(forming.woken)
            return await call.outcome()
        return await self._lead(call)

    async def _lead(self, call: _Call) -> MutationResult:
        """Gather the calls that arrive in the next few ticks behind `call`, then run them."""
        group = _Group(call) if self._in_flight > 1 or self._company else None
        if group is not None:
            self._forming, self._thread = group, threading.get_ident()
            try:
                await _gather(group.calls)
            finally:
                self._forming = None
            self._company = len(group.calls) > 1
        if group is None or len(group.calls) == 1:
            return await pipeline.transact(call.session, pipeline.Call(call.tool, [call.op]))
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            call.left = True  # cancelled before its group ran: dropped, as a waiter is
            await _run_group(group)
            raise
        await _run_group(group)
        return await call.outcome()


async def _run_group(group: _Group) -> None:
    """Run `group` to its end, whatever befalls its leader, and wake its waiters."""
    try:
        with anyio.CancelScope(shield=True):
            await _phases(group.calls)
    except Exception as exc:  # a fault of the group itself: every call not done fails
        for each in group.calls:
            if each.result is None and each.error is None and not each.alone:
                each.error = exc
    finally:
        group.woken.set()


async def _gather(group: list[_Call]) -> None:
    """Let the loop run other tasks, which join `group`, until `QUIET_TICKS` ticks
    pass with nobody joining, or `MAX_GATHER_TICKS` pass."""
    quiet = 0
    for _ in range(MAX_GATHER_TICKS):
        size = len(group)
        # Not a cancellation point: the followers are woken by the leader in any case.
        await anyio.lowlevel.cancel_shielded_checkpoint()
        quiet = 0 if len(group) > size else quiet + 1
        if quiet >= pipeline.QUIET_TICKS or len(group) >= MAX_GROUP:
            return


async def _phases(group: list[_Call]) -> None:
    """The pipeline's phases, each for every call of the group in turn."""
    calls = [call for call in group if not call.left]
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

    A bucket the group holds already is the call's too, unless an earlier call
    of the group names one of its files (the call must see that one's result):
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
        bases = await stale.find_bases(call.session.kept, call.session.engine.journal, tree, [step])
        changes, checks, failure = pipeline.plan(call.session, tree, [step], bases)
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
    """Commit the calls still wanted as one group (`pipeline.commit`)."""
    # A call whose waiter left is dropped: nothing of it is recorded.
    kept = [call for call in calls if not call.left]
    if not kept:
        return
    planned = [
        pipeline.Planned(c.session, c.changes, c.weight, c.summary, c.warnings) for c in kept
    ]
    outcomes = await pipeline.commit(planned)
    for call, outcome in zip(kept, outcomes, strict=True):
        if isinstance(outcome, MutationResult):
            call.result = outcome
        else:
            call.error = outcome
