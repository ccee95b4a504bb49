"""Owners, claim_unfinished and finish_recovery: nothing pending is dropped or stolen."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from ledgerfs.journal import Journal, TransactionStateError
from ledgerfs.journal._owners import owners_dir

from .conftest import write_intent

pytestmark = pytest.mark.anyio


async def _abandon(path: Path) -> tuple[str, int, int, int]:
    """Leave one pending and two checkpointed transactions, then 'die' (close)."""
    j = await Journal.open(path)
    pending = await j.begin(write_intent("/p", b"p"))
    forward = await j.begin(write_intent("/f", b"f"))
    await j.commit(forward)
    done = await j.begin(write_intent("/d", b"d"))
    await j.commit(done)
    await j.checkpoint(done)
    await j.aclose()
    return j.owner, pending, forward, done


async def test_lock_file_held_while_open(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        lock = owners_dir(journal_path) / f"{j.owner}.lock"
        assert lock.exists()
    assert not lock.exists()


async def test_claim_returns_dead_owners_work_in_id_order(journal_path: Path) -> None:
    j = await Journal.open(journal_path)
    pending = await j.begin(write_intent("/p", b"p"))
    forward = await j.begin(write_intent("/f", b"f"))
    await j.commit(forward)
    checked = await j.begin(write_intent("/c", b"c"))
    await j.commit(checked)
    rolled = await j.begin(write_intent("/r", b"r"))
    await j.rollback(rolled, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
    late = await j.begin(write_intent("/l", b"l"))
    await j.commit(late)
    await j.checkpoint(checked)  # forward and checked are checkpointed, late is not
    await j.aclose()
    async with Journal.open(journal_path) as rescuer:
        unfinished = await rescuer.claim_unfinished()
        assert [(u.tx.id, u.action) for u in unfinished] == [
            (pending, "roll_back"),
            (late, "roll_forward"),
        ]
        assert all(u.tx.owner == rescuer.owner for u in unfinished)
        assert unfinished[0].tx.mutations[0].path == "/p"
        assert await rescuer.claim_unfinished() == []
        await rescuer.finish_recovery(
            pending, state="recovered", outcome="ROLLBACK_COMPLETE", cause='{"e": 1}'
        )
        await rescuer.finish_recovery(late, state="recovered", outcome="rolled_forward", cause=None)
        record = await rescuer.transaction(pending)
        assert record is not None
        assert (record.state, record.outcome, record.checkpointed) == (
            "recovered",
            "ROLLBACK_COMPLETE",
            True,
        )
        with pytest.raises(TransactionStateError):
            await rescuer.finish_recovery(
                pending, state="recovered", outcome="ROLLBACK_COMPLETE", cause=None
            )
        found = await rescuer.last_change("/l")
        assert found is not None and found[0].id == late
    async with Journal.open(journal_path) as again:
        assert await again.claim_unfinished() == []


async def test_live_owner_is_never_claimed(journal_path: Path) -> None:
    async with Journal.open(journal_path) as alive, Journal.open(journal_path) as other:
        tx = await alive.begin(write_intent("/p", b"p"))
        assert await other.claim_unfinished() == []
        # Its own unfinished work is not "dead" either.
        assert await alive.claim_unfinished() == []
        record = await other.transaction(tx)
        assert record is not None and record.owner == alive.owner


async def test_finish_recovery_requires_a_claim(journal_path: Path) -> None:
    async with Journal.open(journal_path) as alive, Journal.open(journal_path) as other:
        tx = await alive.begin(write_intent("/p", b"p"))
        with pytest.raises(TransactionStateError):
            await other.finish_recovery(tx, state="recovered", outcome="x", cause=None)


async def test_concurrent_claimers_split_the_work(journal_path: Path) -> None:
    dead = await Journal.open(journal_path)
    ids = [await dead.begin(write_intent(f"/p/{i}", b"p")) for i in range(20)]
    await dead.aclose()
    claims: list[list[int]] = []
    rescuers = [await Journal.open(journal_path) for _ in range(4)]
    try:

        async def claim(j: Journal) -> None:
            claims.append([u.tx.id for u in await j.claim_unfinished()])

        async with anyio.create_task_group() as tg:
            for j in rescuers:
                tg.start_soon(claim, j)
    finally:
        for j in rescuers:
            await j.aclose()
    flat = sorted(i for c in claims for i in c)
    assert flat == ids


async def test_claim_removes_dead_lock_files(journal_path: Path) -> None:
    folder = owners_dir(journal_path)
    folder.mkdir(parents=True)
    stale = folder / "0123456789abcdef0123456789abcdef.lock"
    stale.write_bytes(b"")
    async with Journal.open(journal_path) as j:
        await j.claim_unfinished()
        assert not stale.exists()
        assert (folder / f"{j.owner}.lock").exists()


async def test_rolled_back_claim_keeps_unrestored_ordinals(journal_path: Path) -> None:
    owner, pending, _, _ = await _abandon(journal_path)
    async with Journal.open(journal_path) as j:
        claimed = {u.tx.id: u for u in await j.claim_unfinished()}
        assert claimed[pending].tx.mutations[0].applied is False
        await j.finish_recovery(
            pending, state="recovered", outcome="ROLLBACK_PARTIAL", cause=None, applied=[0]
        )
        record = await j.transaction(pending)
        assert record is not None and record.mutations[0].applied is True
        assert record.owner != owner
