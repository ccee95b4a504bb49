"""engine.diffs: the previews' unified diffs apply back exactly, large files included."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine import diffs
from ledgerfs.engine.diffs import MAX_DIFF_LINES, core_opcodes, unified_diff
from ledgerfs.engine.patchapply import apply_hunks
from ledgerfs.engine.patchparse import parse_patch


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


def reference_diff(label: str, before: bytes, after: bytes) -> str:
    """The straightforward unified diff of two texts: whole files split into lines,
    the equal leading and trailing lines set aside, difflib's matcher on the rest
    and difflib's grouping into hunks with 3 lines of context."""
    if before == after:
        return ""
    old, new = _lf_lines(before.decode()), _lf_lines(after.decode())
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    core = difflib.SequenceMatcher(None, old[head : len(old) - tail], new[head : len(new) - tail])
    codes = [("equal", 0, head, 0, head)]
    codes += [
        (t, i1 + head, i2 + head, j1 + head, j2 + head) for t, i1, i2, j1, j2 in core.get_opcodes()
    ]
    codes.append(("equal", len(old) - tail, len(old), len(new) - tail, len(new)))
    joined: list[tuple[str, int, int, int, int]] = []
    for code in codes:
        if code[1] == code[2] and code[3] == code[4]:
            continue
        if joined and code[0] == joined[-1][0] == "equal":
            code = ("equal", joined[-1][1], code[2], joined[-1][3], code[4])
            joined.pop()
        joined.append(code)
    whole = difflib.SequenceMatcher(None, old, new)
    whole.opcodes = joined  # what get_grouped_opcodes groups
    out = [f"--- a/{label}\n", f"+++ b/{label}\n"]
    for group in whole.get_grouped_opcodes(3):
        old_span = _span(group[0][1], group[-1][2])
        new_span = _span(group[0][3], group[-1][4])
        out.append(f"@@ -{old_span} +{new_span} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in old[i1:i2]]
                continue
            out += ["-" + line for line in old[i1:i2]]
            out += ["+" + line for line in new[j1:j2]]
    unended = "\n\\ No newline at end of file\n"
    return "".join(line if line.endswith("\n") else line + unended for line in out)


def _lf_lines(text: str) -> list[str]:
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _span(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


# Long lines and edits of a few bytes or lines anywhere: the common head and
# tail found on bytes span many windows and end inside lines or at their edges.
WORD = st.sampled_from(["alpha", "beta", "", " ", "é", "x\r", "0123456789" * 4, "\x0c"])
LONG_LINE = st.lists(WORD, max_size=12).map("".join)
INSERT = st.sampled_from(["", "\n", "new", "alpha\n", "é", "0123456789" * 4 + "\n"])


@st.composite
def edited(draw: st.DrawFn) -> tuple[bytes, bytes]:
    lines = draw(st.lists(LONG_LINE, max_size=60))
    before = "".join(line + "\n" for line in lines) + draw(st.sampled_from(["", "end"]))
    after = before
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(after)))
        cut = draw(st.integers(0, 80))
        after = after[:at] + draw(INSERT) + after[at + cut :]
    return before.encode(), after.encode()


@settings(max_examples=600, deadline=None)
@given(before=TEXT, after=TEXT)
def test_a_diff_is_the_straightforward_diff(before: bytes, after: bytes) -> None:
    assert unified_diff("f.txt", before, after) == reference_diff("f.txt", before, after)


@settings(max_examples=600, deadline=None)
@given(pair=edited())
def test_an_edits_diff_is_the_straightforward_diff(pair: tuple[bytes, bytes]) -> None:
    before, after = pair
    assert unified_diff("f.txt", before, after) == reference_diff("f.txt", before, after)


def _naive_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# Few distinct bytes, so the texts share long runs; a few bytes changed at any
# distance from either end, so a mismatch falls at every place in a window.
RUN = st.lists(st.sampled_from(b"ab"), max_size=700).map(bytes)
ENDS = st.lists(st.sampled_from(b"ab"), max_size=2).map(bytes)


@settings(max_examples=1000, deadline=None)
@given(
    base=RUN,
    changes=st.lists(st.integers(0), max_size=3),
    ends=st.tuples(ENDS, ENDS, ENDS, ENDS),
    limit=st.integers(0),
)
def test_the_common_prefix_and_suffix_are_the_byte_by_byte_ones(
    base: bytes, changes: list[int], ends: tuple[bytes, bytes, bytes, bytes], limit: int
) -> None:
    changed = bytearray(base)
    for at in changes if base else []:
        changed[at % len(base)] ^= 1 + at % 255
    a, b = ends[0] + base + ends[1], ends[2] + bytes(changed) + ends[3]
    assert diffs._common_prefix(a, b) == _naive_prefix(a, b)
    limit %= min(len(a), len(b)) + 1
    expected = min(_naive_prefix(a[::-1], b[::-1]), limit)
    assert diffs._common_suffix(a, b, limit=limit) == expected


@pytest.mark.parametrize("size", [1, 63, 64, 65, 129, 700])
def test_one_changed_byte_is_found_wherever_it_is(size: int) -> None:
    """Every position, so every edge of every window and probe is crossed."""
    base = bytes(range(256)) * 3
    a = base[:size]
    for at in range(size):
        b = a[:at] + bytes([a[at] ^ 0x80]) + a[at + 1 :]
        assert diffs._common_prefix(a, b) == at
        for limit in {size, size - at, size - at - 1}:
            assert diffs._common_suffix(a, b, limit=max(limit, 0)) == min(size - at - 1, limit)


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
