"""Paged reads from line indexes: the same pages as a whole read, for the page's cost.

A page served from a version's line index (found by the file's identity, without
reading the whole file) must be exactly the page a whole read returns, hash
included, for every shape of text (each line break `str.splitlines` knows, wide
and non-ASCII lines, binary bytes) and every window. The identity names the
content only when the file was settled (engine/pages.py): a file changed in place
with its size and mtime kept is read afresh, a file changed within the racy window
is never trusted by identity, and a page read while the file changes is not
served. Indexes stay within their byte budget.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import Engine, LedgerError
from ledgerfs.engine.errors import Code
from ledgerfs.engine.pages import RACY_NS, Identity, LineIndexes, index_of, settled
from ledgerfs.engine.paths import Workspace
from ledgerfs.engine.reads import MAX_TEXT_BYTES, LineWindow, read_file_kept
from ledgerfs.journal import content_hash


def read_file(*args: Any) -> Any:
    """The page `read_file_kept` returns, without the bytes."""
    return read_file_kept(*args)[0]


def later() -> int:
    """A clock far enough ahead that every file on disk is settled."""
    return time.time_ns() + 10 * RACY_NS


def reference_page(data: bytes, window: LineWindow) -> tuple[str, int, int | None]:
    """What a page holds, computed from the whole text: content, lines, next offset."""
    lines = data.decode("utf-8").splitlines(keepends=True)
    start, end = window.bounds(len(lines))
    used = 0
    for index in range(start, end):
        used += len(lines[index].encode("utf-8"))
        if used > MAX_TEXT_BYTES and index > start:
            end = index
            break
    return "".join(lines[start:end]), end - start, end if end < len(lines) else None


LINE_PIECES = st.sampled_from(
    ["a", "é", "€", "𝄞", " ", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
)
#: Newline-ended lines only (indexed by blocks of newline counts), some long
#: enough to cross blocks.
NEWLINE_PIECES = st.sampled_from(["a", "é", "𝄞", "\n", "\r\n", "\n\n\n", "y" * 1500, "z" * 5000])
WINDOWS = st.one_of(
    st.builds(
        LineWindow,
        offset=st.none() | st.integers(0, 40),
        limit=st.none() | st.integers(0, 40),
    ),
    st.builds(LineWindow, head=st.integers(0, 40)),
    st.builds(LineWindow, tail=st.integers(0, 40)),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.one_of(st.lists(LINE_PIECES, max_size=60), st.lists(NEWLINE_PIECES, max_size=60)).map(
        "".join
    ),
    window=WINDOWS,
)
def test_a_page_from_the_index_is_the_page_of_the_whole_text(
    tmp_path: Path, text: str, window: LineWindow
) -> None:
    path = tmp_path / "f.txt"
    data = text.encode("utf-8")
    path.write_bytes(data)
    target = Workspace([str(tmp_path)]).resolve(str(path))
    indexes = LineIndexes(clock=later)
    whole = read_file(target, window, 1 << 20, None, indexes)  # reads it all, indexes it
    paged = read_file(target, window, 1 << 20, None, indexes)  # from the index
    assert indexes.statistics().by_identity >= 1
    assert paged == whole == read_file(target, window, 1 << 20)
    content, lines, following = reference_page(data, window)
    assert (paged.content, paged.lines, paged.next_offset) == (content, lines, following)
    assert paged.content_hash == content_hash(data)
    assert paged.total_lines == len(text.splitlines())


#: name -> (file bytes, windows read in turn)
BIG: dict[str, tuple[bytes, list[LineWindow]]] = {
    "many pages of lines": (
        b"".join(b"line %d\n" % i for i in range(30_000)),
        [LineWindow(), LineWindow(offset=2000), LineWindow(offset=29_999), LineWindow(tail=3)],
    ),
    "wide lines cut at the byte limit": (
        b"".join(b"%d" % i + b"." * 70_000 + b"\n" for i in range(12)),
        [LineWindow(), LineWindow(offset=3), LineWindow(offset=11), LineWindow(head=12)],
    ),
    "one line wider than a page": (
        b"x" * (MAX_TEXT_BYTES + 9) + b"\nend\n",
        [LineWindow(), LineWindow(offset=1)],
    ),
    "non-ASCII lines": (
        "".join(f"ligne {i} é€𝄞\u2028" for i in range(20_000)).encode(),
        [LineWindow(), LineWindow(offset=19_990, limit=5), LineWindow(offset=7000)],
    ),
    "newline-ended non-ASCII and CRLF lines": (
        "".join(f"ligne {i} é€𝄞\r\n" if i % 3 else f"{i}\n" for i in range(40_000)).encode(),
        [LineWindow(), LineWindow(offset=39_990, limit=5), LineWindow(offset=7001)],
    ),
    "runs of empty lines": (
        b"\n" * 20_000 + b"mid\n" + b"\n" * 20_000 + b"end",
        [LineWindow(), LineWindow(offset=20_000, limit=3), LineWindow(tail=2)],
    ),
    "binary": (
        bytes(range(256)) * 3000,
        [LineWindow(), LineWindow(offset=MAX_TEXT_BYTES), LineWindow(offset=10**9)],
    ),
}


@pytest.mark.parametrize("name", list(BIG))
def test_pages_of_big_files_match_the_whole_read(tmp_path: Path, name: str) -> None:
    data, windows = BIG[name]
    path = tmp_path / "big"
    path.write_bytes(data)
    target = Workspace([str(tmp_path)]).resolve(str(path))
    indexes = LineIndexes(clock=later)
    read_file(target, LineWindow(), 1 << 30, None, indexes)
    for window in windows:
        page = read_file(target, window, 1 << 30, None, indexes)
        assert page == read_file(target, window, 1 << 30)
        if page.encoding == "utf-8":
            expected = reference_page(data, window)
            assert (page.content, page.lines, page.next_offset) == expected
    assert indexes.statistics().by_identity == len(windows)
    assert indexes.statistics().built == 1


def open_engine(workspace: Path) -> Any:
    return Engine.open({"roots": [str(workspace)], "durability": "normal", "auto_occ": "off"})


@pytest.mark.anyio
async def test_pages_of_one_version_read_the_file_once(workspace: Path) -> None:
    (workspace / "f.txt").write_bytes(b"".join(b"%d\n" % i for i in range(10_000)))
    async with open_engine(workspace) as engine:
        engine.line_indexes.clock = later
        session = await engine.session()
        pages = []
        offset: int | None = 0
        while offset is not None:
            page = await session.call("read_file", {"path": "f.txt", "offset": offset})
            pages.append(page)
            offset = page.next_offset
        stats = engine.line_indexes.statistics()
        assert (stats.built, stats.by_identity) == (1, len(pages) - 1)
        assert "".join(p.content for p in pages) == (workspace / "f.txt").read_text()
        assert {p.content_hash for p in pages} == {content_hash((workspace / "f.txt").read_bytes())}


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Change a file's bytes (same size) and put its mtime back: only ctime tells."""
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


