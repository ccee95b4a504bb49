"""Unified diffs, applied: one `FilePatch` and its file's current bytes into new bytes.

Pure: nothing here touches the disk. Hunks are placed by exact context only
(never fuzzy): first at the line the hunk states, then up to `max_shift` lines
later or earlier, nearest first. See `docs/patch.md` for the rules a client can
rely on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from msgspec import Struct

from .binpatch import (
    BinaryError,
    BinaryHunk,
    apply_binary,
    blob_id,
)
from .bounds import MAX_FILE_SIZE
from .errors import Code, LedgerError
from .pages import Lines, line_start, newline_blocks
from .patchparse import FilePatch, Hunk

__all__ = ["Applied", "apply_hunks"]


class Applied(Struct, frozen=True, kw_only=True):
    """The outcome of `apply_hunks`: new content (None: deleted) and each hunk's shift.

    `regions` are the line spans each hunk replaced, (old start, old end, new
    start, new end), 0-based and half-open: the file differs only inside them,
    so a diff of the change need only compare those lines.
    """

    content: bytes | None
    offsets: list[int]
    regions: list[tuple[int, int, int, int]] = []


# A file line: (text without its line end, line end: "\n", "\r\n" or "" at EOF).
_Line = tuple[str, str]
# A hunk's old-side line: (text as the patch has it, whether a newline follows it).
_Old = tuple[str, bool]

_NO_MATCH, _EXACT, _CR_ADDED = 0, 1, 2


class _Lines(Lines[_Line]):
    """A file's bytes as (text, line end) pairs, each made when a hunk looks at it.

    Lines are found from the file's newline counts per block (`pages.line_start`),
    so nothing splits, decodes or copies the whole file: a small patch of a large
    file costs its hunks, and the untouched runs of lines are handed on as views
    of the original bytes (`text`). Bytes that are not UTF-8 decode with
    surrogateescape, so they round-trip unchanged.

    >>> lines = _Lines(b"a\\r\\nb\\nc")
    >>> len(lines), lines[0], lines[1], lines[2], bytes(lines.text(1, 3))
    (3, ('a', '\\r\\n'), ('b', '\\n'), ('c', ''), b'b\\nc')
    """

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._blocks = newline_blocks(data)
        self._lf = self._blocks[-1]
        self._crlf = data.count(b"\r\n") if b"\r" in data else 0
        # A last line without a newline is a line too.
        self._count = self._lf + (not data.endswith(b"\n") and bool(data))

    def __len__(self) -> int:
        return self._count

    def line(self, index: int) -> _Line:
        if index < 0:  # as a list counts from the end
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        piece = self._data[self._start(index) : self._start(index + 1)]
        line = piece.decode("utf-8", "surrogateescape")
        if not line.endswith("\n"):
            return line, ""  # the last line, without a newline
        if line.endswith("\r\n"):
            return line[:-2], "\r\n"
        return line[:-1], "\n"

    def text(self, start: int, stop: int) -> memoryview:
        """Lines `start` to `stop` (exclusive) exactly as the file has them."""
        if start >= stop:
            return memoryview(b"")
        return memoryview(self._data)[self._start(start) : self._start(stop)]

    def mostly_crlf(self) -> bool:
        """Whether most of the file's line ends are CRLF."""
        return self._crlf * 2 > self._lf

    def _start(self, index: int) -> int:
        return line_start(self._blocks, len(self._data), index, self._slice)

    def _slice(self, start: int, end: int) -> bytes:
        return self._data[start:end]


def _match_line(expected: _Old, actual: _Line) -> int:
    """How a hunk's old line matches a file line: not, exactly, or with the file's `\\r`.

    A patch written without `\\r` still matches a CRLF file (`_CR_ADDED`); the
    newline at end of file must agree either way.

    >>> _match_line(("a", True), ("a", "\\r\\n")) == _CR_ADDED
    True
    >>> _match_line(("a", True), ("a", "")) == _NO_MATCH
    True
    """
    text, needs_newline = expected
    body, end = actual
    if needs_newline != (end != ""):
        return _NO_MATCH
    if end == "\r\n":
        if text == body + "\r":
            return _EXACT
        return _CR_ADDED if text == body else _NO_MATCH
    return _EXACT if text == body else _NO_MATCH


