"""The accidental-rewrite guard for edit_file.

The rule: an edit is a rewrite when the file is big enough for the question to
matter (at least MIN_LINES lines or MIN_BYTES bytes) and its old texts together
cover more than 75% of the file's lines or of its bytes. Whole rewrites belong to
write_file, or need `allow_rewrite=true`.
"""

from __future__ import annotations

from .errors import Code, LedgerError

__all__ = ["MIN_BYTES", "MIN_LINES", "THRESHOLD", "check_rewrite", "coverage"]

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
    # Lines are counted from one span to the next (spans sorted), so many spans
    # cost one pass over the file, not one each.
    touched = 0
    line = counted_to = 0
    last_touched = -1
    for start, end in sorted(spans):
        line += data.count(b"\n", counted_to, start)
        last = line + data.count(b"\n", start, max(start, end - 1))
        counted_to = start
        first = max(line, last_touched + 1)  # a line two spans touch counts once
        touched += max(0, last - first + 1)
        last_touched = max(last_touched, last)
    replaced = sum(end - start for start, end in spans)
    return touched / _line_count(data), replaced / len(data)


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


def _has_lines(data: bytes, count: int) -> bool:
    """Whether `data` has at least `count` lines, reading no further than that takes."""
    seen, position, chunk = 0, 0, 64 * 1024
    while position < len(data):
        seen += data.count(b"\n", position, position + chunk)
        position += chunk
        if seen >= count:
            return True
        chunk *= 2
    # The whole file was counted: a last line without a line end counts too.
    return seen + (0 if data.endswith(b"\n") else 1) >= count
