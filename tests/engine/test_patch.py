"""engine.patchparse, engine.patchapply and engine.binpatch: parsing, malformed patches,
hunks, deltas (no disk)."""

from __future__ import annotations

import difflib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine.binpatch import BinaryError, apply_delta
from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.patchapply import apply_hunks
from ledgerfs.engine.patchparse import FilePatch, parse_patch


def one(text: str) -> FilePatch:
    [patch] = parse_patch(text)
    return patch


# ---------------------------------------------------------------- parsing

PLAIN = (
    "--- old.txt\t2024-01-02 10:00:00.000000000 +0100\n"
    "+++ new.txt\t2024-01-02 10:05:00.000000000 +0100\n"
    "@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
)
SPACE = (
    "diff --git a/with space.txt b/with space.txt\n"
    "index 1111111..2222222 100644\n"
    "--- a/with space.txt\t\n+++ b/with space.txt\t\n"
    "@@ -1 +1 @@\n-a\n+b\n"
)
QUOTED = (
    'diff --git "a/caf\\303\\251 \\"q\\".txt" "b/caf\\303\\251 \\"q\\".txt"\n'
    "index 1111111..2222222 100644\n"
    '--- "a/caf\\303\\251 \\"q\\".txt"\n+++ "b/caf\\303\\251 \\"q\\".txt"\n'
    "@@ -1 +1 @@\n-a\n+b\n"
)
MODE_ONLY = "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
MODE_SPACE = "diff --git a/my run.sh b/my run.sh\nold mode 100644\nnew mode 100755\n"
RENAME_ONLY = (
    "diff --git a/old name.txt b/new name.txt\n"
    "similarity index 100%\nrename from old name.txt\nrename to new name.txt\n"
)
SEVERAL = (
    "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n"
    "@@ -1,2 +1,2 @@\n-a\n+A\n b\n"
    "@@ -10,2 +10,3 @@\n j\n+J\n k\n"
    "diff --git a/y b/y\nnew file mode 100644\nindex 0000000..3\n--- /dev/null\n+++ b/y\n"
    "@@ -0,0 +1 @@\n+new\n"
    "diff --git a/z b/z\ndeleted file mode 100755\nindex 4..0000000\n--- a/z\n+++ /dev/null\n"
    "@@ -1 +0,0 @@\n-gone\n"
)
NO_NEWLINE = (
    "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
    "\\ No newline at end of file\n"
)
EMPTY_NEW = "diff --git a/e b/e\nnew file mode 100644\nindex 0000000..e69de29\n"
EMPTY_DELETED = "diff --git a/e b/e\ndeleted file mode 100644\nindex e69de29..0000000\n"
FORMAT_PATCH = (
    "From 0123 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n x | 2 +-\n\n"
    "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    "-- \n2.39.5\n\n"
)
EPOCH = (
    "--- x\t1970-01-01 00:00:00.000000000 +0000\n+++ x\t2024-01-02 10:00:00.000000000 +0000\n"
    "@@ -0,0 +1 @@\n+hi\n"
)
CRLF_TRANSPORT = "--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n"
MNEMONIC = "diff --git i/x w/x\n--- i/x\n+++ w/x\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(PLAIN, [("old.txt", "new.txt", 1, None, None, False)], id="diff-u"),
        pytest.param(
            SPACE, [("with space.txt", "with space.txt", 1, None, None, False)], id="space"
        ),
        pytest.param(QUOTED, [('café "q".txt', 'café "q".txt', 1, None, None, False)], id="quoted"),
        pytest.param(MODE_ONLY, [("run.sh", "run.sh", 0, "100644", "100755", False)], id="mode"),
        pytest.param(
            MODE_SPACE, [("my run.sh", "my run.sh", 0, "100644", "100755", False)], id="mode-space"
        ),
        pytest.param(
            RENAME_ONLY, [("old name.txt", "new name.txt", 0, None, None, True)], id="rename"
        ),
        pytest.param(
            SEVERAL,
            [
                ("x", "x", 2, None, None, False),
                (None, "y", 1, None, "100644", False),
                ("z", None, 1, "100755", None, False),
            ],
            id="several",
        ),
        pytest.param(NO_NEWLINE, [("x", "x", 1, None, None, False)], id="no-newline"),
        pytest.param(EMPTY_NEW, [(None, "e", 0, None, "100644", False)], id="empty-new"),
        pytest.param(EMPTY_DELETED, [("e", None, 0, "100644", None, False)], id="empty-deleted"),
        pytest.param(FORMAT_PATCH, [("x", "x", 1, None, None, False)], id="format-patch"),
        pytest.param(EPOCH, [(None, "x", 1, None, None, False)], id="diff-N-epoch"),
        pytest.param(CRLF_TRANSPORT, [("x", "x", 1, None, None, False)], id="crlf-headers"),
        pytest.param(MNEMONIC, [("x", "x", 1, None, None, False)], id="mnemonic-prefix"),
    ],
)
def test_parse(text: str, expected: list[tuple[Any, ...]]) -> None:
    got = [
        (p.old_path, p.new_path, len(p.hunks), p.old_mode, p.new_mode, p.rename)
        for p in parse_patch(text)
    ]
    assert got == expected