def _old_lines(hunk: Hunk) -> list[_Old]:
    """The lines a hunk expects in the file, each with whether a newline follows it."""
    olds: list[_Old] = [(text, True) for tag, text in hunk.lines if tag != "+"]
    if olds and hunk.old_no_newline:
        olds[-1] = (olds[-1][0], False)
    return olds


def _match_at(olds: Sequence[_Old], lines: Sequence[_Line], position: int) -> list[int] | None:
    """Each old line's match kind when the hunk sits at `position`, or None."""
    if position < 0 or position + len(olds) > len(lines):
        return None
    kinds = []
    for offset, expected in enumerate(olds):
        kind = _match_line(expected, lines[position + offset])
        if kind == _NO_MATCH:
            return None
        kinds.append(kind)
    return kinds


@functools.lru_cache(maxsize=8)
def _search_order(max_shift: int) -> tuple[int, ...]:
    """Shifts to try, nearest first, later before earlier as git does.

    >>> _search_order(2)
    (0, 1, -1, 2, -2)
    """
    order = [0]
    for distance in range(1, max_shift + 1):
        order += [distance, -distance]
    return tuple(order)


def _anchors(hunk: Hunk) -> tuple[bool, bool]:
    """Whether a hunk must sit at the start and at the end of the file, as git requires.

    A hunk stating line 0 or 1 starts the file; one with no context after its
    last change ends it (`diff` only omits that context at end of file).
    """
    trailing = 0
    for tag, _ in reversed(hunk.lines):
        if tag != " ":
            break
        trailing += 1
    return hunk.old_start <= 1, trailing == 0


def _stated_index(hunk: Hunk) -> int:
    """The 0-based file index where the header says the hunk's old lines begin."""
    return hunk.old_start if hunk.old_count == 0 else hunk.old_start - 1


def _locate(
    hunk: Hunk, lines: Sequence[_Line], floor: int, max_shift: int
) -> tuple[int, list[int]] | None:
    """Where the hunk applies (index, match kinds), searching from its stated line."""
    olds = _old_lines(hunk)
    stated = _stated_index(hunk)
    at_start, at_end = _anchors(hunk)
    if at_start or at_end:
        # An anchored hunk has one possible place, however far it moved.
        position = 0 if at_start else len(lines) - len(olds)
        if at_start and at_end and len(olds) != len(lines):
            return None
        kinds = _match_at(olds, lines, position) if position >= floor else None
        return None if kinds is None else (position, kinds)
    for shift in _search_order(max_shift):
        position = stated + shift
        if position < floor:
            continue
        kinds = _match_at(olds, lines, position)
        if kinds is not None:
            return position, kinds
    return None


def _render(hunk: Hunk, lines: _Lines, position: int, kinds: Sequence[int]) -> str:
    """The text that replaces the hunk's old lines at `position`.

    Context lines keep the file's own bytes. Added lines get `\\r\\n` when the
    patch matched a CRLF file without its `\\r`s; otherwise exactly the patch's text.
    """
    if kinds:
        add_cr = _CR_ADDED in kinds
    else:
        add_cr = lines.mostly_crlf() and not any("\r" in text for _, text in hunk.lines)
    default_end = "\r\n" if add_cr else "\n"
    new_total = sum(1 for tag, _ in hunk.lines if tag != "-")
    out: list[str] = []
    index, new_seen = position, 0
    for tag, text in hunk.lines:
        if tag == "-":
            index += 1
            continue
        new_seen += 1
        newline = not (hunk.new_no_newline and new_seen == new_total)
        if tag == " ":
            body, end = lines[index]
            index += 1
            out.append(body + ((end or default_end) if newline else ""))
        else:
            end = "\n" if text.endswith("\r") else default_end
            out.append(text + (end if newline else ""))
    return "".join(out)


