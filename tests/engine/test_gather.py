"""Calls that arrive together are written as one group (engine/gather.py), each as if alone.

Every test starts its calls in one task group, so they reach the pipeline in the
same loop tick (or a few ticks apart, where that is the point) and are gathered
into a group; each asserts what a client sees (results, envelopes, files, the
journal) and that the calls shared journal commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ledgerfs.engine import Code, Engine, LedgerError, Session
from ledgerfs.engine.gather import MAX_GATHER_TICKS
from ledgerfs.engine.transaction import INLINE_MAX

from .conftest import temp_files

pytestmark = pytest.mark.anyio

LINES = [f"line {i}\n" for i in range(8)]


async def together(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Start every call in the same tick; each one's result, or the LedgerError it raised."""
    outcomes: list[Any] = [None] * len(calls)

    async def run(index: int) -> None:
        try:
            outcomes[index] = await calls[index]()
        except LedgerError as exc:
            outcomes[index] = exc

    async with anyio.create_task_group() as group:
        for index in range(len(calls)):
            group.start_soon(run, index)
    return outcomes


@pytest.fixture(autouse=True)
def marks_held(engine: Engine) -> None:
    """The flusher's writes of commit marks (engine/flush.py) are journal commits
    too: held here, so that the commits counted are the groups' alone."""
    engine.journal.write_marks_nowait = lambda **_: None  # type: ignore[method-assign]


def commits(engine: Engine) -> tuple[int, int]:
    """The journal's commits so far, and the transactions they recorded."""
    stats = engine.journal.statistics_nowait()
    return stats.commits, stats.records


def edit(session: Session, path: str, old: str, new: str, **extra: Any) -> Callable[[], Any]:
    arguments = {"path": path, "edits": [{"old_text": old, "new_text": new}], **extra}
    return lambda: session.call("edit_file", arguments)


async def test_calls_of_one_tick_commit_together_each_as_its_own_transaction(
    engine: Engine, workspace: Path
) -> None:
    names = [f"f{i}.txt" for i in range(16)]
    sessions = []
    for name in names:
        (workspace / name).write_text("counter 0\n")
        sessions.append(await engine.session())
    hashes = [
        (await s.call("read_file", {"path": n})).content_hash
        for s, n in zip(sessions, names, strict=True)
    ]
    before = commits(engine)

    results = await together(
        [
            edit(s, n, "counter 0", "counter 1", expected_hash=h)
            for s, n, h in zip(sessions, names, hashes, strict=True)
        ]
    )

    made, recorded = (a - b for a, b in zip(commits(engine), before, strict=True))
    assert recorded == len(names) and made <= 2
    assert len({r.transaction for r in results}) == len(names)
    for name, result in zip(names, results, strict=True):
        assert (workspace / name).read_text() == "counter 1\n"
        assert result.files[0].previous_hash != result.files[0].content_hash
        assert "-counter 0\n+counter 1\n" in result.diff
        record = await engine.journal.transaction(result.transaction)
        assert record is not None and record.summary == f"edit_file {name}"
        assert record.state == "committed"
    assert temp_files(workspace) == []


async def staggered(session: Session, workspace: Path, count: int, spacing: int) -> None:
    """Edit `count` files, call i starting `i * spacing` loop ticks after the first,
    as requests that reach a served process together reach its pipeline."""
    names = [f"s{i}.txt" for i in range(count)]
    for name in names:
        (workspace / name).write_text("old\n")

    async def late(index: int) -> None:
        for _ in range(index * spacing):
            await anyio.lowlevel.checkpoint()
        await edit(session, names[index], "old", "new")()

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(late, index)
    assert [(workspace / name).read_text() for name in names] == ["new\n"] * count


@pytest.mark.parametrize("spacing", [1, 2], ids=["a tick apart", "two ticks apart"])
async def test_calls_a_few_ticks_apart_join_one_group(
    engine: Engine, workspace: Path, spacing: int
) -> None:
    session = await engine.session()  # opening it is a journal commit
    before = commits(engine)
    await staggered(session, workspace, 4, spacing)
    assert tuple(a - b for a, b in zip(commits(engine), before, strict=True)) == (1, 4)


