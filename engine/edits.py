"""Edits: old/new text pairs applied in order, matched exactly or loosely.

Each `old_text` is matched against the text the edits before it produced (as
the reference filesystem server does), so a second edit may change what the
first wrote. An old text must occur exactly once, or, with `replace_all`, at
least once (every occurrence is replaced). One that occurs nowhere is refused
with the places it nearly matches (engine/nearmiss.py); with `match: "loose"`
the one place that differs only in whitespace, line endings or quote style is
edited instead, new text re-indented to fit, and the result says so.

Bounded as docs/security.md section 7 says: at most MAX_EDITS edits, whose
searches cover at most MAX_EDIT_SEARCH bytes in all (each edit scans the text
once, counted at its size then, so text that grows is counted as it grows),
at most MAX_REPLACED replacements a call, searches in windows (engine/bytescan.py).
Pure: bytes in, bytes out; nothing here touches a disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from .bytescan import find
from .encodings import uniform_ending
from .errors import Code, LedgerError
from .nearmiss import LOOSE, MAX_CANDIDATES, Place, near_misses
from .rewrite import check_rewritten, touched

__all__ = [
    "MAX_EDITS",
    "MAX_EDIT_SEARCH",
    "MAX_REPLACED",
    "Edited",
    "LooseMatch",
    "Match",
    "TextEdit",
    "apply_edits",
    "charge_edit_search",
    "check_edit_text",
    "edit_search",
]

#: The most edits one edit_file (or one edit of a batch) takes. Agents send a
#: handful; a change of more places belongs in apply_patch or write_file.
MAX_EDITS = 1000
#: The most bytes the edits of one call may search, all its files together: each
#: old_text is looked for in its whole file (it must occur exactly once), so an
#: edit searches its edits times the file's size. 1 GiB is 1,000 edits of a 1 MiB
#: file, 20 of a 50 MiB one, and a few seconds of one core on the worst text
#: (docs/security.md, section 7).
MAX_EDIT_SEARCH = 1 << 30
#: The most occurrences the replace_all edits of one call replace.
MAX_REPLACED = 100_000
#: An ambiguous old_text's error lists the lines of at most this many matches
#: and counts at most MAX_COUNTED.
MAX_LISTED = 100
MAX_COUNTED = 10_000

Match = Literal["exact", "loose"]


class TextEdit(msgspec.Struct, frozen=True):
    """One old/new text pair, as planning takes it."""

    old_text: str
    new_text: str
    replace_all: bool = False


class LooseMatch(msgspec.Struct, kw_only=True, frozen=True):
    """An edit that `match: "loose"` applied where its old text nearly matched."""

    path: str
    #: The edit's index in its call's `edits`.
    edit: int
    #: The 1-based line where the place begins, in the text the edits before it left.
    line: int
    differences: list[str]


class Edited(msgspec.Struct, frozen=True):
    """What edits made of a file: its new bytes, and the edits matched loosely."""

    data: bytes
    loose: list[LooseMatch] = []


def edit_search(edits: int, size: int) -> int:
    """The bytes `edits` edits of a file of `size` bytes search: each scans it once.

    >>> edit_search(3, 100)
    300
    """
    return edits * size


def charge_edit_search(
    path: str, label: str, edits: int, size: int, left: int, field: str = "edits"
) -> int:
    """What the call may still search once `edits` edits of a `size`-byte file have,
    of the `left` bytes it had; VALIDATION naming `field` (the edit list) when that
    is over `left`."""
    needed = edit_search(edits, size)
    if needed <= left:
        return left - needed
    most = left // max(size, 1)
    raise LedgerError(
        Code.VALIDATION,
        f"{edits} edits of {label} ({size} bytes) would search {needed} bytes, over "
        f"what one call may search ({MAX_EDIT_SEARCH} bytes in all); send at most "
        f"{most} edits of this file in this call, or the change as one apply_patch.",
        path=path,
        details={
            "field": field,
            "reason": "edit_search_too_large",
            "edits": edits,
            "size": size,
            "max_edits": most,
        },
    )


def check_edit_text(edits: Sequence[TextEdit], limit: int, field: str = "edits") -> None:
    """Refuse edits whose texts together hold more than a file may (`limit` bytes).

    Raises VALIDATION naming `field`, the edit list (`edits_too_large`), before
    any file is read.

    >>> check_edit_text([TextEdit("a", "bc")], 3)
    """
    total = 0
    for edit in edits:
        # surrogatepass: a lone surrogate is refused later, naming its field.
        total += len(edit.old_text.encode("utf-8", "surrogatepass"))
        total += len(edit.new_text.encode("utf-8", "surrogatepass"))
        if total > limit:
            raise LedgerError(
                Code.VALIDATION,
                f"The edits' old and new texts hold more than {limit} bytes, the most "
                "a file may hold; write the file whole with write_file.",
                details={"field": field, "reason": "edits_too_large", "limit": limit},
            )


def apply_edits(
    label: str,
    original: bytes,
    edits: Sequence[TextEdit],
    *,
    allow_rewrite: bool,
    match: Match = "exact",
    limit: int | None = None,
    charge: Callable[[int], None] | None = None,
    field: str = "edits",
) -> Edited:
    """Apply old/new text pairs in order, each to the text the ones before it left.

    `original` is a file's view (engine/encodings.py): UTF-8 text, checked by
    the caller. Raises VALIDATION (an old text found nowhere, with the places it
    nearly matches as `candidates`; found several times, with line numbers; one
    that nearly matches several places loosely; empty; a text grown past `limit`
    bytes; more than MAX_REPLACED replacements) and REWRITE_BLOCKED (the edits
    together replace most of the file). `charge(n)` is told of each search past
    the original's size (a text that grew), and may refuse it. Errors name each
    edit's fields under `field`, the edit list (``operations[2].edits`` in a batch).

    On a file whose every line ends in CRLF (or every one in CR), old and new
    texts written with LF alone are taken with that line end.

    >>> apply_edits("f", b"a\\nb\\n", [TextEdit("b", "c"), TextEdit("c", "d")],
    ...             allow_rewrite=False).data
    b'a\\nd\\n'
    """
    ending = uniform_ending(original)
    text = original
    lines = replaced = occurrences = 0
    loose: list[LooseMatch] = []
    for index, edit in enumerate(edits):
        named = f"{field}[{index}]"
        old, new, needle, new_bytes = _texts(label, edit, named, ending=ending)
        if charge is not None and len(text) > len(original):
            charge(len(text) - len(original))
        spans = _spans(label, text, needle, named + ".old_text", replace_all=edit.replace_all)
        if spans is None:
            place = _near_miss(label, text, old, named, index, match)
            spans = [(place.start, place.end)]
            new_bytes = _fitted(new, place, text[place.start : place.end]).encode("utf-8")
            line = text.count(b"\n", 0, place.start) + 1
            loose.append(
                LooseMatch(path=label, edit=index, line=line, differences=place.differences)
            )
        occurrences += len(spans)
        _check_growth(label, named + ".old_text", text, spans, new_bytes, occurrences, limit)
        touched_lines, touched_bytes = touched(text, spans)
        lines += touched_lines
        replaced += touched_bytes
        text = _spliced(text, spans, new_bytes)
    if not allow_rewrite:
        check_rewritten(label, original, lines, replaced)
    return Edited(text, loose)


def _texts(
    label: str, edit: TextEdit, named: str, *, ending: bytes | None
) -> tuple[str, str, bytes, bytes]:
    """An edit's old and new texts (with the file's one line end when written
    with LF alone), and their bytes; VALIDATION for an empty old text or a lone
    surrogate, naming the field under `named` (``edits[0]``)."""
    old, new = edit.old_text, edit.new_text
    if ending is not None and "\r" not in old:
        end = ending.decode("ascii")
        old, new = old.replace("\n", end), new.replace("\n", end)
    needle = _encoded(label, old, named + ".old_text")
    if not needle:
        field = named + ".old_text"
        raise LedgerError(
            Code.VALIDATION,
            f"{field} is empty; name the text to replace.",
            path=label,
            details={"field": field},
        )
    return old, new, needle, _encoded(label, new, named + ".new_text")


def _check_growth(
    label: str,
    field: str,
    text: bytes,
    spans: list[tuple[int, int]],
    new: bytes,
    occurrences: int,
    limit: int | None,
) -> None:
    """Refuse, before the text is built, more than MAX_REPLACED replacements in a
    call or a text grown past `limit` bytes (VALIDATION)."""
    if occurrences > MAX_REPLACED:
        raise LedgerError(
            Code.VALIDATION,
            f"The edits replace more than {MAX_REPLACED} occurrences in {label}; "
            "write the file whole with write_file.",
            path=label,
            details={"field": field, "reason": "too_many_replacements", "limit": MAX_REPLACED},
        )
    size = len(text) + sum(len(new) - (end - start) for start, end in spans)
    if limit is not None and size > limit:
        raise LedgerError(
            Code.VALIDATION,
            f"{label} would be {size} bytes, over the limit of {limit} bytes.",
            path=label,
            details={"reason": "file_too_large", "size": size, "limit": limit},
        )


def _encoded(label: str, text: str, field: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError(
            Code.VALIDATION,
            f"{field} is not valid Unicode text (a lone surrogate).",
            path=label,
            details={"field": field},
        ) from None


def _spliced(text: bytes, spans: list[tuple[int, int]], new: bytes) -> bytes:
    """`text` with each span replaced by `new`, built by one join of views of it:
    the new text is the one copy (a slice of bytes would copy each piece first).

    >>> _spliced(b"a-b-c", [(1, 2), (3, 4)], b"+")
    b'a+b+c'
    """
    view = memoryview(text)
    pieces: list[bytes | memoryview] = []
    cursor = 0
    for start, end in spans:
        pieces.append(view[cursor:start])
        pieces.append(new)
        cursor = end
    pieces.append(view[cursor:])
    return b"".join(pieces)


def _spans(
    label: str, data: bytes, old: bytes, field: str, *, replace_all: bool
) -> list[tuple[int, int]] | None:
    """Where `old` is replaced: its one occurrence, or with `replace_all` every one
    (left to right, not overlapping); None when it occurs nowhere."""
    first = find(data, old, 0)
    if first < 0:
        return None
    if replace_all:
        spans = [(first, first + len(old))]
        while len(spans) <= MAX_REPLACED:
            following = find(data, old, spans[-1][1])
            if following < 0:
                break
            spans.append((following, following + len(old)))
        return spans
    second = find(data, old, first + 1)
    if second >= 0:
        count, lines = _matches(data, old, first)
        more = "+" if count >= MAX_COUNTED else ""
        raise LedgerError(
            Code.VALIDATION,
            f"{field} matches {count}{more} times in {label} (lines "
            f"{', '.join(map(str, lines[:10]))}); it must match exactly once.",
            path=label,
            details={"field": field, "matches": count, "lines": lines},
            suggestion="add surrounding lines to old_text until it is unique, or set "
            "replace_all: true on the edit to replace every occurrence",
        )
    return [(first, first + len(old))]


def _matches(data: bytes, old: bytes, first: int) -> tuple[int, list[int]]:
    """How often `old` occurs from `first` on (at most MAX_COUNTED times), and the
    lines of its first MAX_LISTED occurrences, counted from one to the next."""
    lines: list[int] = []
    count, line, counted_to, start = 0, 1, 0, first
    while start >= 0 and count < MAX_COUNTED:
        count += 1
        if len(lines) < MAX_LISTED:
            line += data.count(b"\n", counted_to, start)
            counted_to = start
            lines.append(line)
        start = find(data, old, start + 1)
    return count, lines


def _near_miss(label: str, data: bytes, old: str, named: str, index: int, match: Match) -> Place:
    """The place a loose edit applies to; else raise VALIDATION with the near misses."""
    found = near_misses(data, old)
    normalised = found.normalised
    field = named + ".old_text"
    edits = named.rsplit("[", 1)[0]  # the list the edit is in
    after = f" (as {edits}[0..{index - 1}] left it)" if index else ""
    if match == "loose" and len(normalised) > 1:
        shown = normalised[:MAX_CANDIDATES]
        raise LedgerError(
            Code.VALIDATION,
            f"{field} matches {label}{after} nowhere exactly and {len(normalised)} places "
            f"loosely (lines {', '.join(str(p.line) for p in shown)}); a loose match must "
            "be the only one.",
            path=label,
            details={
                "field": field,
                "reason": "ambiguous_loose_match",
                "matches": 0,
                "lines": [],
                "candidates": [p.shown() for p in shown],
            },
            suggestion="copy the text of the candidate you mean into old_text (each "
            "candidate's text occurs once in the file) and write new_text from it",
        )
    if match == "loose" and found.complete and normalised and normalised[0].loose:
        return normalised[0]
    candidates = found.places[:MAX_CANDIDATES]
    message = f"{field} was not found in {label}{after}."
    if candidates:
        best = candidates[0]
        message += (
            f" The closest place, line {best.line}, differs in {', '.join(best.differences)}."
        )
    raise LedgerError(
        Code.VALIDATION,
        message,
        path=label,
        details={
            "field": field,
            "matches": 0,
            "lines": [],
            "candidates": [p.shown() for p in candidates],
        },
        suggestion=_suggestion(candidates, match),
    )


def _suggestion(candidates: list[Place], match: Match) -> str:
    if not candidates:
        return "read the file again and copy old_text exactly, whitespace included"
    best = candidates[0]
    copy = "copy candidates[0].text into old_text and write new_text from it"
    if best.normalised and LOOSE.issuperset(best.differences):
        if match == "exact":
            return (
                f"{copy}, indented as the file is; or send the same call with "
                'match: "loose", which re-indents new_text to fit'
            )
        return (
            f'{copy}: match "loose" could not be sure of it (its indentation follows '
            "no one offset, or old_text's pieces occur in too many places)"
        )
    return copy


def _fitted(new: str, place: Place, matched: bytes) -> str:
    """New text re-indented and given line endings to fit the place it replaces."""
    assert place.indent is not None
    lines = new.split("\n")
    for number, line in enumerate(lines):
        if (number or place.whole_first_line) and line.strip(" \t\r"):
            lead = line[: len(line) - len(line.lstrip(" \t"))]
            lines[number] = place.indent(lead) + line[len(lead) :]
    fitted = "\n".join(lines)
    if b"\r\n" in matched:
        return fitted.replace("\r\n", "\n").replace("\n", "\r\n")
    if b"\n" in matched:
        return fitted.replace("\r\n", "\n")
    return fitted
