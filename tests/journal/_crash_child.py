"""Fork server for the crash test: import the journal once, fork one writer per trial.

Protocol on stdin, one line per trial: ``<journal path> <seed> <backend>``. The
server forks a child that writes transactions until it is killed, and prints
``P <pid>``; when the child has been reaped it prints ``X <pid>``. The child
reports on the same stdout, one line per event, each written in a single
``os.write`` (atomic on a pipe): ``B <tx>`` after begin() returned, ``C <tx>``
after commit() returned, ``R <tx>`` after rollback() returned, ``K <tx>`` after
checkpoint(tx) returned.
"""

from __future__ import annotations

import os
import random
import sys

import anyio

from ledgerfs.journal import Journal, MutationRecord, TxIntent, _blobstore, _images, content_hash

WRITERS = 4
# The blob store merges its tail every few new blobs, so kills land in merges too.
_blobstore.MERGE_AT = 8
# A text every trial edits: its chunks are shared by images of every trial.
_SHARED = b"".join(b"line %d of the text every trial edits\n" % i for i in range(150))


def _say(line: str) -> None:
    """Report one event, unbuffered, so a kill right after loses nothing said."""
    os.write(1, (line + "\n").encode())


def _intent(rng: random.Random, n: int) -> TxIntent:
    """A one- or two-mutation intent; many images come from a small pool, so blobs
    dedupe (in the tail and merged), some are edits of a shared text (chunked, their
    chunks shared), the rest are new."""
    mutations = []
    blobs = {}
    for ordinal in range(rng.choice((1, 1, 2))):
        if rng.random() < 0.3:
            data = b"new %d %d " % (rng.getrandbits(64), n) * rng.choice((1, 200))
        elif rng.random() < 0.5:
            at = rng.randrange(len(_SHARED))
            data = _SHARED[:at] + b"edit %d %d\n" % (rng.getrandbits(32), n) + _SHARED[at:]
        else:
            data = b"%d" % rng.randrange(50) * rng.choice((1, 100, 2000))
        digest = content_hash(data)
        blobs[digest] = data
        mutations.append(
            MutationRecord(
                ordinal=ordinal,
                op="write",
                path=f"/w/{n % 17}/{ordinal}",
                destination=None,
                before_hash=None,
                after_hash=digest,
                before_mode=None,
                after_mode=0o644,
            )
        )
    return TxIntent(session=f"s{n % 3}", mutations=mutations, blobs=blobs, budget_charge=1)


async def _writer(j: Journal, rng: random.Random, limit: int) -> None:
    """begin, mark applied, then commit (or sometimes roll back), reporting each step."""
    for n in range(limit):
        tx = await j.begin(_intent(rng, n))
        _say(f"B {tx}")
        if rng.random() < 0.1:
            await j.rollback(tx, outcome="ROLLBACK_COMPLETE", cause=None, applied=[])
            _say(f"R {tx}")
            continue
        await j.mark_applied(tx, 0)
        await j.commit(tx)
        _say(f"C {tx}")
        if rng.random() < 0.2:
            await j.checkpoint(tx)
            _say(f"K {tx}")


async def _workload(path: str, seed: int) -> None:
    """Open the journal and run WRITERS concurrent writers."""
    rng = random.Random(seed)
    durability = "full" if seed % 2 else "normal"
    async with (
        await Journal.open(path, durability=durability) as j,
        anyio.create_task_group() as tg,
    ):
        for k in range(WRITERS):
            tg.start_soon(_writer, j, random.Random(seed * 100 + k), 5000 + rng.randrange(3))


async def _noop() -> None:
    """Nothing: running it once loads a backend's modules before any fork."""


def serve() -> None:
    """Answer trial lines until stdin closes."""
    # Images of a few KiB are chunked (FastCDC's smallest sizes), so kills land while
    # chunks are stored, and images stored after a kill list chunks stored before it.
    # Set here, not on import: the test imports this module too.
    _images.MIN_CHUNK, _images.AVG_CHUNK, _images.MAX_CHUNK = 64, 256, 1024
    _images.CHUNKED_FROM = 1024
    # Children inherit loaded backends instead of importing them after the fork.
    for backend in ("asyncio", "trio"):
        anyio.run(_noop, backend=backend)
    for line in sys.stdin:
        path, seed, backend = line.split()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                anyio.run(_workload, path, int(seed), backend=backend)
            except BaseException:
                code = 1
            os._exit(code)
        print(f"P {pid}", flush=True)
        os.waitpid(pid, 0)
        print(f"X {pid}", flush=True)


if __name__ == "__main__":
    serve()