async def test_a_stream_of_calls_does_not_hold_its_leader_back(
    engine: Engine, workspace: Path
) -> None:
    """A call arriving every tick would keep a leader gathering for ever: it stops
    after MAX_GATHER_TICKS, runs its group, and the next call leads the next one."""
    session = await engine.session()  # opening it is a journal commit
    before = commits(engine)
    await staggered(session, workspace, 3 * MAX_GATHER_TICKS, 1)
    made, recorded = (a - b for a, b in zip(commits(engine), before, strict=True))
    # Records: every call's begin, and the commit marks riding along with later ones.
    assert recorded >= 3 * MAX_GATHER_TICKS and 2 <= made < 3 * MAX_GATHER_TICKS


async def test_calls_on_one_file_in_one_tick_see_each_other(
    engine: Engine, workspace: Path
) -> None:
    """Without hashes every edit lands (none is lost); with the same expected hash
    exactly one does and the others are OCC_MISMATCH."""
    target = workspace / "shared.txt"
    target.write_text("".join(LINES))
    session = await engine.session()
    results = await together([edit(session, "shared.txt", line, line.upper()) for line in LINES])
    assert all(not isinstance(r, LedgerError) for r in results)
    assert target.read_text() == "".join(line.upper() for line in LINES)

    digest = (await session.call("read_file", {"path": "shared.txt"})).content_hash
    results = await together(
        [edit(session, "shared.txt", line.upper(), line, expected_hash=digest) for line in LINES]
    )
    won = [i for i, r in enumerate(results) if not isinstance(r, LedgerError)]
    assert len(won) == 1
    assert {r.code for r in results if isinstance(r, LedgerError)} == {Code.OCC_MISMATCH}
    (winner,) = won
    expected = [line if i == winner else line.upper() for i, line in enumerate(LINES)]
    assert target.read_text() == "".join(expected)


