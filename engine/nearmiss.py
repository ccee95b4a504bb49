"""Near misses: where an old_text that matches nowhere nearly matches, and how it differs.

Agents write old_text from memory: indentation drifts, tabs come back as
spaces, trailing spaces and carriage returns go, quotes come back straight
where the file has curly ones. When an old_text is found nowhere, `near_misses`
finds the places it nearly matches and names what differs, so the error can
show the text to copy back; with `match: "loose"` the one place that differs
only in whitespace, line endings or quote style is edited as if it had matched.

Bounded on the largest file allowed: the old text is cut at every character that
normalising may change (whitespace, quotes, dashes, dots, look-alikes), and its
longest pieces (at most MAX_ANCHORS) are looked for verbatim with `bytes.find`,
in windows, each at most MAX_HITS times: a normalised match holds every piece
verbatim, so the hits of one piece found fewer than MAX_HITS times are every
place the old text can nearly match. Only the lines around hits are normalised
and compared (at most MAX_PLACES places and MAX_COMPARED characters in all), so
a call costs a few passes of `bytes.find` over the file and a bounded number of
comparisons, whatever the file holds. `Work` counts both.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

import msgspec

from .bytescan import find

__all__ = [
    "DIFFERENCES",
    "LOOSE",
    "MAX_CANDIDATES",
    "NearMisses",
    "Place",
    "Work",
    "near_misses",
    "reindent",
]

#: What can differ between an old_text and the place it nearly matches, in the
#: order an error lists them.
DIFFERENCES = (
    "indentation",
    "tabs_vs_spaces",
    "trailing_whitespace",
    "line_endings",
    "quotes",
    "unicode_lookalikes",
    "other",
)
#: The differences `match: "loose"` looks past.
LOOSE = frozenset(
    {"indentation", "tabs_vs_spaces", "trailing_whitespace", "line_endings", "quotes"}
)
#: At most this many candidates are listed, best first.
MAX_CANDIDATES = 3
#: The pieces of an old_text looked for, longest first.
MAX_ANCHORS = 6
#: Hits of one piece looked at; a piece found more often says too little.
MAX_HITS = 64
#: Places compared, and characters normalised and compared, per old_text.
MAX_PLACES = 256
MAX_COMPARED = 1 << 20
#: Old texts longer than this, and file lines longer than this, are not compared.
MAX_NEEDLE = 64 << 10
MAX_LINE = 64 << 10
#: A place that is not a normalised match is listed from this similarity on.
MIN_SCORE = 0.6
#: Places that are not normalised matches are compared closely (quadratic in the
#: worst case, on at most _COMPARED_CHARS of each) only this many, best first.
MAX_SCORED = 2 * MAX_CANDIDATES
#: A candidate's text takes in at most this many lines around it to be unique.
MAX_WIDEN = 3
_COMPARED_CHARS = 4096

_QUOTES = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2032": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2033": '"',
}
_LOOKALIKES = {
    "\u00a0": " ",
    "\u2007": " ",
    "\u2009": " ",
    "\u202f": " ",
    "\u3000": " ",
    "\u2010": "-",
    "\u2011": "-",
    "\u2012": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2212": "-",
    "\u2026": "...",
    "\u200b": "",
    "\u200c": "",
    "\u200d": "",
    "\u2060": "",
    "\ufeff": "",
    "\u00ad": "",
}
_QUOTE_TABLE = str.maketrans(_QUOTES)
_LOOKALIKE_TABLE = str.maketrans(_LOOKALIKES)
_ALL_TABLE = str.maketrans({**_QUOTES, **_LOOKALIKES})
_SPACE = " \t\f\v\r"
#: What normalising may change (a piece of an old text holds none of it), and pieces.
_UNSTABLE = "\\s'\".\\-" + "".join(re.escape(c) for c in {**_QUOTES, **_LOOKALIKES})
_PIECE = re.compile(f"[^{_UNSTABLE}]+")


class Work(msgspec.Struct, kw_only=True):
    """What one search did: bytes passed to `find`, places and characters compared."""

    scanned: int = 0
    places: int = 0
    compared: int = 0


class Place(msgspec.Struct, kw_only=True, frozen=True):
    """A place an old text nearly matches: byte offsets in the text searched."""

    start: int
    end: int
    #: The text to copy back: the match, widened by whole lines to be unique in
    #: the file where a few lines do it, and the 1-based lines it spans.
    line: int
    end_line: int
    text: str
    differences: list[str]
    #: A normalised match (whitespace, line endings, quotes, look-alikes apart).
    normalised: bool
    score: float
    #: How new text is re-indented to fit the place (None: no single offset fits).
    indent: Callable[[str], str] | None = None
    #: Whether the place begins at the start of a line (new text's first line is re-indented).
    whole_first_line: bool = False

    @property
    def loose(self) -> bool:
        """Whether `match: "loose"` may edit this place."""
        return (
            self.normalised
            and bool(self.differences)
            and LOOSE.issuperset(self.differences)
            and self.indent is not None
        )

    def shown(self) -> dict[str, object]:
        """The candidate as an error's details carry it."""
        return {
            "line": self.line,
            "end_line": self.end_line,
            "text": self.text,
            "differences": self.differences,
        }


