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


def coverage(text: str, spans: list[tuple[int, int]]) -> tuple[float, float]:
    """The share of lines and of characters that the replaced spans touch.

    >>> coverage("a\\nb\\nc\\nd\\n", [(0, 4)])
    (0.5, 0.5)
    """
    if not text:
        return 0.0, 0.0
    touched: set[int] = set()
    for start, end in spans:
        first = text.count("\n", 0, start)
        last = text.count("\n", 0, max(start, end - 1))
        touched.update(range(first, last + 1))
    chars = sum(end - start for start, end in spans)
    return len(touched) / _line_count(text), chars / len(text)


def _line_count(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def check_rewrite(label: str, text: str, spans: list[tuple[int, int]]) -> None:
    """Raise REWRITE_BLOCKED when the spans replace most of the file."""
    if _line_count(text) < MIN_LINES and len(text) < MIN_BYTES:
        return
    lines, chars = coverage(text, spans)
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
