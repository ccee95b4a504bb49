"""edit_file's matching: edits in order, replace_all, near misses explained, loose matching.

Through a session on real files and a real journal: every refusal is VALIDATION
(or REWRITE_BLOCKED) and leaves the file as it was; every landing is compared
whole with the file meant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine import Code, Engine, LedgerError, Session
from ledgerfs.engine.edits import MAX_REPLACED, TextEdit, apply_edits
from ledgerfs.engine.nearmiss import DIFFERENCES, MAX_CANDIDATES

pytestmark = pytest.mark.anyio


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[Session]:
    root = tmp_path / "root"
    root.mkdir()
    async with Engine.open({"roots": [str(root)], "auto_occ": "off"}) as engine:
        yield await engine.session()


def _root(session: Session) -> Path:
    return Path(session.engine.workspace.roots[0])


def _edits(*pairs: tuple[str, str] | dict[str, Any]) -> list[dict[str, Any]]:
    return [p if isinstance(p, dict) else {"old_text": p[0], "new_text": p[1]} for p in pairs]


async def _edit(session: Session, before: str, edits: list[dict[str, Any]], **more: Any) -> Any:
    (_root(session) / "f.txt").write_bytes(before.encode("utf-8"))
    return await session.call("edit_file", {"path": "f.txt", "edits": edits, **more})


async def _refused(
    session: Session,
    before: str,
    edits: list[dict[str, Any]],
    code: Code = Code.VALIDATION,
    **more: Any,
) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        await _edit(session, before, edits, **more)
    assert caught.value.code is code, caught.value
    assert (_root(session) / "f.txt").read_bytes() == before.encode("utf-8")
    return caught.value


def _text(session: Session) -> str:
    return (_root(session) / "f.txt").read_bytes().decode("utf-8")


IN_ORDER = [
    # The second edit changes what the first wrote.
    ("a = 1\n", _edits(("a = 1", "b = 1"), ("b = 1", "b = 2")), "b = 2\n"),
    # The second edit's old_text exists only once the first has run.
    ("x\n", _edits(("x\n", "x\ny\n"), ("y\n", "z\n")), "x\nz\n"),
    # A text the first edit made unique is found once by the second.
    ("k k\n", _edits(("k k", "k j"), ("k ", "K ")), "K j\n"),
    # replace_all: every occurrence, left to right, never overlapping.
    ("x = x + x\n", _edits({"old_text": "x", "new_text": "y", "replace_all": True}), "y = y + y\n"),
    ("aaaaa\n", _edits({"old_text": "aa", "new_text": "b", "replace_all": True}), "bba\n"),
    # replace_all once a first edit has made more of them.
    (
        "f(a)\n",
        _edits(("f(a)", "f(a) + g(a)"), {"old_text": "a", "new_text": "b", "replace_all": True}),
        "f(b) + g(b)\n",
    ),
    # replace_all of one occurrence is an ordinary edit.
    ("one two\n", _edits({"old_text": "two", "new_text": "2", "replace_all": True}), "one 2\n"),
    # On a CRLF file, LF texts are taken as CRLF, edit after edit.
    ("a\r\nb\r\n", _edits(("a\nb", "a\nc"), ("c\n", "d\n")), "a\r\nd\r\n"),
]


@pytest.mark.parametrize(("before", "edits", "after"), IN_ORDER)
async def test_edits_apply_in_order(
    session: Session, before: str, edits: list[dict[str, Any]], after: str
) -> None:
    result = await _edit(session, before, edits)
    assert _text(session) == after
    assert result.loose_matches == []


REFUSED = [
    # An earlier edit replaced the text a later one names.
    ("a\nb\n", _edits(("a", "c"), ("a", "d")), "edits[1].old_text", 0),
    # Unique in the file as read, twice once the first edit has run.
    ("x y\n", _edits(("y", "x"), ("x", "z")), "edits[1].old_text", 2),
    # replace_all needs one occurrence at least.
    (
        "abc\n",
        _edits({"old_text": "zzz", "new_text": "y", "replace_all": True}),
        "edits[0].old_text",
        0,
    ),
    ("abc\n", _edits(("b", "B"), ("", "x")), "edits[1].old_text", None),
]


@pytest.mark.parametrize(("before", "edits", "field", "matches"), REFUSED)
async def test_a_refused_edit_names_itself_and_changes_nothing(
    session: Session, before: str, edits: list[dict[str, Any]], field: str, matches: int | None
) -> None:
    error = await _refused(session, before, edits)
    assert error.details["field"] == field
    assert error.details.get("matches") == matches


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.sampled_from(["ab", "cd", "ef", "abcd", "\n"]), min_size=1, max_size=12),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["ab", "cd", "ef", "abcd", "b\nc"]),
            st.sampled_from(["", "ab", "X", "cd\n"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_edits_in_order_are_replacements_one_after_another(
    words: list[str], edits: list[tuple[str, str, bool]]
) -> None:
    text = "".join(words)
    expected: str | None = text
    for old, new, every in edits:
        assert expected is not None
        first = expected.find(old)
        if first < 0 or (not every and expected.find(old, first + 1) >= 0):
            expected = None
            break
        expected = expected.replace(old, new) if every else expected.replace(old, new, 1)
    try:
        got = apply_edits(
            "f", text.encode(), [TextEdit(o, n, a) for o, n, a in edits], allow_rewrite=True
        ).data.decode()
    except LedgerError as exc:
        assert exc.code is Code.VALIDATION
        got = None
    assert got == expected


NEAR_MISSES = [
    # (file, old_text, the best candidate's (line, end_line, text), differences)
    (
        "class A:\n    def f(self):\n        return 1\n",
        "def f(self):\n    return 1\n",
        (2, 3, "    def f(self):\n        return 1\n"),
        ["indentation"],
    ),
    (
        "func f() {\n\treturn 1\n}\n",
        "func f() {\n    return 1\n}\n",
        (1, 3, "func f() {\n\treturn 1\n}\n"),
        ["tabs_vs_spaces"],
    ),
    (
        "total = 1  \ncount = 2\n",
        "total = 1\ncount = 2\n",
        (1, 2, "total = 1  \ncount = 2\n"),
        ["trailing_whitespace"],
    ),
    (
        "head\nfirst line\r\nsecond line\r\n",
        "first line\nsecond line\n",
        (2, 3, "first line\r\nsecond line\r\n"),
        ["line_endings"],
    ),
    (
        "say \u201chello\u201d now\n",
        'say "hello" now',
        (1, 1, "say \u201chello\u201d now"),
        ["quotes"],
    ),
    (
        "wait \u2013 then go\n",
        "wait - then go",
        (1, 1, "wait \u2013 then go"),
        ["unicode_lookalikes"],
    ),
    (
        "value = store.get(key)\nif value is None:\n",
        "value = store.lookup(key)\nif value is None:\n",
        (1, 2, "value = store.get(key)\nif value is None:\n"),
        ["other"],
    ),
]


@pytest.mark.parametrize(("before", "old", "best", "differences"), NEAR_MISSES)
async def test_an_old_text_found_nowhere_lists_where_it_nearly_matches(
    session: Session, before: str, old: str, best: tuple[int, int, str], differences: list[str]
) -> None:
    error = await _refused(session, before, _edits((old, "NEW")))
    candidates = error.details["candidates"]
    assert 1 <= len(candidates) <= MAX_CANDIDATES
    assert (candidates[0]["line"], candidates[0]["end_line"], candidates[0]["text"]) == best
    assert candidates[0]["differences"] == differences
    assert set(differences) <= set(DIFFERENCES)
    assert error.details["matches"] == 0
    assert ("loose" in (error.envelope.error.suggestion or "")) is (
        set(differences)
        <= {"indentation", "tabs_vs_spaces", "trailing_whitespace", "line_endings", "quotes"}
    )
    # Copied back, the candidate lands on the next call, and nothing else changes.
    await session.call("edit_file", {"path": "f.txt", "edits": _edits((best[2], "NEW"))})
    assert _text(session) == before.replace(best[2], "NEW", 1)


async def test_nothing_like_the_old_text_lists_no_candidates(session: Session) -> None:
    error = await _refused(session, "alpha\nbeta\n", _edits(("completely different", "x")))
    assert error.details["candidates"] == []
    assert "read the file again" in (error.envelope.error.suggestion or "")


async def test_a_chained_edit_counts_lines_in_the_text_before_it(session: Session) -> None:
    error = await _refused(session, "a\nb\n    c\n", _edits(("a\n", "x\ny\nz\n"), ("c\n\n", "d")))
    assert "as edits[0..0] left it" in error.envelope.error.message
    # "c" is on line 5 once the first edit has added two lines.
    assert error.details["candidates"][0]["line"] == 5


LOOSE = [
    # (file, old_text, new_text, the file meant, (line, differences))
    (
        "class A:\n    def f(self):\n        return 1\n",
        "def f(self):\n    return 1\n",
        "def f(self):\n    if self:\n        return 2\n    return 1\n",
        "class A:\n    def f(self):\n        if self:\n            return 2\n        return 1\n",
        (2, ["indentation"]),
    ),
    (
        "    if x:\n        y()\n",
        "if x:\n    y()\n",
        "if x:\n    z()\n",
        "    if x:\n        z()\n",
        (1, ["indentation"]),
    ),
    (
        "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n",
        "    if x {\n        return 1\n    }\n",
        "    if x {\n        return 2\n    }\n",
        "func f() {\n\tif x {\n\t\treturn 2\n\t}\n}\n",
        (2, ["tabs_vs_spaces"]),
    ),
    (
        "def f():\n    return 1\n",
        "def f():\n\treturn 1\n",
        "def f():\n\treturn 2\n",
        "def f():\n    return 2\n",
        (1, ["tabs_vs_spaces"]),
    ),
    (
        "a = 1 \nb = 2\n",
        "a = 1\nb = 2\n",
        "a = 3\nb = 4\n",
        "a = 3\nb = 4\n",
        (1, ["trailing_whitespace"]),
    ),
    (
        "x\nfirst\r\nsecond\r\n",
        "first\nsecond\n",
        "first\nthird\n",
        "x\nfirst\r\nthird\r\n",
        (2, ["line_endings"]),
    ),
    ("it\u2019s fine\n", "it's fine", "it's great", "it's great\n", (1, ["quotes"])),
]


@pytest.mark.parametrize(("before", "old", "new", "after", "said"), LOOSE)
async def test_loose_edits_the_one_near_match_and_says_so(
    session: Session, before: str, old: str, new: str, after: str, said: tuple[int, list[str]]
) -> None:
    await _refused(session, before, _edits((old, new)))  # exact refuses it
    result = await _edit(session, before, _edits((old, new)), match="loose")
    assert _text(session) == after
    [loose] = result.loose_matches
    assert (loose.edit, (loose.line, loose.differences)) == (0, said)
    assert loose.path == str(_root(session) / "f.txt")


async def test_loose_in_a_batch_and_in_a_dry_run(session: Session) -> None:
    before = "def f():\n\treturn 1\n"
    (_root(session) / "f.txt").write_text(before)
    op = {
        "op": "edit",
        "path": "f.txt",
        "edits": _edits(("    return 1", "    return 2")),
        "match": "loose",
    }
    preview = await session.call("batch", {"operations": [op], "dry_run": True})
    assert [m.line for m in preview.loose_matches] == [2]
    assert _text(session) == before
    done = await session.call("batch", {"operations": [op]})
    assert [m.differences for m in done.loose_matches] == [["tabs_vs_spaces"]]
    assert _text(session) == "def f():\n\treturn 2\n"


LOOSE_REFUSED = [
    # Two places match loosely: both listed, each with a text that occurs once.
    (
        "def a():\n    return None\n\ndef b():\n    return None\n",
        "\treturn None\n",
        "ambiguous_loose_match",
        [(1, 2, "def a():\n    return None\n"), (4, 5, "def b():\n    return None\n")],
    ),
    # A look-alike is not a loose difference.
    ("wait \u2013 then go\n", "wait - then go", None, [(1, 1, "wait \u2013 then go")]),
    # No one offset maps the indentation (4 -> 2, 8 -> 4).
    (
        "  if (x) {\n    y();\n  }\n",
        "    if (x) {\n        y();\n    }\n",
        None,
        [(1, 3, "  if (x) {\n    y();\n  }\n")],
    ),
]


@pytest.mark.parametrize(("before", "old", "reason", "candidates"), LOOSE_REFUSED)
async def test_loose_refuses_what_it_cannot_be_sure_of(
    session: Session,
    before: str,
    old: str,
    reason: str | None,
    candidates: list[tuple[int, int, str]],
) -> None:
    error = await _refused(session, before, _edits((old, "x\n")), match="loose")
    assert error.details.get("reason") == reason
    shown = [(c["line"], c["end_line"], c["text"]) for c in error.details["candidates"]]
    assert shown == candidates


async def test_the_rewrite_guard_counts_what_chained_edits_replace(session: Session) -> None:
    before = "".join(f"line {i}\n" for i in range(10))
    edits = _edits(*[(f"line {i}\n", f"LINE {i}\n") for i in range(8)])
    error = await _refused(session, before, edits, Code.REWRITE_BLOCKED)
    assert error.details["lines_replaced"] == 0.8
    # The same line edited again and again is a small edit.
    again = _edits(("line 3\n", "a\n"), ("a\n", "b\n"), ("b\n", "c\n"))
    await _edit(session, before, again)
    assert _text(session) == before.replace("line 3\n", "c\n")


async def test_replace_all_is_bounded(session: Session, tmp_path: Path) -> None:
    every = {"old_text": "a", "new_text": "b", "replace_all": True}
    await _edit(session, "a" * MAX_REPLACED, _edits(every), allow_rewrite=True)
    assert _text(session) == "b" * MAX_REPLACED
    error = await _refused(session, "a" * (MAX_REPLACED + 1), _edits(every), allow_rewrite=True)
    assert error.details["reason"] == "too_many_replacements"
    # Grown past max_file_size by one replace_all: refused before the text is built.
    root = tmp_path / "small"
    root.mkdir()
    (root / "f.txt").write_text("a" * 100)
    grow = {"old_text": "a", "new_text": "a" * 20, "replace_all": True}
    async with Engine.open({"roots": [str(root)], "max_file_size": 1000}) as small:
        capped = await small.session()
        with pytest.raises(LedgerError) as caught:
            await capped.call("edit_file", {"path": "f.txt", "edits": [grow]})
    assert caught.value.details["reason"] == "file_too_large"
    assert (root / "f.txt").read_text() == "a" * 100


def test_text_an_edit_grew_is_charged_as_it_is_searched() -> None:
    charged: list[int] = []
    edits = [TextEdit("a", "aaaa", replace_all=True), TextEdit("b", "c"), TextEdit("c", "d")]
    apply_edits("f", b"aab", edits, allow_rewrite=True, charge=charged.append)
    # 3 bytes became 9: the second and third edits each search 6 bytes more.
    assert charged == [6, 6]


@st.composite
def drifted_blocks(draw: st.DrawFn) -> tuple[str, str, str, str]:
    """A file indented in one style, a block of it as an agent resends it (its
    indentation shifted or in the other style), the agent's new text in that same
    drift, and the file meant: the block with the change, in the file's style."""
    tabs = draw(st.booleans(), label="file uses tabs")
    unit = "\t" if tabs else "    "
    levels = draw(st.lists(st.integers(0, 3), min_size=3, max_size=12), label="levels")
    words = [f"w{i}()" for i in range(len(levels))]
    lines = [unit * level + word for level, word in zip(levels, words, strict=True)]
    start = draw(st.integers(0, len(lines) - 2), label="start")
    end = draw(st.integers(start + 2, len(lines)), label="end")
    block = lines[start:end]
    low = min(levels[start:end])
    drift = draw(st.sampled_from(["shift", "style"]), label="drift")
    if drift == "shift":
        shift = draw(st.integers(-low, 2).filter(lambda n: n != 0), label="levels shifted")
        sent_unit, sent_levels = unit, [level + shift for level in levels[start:end]]
    else:
        sent_unit, sent_levels = ("    " if tabs else "\t"), levels[start:end]
    words_in = words[start:end]
    sent = [sent_unit * level + word for level, word in zip(sent_levels, words_in, strict=True)]
    changed = [line + " # x" for line in sent]
    meant = [line + " # x" for line in block]
    text = "\n".join(lines) + "\n"
    after = "\n".join([*lines[:start], *meant, *lines[end:]]) + "\n"
    return text, "\n".join(sent) + "\n", "\n".join(changed) + "\n", after


@settings(max_examples=150, deadline=None)
@given(case=drifted_blocks())
def test_loose_writes_what_was_meant_or_nothing(case: tuple[str, str, str, str]) -> None:
    text, old, new, meant = case
    try:
        edited = apply_edits(
            "f", text.encode(), [TextEdit(old, new)], allow_rewrite=True, match="loose"
        )
    except LedgerError as exc:
        # Only when the drift leaves no single place to edit.
        assert exc.code is Code.VALIDATION
        assert exc.details["field"] == "edits[0].old_text"
        return
    assert edited.data.decode() == meant
