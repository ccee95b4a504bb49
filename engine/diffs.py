"""Unified diffs of planned changes, cheap for small edits of large files."""

from __future__ import annotations

import difflib

__all__ = ["MAX_DIFF_LINES", "is_text", "unified_diff"]

#: Above this many differing lines the diff is summarised instead of listed.
MAX_DIFF_LINES = 20_000
_CONTEXT = 3


def is_text(data: bytes) -> bool:
    """Whether bytes are UTF-8 text without NUL bytes.

    >>> is_text(b"hello\\n"), is_text(b"\\x00\\x01"), is_text(b"\\xff")
    (True, False, False)
    """
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def unified_diff(label: str, before: bytes | None, after: bytes | None) -> str:
    """A `git diff`-style unified diff from `before` to `after` (None: absent).

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
        return f"Binary files {old_label} and {new_label} differ\n"
    old_lines = old.decode("utf-8").splitlines(keepends=True)
    new_lines = new.decode("utf-8").splitlines(keepends=True)
    # Only the differing middle goes through difflib, so a one-line edit of a
    # large file costs what the edit costs, not what the file costs.
    head = _common_prefix(old_lines, new_lines)
    tail = _common_suffix(old_lines[head:], new_lines[head:])
    start = max(0, head - _CONTEXT)
    old_mid = old_lines[start : len(old_lines) - max(0, tail - _CONTEXT)]
    new_mid = new_lines[start : len(new_lines) - max(0, tail - _CONTEXT)]
    if len(old_mid) + len(new_mid) > MAX_DIFF_LINES:
        return (
            f"--- {old_label}\n+++ {new_label}\n"
            f"(diff of {len(old_mid)} and {len(new_mid)} lines omitted)\n"
        )
    lines = difflib.unified_diff(old_mid, new_mid, old_label, new_label, n=_CONTEXT)
    return "".join(_renumbered(_terminated(lines), start))


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_suffix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        n += 1
    return n


def _terminated(lines: object) -> list[str]:
    out: list[str] = []
    for line in lines:  # type: ignore[attr-defined]
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return out


def _renumbered(lines: list[str], shift: int) -> list[str]:
    if shift == 0:
        return lines
    out = []
    for line in lines:
        if line.startswith("@@ "):
            out.append(_shift_header(line, shift))
        else:
            out.append(line)
    return out


def _shift_header(header: str, shift: int) -> str:
    # "@@ -a,b +c,d @@" with start lines moved by the trimmed prefix.
    body = header[3 : header.index(" @@")]
    old, new = body.split(" ")
    return f"@@ {_shift_range(old, shift)} {_shift_range(new, shift)} @@\n"


def _shift_range(spec: str, shift: int) -> str:
    sign, rest = spec[0], spec[1:]
    start, _, count = rest.partition(",")
    begin = int(start)
    if count == "0" or begin != 0:
        begin += shift
    return f"{sign}{begin}" + (f",{count}" if count else "")
