"""engine.rewrite: the accidental-rewrite rule, and its shortcut agreeing with it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.rewrite import (
    MIN_BYTES,
    MIN_LINES,
    THRESHOLD,
    check_rewrite,
    check_rewritten,
    coverage,
)


def blocked(data: bytes, spans: list[tuple[int, int]]) -> bool:
    try:
        check_rewrite("f", data, spans)
    except LedgerError as exc:
        assert exc.code is Code.REWRITE_BLOCKED
        return True
    return False


def rewritten_blocked(data: bytes, lines: int, replaced: int) -> dict[str, object] | None:
    """The details of check_rewritten's REWRITE_BLOCKED, or None when it lets the edits be."""
    try:
        check_rewritten("f", data, lines, replaced)
    except LedgerError as exc:
        assert exc.code is Code.REWRITE_BLOCKED
        return exc.details
    return None


LINES = st.lists(st.sampled_from([b"", b"x", b"a longer line of text", b"y" * 300]), max_size=60)


@st.composite
def files_and_spans(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int]]]:
    data = b"\n".join(draw(LINES)) + draw(st.sampled_from([b"", b"\n"]))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    # Disjoint spans, as apply_edits hands them over.
    spans = [(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b]
    return data, spans


@settings(max_examples=500, deadline=None)
@given(case=files_and_spans())
def test_the_guard_blocks_exactly_what_the_rule_says(
    case: tuple[bytes, list[tuple[int, int]]],
) -> None:
    data, spans = case
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    small = len(data) < MIN_BYTES and lines < MIN_LINES
    line_share, byte_share = coverage(data, spans)
    expected = not small and (line_share > THRESHOLD or byte_share > THRESHOLD)
    assert blocked(data, spans) is expected


def test_one_line_of_a_large_file_is_not_a_rewrite_but_most_of_it_is() -> None:
    data = b"".join(b"line %d\n" % n for n in range(200_000))
    start = data.index(b"line 1234\n")
    assert not blocked(data, [(start, start + 9)])
    assert blocked(data, [(0, len(data) * 4 // 5)])


@settings(max_examples=500, deadline=None)
@given(
    data=LINES.map(b"\n".join),
    touched=st.integers(0, 80),
    replaced=st.integers(0, 20_000),
)
def test_edits_applied_in_order_are_blocked_exactly_when_the_rule_says(
    data: bytes, touched: int, replaced: int
) -> None:
    # check_rewritten counts a file's lines only as far as it needs: its answer,
    # and the shares its error gives, are the rule's on the whole count.
    replaced = min(replaced, len(data))
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    small = len(data) < MIN_BYTES and lines < MIN_LINES
    line_share = min(1.0, touched / lines)
    byte_share = min(1.0, replaced / len(data)) if data else 0.0
    expected = not small and bool(data) and (line_share > THRESHOLD or byte_share > THRESHOLD)
    details = rewritten_blocked(data, touched, replaced)
    assert (details is not None) is expected
    if details is not None:
        assert details["lines_replaced"] == round(line_share, 3)
        assert details["bytes_replaced"] == round(byte_share, 3)