class NearMisses(msgspec.Struct, kw_only=True):
    """The places found, best first, and whether every normalised match is among them."""

    places: list[Place]
    #: Every place the old text matches once normalised was found (some piece of
    #: it was found fewer than MAX_HITS times, and the comparisons fit the bounds).
    complete: bool
    work: Work

    @property
    def normalised(self) -> list[Place]:
        return [p for p in self.places if p.normalised]


def near_misses(data: bytes, needle: str) -> NearMisses:
    """The places of `data` (UTF-8 text) that `needle` nearly matches, best first.

    >>> found = near_misses(b"def f():\\n\\treturn 1\\n", "def f():\\n    return 1\\n")
    >>> [(p.line, p.differences) for p in found.places]
    [(1, ['tabs_vs_spaces'])]
    """
    work = Work()
    if len(needle) > MAX_NEEDLE or not needle.strip():
        return NearMisses(places=[], complete=False, work=work)
    anchors = _anchors(needle)
    hits: dict[int, None] = {}  # line starts of the places, in order found
    complete = False
    lines = needle.split("\n")
    ends_line = len(lines) > 1 and lines[-1] == ""
    if ends_line:
        lines.pop()
    for piece, line_index in anchors:
        found = _hits(data, piece.encode("utf-8"), work)
        complete = complete or len(found) <= MAX_HITS
        for position in found[:MAX_HITS]:
            start = _lines_back(data, _line_start(data, position, work), line_index, work)
            if start >= 0:
                hits.setdefault(start, None)
    places: list[Place] = []
    for start in sorted(hits)[:MAX_PLACES]:
        if work.compared > MAX_COMPARED:
            complete = False
            break
        place = _compare(data, start, lines, ends_line, needle, anchors, work)
        if place is not None:
            places.append(place)
    complete = complete and len(hits) <= MAX_PLACES
    places = _scored(places, lines, anchors)
    # Normalised matches first, then by similarity; a place found twice once.
    unique: dict[tuple[int, int], Place] = {}
    for place in sorted(places, key=lambda p: (not p.normalised, -p.score, p.start)):
        unique.setdefault((place.start, place.end), place)
    ranked = list(unique.values())
    # Only the places an error can list are numbered (each costs passes over the file).
    shown = [_numbered(data, p, work) for p in ranked[:MAX_CANDIDATES]]
    return NearMisses(places=shown + ranked[MAX_CANDIDATES:], complete=complete, work=work)


def _scored(places: list[Place], lines: list[str], anchors: list[tuple[str, int]]) -> list[Place]:
    """The normalised matches, and the MAX_SCORED likeliest other places scored closely
    (their quick score is an upper bound: what falls under MIN_SCORE is dropped)."""
    exact = [p for p in places if p.normalised]
    others = sorted((p for p in places if not p.normalised), key=lambda p: -p.score)
    wanted = [_quick(line) for line in lines]
    scored = []
    for place in others[:MAX_SCORED]:
        have = [_quick(line) for line in place.text.split("\n")[: len(wanted)]]
        score = _similarity(wanted, have, anchors)
        if score >= MIN_SCORE:
            scored.append(msgspec.structs.replace(place, score=score))
    return exact + scored


def _anchors(needle: str) -> list[tuple[str, int]]:
    """The longest distinct pieces of `needle` that normalising cannot change, each
    with the index of the line it lies on."""
    pieces: dict[str, int] = {}
    for match in _PIECE.finditer(needle):
        piece = match.group()
        if piece not in pieces:
            pieces[piece] = needle.count("\n", 0, match.start())
    # Longest first: a long piece is found in few places (a short one only serves
    # an old text of short words, and finds its place while it is found seldom).
    ranked = sorted(pieces.items(), key=lambda item: -len(item[0]))
    return ranked[:MAX_ANCHORS]


