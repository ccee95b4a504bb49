"""engine.nearmiss: what differs, how new text is re-indented, and the bound on the work.

The bound is shown by counting, not timing: on files built to be the worst for
each step (every line a near match, pieces found everywhere, one giant line,
the same block over and over), the bytes passed to `find` stay a fixed number
of passes over the file, and the places compared stay under MAX_PLACES,
whatever the file's size.
"""

from __future__ import annotations

import pytest

from ledgerfs.engine.nearmiss import (
    MAX_ANCHORS,
    MAX_CANDIDATES,
    MAX_COMPARED,
    MAX_LINE,
    MAX_PLACES,
    MAX_WIDEN,
    differences,
    near_misses,
    reindent,
)

#: Passes over the file one search may make: one per piece looked for, and for
#: each listed candidate its uniqueness checks (each at most one pass) and its
#: line count.
PASSES = MAX_ANCHORS + MAX_CANDIDATES * (2 * MAX_WIDEN + 2)


@pytest.mark.parametrize(
    ("needle", "text", "expected"),
    [
        ("a\n", "a\n", []),
        ("  a\n", "    a\n", ["indentation"]),
        ("    a\n", "\ta\n", ["tabs_vs_spaces"]),
        ("a  \n", "a\n", ["trailing_whitespace"]),
        ("a\n\nb", "a\n    \nb", ["trailing_whitespace"]),
        ("a\nb", "a\r\nb", ["line_endings"]),
        ("'a'", "\u2018a\u2019", ["quotes"]),
        ('"a"', "\u201ca\u201d", ["quotes"]),
        ("a-b", "a\u2013b", ["unicode_lookalikes"]),
        ("a b", "a\u00a0b", ["unicode_lookalikes"]),
        ("'a-b'", "\u2018a\u2014b\u2019", ["quotes", "unicode_lookalikes"]),
        ("a\n", "b\n", ["other"]),
        ("a\nb\n", "a\n", ["other"]),
        (
            "  'a' \r\n",
            "\t\u2018a\u2019\n",
            ["tabs_vs_spaces", "trailing_whitespace", "line_endings", "quotes"],
        ),
    ],
)
def test_differences_name_each_kind(needle: str, text: str, expected: list[str]) -> None:
    assert differences(needle, text) == expected


@pytest.mark.parametrize(
    ("pairs", "lead", "expected"),
    [
        ([("", "    ")], "  ", "      "),
        ([("        ", "    "), ("            ", "        ")], "        ", "    "),
        ([("  ", "")], "", ""),  # a line less indented than any matched keeps none
        ([("    ", "\t"), ("        ", "\t\t")], "    ", "\t"),
        ([("    ", "\t\t")], "", "\t"),
        ([("\t", "  "), ("\t\t", "    ")], "\t\t\t", "      "),
        ([("\t", "        ")], "\t", "        "),
        ([], "   ", "   "),
    ],
)
def test_reindent_maps_by_one_rule(pairs: list[tuple[str, str]], lead: str, expected: str) -> None:
    rule = reindent(pairs)
    assert rule is not None
    assert rule(lead) == expected


@pytest.mark.parametrize(
    "pairs",
    [
        [("  ", "    "), ("    ", "    ")],  # 2 -> 4 and 4 -> 4: no one offset
        [("    ", "  "), ("        ", "    ")],  # scaled, not shifted
        [(" \t", "    ")],  # mixed indentation
    ],
)
def test_reindent_refuses_what_no_one_rule_maps(pairs: list[tuple[str, str]]) -> None:
    assert reindent(pairs) is None


def _every_line_near(size: int) -> tuple[bytes, str]:
    line = b"    value = compute(x, limit)  # tuned\n"
    return line * (size // len(line)), "value = compute(y, limit)\n"


def _pieces_everywhere(size: int) -> tuple[bytes, str]:
    line = b"if value is None: return value\n"
    return line * (size // len(line)), "if value is None: return other_value\n"


def _one_giant_line(size: int) -> tuple[bytes, str]:
    return b"ab" * (size // 2), "ab" * 40 + " c"


def _same_block(size: int) -> tuple[bytes, str]:
    block = b"def f():\n    return None\n\n"
    return block * (size // len(block)), "\treturn None\n"


@pytest.mark.parametrize(
    "worst", [_every_line_near, _pieces_everywhere, _one_giant_line, _same_block]
)
def test_the_work_is_a_fixed_number_of_passes_whatever_the_size(worst) -> None:  # type: ignore[no-untyped-def]
    counted = []
    for size in (1 << 20, 8 << 20):
        data, needle = worst(size)
        found = near_misses(data, needle)
        work = found.work
        assert work.places <= MAX_PLACES
        assert work.compared <= MAX_COMPARED + MAX_LINE + len(needle)
        # Looking back from hits for line starts is bounded by the hits, not the file.
        assert work.scanned <= PASSES * len(data) + MAX_PLACES * 4096
        assert len(found.places) <= MAX_PLACES
        counted.append((work.scanned / len(data), work.places))
    (small_passes, small_places), (big_passes, big_places) = counted
    # Eight times the file: no more places, and no more passes over it.
    assert big_places <= small_places
    assert big_passes <= small_passes * 1.05 + 0.01


def test_a_near_match_found_fewer_than_max_hits_is_complete() -> None:
    data = b"".join(b"x = %d\n" % i for i in range(1000)) + b"    unique_name = 1\n"
    found = near_misses(data, "unique_name = 1\n")
    assert found.complete
    [place] = found.normalised
    assert (place.line, place.differences) == (1001, ["indentation"])