def test_parse_hunk_fields() -> None:
    patch = one(NO_NEWLINE)
    [hunk] = patch.hunks
    assert (hunk.old_start, hunk.old_count, hunk.new_start, hunk.new_count) == (1, 2, 1, 2)
    assert hunk.lines == [(" ", "a"), ("-", "b"), ("+", "c")]
    assert (hunk.old_no_newline, hunk.new_no_newline) == (True, True)
    assert (hunk.header, hunk.header_line, patch.line) == ("@@ -1,2 +1,2 @@", 3, 1)
    second = parse_patch(SEVERAL)[0].hunks[1]
    assert (second.header_line, second.lines[1]) == (9, ("+", "J"))


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        pytest.param(CRLF_TRANSPORT, [("-", "a"), ("+", "b")], id="crlf-transported"),
        pytest.param(
            "--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\r\n+b\r\r\n",
            [("-", "a\r"), ("+", "b\r")],
            id="crlf-file-crlf-transported",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\r\n+b\r\n",
            [("-", "a\r"), ("+", "b\r")],
            id="crlf-file",
        ),
    ],
)
def test_parse_carriage_returns(text: str, lines: list[tuple[str, str]]) -> None:
    """A `\\r` is content when it comes from the file, transport when @@ lines have it."""
    assert one(text).hunks[0].lines == lines


@pytest.mark.parametrize("original", [b"a\n", b"a\r\n"])
def test_crlf_transported_patch_applies_to_either_file(original: bytes) -> None:
    expected = original.replace(b"a", b"b")
    assert apply_hunks(one(CRLF_TRANSPORT), original).content == expected


def test_parse_empty_line_is_empty_context() -> None:
    patch = one("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n")
    assert patch.hunks[0].lines == [(" ", "a"), (" ", ""), ("-", "b"), ("+", "c")]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("", 1, id="empty"),
        pytest.param("hello\nworld\n", 1, id="no-headers"),
        pytest.param("--- a/x\n+++ b/x\n", 1, id="no-hunks"),
        pytest.param("diff --git a/x b/x\nindex 1..2 100644\n", 1, id="git-no-hunks"),
        pytest.param("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @\n a\n", 3, id="bad-header"),
        pytest.param("--- a/x\n+++ b/x\n@@ -a +1 @@\n a\n", 3, id="bad-number"),
        pytest.param("@@ -1 +1 @@\n-a\n+b\n", 1, id="hunk-first"),
        pytest.param("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", 6, id="short-eof"),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n@@ -9 +9 @@\n-i\n+j\n", 7, id="short"
        ),
        pytest.param("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", 6, id="long"),
        pytest.param("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n-c\n+b\n", 5, id="long-old"),
        pytest.param("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n*junk\n", 5, id="garbage"),
        pytest.param("--- a/x\n+++ b/x\n@@ -1 +1 @@\n\\ No newline\n-a\n+b\n", 4, id="marker"),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n",
            3,
            id="marker-not-last",
        ),
        pytest.param(
            "diff --git a/i.png b/i.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\n",
            4,
            id="git-binary-without-data",
        ),
        pytest.param(
            "diff --git a/i.png b/i.png\nindex 1..2 100644\n"
            "Binary files a/i.png and b/i.png differ\n",
            3,
            id="binary-differ",
        ),
        pytest.param("Binary files a/i.png and b/i.png differ\n", 1, id="binary-plain"),
        pytest.param("--- /dev/null\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", 3, id="create-with-old"),
        pytest.param("--- a/x\n+++ /dev/null\n@@ -1 +1 @@\n-a\n+b\n", 3, id="delete-with-new"),
        pytest.param(
            "diff --git a/x b/y\nsimilarity index 90%\ncopy from x\ncopy to y\n", 1, id="copy"
        ),
        pytest.param('--- "a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n', 1, id="unterminated-quote"),
    ],
)
def test_parse_malformed(text: str, line: int) -> None:
    with pytest.raises(LedgerError) as caught:
        parse_patch(text)
    assert caught.value.code is Code.VALIDATION
    assert caught.value.details["line"] == line
    assert f"line {line}" in caught.value.envelope.error.message