def _hits(data: bytes, piece: bytes, work: Work, limit: int = MAX_HITS + 1) -> list[int]:
    """Where `piece` occurs (at most `limit` times), searched in windows."""
    found: list[int] = []
    start = 0
    while start < len(data) and len(found) < limit:
        position = find(data, piece, start)
        if position < 0:
            work.scanned += len(data) - start
            break
        work.scanned += position + len(piece) - start
        found.append(position)
        start = position + 1
    return found


def _line_start(data: bytes, position: int, work: Work) -> int:
    """Where the line holding `position` starts; -1 when that is more than MAX_LINE back."""
    floor = max(0, position - MAX_LINE - 1)
    start = data.rfind(b"\n", floor, position) + 1
    work.scanned += position - (start or floor)
    return -1 if start == 0 and floor > 0 else start


def _lines_back(data: bytes, start: int, count: int, work: Work) -> int:
    """The start of the line `count` lines before the one starting at `start` (-1: too long)."""
    for _ in range(count):
        if start <= 0:
            return start
        start = _line_start(data, start - 1, work)
    return start


def _take_lines(data: bytes, start: int, count: int) -> tuple[list[bytes], int] | None:
    """`count` lines from `start` (each without its LF) and where the last one's
    LF ends; None when the file ends first or a line is longer than MAX_LINE."""
    taken: list[bytes] = []
    position = start
    for index in range(count):
        end = data.find(b"\n", position, position + MAX_LINE + 1)
        if end < 0:
            if index < count - 1 or len(data) - position > MAX_LINE:
                return None
            end = len(data)
        taken.append(data[position:end])
        position = end + 1
    return taken, min(position, len(data))


def _quick(line: str) -> str:
    """A line as compared: look-alikes and quotes mapped, edge whitespace dropped.

    >>> _quick("\\t print(\\u201chi\\u201d)  \\r")
    'print("hi")'
    """
    return line.translate(_ALL_TABLE).strip(_SPACE)


def _mapped(line: str) -> tuple[str, list[int]]:
    """`_quick(line)` and, for each of its characters and its end, the index in `line`."""
    chars: list[str] = []
    where: list[int] = []
    for index, char in enumerate(line):
        for mapped in _QUOTES.get(char) or _LOOKALIKES.get(char, char):
            chars.append(mapped)
            where.append(index)
    low, high = 0, len(chars)
    while low < high and chars[low] in _SPACE:
        low += 1
    while high > low and chars[high - 1] in _SPACE:
        high -= 1
    end = where[high - 1] + 1 if high > low else len(line)
    return "".join(chars[low:high]), [*where[low:high], end]


def _compare(
    data: bytes,
    start: int,
    lines: list[str],
    ends_line: bool,
    needle: str,
    anchors: list[tuple[str, int]],
    work: Work,
) -> Place | None:
    """The place at the line starting at `start`: a normalised match, a similar
    place, or None."""
    taken = _take_lines(data, start, len(lines))
    if taken is None:
        return None
    raw, after = taken
    try:
        found = [line.decode("utf-8") for line in raw]
    except UnicodeDecodeError:
        return None
    work.places += 1
    work.compared += sum(map(len, found)) + len(needle)
    wanted = [_quick(line) for line in lines]
    have = [_quick(line) for line in found]
    span = _normalised_span(wanted, have, found, ends_line, lines)
    if span is None:
        score = _similarity(wanted, have, anchors, quick=True)
        if score < MIN_SCORE:
            return None
        # Whole lines, with the last one's line end when the old text ends in one.
        first, begin = 0, start
        end = after if ends_line else start + sum(len(line) + 1 for line in raw) - 1
    else:
        first, last = span
        score = 1.0
        begin = start + len(found[0][:first].encode("utf-8"))
        end = _end_offset(raw, start, last, ends_line, after)
    text = data[begin:end].decode("utf-8")
    normalised = span is not None
    return Place(
        start=begin,
        end=end,
        line=0,
        end_line=0,
        text=text,
        # A similar place differs somehow, even where no named difference says how.
        differences=differences(needle, text) or ([] if normalised else ["other"]),
        normalised=normalised,
        score=score,
        indent=_indent_model(needle, text, whole_first=first == 0) if normalised else None,
        whole_first_line=normalised and first == 0,
    )


