"""A journal that cannot be used is TOOL_UNAVAILABLE, its cause in details, on every
path that reads or writes it (`history.reading_journal` is the one boundary)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine, Inspection, LedgerError, Session
from ledgerfs.engine.history import transaction_diff
from ledgerfs.engine.maintenance import gc

JOURNAL_CAUSE = {"stage", "kind", "errno", "journal", "message"}


def assert_unavailable(error: LedgerError, kind: str, journal: Path) -> None:
    body = error.envelope.error
    assert body.code == "TOOL_UNAVAILABLE"
    assert body.path == str(journal)
    assert set(body.details) == JOURNAL_CAUSE
    assert body.details["kind"] == kind
    assert body.details["journal"] == str(journal)


@pytest.fixture
async def journaled(engine_config: dict[str, Any], workspace: Path) -> Path:
    """A workspace whose journal holds one transaction; returns the journal's path."""
    async with Engine.open(engine_config) as engine:
        session = await engine.session()
        await session.call("write_file", {"path": "a.txt", "content": "a\n"})
    return workspace / ".ledgerfs" / "journal.db"


Read = Callable[[Inspection], Awaitable[object]]

READS: dict[str, Read] = {
    "log": lambda view: view.log(),
    "show": lambda view: view.show(1),
    "verify": lambda view: view.verify(),
    "gc_preview": lambda view: view.gc_preview(keep_days=None, keep_last=0),
}


@pytest.mark.anyio
@pytest.mark.parametrize("read", READS)
async def test_every_read_of_a_closed_journal_is_tool_unavailable(
    engine_config: dict[str, Any], journaled: Path, read: str
) -> None:
    async with Inspection.open(engine_config) as view:
        await view.journal.aclose()
        with pytest.raises(LedgerError) as raised:
            await READS[read](view)
    assert_unavailable(raised.value, "closed", journaled)


@pytest.mark.anyio
async def test_a_diff_whose_images_cannot_be_read_is_tool_unavailable(
    engine_config: dict[str, Any], journaled: Path
) -> None:
    async with Inspection.open(engine_config) as view:
        record = await view.journal.transaction(1)
        assert record is not None
        await view.journal.aclose()
        with pytest.raises(LedgerError) as raised:
            await transaction_diff(view.journal, record, view.label)
    assert_unavailable(raised.value, "closed", journaled)


Call = Callable[[Engine, Session], Awaitable[object]]

ENGINE_CALLS: dict[str, Call] = {
    "gc": lambda engine, _session: gc(engine, keep_days=None, keep_last=0),
    "session": lambda engine, _session: engine.session("another"),
    "history tool": lambda _engine, session: session.call(
        "history", {"transaction": 1, "diff": True}
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("call", ENGINE_CALLS)
async def test_an_engine_call_on_a_closed_journal_is_tool_unavailable(
    engine_config: dict[str, Any], journaled: Path, call: str
) -> None:
    async with Engine.open(engine_config) as engine:
        session = await engine.session()
        await engine.journal.aclose()
        with pytest.raises(LedgerError) as raised:
            await ENGINE_CALLS[call](engine, session)
    assert_unavailable(raised.value, "closed", journaled)


@pytest.mark.anyio
@pytest.mark.parametrize("opener", ["engine", "inspection"])
async def test_opening_a_journal_that_is_not_one_is_tool_unavailable(
    engine_config: dict[str, Any], workspace: Path, opener: str
) -> None:
    journal = workspace / ".ledgerfs" / "journal.db"
    journal.parent.mkdir()
    journal.write_bytes(b"not a journal" * 100)
    open_ = Engine.open if opener == "engine" else Inspection.open
    with pytest.raises(LedgerError) as raised:
        async with open_(engine_config):
            pass
    assert_unavailable(raised.value, "corrupt", journal)