@pytest.mark.anyio
async def test_a_file_changed_in_place_with_its_mtime_kept_is_read_afresh(workspace: Path) -> None:
    path = workspace / "f.txt"
    path.write_bytes(b"one\ntwo\n")
    async with open_engine(workspace) as engine:
        engine.line_indexes.clock = later
        session = await engine.session()
        first = await session.call("read_file", {"path": "f.txt"})
        assert (await session.call("read_file", {"path": "f.txt"})) == first
        rewrite_in_place(path, b"uno\ndos\n")
        page = await session.call("read_file", {"path": "f.txt", "limit": 1})
        assert (page.content, page.content_hash) == ("uno\n", content_hash(b"uno\ndos\n"))
        # The hash the page gave guards the change exactly, and the old one is stale.
        with pytest.raises(LedgerError) as stale:
            await session.call(
                "edit_file",
                {
                    "path": "f.txt",
                    "edits": [{"old_text": "uno", "new_text": "one"}],
                    "expected_hash": first.content_hash,
                },
            )
        assert stale.value.envelope.error.code is Code.OCC_MISMATCH
        await session.call(
            "edit_file",
            {
                "path": "f.txt",
                "edits": [{"old_text": "uno", "new_text": "un"}],
                "expected_hash": page.content_hash,
            },
        )
        assert path.read_bytes() == b"un\ndos\n"