def _normalised_span(
    wanted: list[str], have: list[str], found: list[str], ends_line: bool, lines: list[str]
) -> tuple[int, tuple[int, int]] | None:
    """Where a normalised match begins in the first line and ends in the last (raw
    character indices; the end's line is the last taken), or None."""
    count = len(wanted)
    if any(wanted[i] != have[i] for i in range(1, count - 1)):
        return None
    # Checked on the quick forms first: a line is mapped character by character
    # only where a match is certain.
    if count == 1:
        if ends_line:
            column = len(have[0]) - len(wanted[0]) if have[0].endswith(wanted[0]) else -1
        else:
            column = have[0].find(wanted[0])
        if column < 0 or (column > 0 and have[0].find(wanted[0], column + 1) >= 0):
            return None  # absent, or twice in the line: no one place
    elif not have[0].endswith(wanted[0]):
        return None
    else:
        column = len(have[0]) - len(wanted[0])
    tail_ok = (have[-1] == wanted[-1]) if ends_line else have[-1].startswith(wanted[-1])
    if count > 1 and not tail_ok:
        return None
    head, head_map = _mapped(found[0])
    if head != have[0]:  # _quick and _mapped disagree only on exotic text
        return None
    first = 0 if column == 0 else head_map[column]
    if count == 1:
        finish = column + len(wanted[0])
        return first, (0, _end_in_line(found[0], head_map, finish, len(head), lines[0]))
    if ends_line:
        return first, (count - 1, len(found[-1]))
    tail, tail_map = _mapped(found[-1])
    last_raw = _end_in_line(found[-1], tail_map, len(wanted[-1]), len(tail), lines[-1])
    return first, (count - 1, last_raw)


def _end_in_line(line: str, where: list[int], finish: int, length: int, wanted_raw: str) -> int:
    """The raw index where a match ending at normalised column `finish` ends: past
    the line's trailing whitespace when the old text's line had some too."""
    if finish >= length:
        trailing = wanted_raw != wanted_raw.rstrip(_SPACE)
        return len(line.rstrip("\r")) if trailing else where[length]
    return where[finish]


def _end_offset(
    raw: list[bytes], start: int, last: tuple[int, int], ends_line: bool, after: int
) -> int:
    index, column = last
    if ends_line:
        return after
    line_start = start + sum(len(line) + 1 for line in raw[:index])
    return line_start + len(raw[index].decode("utf-8")[:column].encode("utf-8"))


def _similarity(
    wanted: list[str], have: list[str], anchors: list[tuple[str, int]], *, quick: bool = False
) -> float:
    """How alike an old text and a place are, from 0 to 1, on at most a few KiB of each;
    `quick`: an upper bound of it, in linear time."""
    needle = "\n".join(wanted)[:_COMPARED_CHARS]
    text = "\n".join(have)
    if len(wanted) == 1 and len(text) > 2 * len(needle):
        # A short old text in a long line: compare it with the stretch around its piece.
        for piece, _ in anchors:
            at, offset = text.find(piece), needle.find(piece)
            if at >= 0 and offset >= 0:
                begin = max(0, at - offset - 8)
                text = text[begin : begin + len(needle) + 16]
                break
    matcher = difflib.SequenceMatcher(None, needle, text[:_COMPARED_CHARS], autojunk=False)
    return round(matcher.quick_ratio() if quick else matcher.ratio(), 3)


def differences(needle: str, text: str) -> list[str]:
    """What differs between an old text and a place's text, in DIFFERENCES order.

    >>> differences("  x = 'a'  \\n", "\\tx = \\u2018a\\u2019\\n")
    ['tabs_vs_spaces', 'trailing_whitespace', 'quotes']
    """
    ours, theirs = needle.split("\n"), text.split("\n")
    if len(ours) != len(theirs):
        return ["other"]
    kinds: set[str] = set()
    for mine, other in zip(ours, theirs, strict=True):
        if mine.endswith("\r") != other.endswith("\r"):
            kinds.add("line_endings")
        mine, other = mine.removesuffix("\r"), other.removesuffix("\r")
        lead_mine, lead_other = _lead(mine), _lead(other)
        if not mine.strip(" \t") and not other.strip(" \t"):
            # A blank line's spaces trail nothing: they are trailing whitespace.
            if mine != other:
                kinds.add("trailing_whitespace")
            continue
        if lead_mine != lead_other:
            tabs = ("\t" in lead_mine) != ("\t" in lead_other)
            kinds.add("tabs_vs_spaces" if tabs else "indentation")
        core_mine, core_other = mine.strip(" \t"), other.strip(" \t")
        if mine[len(lead_mine) + len(core_mine) :] != other[len(lead_other) + len(core_other) :]:
            kinds.add("trailing_whitespace")
        if core_mine != core_other:
            kinds.update(_core_differences(core_mine, core_other))
    return [kind for kind in DIFFERENCES if kind in kinds]


