"""engine.diffs: the previews' unified diffs apply back exactly, large files included."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine import diffs
from ledgerfs.engine.diffs import MAX_DIFF_LINES, core_opcodes, unified_diff
from ledgerfs.engine.patch import apply_hunks, parse_patch


def applied(diff: str, before: bytes | None) -> bytes | None:
    """What the diff makes of `before`, every hunk at exactly its stated line."""
    [patch] = parse_patch(diff)
    result = apply_hunks(patch, before, max_shift=0)
    assert result.offsets == [0] * len(patch.hunks)
    return result.content


# Lines hold what str.splitlines would wrongly break on (CR, form feed, file
# separator, NEL, LINE SEPARATOR): only LF ends a line, in git and here.
LINE = st.sampled_from(["a", "b", "", "x = 1", "é", "t\r", "p\x0cq", "r\x1cs", "n\x85", "l\u2028m"])
TEXT = st.builds(
    lambda lines, final: ("\n".join(lines) + ("\n" if final and lines else "")).encode(),
    st.lists(LINE, max_size=30),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(before=TEXT, after=TEXT)
def test_a_diff_applies_back_to_the_after_image(before: bytes, after: bytes) -> None:
    diff = unified_diff("f.txt", before, after)
    if before == after:
        assert diff == ""
        return
    assert diff.startswith("--- a/f.txt\n+++ b/f.txt\n")
    assert applied(diff, before) == after


@settings(max_examples=300, deadline=None)
@given(before=TEXT, after=TEXT)
def test_a_diff_within_a_patchs_regions_applies_back(before: bytes, after: bytes) -> None:
    """Given the spans a patch's hunks replaced, matching only those gives a diff
    that still makes the after image, hunk for hunk where git's would."""
    general = unified_diff("f.txt", before, after)
    if before == after or not before:
        return
    [patch] = parse_patch(general)
    regions = apply_hunks(patch, before).regions
    assert len(regions) == len(patch.hunks)
    narrow = unified_diff("f.txt", before, after, regions=regions)
    assert applied(narrow, before) == after
    if len(regions) == 1:
        assert narrow == general  # one region is what the general path finds itself


@settings(max_examples=100, deadline=None)
@given(
    body=st.lists(LINE, min_size=1, max_size=40),
    at=st.integers(min_value=0),
    new=LINE,
    shared=st.integers(0, 2),
)
def test_a_one_line_edit_is_one_hunk_at_its_line(
    body: list[str], at: int, new: str, shared: int
) -> None:
    # `shared` makes the new line begin or end like the old one, so the common
    # prefix and suffix found on bytes fall inside a line, not at its edges.
    at %= len(body)
    old_line = body[at]
    new_line = old_line[:shared] + "~" + new + old_line[len(old_line) - shared :]
    before = "".join(line + "\n" for line in body).encode()
    after = "".join(line + "\n" for line in [*body[:at], new_line, *body[at + 1 :]]).encode()
    diff = unified_diff("f", before, after)
    assert applied(diff, before) == after
    hunks = [line for line in diff.split("\n") if line.startswith("@@")]
    first = max(at - 3, 0) + 1
    count = min(at, 3) + 1 + min(len(body) - at - 1, 3)
    span = f"{first},{count}" if count > 1 else f"{first}"
    assert hunks == [f"@@ -{span} +{span} @@"]


# Few distinct lines, so the two sides often share some and the matcher runs.
CORE = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "é\n", "d"]), max_size=8)


@settings(max_examples=500, deadline=None)
@given(old=CORE, new=CORE)
def test_a_cores_opcodes_are_the_matchers(old: list[str], new: list[str]) -> None:
    assert core_opcodes(old, new) == difflib.SequenceMatcher(None, old, new).get_opcodes()


def _matcher_only(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    return list(difflib.SequenceMatcher(None, old, new).get_opcodes())


@settings(max_examples=300, deadline=None)
@given(before=TEXT, after=TEXT)
def test_the_one_hunk_shortcut_gives_the_general_paths_diff(before: bytes, after: bytes) -> None:
    fast = unified_diff("f.txt", before, after)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(diffs, "core_opcodes", _matcher_only)
        general = unified_diff("f.txt", before, after)
    assert fast == general


@pytest.mark.parametrize(
    ("before", "after", "head"),
    [
        (None, b"new\n", "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+new\n"),
        (b"old\n", None, "--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n"),
        (b"", b"x", "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n"),
        (b"a\n", b"a", "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n"),
        (b"\x00\x01", b"\x00\x02", "Binary files a/f and b/f differ\n"),
        (b"\xff\n", b"ok\n", "Binary files a/f and b/f differ\n"),
    ],
)
def test_edges(before: bytes | None, after: bytes | None, head: str) -> None:
    assert unified_diff("f", before, after) == head


def test_a_small_edit_of_a_large_file_numbers_its_hunk_from_the_top() -> None:
    lines = [f"line {n}\n".encode() for n in range(1, 200_001)]
    before = b"".join(lines)
    lines[123_456] = b"changed\n"
    after = b"".join(lines)
    diff = unified_diff("big", before, after)
    assert diff.splitlines()[2] == "@@ -123454,7 +123454,7 @@"
    assert "-line 123457\n+changed\n" in diff
    assert applied(diff, before) == after


def test_a_rewrite_past_the_limit_is_summarised() -> None:
    before = b"".join(f"{n}\n".encode() for n in range(MAX_DIFF_LINES))
    after = b"".join(f"{n}!\n".encode() for n in range(MAX_DIFF_LINES))
    diff = unified_diff("f", before, after)
    assert diff == (
        f"--- a/f\n+++ b/f\n(diff of {MAX_DIFF_LINES} and {MAX_DIFF_LINES} lines omitted)\n"
    )
