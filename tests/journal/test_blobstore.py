"""The blob store: blobs in id order, their keys merged into an index in batches.

Whatever the order of stores, merges, rollbacks and gc, and whichever of two
writers does them, every stored blob is found (by the writers' and a reader's
tail caches and by a scan alike), none is stored twice, and the store's
invariants hold.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlite_utils import Database

from ledgerfs.journal import (
    Journal,
    TransactionStateError,
    _blobstore,
    _codec,
    _images,
    _schema,
)
from ledgerfs.journal import content_hash as text_hash

from .conftest import raw, write_intent

MERGE_AT = 3


def key_of(data: bytes) -> bytes:
    key = _codec.hash_key(text_hash(data))
    assert key is not None
    return key


def content(n: int) -> bytes:
    return f"image {n}\n".encode() * (n + 1)


class Reader:
    """One read connection with its own tail cache, as a journal's reader has."""

    def __init__(self, path: Path) -> None:
        self.db = _schema.connect(path, busy_timeout=5.0, durability="normal")
        self.tail = _blobstore.Tail()

    def load(self, keys: list[bytes]) -> dict[bytes, bytes]:
        """What the cache and a scan each load, in one read transaction (they must agree)."""
        self.db.execute("BEGIN")
        try:
            self.tail.sync(self.db)
            cached = _blobstore.load(self.db, keys, self.tail)
            assert cached == _blobstore.load(self.db, keys)
            return cached
        finally:
            self.db.execute("COMMIT")