FAILURES: dict[str, tuple[dict[str, Any], Code]] = {
    "old text not found": (
        {"path": "f3.txt", "edits": [{"old_text": "absent", "new_text": "x"}]},
        Code.VALIDATION,
    ),
    "stale expected hash": (
        {
            "path": "f3.txt",
            "edits": [{"old_text": "old", "new_text": "new"}],
            "expected_hash": "blake3:" + "0" * 64,
        },
        Code.OCC_MISMATCH,
    ),
    "outside the roots": (
        {"path": "../outside.txt", "edits": [{"old_text": "old", "new_text": "new"}]},
        Code.NOT_ALLOWED,
    ),
    "a secret file": (
        {"path": ".env", "edits": [{"old_text": "old", "new_text": "new"}]},
        Code.SECRET_DENIED,
    ),
    "a missing file": (
        {"path": "missing.txt", "edits": [{"old_text": "old", "new_text": "new"}]},
        Code.NOT_FOUND,
    ),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
async def test_a_failing_call_fails_alone(engine: Engine, workspace: Path, case: str) -> None:
    arguments, code = FAILURES[case]
    for i in range(6):
        (workspace / f"f{i}.txt").write_text("old\n")
    (workspace / ".env").write_text("old\n")
    sessions = [await engine.session() for _ in range(6)]
    calls = [edit(s, f"f{i}.txt", "old", "new") for i, s in enumerate(sessions) if i != 3]
    calls.insert(3, lambda: sessions[3].call("edit_file", arguments))
    before = commits(engine)

    results = await together(calls)

    made, recorded = (a - b for a, b in zip(commits(engine), before, strict=True))
    assert recorded == 5 and made < recorded
    failed = results[3]
    assert isinstance(failed, LedgerError) and failed.code is code, failed
    assert (workspace / "f3.txt").read_text() == "old\n"
    assert (workspace / ".env").read_text() == "old\n"
    for i, result in enumerate(results):
        if i != 3:
            assert not isinstance(result, LedgerError), result
            assert (workspace / f"f{i}.txt").read_text() == "new\n"


@pytest.fixture
def engine_config(workspace: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    config = {"roots": [str(workspace)], "durability": "full", "auto_occ": "off"}
    config.update(getattr(request, "param", {}))
    return config


@pytest.mark.parametrize("engine_config", [{"mutation_budget": 1}], indirect=True)
async def test_a_call_over_its_budget_fails_alone(engine: Engine, workspace: Path) -> None:
    for i in range(4):
        (workspace / f"f{i}.txt").write_text("old\n")
    spent = await engine.session()
    await spent.call("write_file", {"path": "other.txt", "content": "x\n"})
    sessions = [spent] + [await engine.session() for _ in range(3)]

    results = await together([edit(s, f"f{i}.txt", "old", "new") for i, s in enumerate(sessions)])

    assert isinstance(results[0], LedgerError) and results[0].code is Code.BUDGET_EXCEEDED
    assert (workspace / "f0.txt").read_text() == "old\n"
    assert all((workspace / f"f{i}.txt").read_text() == "new\n" for i in range(1, 4))
    assert spent.budget.remaining == 0
    assert [s.budget.remaining for s in sessions[1:]] == [0, 0, 0]


async def test_a_call_whose_lock_is_held_elsewhere_waits_alone(
    engine: Engine, workspace: Path
) -> None:
    """The others finish while the lock is held; the call finishes once it is released."""
    for i in range(4):
        (workspace / f"f{i}.txt").write_text("old\n")
    sessions = [await engine.session() for _ in range(4)]
    held, release = anyio.Event(), anyio.Event()
    finished: list[int] = []

    async def holder() -> None:
        async with engine.locks.hold([str(workspace / "f2.txt")]):
            held.set()
            await release.wait()

    async def call(i: int) -> None:
        await edit(sessions[i], f"f{i}.txt", "old", "new")()
        finished.append(i)

    async with anyio.create_task_group() as group:
        group.start_soon(holder)
        await held.wait()
        for i in range(4):
            group.start_soon(call, i)
        with anyio.fail_after(10):
            while len(finished) < 3:
                await anyio.sleep(0.01)
        assert sorted(finished) == [0, 1, 3]
        assert (workspace / "f2.txt").read_text() == "old\n"
        release.set()
    assert sorted(finished) == [0, 1, 2, 3]
    assert all((workspace / f"f{i}.txt").read_text() == "new\n" for i in range(4))


async def test_a_big_file_in_a_group_runs_alone(engine: Engine, workspace: Path) -> None:
    big = "x" * (2 * INLINE_MAX) + "\nold\n"
    (workspace / "big.txt").write_text(big)
    for i in range(3):
        (workspace / f"f{i}.txt").write_text("old\n")
    sessions = [await engine.session() for _ in range(4)]
    paths = ["big.txt", "f0.txt", "f1.txt", "f2.txt"]

    results = await together(
        [edit(s, p, "old", "new") for s, p in zip(sessions, paths, strict=True)]
    )

    assert all(not isinstance(r, LedgerError) for r in results)
    assert (workspace / "big.txt").read_text() == big.replace("old", "new")
    assert len({r.transaction for r in results}) == 4


@pytest.mark.parametrize("first", [True, False], ids=["leading call", "waiting call"])
async def test_a_call_cancelled_before_its_group_runs_changes_nothing(
    engine: Engine, workspace: Path, first: bool
) -> None:
    """Cancelled in the tick that gathers the group: the call is dropped, the group runs."""
    for name in ("a.txt", "b.txt"):
        (workspace / name).write_text("old\n")
    session = await engine.session()
    scope = anyio.CancelScope()
    outcome: list[Any] = []

    async def cancelled() -> None:
        with scope:
            outcome.append(await edit(session, "b.txt", "old", "new")())

    async def other() -> None:
        await edit(session, "a.txt", "old", "new")()

    async def canceller() -> None:
        scope.cancel()  # in the gathering tick: the group runs in a later one

    async with anyio.create_task_group() as group:
        for task in (cancelled, other) if first else (other, cancelled):
            group.start_soon(task)
        group.start_soon(canceller)
    await engine.flush()

    assert outcome == []
    assert (workspace / "a.txt").read_text() == "new\n"
    assert (workspace / "b.txt").read_text() == "old\n"
    assert len(await engine.journal.history(path=str(workspace / "a.txt"), limit=10)) == 1
    assert await engine.journal.history(path=str(workspace / "b.txt"), limit=10) == []