def test_an_identity_is_trusted_only_once_the_file_is_settled(tmp_path: Path) -> None:
    """A file changed within RACY_NS of a read may change again in the same tick of
    the file system's clock, keeping its identity: such reads name no version."""
    path = tmp_path / "f.txt"
    path.write_bytes(b"a\nb\n")
    target = Workspace([str(tmp_path)]).resolve(str(path))
    changed = os.stat(path).st_ctime_ns
    for offset, trusted in ((RACY_NS // 2, False), (RACY_NS, False), (RACY_NS + 1, True)):
        indexes = LineIndexes(clock=lambda offset=offset: changed + offset)
        read_file(target, LineWindow(), 1 << 20, None, indexes)
        read_file(target, LineWindow(), 1 << 20, None, indexes)
        assert indexes.statistics().by_identity == int(trusted), offset
        assert indexes.statistics().built == 1


@pytest.mark.parametrize(
    ("mtime", "ctime", "started", "expected"),
    [
        (0, 0, RACY_NS + 1, True),
        (0, 0, RACY_NS, False),
        (0, RACY_NS, RACY_NS + 1, False),  # ctime alone recent: a write just now
        (RACY_NS, 0, RACY_NS + 1, False),  # mtime set ahead: not trusted either
        (5, 5, 0, False),  # the clock stepped back before the read
    ],
)
def test_settled_needs_both_timestamps_older_than_the_racy_window(
    mtime: int, ctime: int, started: int, expected: bool
) -> None:
    assert settled(Identity(1, 2, 3, mtime, ctime), started) is expected


def test_indexes_stay_within_their_byte_budget(tmp_path: Path) -> None:
    versions = [b"".join(b"%d %d\n" % (v, i) for i in range(1000)) for v in range(6)]
    one = index_of(versions[0], "x").cost
    indexes = LineIndexes(limit=3 * one + one // 2, clock=later)
    for data in versions:
        indexes.remember(index_of(data, content_hash(data)), None, 0)
        assert indexes.statistics().bytes <= indexes.limit
    assert indexes.statistics().indexes == 3
    assert indexes.by_hash(content_hash(versions[0])) is None
    assert indexes.by_hash(content_hash(versions[-1])) is not None
    # An index larger than the whole budget is not kept at all.
    small = LineIndexes(limit=one // 2)
    small.remember(index_of(versions[0], "x"), None, 0)
    assert small.statistics().indexes == 0


@pytest.mark.anyio
async def test_a_page_from_the_index_keeps_the_version_for_a_stale_merge(workspace: Path) -> None:
    """A session whose page came from another session's index still merges a
    stale change onto the version it read (it keeps that version's bytes)."""
    path = workspace / "f.txt"
    base = b"".join(b"line %d\n" % i for i in range(20))
    path.write_bytes(base)
    async with open_engine(workspace) as engine:
        engine.line_indexes.clock = later
        one, two = await engine.session(), await engine.session()
        await one.call("read_file", {"path": "f.txt"})
        read = await two.call("read_file", {"path": "f.txt"})
        assert engine.line_indexes.statistics().by_identity == 1
        # Changed outside the engine: the journal holds no copy of the version read.
        path.write_bytes(base.replace(b"line 0\n", b"L0\n"))
        await two.call(
            "edit_file",
            {
                "path": "f.txt",
                "edits": [{"old_text": "line 19\n", "new_text": "L19\n"}],
                "expected_hash": read.content_hash,
                "on_stale": "merge",
            },
        )
        assert path.read_bytes() == base.replace(b"line 0\n", b"L0\n").replace(
            b"line 19\n", b"L19\n"
        )


def test_a_page_that_is_not_the_indexed_text_is_read_whole(tmp_path: Path) -> None:
    """Should an identity name a version the file no longer holds (the case the
    racy rule exists for, forced here), bytes that are not its text are not served."""
    path = tmp_path / "f.txt"
    path.write_bytes(b"one\ntwo\n")
    target = Workspace([str(tmp_path)]).resolve(str(path))
    indexes = LineIndexes(clock=later)
    read_file(target, LineWindow(), 1 << 20, None, indexes)
    old_index = indexes.by_hash(content_hash(b"one\ntwo\n"))
    assert old_index is not None
    rewrite_in_place(path, b"\x80\x81\nt\x00oo\n")
    indexes.remember(old_index, Identity.of(os.stat(path)), later())
    page = read_file(target, LineWindow(), 1 << 20, None, indexes)
    assert (page.encoding, page.content_hash) == ("base64", content_hash(b"\x80\x81\nt\x00oo\n"))
