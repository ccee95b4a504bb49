"""SIGKILL a writer at random moments; after each kill nothing acknowledged is lost.

A fork server (`_crash_child.py`) imports the journal once; each trial forks a
writer that reports every begin/commit/rollback/checkpoint after the call
returned, and the test kills it with SIGKILL after a random delay. Then the
journal must open, verify, hold every reported commit, and hand every reported
begin that never committed to claim_unfinished() as roll_back.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ledgerfs.journal import Journal, _images

from ._crash_child import WRITERS

ROOT = Path(__file__).resolve().parents[2]


class Trial:
    """What one killed child said it did."""

    def __init__(self) -> None:
        self.events: dict[str, set[int]] = {k: set() for k in "BCRK"}


class ForkServer:
    """The running `_crash_child` server and the line protocol to it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.journal._crash_child"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def trial(self, path: Path, seed: int, backend: str, delay: float) -> Trial:
        """Start a writer, kill it after `delay` seconds, and collect its reports."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{path} {seed} {backend}\n")
        self.proc.stdin.flush()
        trial = Trial()
        pid = self._read_until(trial, "P")
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        self._read_until(trial, "X")
        return trial

    def _read_until(self, trial: Trial, tag: str) -> int:
        """Record event lines until a server line tagged `tag`; return its pid."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            fields = line.split()
            assert len(fields) == 2, f"a line out of protocol: {line!r}"
            kind, value = fields
            if kind == tag:
                return int(value)
            trial.events[kind].add(int(value))
        raise AssertionError("fork server exited")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


async def _check(path: Path, trial: Trial) -> int:
    """Assert the recovery contract for one killed trial, then recover it; return
    how many blobs the blob store had merged (the child merges every 8)."""
    ev = trial.events
    if not path.exists():
        assert not ev["B"], "the child reported work but the journal file is gone"
        return 0
    async with Journal.open(path, create=False) as j:
        report = await j.verify()
        assert report.ok, report
        # Every image a reported begin recorded reads back whole, chunked or not.
        for tx in ev["B"]:
            record = await j.transaction(tx)
            assert record is not None
            hashes = [m.after_hash for m in record.mutations if m.after_hash is not None]
            assert set(await j.blobs(hashes)) == set(hashes), tx
        for tx in ev["C"] | ev["K"]:
            record = await j.transaction(tx)
            assert record is not None and record.state == "committed", (tx, record)
        for tx in ev["K"]:
            record = await j.transaction(tx)
            assert record is not None and record.checkpointed
        for tx in ev["R"]:
            record = await j.transaction(tx)
            assert record is not None and record.state == "rolled_back"
        unfinished = await j.claim_unfinished()
        back = {u.tx.id for u in unfinished if u.action == "roll_back"}
        forward = {u.tx.id for u in unfinished if u.action == "roll_forward"}
        # Begun and not reported finished: pending (so claimed to roll back), unless the
        # kill hit between the finishing call's COMMIT and its report (one per writer).
        unreported = set()
        for tx in ev["B"] - ev["C"] - ev["R"] - back:
            record = await j.transaction(tx)
            assert record is not None and record.state in ("committed", "rolled_back"), record
            unreported.add(tx)
        assert len(unreported) <= WRITERS
        # Anything else pending was begun but killed before it could be reported.
        assert len(back - ev["B"]) <= WRITERS and not back & (ev["C"] | ev["R"])
        for u in unfinished:
            assert u.tx.state == ("pending" if u.action == "roll_back" else "committed")
        unreported_commits = forward - ev["C"]
        assert len(unreported_commits) <= WRITERS
        for tx in ev["C"]:
            record = await j.transaction(tx)
            assert record is not None and (record.checkpointed or tx in forward)
        for u in unfinished:
            outcome = "ROLLBACK_COMPLETE" if u.action == "roll_back" else "rolled_forward"
            await j.finish_recovery(u.tx.id, state="recovered", outcome=outcome, cause=None)
        assert await j.claim_unfinished() == []
    owners = [p for p in (path.parent / "owners").glob("*.lock")]
    assert owners == [], owners
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT upto FROM blob_merged").fetchone()[0])


def _stored_before(path: Path, top: int) -> tuple[int, int]:
    """(the highest blob id, how many chunks that images above `top` list are at or
    below it): chunks an image stored after a kill shares with images before it."""
    if not path.exists():
        return 0, 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        high = db.execute("SELECT coalesce(max(id), 0) FROM blobs").fetchone()[0]
        lists = db.execute("SELECT chunks FROM blob_chunks WHERE id > ?", (top,)).fetchall()
    shared = sum(1 for (listed,) in lists for i in _images.decode_chunk_ids(listed) if i <= top)
    return int(high), shared


def _run_trials(server: ForkServer, tmp_path: Path, trials: int, seed: int) -> None:
    rng = random.Random(seed)
    totals = dict.fromkeys("BCRK", 0)
    kills_mid_work = 0
    merged = 0
    shared_across = 0
    top = 0
    path = tmp_path / "j0" / "journal.db"
    for n in range(trials):
        if n % 20 == 0:
            # A fresh file now and then, so some kills land while it is being created.
            path = tmp_path / f"j{n}" / "journal.db"
            top = 0
        backend = "trio" if n % 3 == 0 else "asyncio"
        # Some kills land in start-up and open (about 20 ms), most amid the writes.
        delay = rng.choice(
            (0.0, rng.uniform(0, 0.04), rng.uniform(0.02, 0.12), rng.uniform(0.02, 0.12))
        )
        trial = server.trial(path, seed * 100_000 + n, backend, delay)
        merged = max(merged, anyio.run(_check, path, trial))
        top, shared = _stored_before(path, top)
        shared_across += shared
        for kind, ids in trial.events.items():
            totals[kind] += len(ids)
        kills_mid_work += bool(trial.events["B"])
    # The kills must land while work is in flight, not only before it starts.
    assert kills_mid_work >= trials // 4, (kills_mid_work, totals)
    assert min(totals.values()) > 0, totals
    assert merged > 0, "no trial reached a merge of the blob store"
    assert shared_across > 0, "no image listed a chunk stored before a kill"


def test_sigkill_loses_nothing_acknowledged(fork_server: ForkServer, tmp_path: Path) -> None:
    # 140 trials by default; the soak below runs thousands.
    _run_trials(fork_server, tmp_path, trials=140, seed=1)


@pytest.mark.soak
def test_sigkill_soak(fork_server: ForkServer, tmp_path: Path) -> None:
    _run_trials(fork_server, tmp_path, trials=3000, seed=int(os.environ.get("SOAK_SEED", "7")))
