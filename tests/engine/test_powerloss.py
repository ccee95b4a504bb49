"""Power loss, simulated: every state a crash may leave recovers with every promise kept.

`_powerloss` records a workload's file steps and flushes and builds the states a
power loss may leave at every point (metadata a prefix since the last syncfs,
unflushed bytes kept, lost, cut or zeroed; the journal as of its last WAL flush),
then recovers each and checks the promises; then the same for power losses
during the recovery of some of those states. The controls drop one flush each
and the simulator must find the data loss that follows: a durability test that
cannot fail is not a test.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Session
from ledgerfs.journal import _blobstore, _images

from ._powerloss import (
    FLUSH_POINTS,
    Action,
    Stats,
    check_all,
    checkpoint,
    crash_states,
    record,
    scratch_root,
    simulate,
    tool,
    undo_of_call,
    unique,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def merges_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal's blob store merges its tail every 2 new blobs (5 merges in the
    seed-1 workload), so power losses land around merges, and recovery and undo
    read blobs both merged and in the tail."""
    monkeypatch.setattr(_blobstore, "MERGE_AT", 2)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    folder = scratch_root(tmp_path / "ws")
    yield Path(os.path.realpath(folder))
    shutil.rmtree(folder, ignore_errors=True)


async def test_every_state_a_power_loss_leaves_recovers(root: Path) -> None:
    # A third of the states the simulator's defaults give seed 1 (485 against
    # 1,499), every kind of them still there; the soak runs every seed bigger.
    stats = await simulate(root, seed=1, recoveries=4, per_point=3)
    assert stats.violations == [], stats.violations[:3]
    assert stats.states >= 400, stats
    # The states exercise what recovery is for: work rolled forward, torn files
    # written again, temp files left to discard (a replaced file among them, left
    # under its temp name between a swap and its unlink).
    assert stats.rolled_forward > 0 and stats.temps > 0 and stats.swaps > 0, stats


@pytest.mark.parametrize("drop", FLUSH_POINTS)
async def test_without_any_one_flush_a_power_loss_loses_data(root: Path, drop: str) -> None:
    stats = await simulate(root, seed=1, drop=drop, stop_at_first=True)
    assert stats.violations, f"nothing was lost without {drop}: the simulator cannot see it"


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(1, 12))
async def test_power_loss_soak(root: Path, seed: int) -> None:
    stats = await simulate(root, seed=seed, recoveries=30, per_point=10)
    assert stats.violations == [], stats.violations[:3]


LINES = "".join(f"line {i}\n" for i in range(1, 11))


def by_other(name: str, **arguments: Any) -> Action:
    """A call of a second session ("other") of the same engine."""

    async def run(session: Session, made: list[int | None]) -> int | None:
        other = await session.engine.session("other")
        return await tool(name, **arguments)(other, made)

    return run


def line(old: str, new: str) -> list[dict[str, str]]:
    return [{"old_text": old, "new_text": new}]


#: The workload session's changes of every kind, another session's edits to the
#: same files, then a rewind of the workload session and an undo of that rewind.
REWOUND = [
    by_other("write_file", path="a.txt", content=LINES),
    tool("edit_file", path="a.txt", edits=line("line 2\n", "mine 2\n")),
    tool("write_file", path="b.txt", content="b1\n"),
    tool(
        "batch",
        operations=[
            {"op": "write", "path": "d/f.txt", "content": "f1\n"},
            {"op": "move", "source": "d", "destination": "e"},
            {"op": "write", "path": "n/new.txt", "content": "new\n"},
        ],
    ),
    tool("delete_file", path="c.txt"),
    by_other("edit_file", path="a.txt", edits=line("line 8\n", "other 8\n")),
    checkpoint,
    tool("rewind", session="powerloss"),
    undo_of_call(7),
]


async def test_a_power_loss_during_a_rewind_recovers_to_before_or_after_it(root: Path) -> None:
    run = await record(root, REWOUND)
    rewind, undone = run.transactions[7], run.transactions[8]
    assert rewind is not None and undone is not None
    assert run.trees[7]["a.txt"] == LINES.replace("line 8\n", "other 8\n").encode()
    assert run.trees[7]["d/f.txt"] == b"f0\n" and "e" not in run.trees[7]
    states = [s for s in unique(crash_states(run, random.Random(1))) if s.in_flight == rewind]
    stats = Stats()
    await check_all(run, states, stats, stop_at_first=False)
    assert stats.violations == [], stats.violations[:3]
    # Power losses cut the rewind midway (files neither before nor after it), and
    # recovery rolled it forward.
    assert sum(s.tree not in (s.before, s.after) for s in states) >= 10, stats
    assert stats.rolled_forward > 0, stats


#: A text of about 10 KiB: with the small chunk sizes below, its images are chunked.
BIG = "".join(f"line {i} of a text long enough to be stored as chunks\n" for i in range(200))

#: Edits of a chunked file, a second file sharing its chunks, and undos, so power
#: losses land while chunks are stored, and recovery and undo read images whose
#: chunks earlier transactions stored.
CHUNKED = [
    tool("write_file", path="big.txt", content=BIG),
    tool("edit_file", path="big.txt", edits=line("line 50 of", "LINE 50 of")),
    tool("write_file", path="copy.txt", content=BIG.replace("line 150 of", "LINE 150 of")),
    tool("edit_file", path="big.txt", edits=line("line 120 of", "LINE 120 of")),
    undo_of_call(3),
    tool("delete_file", path="copy.txt"),
    undo_of_call(5),
]


async def test_a_power_loss_amid_chunked_images_recovers(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("MIN_CHUNK", 64), ("AVG_CHUNK", 256), ("MAX_CHUNK", 1024)):
        monkeypatch.setattr(_images, name, value)
    monkeypatch.setattr(_images, "CHUNKED_FROM", 1024)
    run = await record(root, CHUNKED)
    assert None not in run.transactions, run.transactions
    assert run.trees[-1]["copy.txt"] == run.trees[2]["copy.txt"]
    with contextlib.closing(sqlite3.connect(root / ".ledgerfs" / "journal.db")) as db:
        assert db.execute("SELECT count(*) FROM blob_chunks").fetchone()[0] >= 4
    states = unique(crash_states(run, random.Random(1), per_point=3))
    stats = Stats()
    await check_all(run, states, stats, stop_at_first=False)
    assert stats.violations == [], stats.violations[:3]
    assert stats.states >= 100 and stats.rolled_forward > 0, stats
