"""The page's diff rows: every line at its number on its side, highlighted or escaped,
and the side-by-side view made of exactly the same rows."""

from __future__ import annotations

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine.diffs import unified_diff
from ledgerfs.engine.uiviews import Row, diff_rows, image_type, side_by_side

_TAG = re.compile(r"<[^>]+>")
_COUNTS = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", re.MULTILINE)

lines = st.lists(
    st.sampled_from(["a", "b", "c", "def f():", "    return '<x>'", "-- x", "++ y", "", "é"]),
    max_size=12,
)


def text(row: Row) -> str:
    """What a row's HTML reads as."""
    return html.unescape(_TAG.sub("", row.html))


def joined(parts: list[str], end: bool) -> bytes:
    return ("\n".join(parts) + ("\n" if end and parts else "")).encode()


@settings(max_examples=300, deadline=None)
@given(lines, lines, st.booleans(), st.booleans(), st.sampled_from(["f.py", "f.txt", "f.html"]))
def test_each_row_shows_the_line_at_its_number(
    old: list[str], new: list[str], old_end: bool, new_end: bool, name: str
) -> None:
    before, after = joined(old, old_end), joined(new, new_end)
    rows = diff_rows(unified_diff(name, before, after), before, after, name)
    before_lines, after_lines = before.decode().splitlines(), after.decode().splitlines()
    for row in rows:
        if row.kind in ("del", "ctx"):
            assert row.old is not None and text(row) == before_lines[row.old - 1]
        if row.kind in ("add", "ctx"):
            assert row.new is not None and text(row) == after_lines[row.new - 1]
    # Every line of every hunk is shown once: as many rows per side as the headers say.
    diff = unified_diff(name, before, after)
    counts = [(int(o or 1), int(n or 1)) for o, n in _COUNTS.findall(diff)]
    assert sum(r.kind in ("del", "ctx") for r in rows) == sum(o for o, _ in counts)
    assert sum(r.kind in ("add", "ctx") for r in rows) == sum(n for _, n in counts)

    pairs = side_by_side(rows)
    lefts = [p.left for p in pairs if p.left is not None]
    rights = [p.right for p in pairs if p.right is not None]
    assert lefts == [r for r in rows if r.kind in ("del", "ctx")]
    assert rights == [r for r in rows if r.kind in ("add", "ctx")]
    assert [p.wide for p in pairs if p.wide] == [r for r in rows if r.kind in ("hunk", "note")]


def test_code_is_highlighted_and_markup_in_files_is_escaped() -> None:
    before = b"x = 1\n"
    after = b"x = '<script>'\n"
    rows = diff_rows(unified_diff("a.py", before, after), before, after, "a.py")
    added = next(r for r in rows if r.kind == "add")
    assert '<span class="s1">' in added.html  # pygments' class for a string
    assert "<script>" not in added.html and "&lt;script&gt;" in added.html
    plain = diff_rows(unified_diff("a.py", before, after))
    assert "<span" not in next(r for r in plain if r.kind == "add").html


def test_a_diff_of_several_files_names_each() -> None:
    diff = unified_diff("a.txt", b"1\n", None) + unified_diff("b.txt", None, b"2\n")
    rows = diff_rows(diff, files=True)
    assert [(r.kind, r.html) for r in rows if r.kind == "file"] == [
        ("file", "a.txt"),
        ("file", "b.txt"),
    ]
    assert [r.kind for r in diff_rows(diff)].count("file") == 0


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "image/png"),
        (b"\xff\xd8\xff\xe0", "image/jpeg"),
        (b"GIF89a..", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", None),  # it could run script
        (b"<html>", None),
        (b"", None),
    ],
)
def test_only_pictures_are_images(data: bytes, kind: str | None) -> None:
    assert image_type(data) == kind
