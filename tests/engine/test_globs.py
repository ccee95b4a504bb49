"""Globs matched by RE2 agree with pathspec's own GitIgnoreSpec (Python's `re`) on
small patterns and paths, where backtracking costs nothing."""

from __future__ import annotations

import pathspec
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgerfs.engine.globs import Globs

PIECES = ["a", "b", "*", "**", "?", "/", "[ab]", "[!a]", "\\*", " ", "."]
LINE = st.builds(
    lambda negate, pieces: ("!" if negate else "") + "".join(pieces),
    st.booleans(),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=6),
)
# A walk's names: never "." or "..".
NAME = st.text(alphabet="ab*. ", min_size=1, max_size=4).filter(
    lambda name: name not in {".", ".."}
)
PATH = st.builds(
    lambda parts, folder: "/".join(parts) + ("/" if folder else ""),
    st.lists(NAME, min_size=1, max_size=4),
    st.booleans(),
)


def readable(line: str) -> bool:
    """Whether pathspec reads the line (Globs skips the others)."""
    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(LINE, min_size=1, max_size=5), paths=st.lists(PATH, min_size=1, max_size=8))
def test_globs_agree_with_pathspec(lines: list[str], paths: list[str]) -> None:
    ours = Globs(lines)
    theirs = pathspec.GitIgnoreSpec.from_lines(
        [line for line in lines if readable(line)], backend="simple"
    )
    for path in paths:
        assert ours.match_file(path) == theirs.match_file(path), (lines, path)


def test_a_line_pathspec_cannot_read_is_skipped() -> None:
    assert Globs(["! ", "*.log"]).match_file("a.log")
    assert not Globs(["! "]).match_file("a.log")


def test_a_name_that_is_not_utf8_counts_one_character_per_byte() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert Globs(["caf?.txt"]).match_file(name)
    assert Globs(["*.txt"]).match_file(f"src/{name}")
    assert not Globs(["caf??.txt"]).match_file(name)
