"""gc keeps what recovery may need; verify finds tampered and missing blobs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ledgerfs.journal import Journal, content_hash

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio


async def _finished(j: Journal, path: str, data: bytes) -> int:
    tx = await j.begin(write_intent(path, data))
    await j.commit(tx)
    await j.checkpoint(tx)
    return tx


async def test_gc_without_policy_drops_nothing(journal: Journal) -> None:
    await _finished(journal, "/a", b"a")
    report = await journal.gc()
    assert (report.transactions_dropped, report.blobs_dropped, report.bytes_freed) == (0, 0, 0)


async def test_gc_keep_last_drops_old_finished_and_their_blobs(
    journal: Journal, journal_path: Path
) -> None:
    old = [await _finished(journal, f"/old/{i}", b"old %d" % i) for i in range(5)]
    shared = await _finished(journal, "/s", b"shared")
    keep = [await _finished(journal, f"/new/{i}", b"new %d" % i) for i in range(3)]
    await _finished(journal, "/s2", b"shared")  # keeps the shared blob referenced
    report = await journal.gc(keep_last=4)
    assert report.transactions_dropped == 6
    assert report.blobs_dropped == 5
    assert report.bytes_freed == sum(len(b"old %d" % i) for i in range(5))
    for tx in [*old, shared]:
        assert await journal.transaction(tx) is None
    for tx in keep:
        assert await journal.transaction(tx) is not None
    assert await journal.blob(content_hash(b"shared")) == b"shared"
    assert await journal.blob(content_hash(b"old 0")) is None
    assert (await journal.verify()).ok
    orphans = raw(journal_path).execute(
        "SELECT count(*) FROM paths WHERE tx NOT IN (SELECT id FROM transactions)"
    )
    assert orphans.fetchone()[0] == 0
    assert [r.id for r in await journal.history(path="/old/0")] == []


async def test_gc_never_drops_pending_or_uncheckpointed(journal: Journal) -> None:
    pending = await journal.begin(write_intent("/p", b"pending image"))
    committed = await journal.begin(write_intent("/c", b"unchecked image"))
    await journal.commit(committed)
    rolled = await journal.begin(write_intent("/r", b"rolled"))
    await journal.rollback(rolled, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
    newest = await journal.begin(write_intent("/n", b"newest"))
    await journal.rollback(newest, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
    report = await journal.gc(keep_last=0, keep_days=0)
    assert await journal.transaction(newest) is not None
    assert report.transactions_dropped == 1
    assert await journal.transaction(rolled) is None
    for tx in (pending, committed):
        assert await journal.transaction(tx) is not None
    assert await journal.blob(content_hash(b"pending image")) == b"pending image"
    assert await journal.blob(content_hash(b"unchecked image")) == b"unchecked image"


async def test_gc_keep_days(journal: Journal, journal_path: Path) -> None:
    old = await _finished(journal, "/old", b"old")
    new = await _finished(journal, "/new", b"new")
    conn = raw(journal_path)
    conn.execute(
        "UPDATE transactions SET created_at = created_at - 10 * 86400 WHERE id = ?", (old,)
    )
    conn.close()
    report = await journal.gc(keep_days=1)
    assert report.transactions_dropped == 1
    assert await journal.transaction(old) is None
    assert await journal.transaction(new) is not None


async def test_verify_ok_then_detects_tampered_and_missing(
    journal: Journal, journal_path: Path
) -> None:
    await _finished(journal, "/a", b"alpha")
    await _finished(journal, "/b", b"beta")
    report = await journal.verify(full=True)
    assert report.ok and report.blobs_checked == 2
    conn = raw(journal_path)
    conn.execute("UPDATE blobs SET data = ? WHERE hash = ?", (b"alphx", key(b"alpha")))
    conn.execute("DELETE FROM blobs WHERE hash = ?", (key(b"beta"),))
    conn.close()
    report = await journal.verify()
    assert not report.ok
    assert report.corrupt == [content_hash(b"alpha")]
    assert report.missing == [content_hash(b"beta")]
    assert report.blobs_checked == 1


def key(data: bytes) -> bytes:
    """The stored key of `data`'s blob: the 32 bytes of its blake3 digest."""
    return bytes.fromhex(content_hash(data).removeprefix("blake3:"))


async def test_gc_never_lets_an_id_come_back(journal: Journal) -> None:
    ids = [await _finished(journal, f"/i/{i}", b"%d" % i) for i in range(3)]
    report = await journal.gc(keep_last=0)
    assert report.transactions_dropped == 2
    assert [r.id for r in await journal.history()] == [ids[-1]]
    fresh = await journal.begin(write_intent("/i/new", b"new"))
    assert fresh > ids[-1]


async def test_gc_candidates_preview_exactly_what_gc_drops(journal: Journal) -> None:
    ids = [await _finished(journal, f"/p/{i}", b"p %d" % i) for i in range(6)]
    preview = await journal.gc_candidates(keep_last=2)
    assert [r.id for r in preview] == ids[:4]
    assert [r.id for r in await journal.history(limit=100)] == ids[::-1]  # a preview drops nothing
    report = await journal.gc(keep_last=2)
    assert report.transactions_dropped == 4
    assert [r.id for r in await journal.history(limit=100)] == ids[:3:-1]


async def test_gc_only_drops_nothing_the_preview_did_not_show(journal: Journal) -> None:
    ids = [await _finished(journal, f"/q/{i}", b"q %d" % i) for i in range(4)]
    shown = [r.id for r in await journal.gc_candidates(keep_last=2)]
    assert shown == ids[:2]
    # More transactions arrive between the preview and the confirmation.
    later = [await _finished(journal, f"/q/late{i}", b"late %d" % i) for i in range(3)]
    report = await journal.gc(keep_last=2, only=shown)
    assert report.transactions_dropped == 2
    remaining = [r.id for r in await journal.history(limit=100)]
    assert remaining == [*later[::-1], ids[3], ids[2]]


def _on_disk(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


async def test_gc_gives_the_space_back_to_the_file_system(
    journal: Journal, journal_path: Path
) -> None:
    # 10 MiB the gc drops: random, so they neither compress nor share chunks.
    images = [random.Random(i).randbytes(256 * 1024) for i in range(40)]
    for i, data in enumerate(images):
        await _finished(journal, f"/big/{i}", data)
    kept = await _finished(journal, "/kept", b"kept")
    before = _on_disk(journal_path)
    report = await journal.gc(keep_last=1)
    after = _on_disk(journal_path)
    assert report.bytes_freed == sum(map(len, images))
    assert report.bytes_returned == before - after
    assert report.bytes_returned >= 0.9 * report.bytes_freed
    assert (await journal.verify()).ok and await journal.transaction(kept) is not None
    assert await _finished(journal, "/after", b"after") > kept  # it still takes writes


async def test_gc_that_drops_nothing_rewrites_nothing(journal: Journal, journal_path: Path) -> None:
    await _finished(journal, "/a", b"a" * 100_000)
    inode = journal_path.stat().st_ino
    report = await journal.gc(keep_last=5)
    assert (report.transactions_dropped, report.bytes_returned) == (0, 0)
    assert journal_path.stat().st_ino == inode