def _failure(
    patch: FilePatch,
    hunk: Hunk,
    number: int,
    lines: Sequence[_Line],
    floor: int,
) -> LedgerError:
    """PATCH_FAILED for a hunk: what differs at its stated line, and the best near miss."""
    olds = _old_lines(hunk)
    stated = _stated_index(hunk)
    expected: str | None = None
    found: str | None = None
    mismatch_line: int | None = None
    reason = "context_mismatch"
    for offset, old in enumerate(olds):
        index = stated + offset
        if index >= len(lines) or _match_line(old, lines[index]) == _NO_MATCH:
            expected = old[0]
            mismatch_line = index + 1
            if index < len(lines):
                found = lines[index][0]
                if old[0] in (found, found + "\r"):
                    reason = "newline_at_end_of_file"
            else:
                reason = "past_end_of_file"
            break
    else:
        at_start, at_end = _anchors(hunk)
        if stated < floor:
            reason = "overlaps_previous_hunk"
        elif at_end and stated + len(olds) != len(lines):
            reason = "not_at_end_of_file"
        elif at_start and stated != 0:
            reason = "not_at_start_of_file"
        elif len(olds) == 0 and stated > len(lines):
            reason = "past_end_of_file"
    details: dict[str, Any] = {
        "file": patch.path,
        "hunk": number,
        "hunk_header": hunk.header or _format_header(hunk),
        "line": hunk.old_start,
        "expected": expected,
        "found": found,
        "mismatch_line": mismatch_line,
        "nearest_candidate": _nearest_candidate(olds, lines, stated),
        "reason": reason,
    }
    return LedgerError(
        Code.PATCH_FAILED,
        f"hunk {number} ({details['hunk_header']}) does not apply to {patch.path}: {reason}",
        path=patch.path,
        details=details,
    )


def _format_header(hunk: Hunk) -> str:
    """`@@ -a,b +c,d @@` from a hunk's numbers."""
    return f"@@ -{hunk.old_start},{hunk.old_count} +{hunk.new_start},{hunk.new_count} @@"


def _nearest_candidate(olds: Sequence[_Old], lines: Sequence[_Line], stated: int) -> int | None:
    """The 1-based line where most of the hunk's old lines match, nearest on ties.

    >>> _nearest_candidate([("b", True), ("x", True)], [("a", "\\n"), ("b", "\\n")], 0)
    2
    """
    best: tuple[int, int] | None = None  # (-score, distance)
    best_index: int | None = None
    if not olds:
        return None
    for position in range(len(lines)):
        score = 0
        for offset, old in enumerate(olds):
            if position + offset >= len(lines):
                break
            if _match_line(old, lines[position + offset]) != _NO_MATCH:
                score += 1
        if score == 0:
            continue
        key = (-score, abs(position - stated))
        if best is None or key < best:
            best, best_index = key, position
    return None if best_index is None else best_index + 1


def _patch_failed(
    patch: FilePatch,
    reason: str,
    message: str,
    *,
    expected: str | None = None,
    found: str | None = None,
) -> LedgerError:
    """PATCH_FAILED about the file as a whole rather than one hunk."""
    return LedgerError(
        Code.PATCH_FAILED,
        f"{message}: {patch.path}",
        path=patch.path,
        details={
            "file": patch.path,
            "hunk": None,
            "hunk_header": None,
            "line": None,
            "expected": expected,
            "found": found,
            "nearest_candidate": None,
            "reason": reason,
        },
    )


def _missing(patch: FilePatch) -> LedgerError:
    return LedgerError(
        Code.NOT_FOUND,
        f"the patch changes a file that does not exist: {patch.path}",
        path=patch.path,
        details={"file": patch.path},
    )


def _names(index: str, object_id: str) -> bool:
    """Whether an `index` line's (possibly abbreviated) id names `object_id`."""
    return object_id.startswith(index)


