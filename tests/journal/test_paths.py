"""Paths the journal's transactions named, found by a part of their name (the page's search)."""

from __future__ import annotations

import pytest

from ledgerfs.journal import Journal, PathSeen

from .conftest import write_intent
from .test_sessions import move_intent

pytestmark = pytest.mark.anyio


async def test_paths_containing_text_newest_change_first(journal: Journal) -> None:
    for intent in (
        write_intent("/w/src/app.py", b"1"),
        write_intent("/w/docs/app.md", b"2"),
        write_intent("/w/src/app.py", b"3", before=b"1"),
        move_intent("/w/src/util.py", "/w/src/helpers.py", b"4", session="s2"),
    ):
        await journal.commit(await journal.begin(intent))
    assert await journal.paths_containing("app") == [
        PathSeen(path="/w/src/app.py", transactions=2, newest=3),
        PathSeen(path="/w/docs/app.md", transactions=1, newest=2),
    ]
    # A move's source and destination are both found.
    found = await journal.paths_containing("/src/")
    assert [p.path for p in found] == ["/w/src/helpers.py", "/w/src/util.py", "/w/src/app.py"]
    assert await journal.paths_containing("src", limit=1) == found[:1]
    assert await journal.paths_containing("nowhere") == []


@pytest.mark.parametrize("text", ["%", "_", "a%", "[", "'"])
async def test_paths_containing_takes_text_as_it_is(journal: Journal, text: str) -> None:
    # No pattern language: % and _ match only themselves.
    await journal.commit(await journal.begin(write_intent("/w/abc", b"1")))
    await journal.commit(await journal.begin(write_intent(f"/w/x{text}y", b"2")))
    assert [p.path for p in await journal.paths_containing(text)] == [f"/w/x{text}y"]
