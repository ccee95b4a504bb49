"""engine.merge: both sides' separate changes kept, changes that meet reported, never lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine.merge import merge3, split_lines

LINE = st.sampled_from([b"a\n", b"b\n", b"\n", b"x = 1\n", b"t\r\n", b"c", b"  a\n"])
TEXT = st.lists(LINE, max_size=20).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(base=TEXT, side=TEXT)
def test_a_side_alone_is_taken_whole(base: bytes, side: bytes) -> None:
    assert merge3(base, side, base) == merge3(base, base, side)
    assert merge3(base, side, base).data == side
    assert merge3(base, side, side).data == side
    assert merge3(base, side, base).conflicts == []


@settings(max_examples=300, deadline=None)
@given(base=TEXT, ours=TEXT, theirs=TEXT)
def test_the_sides_are_symmetric(base: bytes, ours: bytes, theirs: bytes) -> None:
    one, other = merge3(base, ours, theirs), merge3(base, theirs, ours)
    assert [(c.start, c.end) for c in one.conflicts] == [(c.start, c.end) for c in other.conflicts]
    assert [(c.ours, c.theirs) for c in one.conflicts] == [
        (c.theirs, c.ours) for c in other.conflicts
    ]
    if not one.conflicts:
        assert one.data == other.data


@st.composite
def separate_changes(draw: st.DrawFn) -> tuple[bytes, bytes, bytes, bytes]:
    """A base of distinct lines, and changes to it with an unchanged line between each two,
    each given to one side: (base, ours, theirs, both applied)."""
    size = draw(st.integers(0, 30))
    base = [f"line {i}\n".encode() for i in range(size)]
    # Each span starts past the line after the previous one: one unchanged line between.
    spans: list[tuple[int, int]] = []
    at = 0
    while at <= size and draw(st.booleans()):
        start = draw(st.integers(at, min(size, at + 5)))
        end = draw(st.integers(start, min(size, start + 3)))
        spans.append((start, end))
        at = end + 1
    sides: dict[int, list[bytes]] = {0: list(base), 1: list(base)}
    both = list(base)
    for number, (start, end) in reversed(list(enumerate(spans))):
        new = [f"new {number}.{k}\n".encode() for k in range(draw(st.integers(0, 2)))]
        side = draw(st.integers(0, 1))
        sides[side][start:end] = new
        both[start:end] = new
    return b"".join(base), b"".join(sides[0]), b"".join(sides[1]), b"".join(both)


@settings(max_examples=500, deadline=None)
@given(case=separate_changes())
def test_separate_changes_are_both_kept(case: tuple[bytes, bytes, bytes, bytes]) -> None:
    base, ours, theirs, both = case
    merged = merge3(base, ours, theirs)
    assert merged.conflicts == []
    assert merged.data == both


@pytest.mark.parametrize(
    ("base", "ours", "theirs", "span"),
    [
        (b"a\nb\nc\n", b"a\nB\nc\n", b"a\nb2\nc\n", (1, 2)),
        (b"a\nb\nc\n", b"a\nB\nc\n", b"a\nc\n", (1, 2)),
        (b"a\nb\n", b"a\nx\nb\n", b"a\ny\nb\n", (1, 1)),
        (b"a\nb\nc\n", b"A\nb\nc\n", b"a\nB\nc\n", (0, 2)),
        (b"a\nb\n", b"a\nb\nmine\n", b"a\nb\nyours\n", (2, 2)),
        (b"", b"one\n", b"two\n", (0, 0)),
    ],
    ids=["same line", "change vs delete", "two inserts", "touching", "both append", "empty base"],
)
def test_changes_that_meet_are_one_conflict(
    base: bytes, ours: bytes, theirs: bytes, span: tuple[int, int]
) -> None:
    [conflict] = merge3(base, ours, theirs).conflicts
    assert (conflict.start, conflict.end) == span
    lines = split_lines(base)
    assert conflict.base == b"".join(lines[span[0] : span[1]])
    assert conflict.ours != conflict.theirs


def test_identical_changes_on_both_sides_are_taken_once() -> None:
    base = b"a\nb\nc\nd\n"
    ours = b"a\nB\nc\nD\n"
    theirs = b"a\nB\nc\nd\n"
    assert merge3(base, ours, theirs) == merge3(base, theirs, ours)
    assert merge3(base, ours, theirs).data == ours


def test_a_large_file_with_small_changes_merges_by_its_ends() -> None:
    base = b"".join(f"{i}\n".encode() for i in range(200_000))
    ours = base.replace(b"\n10\n", b"\nten\n", 1)
    theirs = base.replace(b"\n199990\n", b"\nlate\n", 1)
    merged = merge3(base, ours, theirs)
    assert merged.conflicts == []
    assert b"\nten\n" in merged.data and b"\nlate\n" in merged.data
    assert len(split_lines(merged.data)) == 200_000