def _apply_binary(
    patch: FilePatch, binary: BinaryHunk, original: bytes | None, limit: int
) -> Applied:
    """Apply a `GIT binary patch`, checking the `index` ids of the old and new bytes.

    Raises PATCH_FAILED (`index_mismatch`: the file is not the one the patch was
    made from; `binary_hunk`: the delta does not fit it; `result_mismatch`: the
    result is not the object the patch names), and what `apply_hunks` raises
    for a missing or existing file.
    """
    if patch.old_path is None and original is not None:
        raise _patch_failed(patch, "file_exists", "the patch creates a file that exists")
    if patch.old_path is not None and original is None:
        raise _missing(patch)
    before = original or b""
    if original is not None and patch.old_index is not None:
        found = blob_id(before)
        if not _names(patch.old_index, found):
            raise _patch_failed(
                patch,
                "index_mismatch",
                "the file is not the one the binary patch was made from",
                expected=patch.old_index,
                found=found,
            )
    try:
        after = apply_binary(binary, before, limit)
    except BinaryError as exc:
        raise _patch_failed(
            patch, "binary_hunk", f"the binary hunk does not apply ({exc})"
        ) from None
    if patch.new_path is None:
        if after:
            raise _patch_failed(
                patch, "delete_leaves_content", "the deletion does not remove the whole file"
            )
        return Applied(content=None, offsets=[])
    if patch.new_index is not None and not _names(patch.new_index, made := blob_id(after)):
        raise _patch_failed(
            patch,
            "result_mismatch",
            "the binary patch does not make the object its index line names",
            expected=patch.new_index,
            found=made,
        )
    return Applied(content=after, offsets=[])


def apply_hunks(
    patch: FilePatch,
    original: bytes | None,
    *,
    max_shift: int = 200,
    limit: int = MAX_FILE_SIZE,
) -> Applied:
    """Apply one file's hunks to its current bytes; pure, all or nothing.

    `original` is None when the file does not exist. Each hunk is matched by
    exact context at its stated line, else up to `max_shift` lines later or
    earlier (nearest first); hunks apply in order and never overlap. Line ends
    and a missing final newline are kept byte for byte; bytes that are not
    UTF-8 round-trip unchanged.

    Raises PATCH_FAILED when a hunk does not apply (details name the hunk, the
    expected and found lines and the nearest partial match), when a new file
    already exists, or when a deletion would leave content; NOT_FOUND when a
    patched file is missing.

    >>> from ledgerfs.engine.patchparse import parse_patch
    >>> [p] = parse_patch("--- a/x\\n+++ b/x\\n@@ -1,2 +1,2 @@\\n a\\n-b\\n+c\\n")
    >>> apply_hunks(p, b"a\\r\\nb\\r\\n").content
    b'a\\r\\nc\\r\\n'
    """
    if patch.binary is not None:
        return _apply_binary(patch, patch.binary, original, limit)
    if patch.old_path is None:
        if original is not None:
            raise _patch_failed(patch, "file_exists", "the patch creates a file that exists")
        original = b""
    elif original is None:
        raise _missing(patch)
    lines = _Lines(original)
    # Views of the original for the untouched runs, bytes for what the hunks
    # made: one join builds the result, the only copy of the file made here.
    pieces: list[bytes | memoryview] = []
    offsets: list[int] = []
    regions: list[tuple[int, int, int, int]] = []
    cursor = grown = 0
    for number, hunk in enumerate(patch.hunks, start=1):
        located = _locate(hunk, lines, cursor, max_shift)
        if located is None:
            raise _failure(patch, hunk, number, lines, cursor)
        position, kinds = located
        pieces.append(lines.text(cursor, position))
        pieces.append(_render(hunk, lines, position, kinds).encode("utf-8", "surrogateescape"))
        offsets.append(position - _stated_index(hunk))
        cursor = position + len(kinds)
        added = sum(1 for tag, _ in hunk.lines if tag != "-")
        regions.append((position, cursor, position + grown, position + grown + added))
        grown += added - len(kinds)
    pieces.append(lines.text(cursor, len(lines)))
    content = b"".join(pieces)
    if patch.new_path is None:
        if content:
            raise _patch_failed(
                patch, "delete_leaves_content", "the deletion does not remove the whole file"
            )
        return Applied(content=None, offsets=offsets)
    return Applied(content=content, offsets=offsets, regions=regions)
