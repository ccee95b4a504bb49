"""A journal that lost transactions is refused on open, loudly, until the loss is accepted.

Each case damages a real journal the way a person or a disk can (files and
folders deleted, truncated, corrupted; the WAL of a killed writer lost or cut)
and checks that `Journal.open` raises JournalError(lost), or (corrupt) where
SQLite itself refuses the file, and never opens a smaller journal silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgerfs.journal import Journal, JournalError
from ledgerfs.journal._marker import read_mark
from tests._wal import used_bytes

from .conftest import write_intent

pytestmark = pytest.mark.anyio

COMMITTED = 6

# A writer that commits and checkpoints COMMITTED transactions, then is killed:
# its WAL holds them all (nothing copied them into the journal file yet).
KILLED_WRITER = f"""
import os, signal, sys, anyio
from ledgerfs.journal import Journal
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from tests.journal.conftest import write_intent

async def main(path):
    journal = await Journal.open(path)
    for i in range({COMMITTED}):
        tx = await journal.begin(write_intent(f"/f{{i}}", b"x%d" % i * 4000))
        await journal.commit(tx)
    await journal.checkpoint(tx)
    os.kill(os.getpid(), signal.SIGKILL)

anyio.run(main, sys.argv[1])
"""


def killed_writer(path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], check=False)
    assert done.returncode == -signal.SIGKILL
    assert Path(f"{path}-wal").stat().st_size > 0


async def closed_writer(path: Path) -> None:
    async with Journal.open(path) as journal:
        for i in range(COMMITTED):
            tx = await journal.begin(write_intent(f"/f{i}", b"x%d" % i))
            await journal.commit(tx)
        await journal.checkpoint(tx)


def used(path: Path) -> int:
    """The bytes of a file that hold data: a WAL's log, without the zeros after it."""
    return used_bytes(path) if path.name.endswith("-wal") else os.path.getsize(path)


def cut(path: Path, fraction: float) -> None:
    with open(path, "r+b") as f:
        f.truncate(int(used(path) * fraction))


def scribble(path: Path, at: float) -> None:
    with open(path, "r+b") as f:
        f.seek(int(used(path) * at))
        f.write(os.urandom(4096))


Damage = Callable[[Path], None]

AFTER_CLOSE: list[tuple[str, Damage, str]] = [
    ("journal file deleted", lambda p: p.unlink(), "lost"),
    ("journal folder deleted", lambda p: shutil.rmtree(p.parent), "lost"),
    ("journal file emptied", lambda p: cut(p, 0), "lost"),
    ("journal file cut in half", lambda p: cut(p, 0.5), "corrupt"),
]

AFTER_KILL: list[tuple[str, Damage, str]] = [
    ("WAL deleted", lambda p: Path(f"{p}-wal").unlink(), "lost"),
    ("WAL cut", lambda p: cut(Path(f"{p}-wal"), 0.4), "lost"),
    ("WAL corrupted", lambda p: scribble(Path(f"{p}-wal"), 0.4), "lost"),
    ("journal folder deleted", lambda p: shutil.rmtree(p.parent), "lost"),
]


@pytest.mark.parametrize(("name", "damage", "kind"), AFTER_CLOSE, ids=[c[0] for c in AFTER_CLOSE])
async def test_damage_after_close_is_refused(
    journal_path: Path, name: str, damage: Damage, kind: str
) -> None:
    await closed_writer(journal_path)
    damage(journal_path)
    with pytest.raises(JournalError) as refused:
        await Journal.open(journal_path)
    assert refused.value.kind == kind, name
    if kind == "lost":
        assert f"up to {COMMITTED}" in refused.value.message
        assert "ledgerfs recover" in refused.value.message


@pytest.mark.parametrize(("name", "damage", "kind"), AFTER_KILL, ids=[c[0] for c in AFTER_KILL])
async def test_damage_after_a_kill_is_refused(
    journal_path: Path, name: str, damage: Damage, kind: str
) -> None:
    killed_writer(journal_path)
    damage(journal_path)
    with pytest.raises(JournalError) as refused:
        await Journal.open(journal_path)
    assert refused.value.kind == kind, name


async def test_an_intact_journal_opens_after_a_kill(journal_path: Path) -> None:
    killed_writer(journal_path)
    async with Journal.open(journal_path) as journal:
        assert journal.loss is None
        newest = await journal.history(limit=1)
        assert [r.id for r in newest] == [COMMITTED]


async def test_accepting_a_loss_opens_and_lowers_the_mark(journal_path: Path) -> None:
    await closed_writer(journal_path)
    journal_path.unlink()
    async with Journal.open(journal_path, accept_loss=True) as journal:
        assert journal.loss is not None
        assert (journal.loss.had, journal.loss.holds) == (COMMITTED, 0)
        tx = await journal.begin(write_intent("/again", b"again"))
        await journal.commit(tx)
    mark = read_mark(journal_path.absolute())
    assert mark is not None and mark.last_tx == 0  # raised by checkpoints only
    async with Journal.open(journal_path) as journal:
        assert journal.loss is None
