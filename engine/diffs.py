"""Unified diffs of planned changes, cheap for small edits of large files."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence

from .encodings import TextForm, text_views
from .textbytes import is_text

__all__ = ["MAX_DIFF_LINES", "unified_diff"]

#: Above this many differing lines the diff is summarised instead of listed.
MAX_DIFF_LINES = 20_000
_CONTEXT = 3


def unified_diff(
    label: str,
    before: bytes | None,
    after: bytes | None,
    *,
    regions: Sequence[tuple[int, int, int, int]] | None = None,
) -> str:
    """A `git diff`-style unified diff from `before` to `after` (None: absent).

    `regions`, when known (a patch's hunks), are line spans (old start, old
    end, new start, new end), 0-based and half-open, outside which the two are
    equal: only their lines are matched, rather than everything from the first
    difference to the last.

    >>> print(unified_diff("a.txt", b"x\\ny\\n", b"x\\nz\\n"), end="")
    --- a/a.txt
    +++ b/a.txt
    @@ -1,2 +1,2 @@
     x
    -y
    +z
    """
    if before == after:
        return ""
    old_label = f"a/{label}" if before is not None else "/dev/null"
    new_label = f"b/{label}" if after is not None else "/dev/null"
    old = before or b""
    new = after or b""
    if not (is_text(old) and is_text(new)):
        # Text in another encoding (or with a BOM) is diffed as the text it holds.
        old_view, new_view = text_views(old), text_views(new)
        if old_view is None or new_view is None:
            return f"Binary files {old_label} and {new_label} differ\n"
        (old_form, old), (new_form, new) = old_view, new_view
        if old == new:
            return (
                f"--- {old_label}\n+++ {new_label}\n"
                f"(same text, stored as {_shown(old_form)}, then as {_shown(new_form)})\n"
            )
    if regions is not None and len(regions) > 1:
        # One region is the differing core the general path finds on bytes anyway.
        return _diff_in_regions(old_label, new_label, old, new, regions)
    # Only the differing core is split and matched: a one-line edit of a large
    # file costs what the edit costs. The common head and tail are found on
    # bytes (memcmp in chunks) and lines are counted with bytes.count, so
    # nothing walks the file in Python. Matching the core alone also keeps the
    # changes inside it, so every hunk gets its full context.
    head = _line_start(old, _common_prefix(old, new))
    tail = _common_suffix(old, new, limit=min(len(old), len(new)) - head)
    old_end = _tail_start(old, new, tail)
    new_end = len(new) - (len(old) - old_end)
    old_lines = _line_count(old, head, old_end)
    new_lines = _line_count(new, head, new_end)
    if old_lines + new_lines > MAX_DIFF_LINES:
        return (
            f"--- {old_label}\n+++ {new_label}\n"
            f"(diff of {old_lines} and {new_lines} lines omitted)\n"
        )
    old_text = old[head:old_end].decode("utf-8")
    new_text = new[head:new_end].decode("utf-8")
    old_core = _lines(old_text)
    new_core = _lines(new_text)
    start = _lines_back(old, head, _CONTEXT)
    end = _lines_forward(old, old_end, _CONTEXT)
    base = old.count(b"\n", 0, start)
    out = [f"--- {old_label}\n", f"+++ {new_label}\n"]
    if not old_core or not new_core or set(old_core).isdisjoint(new_core):
        # No line in common (an edit's usual core): one hunk, the core replaced
        # between its context, written out with no opcodes (`core_opcodes`).
        context = old.count(b"\n", start, head) + _line_count(old, old_end, end)
        old_range = _range(base, context + len(old_core))
        new_range = _range(base, context + len(new_core))
        out += [
            f"@@ -{old_range} +{new_range} @@\n",
            _marked_text(" ", old[start:head].decode("utf-8")),
            _marked_text("-", old_text),
            _marked_text("+", new_text),
            _marked_text(" ", old[old_end:end].decode("utf-8")),
        ]
        return "".join(out)
    lead = _split_lines(old[start:head])
    trail = _split_lines(old[old_end:end])
    codes = _window_opcodes(len(lead), old_core, new_core, len(trail))
    for hunk in _hunks(codes, _CONTEXT):
        out.extend(_hunk_text(hunk, lead + old_core + trail, lead + new_core + trail, base))
    return "".join(out)


def _shown(form: TextForm) -> str:
    return form.encoding + (" with a BOM" if form.bom else "")


# (tag, i1, i2, j1, j2) as difflib.SequenceMatcher.get_opcodes gives them.
_Opcode = tuple[str, int, int, int, int]


def _diff_in_regions(
    old_label: str,
    new_label: str,
    old: bytes,
    new: bytes,
    regions: Sequence[tuple[int, int, int, int]],
) -> str:
    """The unified diff of two texts known to be equal outside `regions`."""
    old_changed = sum(o2 - o1 for o1, o2, _, _ in regions)
    new_changed = sum(n2 - n1 for _, _, n1, n2 in regions)
    if old_changed + new_changed > MAX_DIFF_LINES:
        return (
            f"--- {old_label}\n+++ {new_label}\n"
            f"(diff of {old_changed} and {new_changed} lines omitted)\n"
        )
    old_lines, new_lines = _split_lines(old), _split_lines(new)
    codes: list[_Opcode] = []
    i = j = 0
    for o1, o2, n1, n2 in regions:
        codes.append(("equal", i, o1, j, n1))
        matcher = difflib.SequenceMatcher(None, old_lines[o1:o2], new_lines[n1:n2])
        for tag, a1, a2, b1, b2 in matcher.get_opcodes():
            codes.append((tag, o1 + a1, o1 + a2, n1 + b1, n1 + b2))
        i, j = o2, n2
    codes.append(("equal", i, len(old_lines), j, len(new_lines)))
    out = [f"--- {old_label}\n", f"+++ {new_label}\n"]
    for hunk in _hunks(_merged(codes), _CONTEXT):
        out.extend(_hunk_text(hunk, old_lines, new_lines, 0))
    return "".join(out)


def _window_opcodes(lead: int, old: list[str], new: list[str], trail: int) -> list[_Opcode]:
    """The core's opcodes between `lead` and `trail` equal lines of context."""
    codes: list[_Opcode] = [("equal", 0, lead, 0, lead)]
    for tag, i1, i2, j1, j2 in core_opcodes(old, new):
        codes.append((tag, lead + i1, lead + i2, lead + j1, lead + j2))
    i, j = lead + len(old), lead + len(new)
    codes.append(("equal", i, i + trail, j, j + trail))
    return _merged(codes)


