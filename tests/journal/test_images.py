"""Images stored as shared chunks: they read back as stored, an edit costs its change,
gc keeps a chunk while any image lists it, verify finds a damaged chunk, and a
journal of schema version 5 reads the same after the migration."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlite_utils import Database

from ledgerfs.journal import Journal, _blobstore, _codec, _images, _schema, content_hash

from .conftest import raw, write_intent

# Chunk sizes small enough that a few KiB make many chunks (FastCDC's smallest).
SMALL = {"MIN_CHUNK": 64, "AVG_CHUNK": 256, "MAX_CHUNK": 1024, "CHUNKED_FROM": 1024}


@pytest.fixture
def small_chunks() -> Iterator[None]:
    with mock.patch.multiple(_images, **SMALL):
        yield


def key_of(data: bytes) -> bytes:
    key = _codec.hash_key(content_hash(data))
    assert key is not None
    return key


def text(size: int, seed: int) -> bytes:
    """`size` bytes of numbered lines of words (compressible as source is)."""
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghij_xyz", k=rng.randint(2, 8))) for _ in range(300)]
    lines = (f"{n:06d} {' '.join(rng.choices(words, k=8))}\n" for n in range(size // 30 + 1))
    return "".join(lines).encode()[:size]


class Store:
    """A journal file's write connection, storing and loading images directly."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = _schema.connect(path, busy_timeout=5.0, durability="normal")
        _schema.prepare(self.db, str(path))

    def store(self, images: list[bytes]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        _blobstore.store(self.db, [_images.image(key_of(b), b) for b in images])
        self.db.execute("COMMIT")

    def stored_bytes(self) -> int:
        """The bytes the store holds: blobs as stored, and chunk lists."""
        blobs = self.db.execute("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()[0]
        lists = self.db.execute(
            "SELECT coalesce(sum(length(chunks)), 0) FROM blob_chunks"
        ).fetchone()[0]
        return int(blobs) + int(lists)

    def close(self) -> None:
        self.db.conn.close()


edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 300), st.binary(max_size=300)), max_size=6
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.one_of(st.binary(max_size=12_000), st.integers(0, 2**16).map(lambda s: text(9000, s))),
    changes=edits,
)
def test_images_and_their_edits_read_back_as_stored(
    tmp_path_factory: pytest.TempPathFactory, base: bytes, changes: list[tuple[float, int, bytes]]
) -> None:
    versions = [base]
    for where, cut, insert in changes:
        last = versions[-1]
        at = int(where * len(last))
        versions.append(last[:at] + insert + last[at + cut :])
    store = Store(tmp_path_factory.mktemp("images") / "journal.db")
    with contextlib.closing(store), mock.patch.multiple(_images, **SMALL):
        for version in versions:
            store.store([version])
        keys = [key_of(v) for v in versions]
        assert _blobstore.load(store.db, keys) == {key_of(v): v for v in versions}
        assert _blobstore.integrity(store.db) == []
        rows = store.db.execute("SELECT id, hash, size, form, data FROM blobs").fetchall()
        for id, key, size, form, data in rows:
            assert _blobstore.intact(store.db, bytes(key), size, (id, form, bytes(data)))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16), where=st.floats(0, 0.99), line=st.binary(min_size=1, max_size=80)
)
def test_a_line_edit_of_a_big_image_adds_about_a_chunk(
    tmp_path_factory: pytest.TempPathFactory, seed: int, where: float, line: bytes
) -> None:
    image = text(1 << 20, seed)
    at = image.index(b"\n", int(where * (len(image) - 1))) + 1
    edited = image[:at] + line + b"\n" + image[at:]
    store = Store(tmp_path_factory.mktemp("dedup") / "journal.db")
    with contextlib.closing(store):
        store.store([image])
        first = store.stored_bytes()
        store.store([edited])
        added = store.stored_bytes() - first
        # The chunks the edit touched (one or two, compressed) and the new chunk list.
        assert added <= 2 * _images.MAX_CHUNK, added
        assert first < len(image)  # text compresses
        assert _blobstore.load(store.db, [key_of(edited)]) == {key_of(edited): edited}


async def _finished(j: Journal, path: str, data: bytes) -> int:
    tx = await j.begin(write_intent(path, data))
    await j.commit(tx)
    await j.checkpoint(tx)
    return tx


@pytest.mark.anyio
@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dropped", [0, 1], ids=["first image dropped", "second image dropped"])
async def test_gc_keeps_a_chunk_while_an_image_lists_it(
    journal: Journal, journal_path: Path, dropped: int
) -> None:
    one = text(20_000, 1)
    two = one[:10_000] + b"an edit in the middle\n" + one[10_000:]
    txs = [await _finished(journal, f"/f{n}", image) for n, image in enumerate((one, two))]
    await _finished(journal, "/newest", b"the newest transaction always stays")
    db = raw(journal_path)
    shared = db.execute("SELECT count(*) FROM blobs").fetchone()[0]
    report = await journal.gc(keep_last=1, only=[txs[dropped]])
    assert report.transactions_dropped == 1
    gone, kept = (one, two) if dropped == 0 else (two, one)
    assert await journal.blob(content_hash(gone)) is None
    assert await journal.blob(content_hash(kept)) == kept
    # The image's own row and the chunks only it listed went; the shared ones stayed.
    left = db.execute("SELECT count(*) FROM blobs").fetchone()[0]
    assert 2 <= report.blobs_dropped <= 6 and left == shared - report.blobs_dropped
    assert (await journal.verify(full=True)).ok
    await journal.gc(keep_last=1, only=[txs[1 - dropped]])
    assert db.execute("SELECT count(*) FROM blob_chunks").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
    assert (await journal.verify(full=True)).ok


