"""Bounds on what a result carries, so a big change never floods a client.

A mutation result shows its first MAX_FILES files, a diff of at most MAX_DIFF
characters and MAX_WARNINGS warnings; the journal keeps everything, and
`history` with `transaction` and `diff: true` pages through a whole diff.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "HISTORY_DIFF_PAGE",
    "MAX_DIFF",
    "MAX_FILES",
    "MAX_FILE_SIZE",
    "MAX_WARNINGS",
    "cut",
    "page",
    "warnings",
]

MAX_FILES = 200
MAX_DIFF = 64 * 1024
MAX_WARNINGS = 20
HISTORY_DIFF_PAGE = 256 * 1024
#: The default of `Config.max_file_size`: the most bytes a file read, written or
#: built by a patch may hold (what pure helpers assume when given no limit).
MAX_FILE_SIZE = 50 * 1024 * 1024


def cut(text: str, limit: int) -> tuple[str, bool]:
    """`text` up to `limit` characters, ended at a line end when there is one; and
    whether anything was cut.

    >>> cut("ab\\ncd\\n", 4), cut("ab\\n", 4)
    (('ab\\n', True), ('ab\\n', False))
    """
    if len(text) <= limit:
        return text, False
    end = text.rfind("\n", 0, limit)
    return text[: end + 1 if end >= 0 else limit], True


def page(text: str, offset: int, size: int) -> tuple[str, int | None]:
    """The page of `text` from `offset` (at most `size` characters, ended at a line
    end when there is one) and the offset of the next page, None at the end.

    >>> page("ab\\ncd\\nef\\n", 0, 6), page("ab\\ncd\\nef\\n", 6, 6)
    (('ab\\ncd\\n', 6), ('ef\\n', None))
    """
    shown, _ = cut(text[offset:], size)
    following = offset + len(shown)
    return shown, following if following < len(text) else None


def warnings(items: Sequence[str]) -> list[str]:
    """At most MAX_WARNINGS warnings, the last counting the ones left out.

    >>> len(warnings(["w"] * 50)), warnings(["w"] * 50)[-1]
    (20, '... and 31 more warnings like these')
    """
    if len(items) <= MAX_WARNINGS:
        return list(items)
    kept = list(items[: MAX_WARNINGS - 1])
    return [*kept, f"... and {len(items) - len(kept)} more warnings like these"]