@pytest.mark.parametrize(
    "text",
    [
        "*** Begin Patch\n*** Update File: x\n@@\n-a\n+b\n*** End Patch\n",
        "  \n\t*** Begin Patch\n*** Add File: y\n+hi\n*** End Patch",
    ],
)
def test_begin_patch(text: str) -> None:
    with pytest.raises(LedgerError) as caught:
        parse_patch(text)
    error = caught.value.envelope.error
    assert error.code is Code.BEGIN_PATCH
    assert "unified diff" in error.suggestion
    assert error.recovery == "fix_arguments"


# ---------------------------------------------------------------- applying

LF_PATCH = "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"


@pytest.mark.parametrize(
    ("patch", "original", "expected"),
    [
        pytest.param(LF_PATCH, b"a\nb\nc\n", b"a\nB\nc\n", id="lf"),
        pytest.param(LF_PATCH, b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n", id="crlf-file-lf-patch"),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n",
            b"a\r\nb\r\nc\r\n",
            b"a\r\nB\r\nc\r\n",
            id="crlf-exact",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
            b"a\nb",
            b"a\nb\n",
            id="add-final-newline",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n",
            b"a\nb\n",
            b"a\nb",
            id="drop-final-newline",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
            "\\ No newline at end of file\n",
            b"a\r\nb",
            b"a\r\nc",
            id="no-newline-both-crlf",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n \udcff\udcfe\n-caf\udcc3\n+cafe\n z\n",
            b"\xff\xfe\ncaf\xc3\nz\n",
            b"\xff\xfe\ncafe\nz\n",
            id="non-utf8",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -2,3 +2,3 @@\n a\n-b\n+B\n c\n",
            b"\x0c\x1c\xe2\x80\xa8\na\nb\nc\nd\n",
            b"\x0c\x1c\xe2\x80\xa8\na\nB\nc\nd\n",
            id="odd-separators-are-content",
        ),
        pytest.param(
            "--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+a\n+b\n", None, b"a\nb\n", id="create"
        ),
        pytest.param(
            "--- a/x\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n", b"a\nb\n", None, id="delete"
        ),
        pytest.param(
            "--- a/x\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n",
            b"a\r\nb\r\n",
            None,
            id="delete-crlf",
        ),
        pytest.param(EMPTY_NEW, None, b"", id="create-empty"),
        pytest.param(EMPTY_DELETED, b"", None, id="delete-empty"),
        pytest.param(MODE_ONLY, b"#!/bin/sh\n", b"#!/bin/sh\n", id="mode-only"),
    ],
)
def test_apply(patch: str, original: bytes | None, expected: bytes | None) -> None:
    assert apply_hunks(one(patch), original).content == expected


def numbered(count: int, start: int = 1) -> bytes:
    return b"".join(b"line %d\n" % i for i in range(start, start + count))


MIDDLE = "--- a/x\n+++ b/x\n@@ -10,3 +10,3 @@\n line 10\n-line 11\n+eleven\n line 12\n"


