"""Recovery on open: finish what a dead process left in the journal.

A transaction's durable intent is its commit point, so an unfinished one (its
process died while applying, or before a checkpoint made its files durable) is
rolled forward from its after images, each file only while it still holds a state
the transaction moves it through. If something else changed one of its paths
since, it is rolled back instead, each file only while it still holds the
transaction's after image. An external change is reported, never overwritten.
"""

from __future__ import annotations

import os

import anyio
import msgspec

from ledgerfs.journal import Journal, Unfinished

from .planning import Change
from .results import RecoveryOutcome
from .transaction import Applier, Restoration, change_of, folders_of

__all__ = ["recover"]


async def recover(journal: Journal, applier: Applier) -> list[RecoveryOutcome]:
    """Roll back or forward every transaction of a dead owner; report each outcome."""
    outcomes = []
    with anyio.CancelScope(shield=True):
        claimed = await journal.claim_unfinished()
        loaded = [await _changes(journal, unfinished) for unfinished in claimed]
        for index, unfinished in enumerate(claimed):
            # A later unfinished transaction may have moved a shared path on already
            # (the process died applying it): its states count as reached, so the
            # earlier, acknowledged one is rolled forward, not back over the later one.
            later = [change for changes in loaded[index + 1 :] for change in changes]
            outcomes.append(await _recover_one(journal, applier, unfinished, loaded[index], later))
    return outcomes


async def _changes(journal: Journal, unfinished: Unfinished) -> list[Change]:
    record = unfinished.tx
    hashes = {h for m in record.mutations for h in (m.before_hash, m.after_hash) if h}
    blobs = await journal.blobs(hashes)
    return [change_of(m, blobs, os.path.basename) for m in record.mutations]


async def _recover_one(
    journal: Journal,
    applier: Applier,
    unfinished: Unfinished,
    changes: list[Change],
    later: list[Change],
) -> RecoveryOutcome:
    record = unfinished.tx
    action, restoration = await anyio.to_thread.run_sync(applier.finish, changes, later)
    if action == "roll_back":
        outcome = str(restoration.outcome())
    else:
        outcome = "rolled_forward" if not restoration.not_restored else "roll_forward_partial"
    await anyio.to_thread.run_sync(
        applier.fileops.discard_temps, folders_of(record), unfinished.previous_owner
    )
    await journal.finish_recovery(
        record.id, state="recovered", outcome=outcome, cause=_cause(restoration)
    )
    return RecoveryOutcome(
        transaction=record.id,
        action=action,
        outcome=outcome,
        restored=restoration.restored,
        not_restored=restoration.not_restored,
    )


def _cause(restoration: Restoration) -> str | None:
    if not restoration.not_restored:
        return None
    return msgspec.json.encode({"not_restored": restoration.not_restored}).decode()
