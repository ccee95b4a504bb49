"""Recovery on open: finish what a dead process left in the journal.

A pending transaction (its process died while applying) is rolled back, each file
only while it still holds the transaction's after image. A committed transaction
not yet covered by a checkpoint is rolled forward from its after images, each file
only while it still holds the before image. Anything else is an external change:
reported, never overwritten.
"""

from __future__ import annotations

import os

import anyio
import msgspec

from journal import Journal, Unfinished

from .results import RecoveryOutcome
from .transaction import Applier, Restoration, change_of, folders_of

__all__ = ["recover"]


async def recover(journal: Journal, applier: Applier) -> list[RecoveryOutcome]:
    """Roll back or forward every transaction of a dead owner; report each outcome."""
    outcomes = []
    with anyio.CancelScope(shield=True):
        for unfinished in await journal.claim_unfinished():
            outcomes.append(await _recover_one(journal, applier, unfinished))
    return outcomes


async def _recover_one(
    journal: Journal, applier: Applier, unfinished: Unfinished
) -> RecoveryOutcome:
    record = unfinished.tx
    hashes = {h for m in record.mutations for h in (m.before_hash, m.after_hash) if h}
    blobs = await journal.blobs(hashes)
    changes = [change_of(m, blobs, os.path.basename) for m in record.mutations]
    if unfinished.action == "roll_back":
        restoration = await anyio.to_thread.run_sync(applier.restore, changes)
        outcome = str(restoration.outcome())
    else:
        restoration = await anyio.to_thread.run_sync(applier.roll_forward, changes)
        outcome = "rolled_forward" if not restoration.not_restored else "roll_forward_partial"
    await anyio.to_thread.run_sync(
        applier.fileops.discard_temps, folders_of(record), record.owner
    )
    await journal.finish_recovery(
        record.id, state="recovered", outcome=outcome, cause=_cause(restoration)
    )
    return RecoveryOutcome(
        transaction=record.id,
        action=unfinished.action,
        outcome=outcome,
        restored=restoration.restored,
        not_restored=restoration.not_restored,
    )


def _cause(restoration: Restoration) -> str | None:
    if not restoration.not_restored:
        return None
    return msgspec.json.encode({"not_restored": restoration.not_restored}).decode()