@pytest.mark.parametrize(
    ("original", "max_shift", "offsets"),
    [
        pytest.param(numbered(30), 200, [0], id="in-place"),
        pytest.param(b"new\n" * 3 + numbered(30), 200, [3], id="later"),
        pytest.param(numbered(25, start=5), 200, [-4], id="earlier"),
        pytest.param(b"new\n" * 250 + numbered(30), 250, [250], id="far-with-bigger-window"),
    ],
)
def test_apply_searches_nearby(original: bytes, max_shift: int, offsets: list[int]) -> None:
    applied = apply_hunks(one(MIDDLE), original, max_shift=max_shift)
    assert applied.offsets == offsets
    assert applied.content == original.replace(b"line 11\n", b"eleven\n")


def test_apply_prefers_nearest_match() -> None:
    original = b"x\ny\nx\ny\nx\ny\nx\n"
    patch = one("--- a/x\n+++ b/x\n@@ -3,3 +3,3 @@\n x\n-y\n+Y\n x\n")
    assert apply_hunks(patch, original).content == b"x\ny\nx\nY\nx\ny\nx\n"
    shifted = one("--- a/x\n+++ b/x\n@@ -4,3 +4,3 @@\n x\n-y\n+Y\n x\n")
    assert apply_hunks(shifted, original).offsets == [1]  # later before earlier on a tie


def error_of(patch: str, original: bytes | None, **kwargs: Any) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        apply_hunks(one(patch), original, **kwargs)
    return caught.value


def test_patch_failed_details() -> None:
    original = numbered(30).replace(b"line 11\n", b"line eleven\n")
    error = error_of(MIDDLE, original)
    assert error.code is Code.PATCH_FAILED
    assert error.envelope.error.path == "x"
    assert error.envelope.error.recovery == "read_and_rebase"
    assert error.details == {
        "file": "x",
        "hunk": 1,
        "hunk_header": "@@ -10,3 +10,3 @@",
        "line": 10,
        "expected": "line 11",
        "found": "line eleven",
        "mismatch_line": 11,
        "nearest_candidate": 10,
        "reason": "context_mismatch",
    }


@pytest.mark.parametrize(
    ("patch", "original", "details"),
    [
        pytest.param(
            MIDDLE, b"new\n" * 300 + numbered(30), {"nearest_candidate": 310}, id="beyond-shift"
        ),
        pytest.param(
            MIDDLE, numbered(5), {"found": None, "nearest_candidate": None}, id="past-eof"
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n b\n-c\n+C\n",
            b"a\nb\nc\nd\n",
            {"reason": "not_at_end_of_file", "expected": None},
            id="end-anchor",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -2,2 +2,2 @@\n b\n-c\n\\ No newline at end of file\n+C\n",
            b"a\nb\nc\n",
            {"reason": "newline_at_end_of_file", "expected": "c", "found": "c"},
            id="newline-differs",
        ),
        pytest.param(
            "--- a/x\n+++ b/x\n@@ -5,3 +5,3 @@\n e\n-f\n+F\n g\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n",
            b"a\nb\nc\nd\ne\nf\ng\nh\ni\n",
            {"hunk": 2, "reason": "overlaps_previous_hunk"},
            id="out-of-order",
        ),
    ],
)
def test_patch_failed_cases(patch: str, original: bytes, details: dict[str, Any]) -> None:
    error = error_of(patch, original)
    assert error.code is Code.PATCH_FAILED
    assert {key: error.details[key] for key in details} == details


@pytest.mark.parametrize(
    ("patch", "original", "code", "reason"),
    [
        pytest.param("--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n", b"", Code.PATCH_FAILED,
                     "file_exists", id="create-existing"),
        pytest.param("--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", b"a\nb\n", Code.PATCH_FAILED,
                     "not_at_end_of_file", id="delete-partial"),
        pytest.param(EMPTY_DELETED, b"x\n", Code.PATCH_FAILED, "delete_leaves_content",
                     id="delete-nonempty"),
        pytest.param(LF_PATCH, None, Code.NOT_FOUND, None, id="missing"),
    ],
)  # fmt: skip
def test_apply_file_level_errors(
    patch: str, original: bytes | None, code: Code, reason: str | None
) -> None:
    error = error_of(patch, original)
    assert error.code is code
    assert error.details.get("reason") == reason


# ---------------------------------------------------------------- invariants

TEXT_LINES = st.lists(st.sampled_from(["a", "b", "c", "", "x = 1", "é"]), max_size=25)


