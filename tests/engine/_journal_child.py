"""A journal opened with its default flushes, for the system-call tests to trace.

`python -m tests.engine._journal_child JOURNAL GROUP_COMMIT [create]` opens the journal
(durability full, `datasync` left at its default) and makes begins: lone ones,
concurrent ones, and begins after groups nobody waits on (`mark_applied`,
`commit_nowait`), which the writer commits without a WAL flush of their own. After
each begin returns it writes `begun <tx>` to stdout, so the trace shows when the
caller was told its intent is durable. With `create` it only makes the journal.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from ledgerfs.journal import Journal
from tests.journal.conftest import write_intent

#: The calls below that wait for durability: 31 begins and a checkpoint.
DURABLE_CALLS = 32


async def main(path: Path, group_commit: bool, create: bool) -> None:
    async with await Journal.open(path, group_commit=group_commit) as journal:
        if create:
            return  # made (and migrated) untraced: its creation is SQLite's business

        async def begin(name: str, data: bytes) -> int:
            tx = await journal.begin(write_intent(f"/w/{name}", data))
            os.write(1, f"begun {tx}\n".encode())
            return tx

        for i in range(10):
            tx = await begin(f"lone{i}", b"lone %d" % i)
            await journal.mark_applied(tx, 0)
            journal.commit_nowait(tx)
            await anyio.sleep(0.01)  # the queued marks commit alone, lazily
        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(begin, f"together{i}", b"together %d" % i)
        await journal.checkpoint(tx)
        await begin("last", b"last")


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:] == ["create"])
