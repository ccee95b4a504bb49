"""Bounds on what a result carries, so a big change never floods a client.

A mutation result shows its first MAX_FILES files (no more than MAX_LISTED
characters of them: paths can be long), a diff of at most MAX_DIFF characters
and MAX_WARNINGS warnings; the journal keeps everything. A `history` page holds
transactions up to MAX_HISTORY characters (one at least), each showing its
mutations as a mutation result shows its files; `before`, `mutations_offset`
and `diff_offset` page on through the rest.

A directory tree descends TREE_DEPTH levels unless asked, never more than
MAX_TREE_DEPTH: each level nests a reply two levels deeper (a node and its
`children`), and JSON parsers refuse deep nesting (System.Text.Json past 64
levels, serde_json past 128, pydantic's past 200), which leaves a client
waiting for a reply it dropped. At MAX_TREE_DEPTH a reply nests at most
MAX_NESTING levels, the envelope included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "HISTORY_DIFF_PAGE",
    "MAX_DIFF",
    "MAX_FILES",
    "MAX_FILE_SIZE",
    "MAX_HISTORY",
    "MAX_LISTED",
    "MAX_NESTING",
    "MAX_TREE_DEPTH",
    "MAX_WARNINGS",
    "TREE_DEPTH",
    "cut",
    "listed",
    "page",
    "warnings",
]

MAX_FILES = 200
MAX_LISTED = 48 * 1024
MAX_HISTORY = 64 * 1024
MAX_DIFF = 64 * 1024
MAX_WARNINGS = 20
HISTORY_DIFF_PAGE = 256 * 1024
#: The default of `Config.max_file_size`: the most bytes a file read, written or
#: built by a patch may hold (what pure helpers assume when given no limit).
MAX_FILE_SIZE = 50 * 1024 * 1024
TREE_DEPTH = 10
MAX_TREE_DEPTH = 25
#: The JSON-RPC reply, its result, structuredContent and the tree's list, then
#: a node and its children per level.
MAX_NESTING = 4 + 2 * MAX_TREE_DEPTH


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


def listed(sizes: Iterable[int], count: int = MAX_FILES, chars: int = MAX_LISTED) -> int:
    """How many of the first items to show: at most `count`, and no more than
    `chars` characters together (`sizes` are theirs, in order), one at least.

    >>> listed([10] * 500), listed([10, 10, 10], chars=25), listed([99], chars=25)
    (200, 2, 1)
    """
    shown = total = 0
    for size in sizes:
        total += size
        if shown == count or (shown and total > chars):
            break
        shown += 1
    return shown


def warnings(items: Sequence[str]) -> list[str]:
    """At most MAX_WARNINGS warnings, the last counting the ones left out.

    >>> len(warnings(["w"] * 50)), warnings(["w"] * 50)[-1]
    (20, '... and 31 more warnings like these')
    """
    if len(items) <= MAX_WARNINGS:
        return list(items)
    kept = list(items[: MAX_WARNINGS - 1])
    return [*kept, f"... and {len(items) - len(kept)} more warnings like these"]
