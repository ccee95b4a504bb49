"""Paths stored relative to their roots (schema version 9): a journal moved or copied
with its workspace reads its records where the roots are now.

A journal written at version 5 (absolute paths) is migrated, then moved with its
workspace, then moved alone; each open finds its roots again (by their place
relative to the journal, else where they were recorded) and reads every record
at the new place, with its relocation reported.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlite_utils import Database

from ledgerfs.journal import (
    Journal,
    MutationRecord,
    TxIntent,
    _queries,
    content_hash,
    recorded_roots,
)
from ledgerfs.journal._places import Places, loaded_key, stored_key
from ledgerfs.journal._schema import APPLICATION_ID, LATEST_VERSION, MIGRATIONS

from .conftest import raw, write_intent

pytestmark = pytest.mark.anyio

OUTSIDE = "/elsewhere/x.txt"


# -- keys ------------------------------------------------------------------------------

KEY_CASES = [
    # (roots, path, key)
    ({1: "/w/a"}, "/w/a/x.txt", "1:x.txt"),
    ({1: "/w/a"}, "/w/a", "1:"),
    ({1: "/w/a"}, "/w/ab/x.txt", "/w/ab/x.txt"),  # a sibling sharing a prefix
    ({1: "/w/a"}, "/w", "/w"),
    ({1: "/w/a", 2: "/w/b"}, "/w/b/d/e", "2:d/e"),
    ({1: "/w/a", 2: "/w/a/sub"}, "/w/a/sub/x", "1:sub/x"),  # nested: the oldest root
    ({1: "/w/a/sub", 2: "/w/a"}, "/w/a/sub/x", "1:x"),
    ({1: "/w/a/sub", 2: "/w/a"}, "/w/a/y", "2:y"),
    ({1: "/"}, "/etc/x", "1:etc/x"),
    ({1: "/w/a"}, "/w/a/caf\udce9", "1:caf\udce9"),
    ({1: "/w/a"}, "/w/a/1:x", "1:1:x"),
]


@pytest.mark.parametrize(("roots", "path", "key"), KEY_CASES)
def test_a_path_is_keyed_by_its_oldest_root_and_read_back(
    roots: dict[int, str], path: str, key: str
) -> None:
    places = Places(roots)
    assert places.key(path) == key
    assert places.path(key) == path


# Any name a file system holds, as Python names it: text, or bytes that are not
# UTF-8 decoded with their lone bytes as surrogates (U+DC80-U+DCFF, `os.fsdecode`).
_segment = st.one_of(
    st.text(st.characters(exclude_characters="/\x00", exclude_categories=("Cs",)), min_size=1),
    st.binary(min_size=1).filter(lambda b: b"/" not in b and b"\x00" not in b).map(os.fsdecode),
).filter(lambda s: s not in (".", ".."))


@given(inside=st.lists(_segment, min_size=0, max_size=4))
def test_a_path_inside_a_root_follows_the_root(inside: list[str]) -> None:
    relative = "/".join(inside)
    before = "/old/place/ws" + (f"/{relative}" if relative else "")
    stored = stored_key(before, Places({1: "/old/place/ws", 2: "/old/other"}))
    stored.encode("utf-8")  # what SQLite text and msgpack hold
    after = loaded_key(stored, Places({1: "/new/ws", 2: "/old/other"}))
    assert after == "/new/ws" + (f"/{relative}" if relative else "")


# -- a version-5 journal, migrated and moved --------------------------------------------


def mutation(
    ordinal: int,
    op: str,
    path: str,
    after: bytes | None,
    *,
    destination: str | None = None,
    before: bytes | None = None,
    kind: str = "file",
) -> MutationRecord:
    return MutationRecord(
        ordinal=ordinal,
        op=op,
        path=path,
        destination=destination,
        before_hash=None if before is None else content_hash(before),
        after_hash=None if after is None else content_hash(after),
        before_mode=None,
        after_mode=0o644,
        kind=kind,
    )


def intents(ws: Path, other: Path) -> list[TxIntent]:
    """Writes in two roots, a move across them, a name that is not UTF-8, a path
    outside every root."""
    w, o = str(ws), str(other)
    blobs = {content_hash(b): b for b in (b"a\n", b"b\n", b"c\n")}
    made = [
        [mutation(0, "write", f"{w}/a.txt", b"a\n")],
        [mutation(0, "write", f"{o}/b.txt", b"b\n"),
         mutation(1, "mkdir", f"{w}/d", None, kind="dir")],
        [mutation(0, "move", f"{w}/a.txt", b"a\n", destination=f"{o}/a.txt", before=b"a\n")],
        [mutation(0, "write", f"{w}/d/caf\udce9", b"c\n")],
        [mutation(0, "write", OUTSIDE, b"c\n")],
    ]  # fmt: skip
    return [
        TxIntent(session="s", mutations=ms, blobs=blobs, budget_charge=1, summary=f"tx {i}")
        for i, ms in enumerate(made, 1)
    ]


def write_version_5(path: Path, made: list[TxIntent]) -> None:
    """The journal file as version 5 left it: its schema, absolute paths, committed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = Database(raw(path))
    db.execute("PRAGMA journal_mode = WAL")
    for migration in [m for m in MIGRATIONS if m.version <= 5]:
        db.execute("BEGIN IMMEDIATE")
        migration.apply(db)
        db.execute(
            "INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, 0)",
            (migration.version, migration.name),
        )
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {migration.version}")
        db.execute("COMMIT")
    # Version 5 stored every path as it was given (a key of no root is the path itself).
    # Today's rows are written with the blobs' forms (version 8), taken out after:
    # these blobs are small, stored as version 5 stored them.
    (forms,) = [m for m in MIGRATIONS if m.name == "chunked images"]
    db.execute("BEGIN IMMEDIATE")
    forms.apply(db)
    prepared = [_queries.prepare(i, "e" * 32, 1_700_000_000.0, Places({})) for i in made]
    ids = _queries.begin_many(db, prepared)
    for tx in ids:
        _queries.commit(db, tx, 1_700_000_001.0)
    db.execute("UPDATE transactions SET checkpointed = 1")
    assert db.execute("SELECT count(*) FROM blobs WHERE form != 0").fetchone() == (0,)
    db.execute("ALTER TABLE blobs DROP COLUMN form")
    db.execute("DROP TABLE blob_chunks")
    db.execute("COMMIT")
    db.conn.close()


