"""Sessions and checkpoints through the embedding API: a host names its session,
results carry it, history filters by it and by checkpoints, and a commit reads
committed in other processes once its mark is written, milliseconds later."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgerfs.engine import Engine, LedgerError

pytestmark = pytest.mark.anyio


def on_disk(root: Path, tx: int) -> str:
    """The state of `tx` as another process reads the journal."""
    with sqlite3.connect(root / ".ledgerfs" / "journal.db") as db:
        return str(db.execute("SELECT state FROM transactions WHERE id = ?", (tx,)).fetchone()[0])


async def test_a_commit_reads_committed_elsewhere_once_its_mark_is_written(
    engine: Engine, workspace: Path
) -> None:
    journal = engine.journal
    real = journal.write_marks_nowait
    written = anyio.Event()

    def recorder(**options: float) -> None:
        real(**options)
        written.set()

    journal.write_marks_nowait = recorder  # type: ignore[method-assign]
    session = await engine.session()
    made = await session.call("write_file", {"path": "a.txt", "content": "a\n"})
    assert made.transaction is not None
    # The engine writes the marks by itself, a few milliseconds after the commit.
    with anyio.fail_after(10):
        await written.wait()
    await journal.checkpoint(0)  # a writer round trip: the queued marks went first
    assert on_disk(workspace, made.transaction) == "committed"


async def test_an_embedding_host_names_its_session(engine_config: dict[str, Any]) -> None:
    async with Engine.open(engine_config) as engine:
        host = await engine.session("host-7", client_name="my-host", client_version="0.3")
        made = await host.call("write_file", {"path": "a.txt", "content": "a\n"})
        preview = await host.call("write_file", {"path": "b.txt", "content": "b", "dry_run": True})
        assert made.session == preview.session == "host-7"
    # Opened again by a later process, it is the same session: its counts go on.
    async with Engine.open(engine_config) as engine:
        again = await engine.session("host-7")
        await again.call("create_directory", {"path": "d"})
        listed = await again.call("history", {"sessions": True, "session": "host-7"})
        [info] = listed.sessions
        assert (info.client_name, info.client_version, info.transactions) == ("my-host", "0.3", 2)
        mine = await again.call("history", {"session": "host-7"})
        assert [e.session for e in mine.entries] == ["host-7", "host-7"]


async def test_history_after_a_checkpoint_of_any_session(engine: Engine) -> None:
    one, two = await engine.session("one"), await engine.session("two")
    early = await one.call("write_file", {"path": "a.txt", "content": "a\n"})
    marked = await two.call("checkpoint", {"label": "turn"})
    assert (marked.session, marked.transaction) == ("two", early.transaction)
    late_one = await one.call("write_file", {"path": "b.txt", "content": "b\n"})
    late_two = await two.call("write_file", {"path": "c.txt", "content": "c\n"})
    after = await one.call("history", {"checkpoint": marked.checkpoint})
    assert [e.transaction for e in after.entries] == [late_two.transaction, late_one.transaction]
    only = await one.call("history", {"checkpoint": marked.checkpoint, "session": "one"})
    assert [e.transaction for e in only.entries] == [late_one.transaction]
    # Paged like any history: the page's last id as before.
    first = await one.call("history", {"checkpoint": marked.checkpoint, "limit": 1})
    assert first.truncated and first.next_before == late_two.transaction
    rest = await one.call("history", {"checkpoint": marked.checkpoint, "before": first.next_before})
    assert [e.transaction for e in rest.entries] == [late_one.transaction]


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("history", {"session": "never-opened"}, "NOT_FOUND"),
        ("history", {"checkpoint": 7}, "NOT_FOUND"),
        ("history", {"checkpoint": -1}, "NOT_FOUND"),
        ("history", {"sessions": True, "diff": True}, "VALIDATION"),
        ("history", {"sessions": True, "before": 3}, "VALIDATION"),
        ("history", {"session": ["a"]}, "VALIDATION"),
        ("checkpoint", {"label": None, "extra": True}, "VALIDATION"),
        ("checkpoint", [], "VALIDATION"),
    ],
)
async def test_bad_arguments_change_nothing(
    engine: Engine, workspace: Path, tool: str, arguments: Any, code: str
) -> None:
    session = await engine.session("s")
    with pytest.raises(LedgerError) as raised:
        await session.call(tool, arguments)
    assert str(raised.value.code) == code
    assert await engine.journal.checkpoints() == []
    assert [s.id for s in await engine.journal.sessions()] == ["s"]