def core_opcodes(old: list[str], new: list[str]) -> list[_Opcode]:
    """`difflib.SequenceMatcher(None, old, new).get_opcodes()`, cheaply when it is one hunk.

    When no line of one side occurs on the other (an edit's core: a line or a
    few replaced by others), the matcher finds no matching block and answers
    with one replace, insert or delete: that answer needs no matcher.

    >>> core_opcodes(["a\\n"], ["b\\n", "c\\n"])
    [('replace', 0, 1, 0, 2)]
    """
    if not old or not new or set(old).isdisjoint(new):
        tag = "replace" if old and new else "delete" if old else "insert"
        return [(tag, 0, len(old), 0, len(new))] if old or new else []
    return list(difflib.SequenceMatcher(None, old, new).get_opcodes())


def _merged(codes: list[_Opcode]) -> list[_Opcode]:
    """Opcodes without empty ones, adjacent equal runs joined."""
    merged: list[_Opcode] = []
    for code in codes:
        if code[1] == code[2] and code[3] == code[4]:
            continue
        if merged and code[0] == "equal" and merged[-1][0] == "equal":
            code = ("equal", merged[-1][1], code[2], merged[-1][3], code[4])
            merged.pop()
        merged.append(code)
    return merged


def _hunks(codes: list[_Opcode], context: int) -> Iterator[list[_Opcode]]:
    """Opcodes grouped into hunks, each change with up to `context` equal lines
    around it; changes closer than twice that share a hunk."""
    group: list[_Opcode] = []
    last = len(codes) - 1
    for index, (tag, i1, i2, j1, j2) in enumerate(codes):
        if tag != "equal":
            group.append((tag, i1, i2, j1, j2))
            continue
        keep = min(context, i2 - i1)
        if group and (index == last or i2 - i1 > 2 * context):
            group.append(("equal", i1, i1 + keep, j1, j1 + keep))
            yield group
            group = []
        elif group:
            group.append((tag, i1, i2, j1, j2))
            continue
        if index != last:
            group.append(("equal", i2 - keep, i2, j2 - keep, j2))
    if group:
        yield group


def _hunk_text(hunk: list[_Opcode], old: list[str], new: list[str], base: int) -> list[str]:
    first, final = hunk[0], hunk[-1]
    old_range = _range(base + first[1], final[2] - first[1])
    new_range = _range(base + first[3], final[4] - first[3])
    out = [f"@@ -{old_range} +{new_range} @@\n"]
    for tag, i1, i2, j1, j2 in hunk:
        if tag == "equal":
            out.extend(_marked(" ", old[i1:i2]))
            continue
        out.extend(_marked("-", old[i1:i2]))
        out.extend(_marked("+", new[j1:j2]))
    return out


def _range(start: int, length: int) -> str:
    # A hunk's line span: 1-based, the length left out when 1, and an empty
    # span named by the line before it.
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


def _marked_text(sign: str, text: str) -> str:
    """What `_marked` gives for the lines of `text`, joined, made without a list.

    >>> _marked_text("-", "a\\nb"), _marked_text("+", "a\\n"), _marked_text(" ", "")
    ('-a\\n-b\\n\\\\ No newline at end of file\\n', '+a\\n', '')
    """
    if not text:
        return ""
    marked = sign + text.replace("\n", "\n" + sign)
    if text.endswith("\n"):
        return marked[: -len(sign)]
    return marked + "\n\\ No newline at end of file\n"


def _marked(sign: str, lines: list[str]) -> list[str]:
    return [
        sign + line if line.endswith("\n") else f"{sign}{line}\n\\ No newline at end of file\n"
        for line in lines
    ]