@settings(max_examples=150, deadline=None)
@given(old=TEXT_LINES, new=TEXT_LINES, context=st.integers(1, 4), crlf=st.booleans())
def test_difflib_diffs_apply_and_keep_line_ends(
    old: list[str], new: list[str], context: int, crlf: bool
) -> None:
    """A `diff -u` made on LF text applies to it, and to its CRLF twin giving CRLF."""
    old_text = "".join(line + "\n" for line in old)
    new_text = "".join(line + "\n" for line in new)
    diff = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            "a/f",
            "b/f",
            n=context,
        )
    )
    if not diff:
        assert old == new
        return
    [patch] = parse_patch(diff)
    eol = "\r\n" if crlf else "\n"
    original = old_text.replace("\n", eol).encode()
    applied = apply_hunks(patch, original)
    # An empty file has no line ends to follow, so the patch's own ones are used.
    new_eol = eol if old else "\n"
    assert applied.content == new_text.replace("\n", new_eol).encode()
    assert applied.offsets == [0] * len(patch.hunks)


@settings(max_examples=100, deadline=None)
@given(old=TEXT_LINES, new=TEXT_LINES, junk=st.lists(st.sampled_from(["junk", "zz"]), max_size=5))
def test_lines_added_above_only_shift_hunks(
    old: list[str], new: list[str], junk: list[str]
) -> None:
    """Lines prepended to the file move interior hunks by exactly that many lines."""
    old_text = "".join(line + "\n" for line in ["top", *old])
    new_text = "".join(line + "\n" for line in ["top", *new])
    diff = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), "a/f", "b/f"
        )
    )
    if not diff:
        return
    [patch] = parse_patch(diff)
    if any(hunk.old_start <= 1 for hunk in patch.hunks):
        return  # anchored at the start of the file: prepending must make it fail
    prefix = "".join(line + "\n" for line in junk)
    applied = apply_hunks(patch, (prefix + old_text).encode())
    assert applied.content == (prefix + new_text).encode()
    assert applied.offsets == [len(junk)] * len(patch.hunks)


PATCHY = st.lists(
    st.sampled_from(
        [
            "diff --git a/x b/x",
            'diff --git "a/x',
            "--- a/x",
            "+++ b/x",
            '--- "a/\\q',
            "--- /dev/null",
            "+++ /dev/null",
            "@@ -1 +1 @@",
            "@@ -0,0 +1,2 @@",
            "@@ -1,2 +0,0 @@",
            "new file mode 100644",
            "deleted file mode 100644",
            "rename from x",
            "rename to y",
            "\\ No newline at end of file",
            " a",
            "-a",
            "+b",
            "",
            "\r",
            "junk",
        ]
    ),
    max_size=14,
).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(text=PATCHY | st.text(max_size=80), original=st.none() | st.binary(max_size=20))
def test_any_text_parses_or_fails_with_an_envelope(text: str, original: bytes | None) -> None:
    """Whatever the text, the only failure is a LedgerError with a spec code."""
    try:
        for patch in parse_patch(text):
            apply_hunks(patch, original)
    except LedgerError as exc:
        assert exc.code in (Code.VALIDATION, Code.PATCH_FAILED, Code.NOT_FOUND, Code.BEGIN_PATCH)


# ---------------------------------------------------------------- binary hunks


@pytest.mark.parametrize(
    ("source", "delta", "why"),
    [
        (b"hello", bytes([4, 5, 0x91, 0, 5]), "source size"),
        (b"hello", bytes([5, 5, 0x91, 2, 5]), "copy past the end"),
        (b"hello", bytes([5, 5, 0x91, 0]), "cut inside a copy"),
        (b"hello", bytes([5, 5, 3, ord("a")]), "cut inside an insert"),
        (b"hello", bytes([5, 5, 0]), "reserved command"),
        (b"hello", bytes([5, 6, 0x91, 0, 5]), "result size"),
        (b"hello", bytes([0x85]), "cut inside the header"),
        (b"hello", bytes([5, 4, 0x91, 0, 5]), "builds past its stated size"),
        (b"hello", bytes([5, 101, 0x91, 0, 5]), "states more than the limit"),
    ],
)
def test_a_bad_delta_is_a_binary_error(source: bytes, delta: bytes, why: str) -> None:
    with pytest.raises(BinaryError):
        apply_delta(source, delta, 100)
