"""Content regexes run in bounded work: a catastrophic pattern answers, correctly,
and an unrelated call sent beside it answers too (through the real stdio server).

Each pattern below backtracks for hours in Python's `re` on the 40-character line
of the searched file (the time doubles with each character); RE2 matches it in
one pass. A pattern that only a backtracking engine can run is refused as bad
input, naming `content`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security._matching import together
from tests.security._support import Server, error, ok

HOSTILE = ["a" * 40 + "!", "x" * 40 + "!"]
#: Short lines, safe for Python's `re` as the oracle; the hostile lines match nothing.
SAFE = ["aaaa", "aab", "zzX", "abc1", "xxy", "tail with spaces"]
LINES = [*HOSTILE, *SAFE]

CATASTROPHIC = [
    pytest.param(r"^(a+)+$", id="nested-plus"),
    pytest.param(r"^(a*)*$", id="nested-star"),
    pytest.param(r"^(a|a)+$", id="alternation-overlap"),
    pytest.param(r"^(a|aa)+$", id="alternation-prefix"),
    pytest.param(r"^(a|a?)+$", id="alternation-optional"),
    pytest.param(r"^(.*)*X$", id="dot-star-star"),
    pytest.param(r"^(.*a){12}X", id="polynomial-repeat"),
    pytest.param(r"(a+)+b", id="unanchored-nested"),
    pytest.param(r"^(\w+\s?)+$", id="words-and-spaces"),
    pytest.param(r"^([a-z]+)*[0-9]$", id="class-star-then-digit"),
    pytest.param(r"(a*)*b", id="empty-loop"),
    pytest.param(r"^(a+|a+b)+c$", id="overlapping-branches"),
    pytest.param(r"(x+x+)+y", id="adjacent-plus"),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("regex-dos")
    (folder / "hostile.txt").write_text("\n".join(LINES) + "\n")
    (folder / "other.txt").write_text("unrelated\n")
    return folder


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[Server]:
    with Server(root) as running:
        yield running


def expected_lines(pattern: str, case_sensitive: bool = True) -> list[int]:
    flags = 0 if case_sensitive else re.IGNORECASE
    return [
        number
        for number, line in enumerate(LINES, start=1)
        if line in SAFE and re.search(pattern, line, flags)
    ]


@pytest.mark.parametrize("case_sensitive", [True, False])
@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_regex_answers_correctly_beside_an_unrelated_call(
    server: Server, root: Path, pattern: str, case_sensitive: bool
) -> None:
    search, info = together(
        server,
        (
            "search_files",
            {
                "path": str(root),
                "pattern": "hostile.txt",
                "content": pattern,
                "regex": True,
                "case_sensitive": case_sensitive,
            },
        ),
        ("get_file_info", {"path": str(root / "other.txt")}),
    )
    assert ok(info)["size"] == len("unrelated\n")
    found = [match["line"] for match in ok(search)["matches"]]
    assert found == expected_lines(pattern, case_sensitive)


@pytest.mark.parametrize("regex", [True, False])
def test_literal_and_regex_search_find_the_same_lines(
    server: Server, root: Path, regex: bool
) -> None:
    result = ok(
        server.call(
            "search_files",
            {"path": str(root), "content": "a{2}" if regex else "aa", "regex": regex, "context": 1},
        )
    )
    assert [m["line"] for m in result["matches"]] == [1, 3, 4]
    assert result["matches"][1]["before"] == [HOSTILE[1]]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param(r"^(a+)\1$", "unsupported", id="backreference"),
        pytest.param(r"(?P<x>a)(?P=x)", "unsupported", id="named-backreference"),
        pytest.param(r"a(?=b)", "unsupported", id="lookahead"),
        pytest.param(r"a(?!b)", "unsupported", id="negative-lookahead"),
        pytest.param(r"(?<=a)b", "unsupported", id="lookbehind"),
        pytest.param(r"(?<!a)b", "unsupported", id="negative-lookbehind"),
        pytest.param(r"(a", "missing", id="unbalanced"),
        pytest.param("a\nb", "line_break", id="line-break"),
    ],
)
def test_a_pattern_that_needs_backtracking_is_refused_naming_content(
    server: Server, root: Path, content: str, reason: str
) -> None:
    body = error(
        server.call("search_files", {"path": str(root), "content": content, "regex": True}),
        "VALIDATION",
    )
    assert body["details"]["field"] == "content"
    assert reason in body["details"]["reason"]
    assert body["message"].startswith("content ")
