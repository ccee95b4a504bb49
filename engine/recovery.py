"""Recovery on open: finish what a dead process left in the journal.

A transaction's durable intent is its commit point, so an unfinished one (its
process died while applying, or before a checkpoint made its files durable) is
rolled forward from its after images. Unfinished transactions that touch related
paths (the same path, or a path inside a folder another one moves) ran one after
the other under their locks, so they are finished together: the disk shows some
prefix of their changes made (`effects.match_prefix`), and the rest is made. If
something else changed one of their paths since, they are rolled back instead,
newest first, each file only while it still holds what they put there. An
external change is reported, never overwritten.

The files recovery wrote are flushed (`FileOps.syncfs`) before the journal
records the transactions as recovered, which also marks them checkpointed: a
power loss in between finds them unfinished again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Literal

import anyio
import msgspec

from ..journal import Journal, Unfinished
from .changes import Change
from .effects import effects, under
from .results import RecoveryOutcome
from .transaction import Applier, Restoration, change_of, folders_of

__all__ = ["recover"]


async def recover(
    journal: Journal, applier: Applier, flush: Callable[[], None]
) -> list[RecoveryOutcome]:
    """Roll forward or back every transaction of a dead owner; report each outcome.

    `flush` makes the files recovery wrote durable (a no-op without durability
    `full`).
    """
    outcomes: list[RecoveryOutcome] = []
    with anyio.CancelScope(shield=True):
        claimed = await journal.claim_unfinished()
        if not claimed:
            return outcomes
        loaded = [await _changes(journal, unfinished) for unfinished in claimed]
        # Leftover temp files first: a folder moved on below would carry them along.
        folders = _folders(claimed, loaded)
        live = await anyio.to_thread.run_sync(journal.live_owners)
        await anyio.to_thread.run_sync(applier.fileops.discard_temps, folders, live)
        finished: list[tuple[Unfinished, Literal["roll_back", "roll_forward"], Restoration]] = []
        for group in _related(loaded):
            result = await anyio.to_thread.run_sync(applier.finish, [loaded[i] for i in group])
            for index, restoration in zip(group, result.restorations, strict=True):
                finished.append((claimed[index], result.action, restoration))
        await anyio.to_thread.run_sync(flush)
        for unfinished, action, restoration in sorted(finished, key=lambda f: f[0].tx.id):
            outcome = _outcome(action, restoration)
            await journal.finish_recovery(
                unfinished.tx.id, state="recovered", outcome=outcome, cause=_cause(restoration)
            )
            outcomes.append(
                RecoveryOutcome(
                    transaction=unfinished.tx.id,
                    action=action,
                    outcome=outcome,
                    restored=restoration.restored,
                    not_restored=restoration.not_restored,
                )
            )
    return outcomes


async def _changes(journal: Journal, unfinished: Unfinished) -> list[Change]:
    record = unfinished.tx
    hashes = {h for m in record.mutations for h in (m.before_hash, m.after_hash) if h}
    blobs = await journal.blobs(hashes)
    return [change_of(m, blobs, os.path.basename) for m in record.mutations]


def _folders(claimed: Sequence[Unfinished], loaded: Sequence[Sequence[Change]]) -> set[str]:
    """Where the transactions' temp files can be: their folders, wherever a move took
    them. A move of any of them counts (they ran in this order): a file one of them
    wrote, in a folder a later one moved, is repaired in its new place, and a power
    loss during that repair leaves the temp file there.
    """
    folders = set().union(*(folders_of(unfinished.tx) for unfinished in claimed))
    for changes in loaded:
        for change in changes:
            if change.op == "move" and change.kind == "dir" and change.destination:
                source, destination = change.path, change.destination
                folders |= {destination + f[len(source) :] for f in folders if under(f, source)}
    return folders


def _related(loaded: Sequence[Sequence[Change]]) -> list[list[int]]:
    """Groups of transactions (indexes, in id order) whose paths overlap or nest."""
    named = [{e.path for c in changes for e in effects(c)} for changes in loaded]
    group_of = list(range(len(loaded)))

    def root(i: int) -> int:
        while group_of[i] != i:
            i = group_of[i]
        return i

    for i in range(len(loaded)):
        for j in range(i):
            if any(under(a, b) or under(b, a) for a in named[i] for b in named[j]):
                group_of[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(loaded)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _outcome(action: str, restoration: Restoration) -> str:
    if action == "roll_back":
        return str(restoration.outcome())
    return "rolled_forward" if not restoration.not_restored else "roll_forward_partial"


def _cause(restoration: Restoration) -> str | None:
    if not restoration.not_restored:
        return None
    return msgspec.json.encode({"not_restored": restoration.not_restored}).decode()
