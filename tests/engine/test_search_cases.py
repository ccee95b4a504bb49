"""search_files on a tree with every kind of file, pinned case by case.

search_cases.json holds each case's result as the sandbox's per-file path gave
it (a resolve and a read_content of each file); the search through the walk's
folder descriptors must give the same files, lines, context, truncation and
count of files searched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .search_cases import CASES, build, run

EXPECTED: dict[str, Any] = json.loads((Path(__file__).parent / "search_cases.json").read_text())


def test_every_case_is_pinned() -> None:
    assert sorted(EXPECTED) == sorted(name for name, _ in CASES)


@pytest.mark.parametrize(("name", "arguments"), CASES, ids=[name for name, _ in CASES])
def test_search_gives_the_pinned_result(
    tmp_path: Path, name: str, arguments: dict[str, Any]
) -> None:
    assert run(build(tmp_path), arguments) == EXPECTED[name]