def _core_differences(mine: str, other: str) -> set[str]:
    if _quick(mine) != _quick(other):
        return {"other"}
    if mine.translate(_QUOTE_TABLE) == other.translate(_QUOTE_TABLE):
        return {"quotes"}
    if mine.translate(_LOOKALIKE_TABLE) == other.translate(_LOOKALIKE_TABLE):
        return {"unicode_lookalikes"}
    return {"quotes", "unicode_lookalikes"}


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _numbered(data: bytes, place: Place, work: Work) -> Place:
    """The place with its shown text: the match widened by whole lines (at most
    MAX_WIDEN before, then after) until it occurs once in `data`, so that copied
    back as old_text it matches; `line` and `end_line` are that text's lines."""
    start, end = place.start, place.end
    widened = 0
    while _occurrences(data, data[start:end], work) > 1:
        if widened == 2 * MAX_WIDEN:
            start, end = place.start, place.end  # no unique text nearby: show the match
            break
        earlier = _line_start(data, start, work) if start > 0 else -1
        if earlier == start:
            earlier = _lines_back(data, start, 1, work)
        if widened < MAX_WIDEN and 0 <= earlier < start:
            start = earlier
        else:
            following = data.find(b"\n", end, end + MAX_LINE + 1)
            if following < 0 and end + MAX_LINE < len(data):
                start, end = place.start, place.end  # the next line is too long to show
                break
            end = len(data) if following < 0 else following + 1
        widened += 1
    work.scanned += start
    line = data.count(b"\n", 0, start) + 1
    end_line = line + data.count(b"\n", start, max(start, end - 1))
    return msgspec.structs.replace(
        place, line=line, end_line=end_line, text=data[start:end].decode("utf-8")
    )


def _occurrences(data: bytes, text: bytes, work: Work) -> int:
    """How often `text` occurs in `data`, counting to 2 at most."""
    return len(_hits(data, text, work, limit=2)) if text else 2


def _indent_model(needle: str, text: str, *, whole_first: bool) -> Callable[[str], str] | None:
    """How to re-indent a line of new text written with the old text's indentation
    so it fits `text`'s; None when no one rule maps every line's indentation."""
    pairs = [
        (_lead(mine.removesuffix("\r")), _lead(other.removesuffix("\r")))
        for index, (mine, other) in enumerate(
            zip(needle.split("\n"), text.split("\n"), strict=False)
        )
        if (index or whole_first) and mine.strip() and other.strip()
    ]
    return reindent(pairs)


def reindent(pairs: list[tuple[str, str]]) -> Callable[[str], str] | None:
    """A map of indentation from (old text's, file's) pairs: a constant offset in
    one style, or tabs for spaces (or spaces for tabs) at a constant level offset.

    >>> reindent([("", "    "), ("  ", "      ")])("  ")
    '      '
    >>> reindent([("    ", "\\t"), ("        ", "\\t\\t")])("            ")
    '\\t\\t\\t'
    >>> reindent([("  ", "    "), ("    ", "    ")]) is None
    True
    """
    if all(mine == other for mine, other in pairs):
        return _same
    kinds_mine = {c for mine, _ in pairs for c in mine}
    kinds_other = {c for _, other in pairs for c in other}
    if len(kinds_mine) > 1 or len(kinds_other) > 1:
        return None
    mine_char = next(iter(kinds_mine), None)
    other_char = next(iter(kinds_other), None)
    if mine_char is None or other_char is None or mine_char == other_char:
        char = other_char or mine_char or " "
        offsets = {len(other) - len(mine) for mine, other in pairs}
        if len(offsets) != 1:
            return None
        return _shift(char, offsets.pop())
    for unit in (4, 2, 8, 3):
        spaces_mine = mine_char == " "
        levels = set()
        for mine, other in pairs:
            spaces = mine if spaces_mine else other
            tabs = other if spaces_mine else mine
            if len(spaces) % unit:
                break
            levels.add(len(tabs) - len(spaces) // unit)
        else:
            if len(levels) == 1:
                return _convert(unit, levels.pop(), to_tabs=spaces_mine)
    return None


def _same(lead: str) -> str:
    return lead


def _shift(char: str, offset: int) -> Callable[[str], str]:
    def shifted(lead: str) -> str:
        return char * max(0, len(lead) + offset)

    return shifted


def _convert(unit: int, offset: int, *, to_tabs: bool) -> Callable[[str], str]:
    def converted(lead: str) -> str:
        if to_tabs:  # spaces -> tabs: offset = tabs - spaces // unit
            level, rest = divmod(lead.count(" ") + unit * lead.count("\t"), unit)
            return "\t" * max(0, level + offset) + " " * rest
        # tabs -> spaces: offset = tabs - spaces // unit, so spaces = (tabs - offset) * unit
        level = lead.count("\t") + lead.count(" ") // unit
        return " " * (unit * max(0, level - offset))

    return converted