def _damage_chunk(db: Database, how: str) -> bytes:
    """Damage one chunk of the only chunked image; return the chunk's hash."""
    (listed,) = db.execute("SELECT chunks FROM blob_chunks").fetchone()
    chunk = _images.decode_chunk_ids(listed)[3]
    key, form, data = db.execute(
        "SELECT hash, form, data FROM blobs WHERE id = ?", (chunk,)
    ).fetchone()
    if how == "bytes changed":
        changed = _images.unpack(form, data).replace(b"0", b"1", 1)
        db.execute("UPDATE blobs SET data = ?, form = 0 WHERE id = ?", (changed, chunk))
    elif how == "frame broken":
        db.execute(
            "UPDATE blobs SET data = ?, form = 1 WHERE id = ?", (b"\x28\xb5\x2f\xfd!", chunk)
        )
    else:
        db.execute("DELETE FROM blob_keys WHERE id = ?", (chunk,))
        db.execute("DELETE FROM blobs WHERE id = ?", (chunk,))
    return bytes(key)


@pytest.mark.anyio
@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("how", ["bytes changed", "frame broken", "chunk deleted"])
async def test_verify_finds_a_damaged_chunk(journal: Journal, journal_path: Path, how: str) -> None:
    image = text(20_000, 2)
    await _finished(journal, "/big", image)
    assert (await journal.verify(full=True)).ok
    db = Database(raw(journal_path))
    chunk = _damage_chunk(db, how)
    report = await journal.verify()
    assert not report.ok
    assert content_hash(image) in report.corrupt
    if how == "chunk deleted":
        assert any("missing" in problem for problem in report.problems), report
    else:
        assert _codec.hash_text(chunk) in report.corrupt
    # A damaged image is not handed out as if it were whole.
    assert await journal.blob(content_hash(image)) is None


@pytest.fixture
def version_5(journal_path: Path) -> Iterator[dict[str, bytes]]:
    """A journal at schema version 5 with blobs as that version stored them: one row
    each, bytes as they are, the older ones merged, the newest in the tail."""
    journal_path.parent.mkdir(parents=True)
    db = Database(raw(journal_path))
    for migration in [m for m in _schema.MIGRATIONS if m.version <= 5]:
        db.execute("BEGIN IMMEDIATE")
        migration.apply(db)
        db.execute("INSERT INTO migrations VALUES (?, ?, 0)", (migration.version, migration.name))
        db.execute(f"PRAGMA application_id = {_schema.APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {migration.version}")
        db.execute("COMMIT")
    images = {"/small": b"small file\n", "/big": text(300_000, 3), "/other": text(5000, 4)}
    now = time.time()
    for tx, (path, data) in enumerate(images.items(), 1):
        stored = _codec.Stored(
            ordinal=0, op="write", path=path, destination=None, before=None,
            after=key_of(data), before_mode=None, after_mode=0o644,
        )  # fmt: skip
        db.execute(
            "INSERT INTO transactions (id, session, state, created_at, summary, owner,"
            " checkpointed, mutations) VALUES (?, 's', 'committed', ?, 'write', 'o', 1, ?)",
            (tx, now, _codec.encode_mutations([stored])),
        )
        db.execute("INSERT INTO paths (path, tx) VALUES (?, ?)", (path, tx))
        db.execute(
            "INSERT INTO blobs (id, hash, size, data) VALUES (?, ?, ?, ?)",
            (tx, key_of(data), len(data), data),
        )
    db.execute("INSERT INTO blob_keys (hash, id) SELECT hash, id FROM blobs WHERE id <= 2")
    db.execute("UPDATE blob_merged SET upto = 2")
    db.execute("INSERT INTO sessions (id, budget_used, created_at) VALUES ('s', 3, ?)", (now,))
    db.conn.close()
    yield images


@pytest.mark.anyio
@pytest.mark.usefixtures("small_chunks")
async def test_a_version_5_journal_reads_the_same_then_stores_chunks(
    journal_path: Path, version_5: dict[str, bytes]
) -> None:
    big = version_5["/big"]
    edited = big[:150_000] + b"one more line\n" + big[150_000:]
    async with Journal.open(journal_path, create=False) as j:
        hashes = [content_hash(data) for data in version_5.values()]
        assert await j.blobs(hashes) == {content_hash(d): d for d in version_5.values()}
        assert (await j.verify(full=True)).ok
        tx = await j.begin(write_intent("/big", edited, before=big))
        await j.commit(tx)
        await j.checkpoint(tx)
        assert await j.blob(content_hash(edited)) == edited
        assert await j.blob(content_hash(big)) == big  # still the old row, read as it was
        # Dropping the first write leaves the old row to the edit's before image.
        report = await j.gc(keep_last=1, only=[2])
        assert report.transactions_dropped == 1
        assert await j.blob(content_hash(big)) == big
        assert (await j.verify(full=True)).ok
    db = raw(journal_path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == _schema.LATEST_VERSION
    names = [r[0] for r in db.execute("SELECT name FROM migrations ORDER BY version")]
    assert "chunked images" in names
    forms = dict(db.execute("SELECT hash, form FROM blobs").fetchall())
    assert forms[key_of(big)] == _images.Form.RAW
    assert forms[key_of(edited)] == _images.Form.CHUNKED