#: Each transaction's (path, destination) pairs, oldest first.
Shapes = list[list[tuple[str, str | None]]]


def paths_of(record_paths: Shapes, old: str, new: str) -> Shapes:
    """`record_paths` with the paths under `old` moved under `new`."""

    def moved(p: str | None) -> str | None:
        return None if p is None else p.replace(old, new, 1) if p.startswith(old) else p

    return [[(moved(p) or "", moved(d)) for p, d in tx] for tx in record_paths]


async def shapes(j: Journal) -> Shapes:
    return [[(m.path, m.destination) for m in r.mutations] for r in reversed(await j.history())]


async def test_version_5_migrates_and_follows_its_workspace(tmp_path: Path) -> None:
    place = (tmp_path / "place").resolve()
    ws, other = place / "ws", place / "other"
    for folder in (ws / "d", other):
        folder.mkdir(parents=True)
    path = ws / ".ledgerfs" / "journal.db"
    made = intents(ws, other)
    write_version_5(path, made)
    written = [[(m.path, m.destination) for m in i.mutations] for i in made]

    async with Journal.open(path, roots=[str(ws), str(other)]) as j:
        assert await shapes(j) == written
        assert j.relocation is None
    check = raw(path)
    assert check.execute("PRAGMA user_version").fetchone() == (LATEST_VERSION,)
    assert (9, "relative paths") in check.execute("SELECT version, name FROM migrations").fetchall()
    stored = {p for (p,) in check.execute("SELECT path FROM paths")}
    # Inside the roots, keys; outside every root, the path as it was.
    assert not any(p.startswith(str(place)) for p in stored)
    assert OUTSIDE in stored and "1:a.txt" in stored and "2:a.txt" in stored
    check.close()

    there = (tmp_path / "there").resolve()
    shutil.move(place, there)
    new_ws, new_other = there / "ws", there / "other"
    moved_path = new_ws / ".ledgerfs" / "journal.db"
    expected = paths_of(written, str(place), str(there))
    assert recorded_roots(moved_path) == [str(new_ws), str(new_other)]
    # Read-only from the new place: found where the roots are now, and said so.
    async with Journal.open(moved_path, readonly=True, roots=[str(new_ws)]) as j:
        assert await shapes(j) == expected
        assert j.relocation is not None
        assert (j.relocation.previous, j.relocation.current) == (str(path), str(moved_path))
    async with Journal.open(moved_path, roots=[str(new_ws), str(new_other)]) as j:
        assert j.relocation is not None and j.relocation.previous == str(path)
        assert await shapes(j) == expected
        assert [r.id for r in await j.history(path=f"{new_other}/a.txt")] == [3]
        assert [r.id for r in await j.history(path=f"{new_ws}/d/caf\udce9")] == [4]
        found = await j.last_change(f"{new_ws}/a.txt")
        assert found is not None and found[0].id == 3
        tx = await j.begin(write_intent(f"{new_ws}/e.txt", b"e\n"))
        await j.commit(tx)
    # The new place is recorded: the next open is no relocation, and no new root.
    async with Journal.open(moved_path, roots=[str(new_ws), str(new_other)]) as j:
        assert j.relocation is None
        assert [r.id for r in await j.history(path=f"{new_ws}/e.txt")] == [6]
        # The records stored absolute were left as the audit chain covers them.
        report = await j.verify(full=True)
        assert report.ok, report.problems
    check = raw(moved_path)
    assert check.execute("SELECT id, path, relative FROM roots ORDER BY id").fetchall() == [
        (1, str(new_ws), ".."),
        (2, str(new_other), "../../other"),
    ]
    assert [p for (p,) in check.execute("SELECT path FROM locations ORDER BY id")] == [
        str(path),
        str(moved_path),
    ]


