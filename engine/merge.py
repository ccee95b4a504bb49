"""Three-way merge by lines: keep two sides' changes to a common base.

A stale edit rebased onto the file as it is now, and a rewind that reverts one
agent's change while keeping everyone else's, are the same question: given the
text both sides started from (`base`), ours and theirs, which lines does each
side change, and do those changes meet? Changes that meet are conflicts;
everything else is applied from both sides, in base order.

Two changes meet when their base lines overlap or touch (no unchanged base line
between them; two insertions at the same place touch). Touching changes are
conflicts, as in `git merge`: with nothing unchanged between them there is no
telling which order the reader meant. Identical changes on both sides are taken
once.

>>> merged = merge3(b"a\\nb\\nc\\nd\\ne\\n", b"A\\nb\\nc\\nd\\ne\\n", b"a\\nb\\nc\\nd\\nE\\n")
>>> merged.data, merged.conflicts
(b'A\\nb\\nc\\nd\\nE\\n', [])
>>> clash = merge3(b"a\\n", b"ours\\n", b"theirs\\n").conflicts[0]
>>> clash.ours, clash.theirs, clash.start, clash.end
(b'ours\\n', b'theirs\\n', 0, 1)
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import msgspec

__all__ = ["Conflict", "Merged", "changes", "merge3", "split_lines"]


class Change(msgspec.Struct, frozen=True):
    """Base lines `[start, end)` replaced by `lines` (an insertion when start == end)."""

    start: int
    end: int
    lines: tuple[bytes, ...]


class Conflict(msgspec.Struct, frozen=True):
    """Base lines `[start, end)` (0-based) that both sides changed, and what each made of them."""

    start: int
    end: int
    base: bytes
    ours: bytes
    theirs: bytes


class Merged(msgspec.Struct, frozen=True):
    """The merged text; meaningful only when `conflicts` is empty."""

    data: bytes
    conflicts: list[Conflict]


def split_lines(data: bytes) -> list[bytes]:
    r"""Lines with their `\n` kept; only `\n` ends a line, so `\r\n` stays whole.

    >>> split_lines(b"a\r\nb\nc")
    [b'a\r\n', b'b\n', b'c']
    """
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


def changes(base: Sequence[bytes], side: Sequence[bytes]) -> list[Change]:
    """The changes that turn `base` into `side`, in base order.

    Equal lines at both ends are taken off before matching, so a small change in
    a large file costs a pass over it rather than the matcher's quadratic walk.
    """
    head = _common_prefix(base, side)
    tail = _common_suffix(base, side, limit=min(len(base), len(side)) - head)
    old = base[head : len(base) - tail]
    new = side[head : len(side) - tail]
    if not old and not new:
        return []
    if not old or not new or set(old).isdisjoint(new):
        return [Change(head, head + len(old), tuple(new))]
    matcher = difflib.SequenceMatcher(None, old, new)
    return [
        Change(head + i1, head + i2, tuple(new[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def merge3(base: bytes, ours: bytes, theirs: bytes) -> Merged:
    """Both sides' changes to `base`, applied together, or the places where they meet."""
    if ours == theirs or theirs == base:
        return Merged(ours, [])
    if ours == base:
        return Merged(theirs, [])
    base_lines = split_lines(base)
    ours_changes = changes(base_lines, split_lines(ours))
    theirs_changes = changes(base_lines, split_lines(theirs))
    out: list[bytes] = []
    conflicts: list[Conflict] = []
    at = 0
    for group_ours, group_theirs in _meeting_groups(ours_changes, theirs_changes):
        start = min(c.start for c in (*group_ours, *group_theirs))
        end = max(c.end for c in (*group_ours, *group_theirs))
        out.extend(base_lines[at:start])
        at = end
        mine = _applied(base_lines, start, end, group_ours)
        yours = _applied(base_lines, start, end, group_theirs)
        if not group_theirs or mine == yours:
            out.append(mine)
        elif not group_ours:
            out.append(yours)
        else:
            conflicts.append(Conflict(start, end, b"".join(base_lines[start:end]), mine, yours))
    out.extend(base_lines[at:])
    return Merged(b"".join(out), conflicts)


def _meeting_groups(
    ours: list[Change], theirs: list[Change]
) -> list[tuple[list[Change], list[Change]]]:
    """Both sides' changes in base order, gathered into groups whose members meet."""
    tagged = sorted(
        [(c.start, c.end, 0, c) for c in ours] + [(c.start, c.end, 1, c) for c in theirs],
        key=lambda item: (item[0], item[1], item[2]),
    )
    groups: list[tuple[list[Change], list[Change]]] = []
    reach = -1
    for start, end, side, change in tagged:
        if not groups or start > reach:
            groups.append(([], []))
        groups[-1][side].append(change)
        reach = max(reach, end) if start <= reach else end
    return groups


def _applied(base: list[bytes], start: int, end: int, group: list[Change]) -> bytes:
    """Base lines `[start, end)` with one side's changes in them applied."""
    out: list[bytes] = []
    at = start
    for change in group:
        out.extend(base[at : change.start])
        out.extend(change.lines)
        at = change.end
    out.extend(base[at:end])
    return b"".join(out)


def _common_prefix(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: Sequence[bytes], b: Sequence[bytes], *, limit: int) -> int:
    i = 0
    while i < limit and a[-1 - i] == b[-1 - i]:
        i += 1
    return i