# Below this many bytes a mismatch is found at once, by XOR of the two as integers.
_WINDOW = 64


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of `a` and `b`.

    Spans are compared at memcmp speed without copies (`startswith` a view of
    the other side): first the whole, then the first window (an edit near the
    top), then by bisection until the mismatch lies in one window.

    >>> _common_prefix(b"abcdef", b"abcxef"), _common_prefix(b"ab", b"abc")
    (3, 2)
    """
    limit = min(len(a), len(b))
    other = memoryview(b)
    if a.startswith(other[:limit]):
        return limit
    lo, hi = 0, limit  # a[:lo] == b[:lo]; a mismatch lies in [lo, hi)
    if hi > _WINDOW:
        if a.startswith(other[:_WINDOW]):
            lo = _WINDOW
        else:
            hi = _WINDOW
    while hi - lo > _WINDOW:
        mid = (lo + hi) // 2
        if a.startswith(other[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    # Big-endian, the first differing byte holds the highest differing bit.
    diff = int.from_bytes(a[lo:hi], "big") ^ int.from_bytes(other[lo:hi], "big")
    return hi - 1 - (diff.bit_length() - 1) // 8


def _common_suffix(a: bytes, b: bytes, *, limit: int) -> int:
    """The length of the longest common suffix of `a` and `b`, at most `limit`.

    >>> _common_suffix(b"xbcd", b"ybcd", limit=4), _common_suffix(b"abc", b"abc", limit=2)
    (3, 2)
    """
    if limit <= 0:
        return 0
    la, lb = len(a), len(b)
    other = memoryview(b)
    if a.endswith(other[lb - limit :]):
        return limit
    lo, hi = 0, limit  # the last lo bytes are equal; a mismatch lies in the last hi
    if hi > _WINDOW:
        if a.endswith(other[lb - _WINDOW :]):
            lo = _WINDOW
        else:
            hi = _WINDOW
    # The caller's limit ends where the prefix's mismatch is: an edit of a few
    # bytes there leaves a suffix a little shorter than the limit. Probe for it
    # at doubling distances before bisecting.
    step = _WINDOW
    while hi - step > lo:
        if a.endswith(other[lb - hi + step : lb - lo], 0, la - lo):
            lo = hi - step
            break
        hi -= step
        step *= 2
    while hi - lo > _WINDOW:
        mid = (lo + hi) // 2
        if a.endswith(other[lb - mid : lb - lo], 0, la - lo):
            lo = mid
        else:
            hi = mid
    # Little-endian, the last differing byte holds the highest differing bit.
    diff = int.from_bytes(a[la - hi : la - lo], "little") ^ int.from_bytes(
        other[lb - hi : lb - lo], "little"
    )
    return hi - 1 - (diff.bit_length() - 1) // 8


def _line_start(data: bytes, pos: int) -> int:
    """The start of the line holding byte `pos`."""
    return data.rfind(b"\n", 0, pos) + 1


def _tail_start(old: bytes, new: bytes, tail: int) -> int:
    """Where in `old` the common tail of whole lines begins.

    The last `tail` bytes are common, but their first line may have begun
    differently in each; the tail then starts at the first line end inside it,
    which sits at the same distance from the end in both.
    """
    at_old, at_new = len(old) - tail, len(new) - tail
    if _is_line_start(old, at_old) and _is_line_start(new, at_new):
        return at_old
    found = old.find(b"\n", at_old)
    return len(old) if found < 0 else found + 1


def _is_line_start(data: bytes, pos: int) -> bool:
    return pos == 0 or data[pos - 1 : pos] == b"\n"


def _lines_back(data: bytes, pos: int, count: int) -> int:
    """The start of the line `count` lines above the line starting at `pos`."""
    for _ in range(count):
        if pos == 0:
            break
        pos = data.rfind(b"\n", 0, pos - 1) + 1
    return pos


def _lines_forward(data: bytes, pos: int, count: int) -> int:
    """The line start `count` lines below the line start `pos` (or the end)."""
    for _ in range(count):
        found = data.find(b"\n", pos)
        if found < 0:
            return len(data)
        pos = found + 1
    return pos


def _line_count(data: bytes, start: int, end: int) -> int:
    """How many lines `data[start:end]` holds, a last one without LF included."""
    ends = data.count(b"\n", start, end)
    return ends + (1 if end > start and data[end - 1 : end] != b"\n" else 0)


def _split_lines(data: bytes) -> list[str]:
    """Lines ended by LF only (a CR or form feed inside a line is not an end), as git does."""
    return _lines(data.decode("utf-8"))


def _lines(text: str) -> list[str]:
    """The lines of `text`, each with its LF (the last one may have none).

    >>> _lines("a\\r\\nb\\x0cc\\n"), _lines("a\\nb"), _lines("")
    (['a\\r\\n', 'b\\x0cc\\n'], ['a\\n', 'b'], [])
    """
    lines = text.split("\n")
    last = lines.pop()
    out = [line + "\n" for line in lines]
    if last:
        out.append(last)
    return out
