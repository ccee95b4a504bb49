"""The accidental-rewrite guard for edit_file.

The rule: an edit is a rewrite when the file is big enough for the question to
matter (at least MIN_LINES lines or MIN_BYTES bytes) and its old texts together
cover more than 75% of the file's lines or of its bytes. Whole rewrites belong to
write_file, or need `allow_rewrite=true`.
"""

from __future__ import annotations

import math

from .errors import Code, LedgerError

__all__ = [
    "MIN_BYTES",
    "MIN_LINES",
    "THRESHOLD",
    "check_rewrite",
    "check_rewritten",
    "coverage",
    "touched",
]

THRESHOLD = 0.75
MIN_LINES = 8
MIN_BYTES = 512


def coverage(data: bytes, spans: list[tuple[int, int]]) -> tuple[float, float]:
    """The share of lines and of bytes that the replaced spans touch.

    >>> coverage(b"a\\nb\\nc\\nd\\n", [(0, 4)])
    (0.5, 0.5)
    """
    if not data:
        return 0.0, 0.0
    lines, replaced = touched(data, spans)
    return lines / _line_count(data), replaced / len(data)


def touched(data: bytes, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """How many lines of `data` the spans touch, and how many bytes they replace.

    >>> touched(b"a\\nb\\nc\\n", [(0, 1), (1, 3)])
    (2, 3)
    """
    # Lines are counted from one span to the next (spans sorted), so many spans
    # cost one pass over what they cover, not one over the file each.
    ordered = sorted(spans)
    count = line = 0
    counted_to = ordered[0][0] if ordered else 0
    last_touched = -1
    for start, end in ordered:
        line += data.count(b"\n", counted_to, start)
        last = line + data.count(b"\n", start, max(start, end - 1))
        counted_to = start
        first = max(line, last_touched + 1)  # a line two spans touch counts once
        count += max(0, last - first + 1)
        last_touched = max(last_touched, last)
    return count, sum(end - start for start, end in spans)


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def check_rewrite(label: str, data: bytes, spans: list[tuple[int, int]]) -> None:
    """Raise REWRITE_BLOCKED when the spans (byte offsets) replace most of the file."""
    if len(data) < MIN_BYTES and _line_count(data) < MIN_LINES:
        return
    if _clearly_small(data, spans):
        return
    lines, chars = coverage(data, spans)
    if lines > THRESHOLD or chars > THRESHOLD:
        _blocked(label, lines, chars)


def _clearly_small(data: bytes, spans: list[tuple[int, int]]) -> bool:
    """Whether the spans are under both thresholds, counting as few lines as that takes.

    A small edit of a large file is the common case; it is decided by the lines
    the spans touch and a lower bound on the file's line count, found by
    counting line ends only as far into the file as needed.
    """
    replaced = sum(end - start for start, end in spans)
    if replaced > THRESHOLD * len(data):
        return False
    touched = sum(data.count(b"\n", start, max(start, end - 1)) + 1 for start, end in spans)
    needed = int(touched / THRESHOLD) + 1
    return _has_lines(data, needed)


def _has_lines(data: bytes, count: int, *, first: int = 64 * 1024) -> bool:
    """Whether `data` has at least `count` lines, reading no further than that takes
    (`first` bytes, then twice as many each time)."""
    seen, position, chunk = 0, 0, first
    while position < len(data):
        seen += data.count(b"\n", position, position + chunk)
        position += chunk
        if seen >= count:
            return True
        chunk *= 2
    # The whole file was counted: a last line without a line end counts too.
    return seen + (0 if data.endswith(b"\n") else 1) >= count


def check_rewritten(label: str, original: bytes, lines: int, replaced: int) -> None:
    """Raise REWRITE_BLOCKED when edits applied in order replaced most of `original`.

    `lines` and `replaced` sum what each edit's old texts touched in the text it
    was matched against (`touched`), so chained edits count what they actually
    replace; a line two edits both touch counts twice.

    >>> check_rewritten("f", b"x\\n" * 10, 2, 4)
    """
    if len(original) < MIN_BYTES and _line_count(original) < MIN_LINES:
        return
    if not original:
        return
    byte_share = min(1.0, replaced / len(original))
    # A small edit of a large file is the common case: the lines are counted only
    # as far as it takes to see the edit touched no more than THRESHOLD of them
    # (counting line ends costs a pass over the bytes).
    if byte_share <= THRESHOLD and _has_lines(original, _lines_within(lines), first=_FIRST):
        return
    line_share = min(1.0, lines / _line_count(original))
    if line_share > THRESHOLD or byte_share > THRESHOLD:
        _blocked(label, line_share, byte_share)


#: The bytes `check_rewritten` counts line ends in first (doubling each time):
#: a few lines of source text.
_FIRST = 256


def _lines_within(touched: int) -> int:
    """The fewest lines a file may have for `touched` of them to be at most THRESHOLD
    of it (`touched / lines <= THRESHOLD`, in the float division the rule makes).

    >>> _lines_within(3), _lines_within(4), _lines_within(0)
    (4, 6, 1)
    """
    lines = max(1, math.ceil(touched / THRESHOLD))
    while lines > 1 and touched / (lines - 1) <= THRESHOLD:
        lines -= 1
    while touched / lines > THRESHOLD:
        lines += 1
    return lines


def _blocked(label: str, lines: float, chars: float) -> None:
    raise LedgerError(
        Code.REWRITE_BLOCKED,
        f"The edit replaces {max(lines, chars):.0%} of {label}.",
        path=label,
        details={
            "lines_replaced": round(lines, 3),
            "bytes_replaced": round(chars, 3),
            "threshold": THRESHOLD,
        },
    )
