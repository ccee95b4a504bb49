"""What the web page shows of a transaction's files: diff rows, highlighted, two ways.

A journaled mutation becomes a `FileView`: for text, the rows of its unified diff
(as `history` and `ledgerfs show` print it) with each line's numbers and its
highlighted HTML; for other bytes, the sizes and hashes of both sides, and the
images themselves when they are pictures. `side_by_side` pairs the same rows into
two columns. Everything here is pure but `transaction_files`, which reads the images.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache

import msgspec
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from ..journal import Journal, MutationRecord, TxRecord
from .history import reading_journal, recorded_diff
from .textbytes import is_text

__all__ = [
    "CSS_SCOPE",
    "MAX_ROWS",
    "FileView",
    "Pair",
    "Row",
    "diff_rows",
    "image_type",
    "side_by_side",
    "transaction_files",
]

#: Diff rows one file shows; past them the page says how to see the rest.
MAX_ROWS = 4000
#: The largest side highlighted (pygments lexes the whole file, at a few hundred KiB a
#: second); a larger one shows its lines escaped, uncoloured.
MAX_HIGHLIGHTED = 64 * 1024
#: The CSS class pygments' rules hang under (the stylesheet is pygments' own).
CSS_SCOPE = ".hl"

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: Magic numbers of the pictures shown as thumbnails, with their media types.
_IMAGES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class Row(msgspec.Struct, frozen=True):
    """One line of a diff: `kind` is ctx, del, add, hunk or note."""

    kind: str
    old: int | None
    new: int | None
    html: str


class Pair(msgspec.Struct, frozen=True):
    """One line of the side-by-side view: the old side and the new, either may be empty."""

    left: Row | None
    right: Row | None
    #: A hunk header or a note spans both sides.
    wide: Row | None = None


class FileView(msgspec.Struct, frozen=True, kw_only=True):
    """One mutation of a transaction as the page shows it."""

    op: str
    kind: str
    label: str
    path: str
    destination: str | None
    before_hash: str | None
    after_hash: str | None
    before_size: int | None
    after_size: int | None
    #: Text: the diff's rows (at most MAX_ROWS); binary: none.
    rows: list[Row]
    rows_total: int
    binary: bool
    #: The media type of each side when it is a picture (a thumbnail is shown).
    before_image: str | None = None
    after_image: str | None = None

    def pairs(self) -> list[Pair]:
        return side_by_side(self.rows)


def image_type(data: bytes) -> str | None:
    """The media type of a picture the page shows, by its magic number, else None.

    >>> image_type(b"\\x89PNG\\r\\n\\x1a\\n...."), image_type(b"<svg/>")
    ('image/png', None)
    """
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _IMAGES if data.startswith(magic)), None)


@lru_cache(maxsize=256)
def _lexer(name: str) -> Lexer:
    try:
        return get_lexer_for_filename(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def highlighted_lines(name: str, data: bytes | None) -> list[str] | None:
    """`data`'s lines as highlighted HTML (without their ends), or None when it is
    not text or too large to colour."""
    if data is None or len(data) > MAX_HIGHLIGHTED or not is_text(data):
        return None
    text = data.decode("utf-8")
    formatted: str = highlight(text, _lexer(name), HtmlFormatter(nowrap=True))
    return formatted.split("\n")


def _plain_lines(data: bytes | None) -> list[str] | None:
    if data is None or not is_text(data):
        return None
    return data.decode("utf-8").splitlines()


def diff_rows(
    diff: str,
    before: bytes | None = None,
    after: bytes | None = None,
    name: str = "",
    *,
    files: bool = False,
) -> list[Row]:
    """A unified diff's rows. With the images it was made from, each line's HTML is
    the highlighted line of its side (when the diff's text is that line); else the
    diff's text, escaped. With `files`, each file's `---`/`+++` pair becomes a `file`
    row naming it (a diff of several files).

    >>> [(r.kind, r.old, r.new, r.html) for r in diff_rows("@@ -1 +1 @@\\n-a<\\n+b\\n")]
    [('hunk', None, None, '@@ -1 +1 @@'), ('del', 1, None, 'a&lt;'), ('add', None, 1, 'b')]
    """
    sides = {
        "old": (_plain_lines(before), highlighted_lines(name, before)),
        "new": (_plain_lines(after), highlighted_lines(name, after)),
    }

    def shown(side: str, number: int, text: str) -> str:
        plain, coloured = sides[side]
        if plain and coloured and 0 < number <= len(plain) and plain[number - 1] == text:
            return coloured[number - 1] if number <= len(coloured) else html.escape(text)
        return html.escape(text)

    rows: list[Row] = []
    old = new = 0
    # Lines the current hunk has left on each side: a file's header comes only after.
    old_left = new_left = 0
    gone = ""
    for line in diff.splitlines():
        in_hunk = old_left > 0 or new_left > 0
        hunk = None if in_hunk else _HUNK.match(line)
        if hunk:
            old, new = int(hunk[1]), int(hunk[3])
            old_left = int(hunk[2]) if hunk[2] is not None else 1
            new_left = int(hunk[4]) if hunk[4] is not None else 1
            rows.append(Row("hunk", None, None, html.escape(line)))
        elif not in_hunk or line.startswith("\\"):
            if line.startswith("--- "):
                gone = line[4:]
            elif line.startswith("+++ "):
                if files:
                    shown_name = gone if line[4:] == "/dev/null" else line[4:]
                    rows.append(Row("file", None, None, html.escape(_unprefixed(shown_name))))
            elif not line.startswith("diff --git "):
                rows.append(Row("note", None, None, html.escape(line)))
        elif line.startswith("-"):
            rows.append(Row("del", old, None, shown("old", old, line[1:])))
            old, old_left = old + 1, old_left - 1
        elif line.startswith("+"):
            rows.append(Row("add", None, new, shown("new", new, line[1:])))
            new, new_left = new + 1, new_left - 1
        else:
            rows.append(Row("ctx", old, new, shown("new", new, line[1:])))
            old, new = old + 1, new + 1
            old_left, new_left = old_left - 1, new_left - 1
    return rows


def _unprefixed(name: str) -> str:
    return name[2:] if name.startswith(("a/", "b/")) else name


def side_by_side(rows: Sequence[Row]) -> list[Pair]:
    """Rows in two columns: a run of deletions faces the additions that follow it.

    >>> pairs = side_by_side(diff_rows("@@ -1,2 +1 @@\\n-a\\n-b\\n+c\\n"))
    >>> [(p.left and p.left.html, p.right and p.right.html) for p in pairs[1:]]
    [('a', 'c'), ('b', None)]
    """
    pairs: list[Pair] = []
    gone: list[Row] = []
    came: list[Row] = []

    def flush() -> Iterator[Pair]:
        for i in range(max(len(gone), len(came))):
            yield Pair(gone[i] if i < len(gone) else None, came[i] if i < len(came) else None)
        gone.clear()
        came.clear()

    for row in rows:
        if row.kind == "del":
            if came:
                pairs.extend(flush())
            gone.append(row)
        elif row.kind == "add":
            came.append(row)
        else:
            pairs.extend(flush())
            if row.kind == "ctx":
                pairs.append(Pair(row, row))
            else:
                pairs.append(Pair(None, None, wide=row))
    pairs.extend(flush())
    return pairs


def file_view(
    mutation: MutationRecord, blobs: dict[str, bytes], label: Callable[[str], str]
) -> FileView:
    """One mutation with its diff rows, or its sizes and pictures when it is not text."""
    before = blobs.get(mutation.before_hash) if mutation.before_hash else None
    after = blobs.get(mutation.after_hash) if mutation.after_hash else None
    binary = any(data is not None and not is_text(data) for data in (before, after))
    rows: list[Row] = []
    if not binary and mutation.kind != "dir":
        diff = recorded_diff(mutation, blobs, label)
        rows = diff_rows(diff, before, after, mutation.path)
    return FileView(
        op=mutation.op,
        kind=mutation.kind,
        label=label(mutation.path),
        path=mutation.path,
        destination=mutation.destination,
        before_hash=mutation.before_hash,
        after_hash=mutation.after_hash,
        before_size=None if before is None else len(before),
        after_size=None if after is None else len(after),
        rows=rows[:MAX_ROWS],
        rows_total=len(rows),
        binary=binary,
        before_image=None if before is None else image_type(before),
        after_image=None if after is None else image_type(after),
    )


async def transaction_files(
    journal: Journal, record: TxRecord, label: Callable[[str], str]
) -> list[FileView]:
    """Each mutation of `record`, in order, as the page shows it. Raises
    TOOL_UNAVAILABLE when the journal cannot be read."""
    hashes = {h for m in record.mutations for h in (m.before_hash, m.after_hash) if h}
    with reading_journal():
        blobs = await journal.blobs(hashes)
    ordered = sorted(record.mutations, key=lambda m: m.ordinal)
    return [file_view(m, blobs, label) for m in ordered]