class Writer:
    """One write connection with its own tail cache, as a journal's writer has."""

    def __init__(self, path: Path) -> None:
        self.db = _schema.connect(path, busy_timeout=5.0, durability="normal")
        _schema.prepare(self.db, str(path))
        self.tail = _blobstore.Tail()

    def store(self, blobs: list[bytes], *, commit: bool = True) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.tail.sync(self.db)
        _blobstore.store(self.db, [_images.image(key_of(b), b) for b in blobs], self.tail)
        if commit:
            self.db.execute("COMMIT")
            self.tail.committed()
        else:
            self.db.execute("ROLLBACK")

    def keep_only(self, kept: set[bytes]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS used (hash BLOB PRIMARY KEY)")
        self.db.execute("DELETE FROM used")
        self.db.conn.executemany("INSERT INTO used VALUES (?)", [(key_of(b),) for b in kept])
        _blobstore.drop_unused(self.db, "used")
        self.db.execute("COMMIT")

    def merge(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        _blobstore.merge(self.db)
        self.db.execute("COMMIT")

    def found(self, keys: list[bytes]) -> tuple[set[bytes], set[bytes]]:
        """What the tail cache and a scan each find (in one write transaction)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.tail.sync(self.db)
            return _blobstore.find(self.db, keys, self.tail), _blobstore.find(self.db, keys)
        finally:
            self.db.execute("ROLLBACK")


operations = st.lists(
    st.tuples(
        st.integers(0, 1),  # which writer
        st.sampled_from(["store", "rollback", "merge", "gc"]),
        st.sets(st.integers(0, 11), max_size=6),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_two_writers_find_every_blob_once(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, str, set[int]]]
) -> None:
    path = tmp_path_factory.mktemp("store") / "journal.db"
    with mock.patch.object(_blobstore, "MERGE_AT", MERGE_AT):
        writers = [Writer(path), Writer(path)]
        # Opened before the first store, so its cache lives through every operation.
        reader = Reader(path)
        stored: set[bytes] = set()
        everything = [content(n) for n in range(12)]
        keys = [key_of(b) for b in everything]
        for who, kind, ns in ops:
            writer, blobs = writers[who], [content(n) for n in sorted(ns)]
            if kind == "store":
                writer.store(blobs)
                stored |= set(blobs)
            elif kind == "rollback":
                writer.store(blobs, commit=False)
            elif kind == "merge":
                writer.merge()
            else:
                writer.keep_only(set(blobs))
                stored &= set(blobs)
            expected = {key_of(b) for b in stored}
            for w in writers:
                assert w.found(keys) == (expected, expected)
            db = writers[1 - who].db
            assert _blobstore.load(db, keys) == {key_of(b): b for b in stored}
            assert reader.load(keys) == {key_of(b): b for b in stored}
            assert _blobstore.integrity(db) == []
            rows = db.execute("SELECT count(*) FROM blobs").fetchone()[0]
            assert rows == len(stored)
        for w in writers:
            w.db.conn.close()
        reader.db.conn.close()


def test_reader_finds_a_blob_stored_again_after_gc(tmp_path: Path) -> None:
    # The reader's cache knew the blob's first id; gc deleted that row, and the
    # same bytes came back under a new id that a merge took out of the tail.
    path = tmp_path / "journal.db"
    writer, reader = Writer(path), Reader(path)
    image = content(1)
    key = key_of(image)
    writer.store([image])
    assert reader.load([key]) == {key: image}
    writer.keep_only(set())
    assert reader.load([key]) == {}
    writer.store([image])
    writer.merge()
    assert reader.load([key]) == {key: image}
    writer.db.conn.close()
    reader.db.conn.close()


@pytest.fixture
def small_merges() -> Iterator[None]:
    with mock.patch.object(_blobstore, "MERGE_AT", MERGE_AT):
        yield


def store_state(path: Path) -> tuple[int, int, int]:
    """(blobs, keyed blobs, upto) as the file holds them."""
    db = raw(path)
    blobs = db.execute("SELECT count(*) FROM blobs").fetchone()[0]
    keyed = db.execute("SELECT count(*) FROM blob_keys").fetchone()[0]
    upto = db.execute("SELECT upto FROM blob_merged").fetchone()[0]
    return int(blobs), int(keyed), int(upto)


@pytest.mark.anyio
@pytest.mark.usefixtures("small_merges")
async def test_merged_and_tail_blobs_read_back_and_verify(journal_path: Path) -> None:
    images = [content(n) for n in range(8)]
    async with Journal.open(journal_path) as j:
        for n, image in enumerate(images):
            await j.begin(write_intent(f"/f{n}", image))
        blobs, keyed, upto = store_state(journal_path)
        # Merged at every MERGE_AT new blobs: 6 keyed, 2 in the tail.
        assert (blobs, keyed, upto) == (8, 6, 6)
        assert await j.blobs(map(text_hash, images)) == {text_hash(b): b for b in images}
        report = await j.verify(full=True)
        assert report.ok and report.blobs_checked == 8, report


@pytest.mark.anyio
@pytest.mark.usefixtures("small_merges")
@pytest.mark.parametrize("merged", [False, True], ids=["in the tail", "merged"])
async def test_a_stored_image_is_named_not_stored_again(journal_path: Path, merged: bool) -> None:
    async with Journal.open(journal_path) as j:
        await j.begin(write_intent("/a", b"kept"))
        if merged:
            for n in range(MERGE_AT):
                await j.begin(write_intent(f"/f{n}", content(n)))
        before = store_state(journal_path)
        assert (before[2] >= 1) is merged
        await j.begin(write_intent("/a", b"kept"))  # given again
        named = msgspec.structs.replace(write_intent("/b", b"kept"), blobs={})
        await j.begin(named)  # named only
        assert store_state(journal_path)[0] == before[0]
        unknown = msgspec.structs.replace(write_intent("/a", b"never stored"), blobs={})
        with pytest.raises(TransactionStateError, match="neither given nor stored"):
            await j.begin(unknown)


@pytest.mark.anyio
@pytest.mark.usefixtures("small_merges")
async def test_a_second_journal_sees_the_others_tail(journal_path: Path) -> None:
    """Two instances on one file (as two processes): each one's cache catches up."""
    async with Journal.open(journal_path) as first, Journal.open(journal_path) as second:
        await first.begin(write_intent("/a", b"shared"))
        named = msgspec.structs.replace(write_intent("/b", b"shared"), blobs={})
        await second.begin(named)
        await second.begin(write_intent("/b", b"shared"))
        for n in range(MERGE_AT + 1):  # the second one merges the tail
            await second.begin(write_intent(f"/f{n}", content(n)))
        await first.begin(write_intent("/c", content(0), before=b"shared"))
        assert store_state(journal_path)[0] == MERGE_AT + 2
        assert (await first.verify()).ok


@pytest.mark.anyio
@pytest.mark.usefixtures("small_merges")
async def test_gc_merges_the_tail_and_drops_only_unused(journal_path: Path) -> None:
    async with Journal.open(journal_path) as j:
        for n in range(5):
            tx = await j.begin(write_intent("/a", content(n + 1), before=content(n)))
            await j.commit(tx)
        await j.checkpoint(tx)  # unfinished transactions are never dropped
        report = await j.gc(keep_last=1)
        assert (report.transactions_dropped, report.blobs_dropped) == (4, 4)
        blobs, keyed, upto = store_state(journal_path)
        assert (blobs, keyed) == (2, 2) and upto >= 6
        kept = [content(4), content(5)]
        assert await j.blobs(map(text_hash, kept)) == {text_hash(b): b for b in kept}
        # Ids go on above the merged mark, though gc dropped the highest ones.
        await j.begin(write_intent("/b", b"after gc"))
        assert store_state(journal_path)[:2] == (3, 2)
        assert await j.blob(text_hash(b"after gc")) == b"after gc"
        assert (await j.verify()).ok


def _drop_a_key(db: sqlite3.Connection) -> None:
    db.execute("DELETE FROM blob_keys WHERE id = (SELECT min(id) FROM blob_keys)")


def _point_a_key_elsewhere(db: sqlite3.Connection) -> None:
    db.execute("UPDATE blob_keys SET id = id + 1000 WHERE id = (SELECT min(id) FROM blob_keys)")


def _store_a_hash_twice(db: sqlite3.Connection) -> None:
    db.execute(
        "INSERT INTO blobs (id, hash, size, data) SELECT 1000, hash, size, data FROM blobs"
        " WHERE id = (SELECT max(id) FROM blobs)"
    )


@pytest.mark.anyio
@pytest.mark.usefixtures("small_merges")
@pytest.mark.parametrize(
    ("damage", "complaint"),
    [
        (_drop_a_key, "merged blobs have no key"),
        (_point_a_key_elsewhere, "name no blob"),
        (_store_a_hash_twice, "stored more than once"),
    ],
)
async def test_verify_reports_a_broken_store(
    journal_path: Path, damage: object, complaint: str
) -> None:
    async with Journal.open(journal_path) as j:
        for n in range(MERGE_AT + 1):
            await j.begin(write_intent(f"/f{n}", content(n)))
        assert (await j.verify()).ok
        db = raw(journal_path)
        damage(db)  # type: ignore[operator]
        db.close()
        report = await j.verify()
        assert not report.ok
        assert any(complaint in problem for problem in report.problems), report.problems


def test_a_fresh_store_is_empty_and_merged(tmp_path: Path) -> None:
    db = Database(raw(tmp_path / "j.db"))
    _schema.prepare(db, "j.db")
    assert _blobstore.integrity(db) == []
    assert db.execute("SELECT upto FROM blob_merged").fetchall() == [(0,)]


@pytest.mark.anyio
async def test_a_failed_request_in_a_group_leaves_no_blob_behind(journal_path: Path) -> None:
    """A group whose fast attempt fails runs again with a savepoint per request:
    the blob of the request that failed was never stored, and is stored later."""
    orphan = b"given by the request that fails"
    failing = msgspec.structs.replace(
        write_intent("/x", b"never stored"), blobs={text_hash(orphan): orphan}
    )
    outcomes: list[object] = []

    async with Journal.open(journal_path) as j:

        async def begin(intent: object) -> None:
            try:
                outcomes.append(await j.begin(intent))  # type: ignore[arg-type]
            except TransactionStateError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(begin, write_intent(f"/f{n}", content(n)))
            tg.start_soon(begin, failing)
        assert sum(isinstance(o, TransactionStateError) for o in outcomes) == 1
        assert (await j.statistics()).largest_group > 1
        assert await j.blob(text_hash(orphan)) is None
        await j.begin(write_intent("/y", orphan))
        assert await j.blob(text_hash(orphan)) == orphan
        assert (await j.verify()).ok