MOVES = [
    # (the journal before and after, relative to tmp; the folders moved; the root after)
    pytest.param("ws/.ledgerfs/journal.db", "moved/ws/.ledgerfs/journal.db",
                 {"ws": "moved/ws"}, "moved/ws", id="workspace-moved"),
    pytest.param("state/journal.db", "other/journal.db", {"state": "other"}, "ws",
                 id="journal-moved-alone"),
    pytest.param("state/journal.db", "b/state/journal.db", {"state": "b/state", "ws": "b/ws"},
                 "b/ws", id="both-moved-together"),
]  # fmt: skip


@pytest.mark.parametrize(("before", "after", "moves", "root"), MOVES)
async def test_each_root_is_found_again_after_a_move(
    tmp_path: Path, before: str, after: str, moves: dict[str, str], root: str
) -> None:
    base = tmp_path.resolve()
    (base / "ws").mkdir()
    async with Journal.open(base / before, roots=[str(base / "ws")]) as j:
        tx = await j.begin(write_intent(f"{base}/ws/a.txt", b"a\n"))
        await j.commit(tx)
    for old, new in moves.items():
        (base / new).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(base / old, base / new)
    new_ws = base / root
    async with Journal.open(base / after, roots=[str(new_ws)]) as j:
        record = await j.transaction(tx)
        assert record is not None and record.mutations[0].path == f"{new_ws}/a.txt"
        assert [r.id for r in await j.history(path=f"{new_ws}/a.txt")] == [tx]
    # The same root, found again (not a second one).
    assert raw(base / after).execute("SELECT id, path FROM roots").fetchall() == [(1, str(new_ws))]


async def test_a_root_given_later_takes_its_stored_paths(tmp_path: Path) -> None:
    base = tmp_path.resolve()
    (base / "ws").mkdir()
    path = base / "state" / "journal.db"
    async with Journal.open(path) as j:  # no roots: paths are stored as they are
        tx = await j.begin(write_intent(f"{base}/ws/a.txt", b"a\n"))
        await j.commit(tx)
    assert raw(path).execute("SELECT path FROM paths").fetchall() == [(f"{base}/ws/a.txt",)]
    async with Journal.open(path, roots=[str(base / "ws")]):
        pass
    assert raw(path).execute("SELECT path FROM paths").fetchall() == [("1:a.txt",)]


async def test_a_root_another_process_records_later_is_read(tmp_path: Path) -> None:
    base = tmp_path.resolve()
    for name in ("a", "b"):
        (base / name).mkdir()
    path = base / "a" / ".ledgerfs" / "journal.db"
    async with Journal.open(path, roots=[str(base / "a")]) as first:
        async with Journal.open(path, roots=[str(base / "a"), str(base / "b")]) as second:
            tx = await second.begin(write_intent(f"{base}/b/x.txt", b"x\n"))
            await second.commit(tx)
        record = await first.transaction(tx)
        assert record is not None and record.mutations[0].path == f"{base}/b/x.txt"


async def test_an_open_with_nothing_to_record_writes_nothing(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    path = root / ".ledgerfs" / "journal.db"
    async with Journal.open(path, roots=[str(root)]):
        pass
    holder = raw(path)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        async with Journal.open(path, roots=[str(root)], busy_timeout=0.2) as j:
            assert j.relocation is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
