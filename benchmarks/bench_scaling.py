"""Journal size against cost: history queries and commits at 1k to 1M transactions.

For each journal size (1k, 10k, 100k, 1M committed transactions, one mutation
each, every path holding exactly 50 transactions so a history query returns the
same 50 records at every size) the benchmark measures

- commit cost: ``begin()`` + ``commit()`` of one record with a fresh 4 KiB blob,
  one writer, durability ``full`` and ``normal``;
- history latency: ``history(path=..., limit=50)`` of a random path;
- what an agent and a person ask of a long history: ``undo`` of one of the oldest
  transactions through the engine (as the server runs it; durability ``normal``,
  as the fsync is the disk's cost, not the history's), and the commands
  ``ledgerfs log``, ``ledgerfs show TX``, ``ledgerfs log --session ID`` and
  ``ledgerfs undo TX``, each a subprocess (start-up included, as people run them);
- incremental verify: ``verify(since=point)`` after 20 transactions were chained
  since the point, and one full check (``verify_full_seconds``: it reads the whole
  journal, so it grows with it), at the smallest and the biggest journal only;
- journal bytes per one-line edit of a 1 KiB, 1 MiB and 50 MiB file
  (``journal_bytes_per_line_edit_*``; ``--edits-only`` runs just these);
- paging through a 50 MiB file against one whole read of it
  (``paging_50mib_vs_whole_read``, from ``bench_bigfiles``).

Journals are built once with bulk inserts (plain SQL, one transaction) into a
file whose schema the journal's own migrations created (``Journal.open``), with
the rows exactly as the journal's writer lays them out (`_codec`), and cached
under ``.bench-cache/scaling/`` keyed by schema version and size: a million
transactions build in about a minute instead of a million tool calls. Their
paths lie in a workspace beside them (``ws/``); the 64 oldest transactions each
wrote a file of their own that nothing changed since (what the undos take back),
and one transaction in 100 is an undo. No ``ANALYZE``: a journal in use has no
statistics, so the plans are the ones users get. Each measurement deletes the
records it added, so the cached file keeps its size. Sizes alternate inside each
round; figures are medians of per-round ratios (cost at N / cost at 1k; lower
is better, 1.0 is flat).

    python -m benchmarks.bench_scaling [--quick] [--sizes N,...] [--rounds R]
                                       [--edits-only] [--json FILE] [--dir DIR]

``--quick`` stops at 100k and says so (``big_point`` in the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from sqlite_utils import Database

from ledgerfs.engine import Engine
from ledgerfs.journal import (
    Journal,
    MutationRecord,
    TxIntent,
    VerifiedPoint,
    _chain,
    _codec,
    _marker,
    content_hash,
)
from ledgerfs.journal._marker import mark_path

from . import bench_bigfiles
from ._stats import figure_fields, median, summary, write_json
from .bench_engine import bench_folder, machine_info, private_state, repo_root

SIZES = (1_000, 10_000, 100_000, 1_000_000)
#: The sizes the operations (undo, the commands) are measured at.
OP_SIZES = (1_000, 100_000, 1_000_000)
PER_PATH = 50
PROBE_SESSION = "scaling-probe"
_BLOBS = 1000
#: The oldest transactions: each wrote a file of its own, never changed since.
OLD = 64
#: One transaction in this many is an undo of the one before it.
UNDO_EVERY = 100
#: The sessions the builder records (s0..s49).
_SESSIONS = 50
#: The commands measured, as `ledgerfs` arguments ({old}: an old transaction).
COMMANDS: dict[str, tuple[str, ...]] = {
    "log": ("log",),
    "show": ("show", "{old}"),
    "log_session": ("log", "--session", "s7"),
    "cli_undo": ("undo", "{old}"),
}


def cache_folder() -> Path:
    """Where built journals are kept between runs (gitignored)."""
    folder = repo_root() / ".bench-cache" / "scaling"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def schema_version(folder: Path) -> int:
    """The schema version the journal's migrations produce (from a scratch journal)."""
    path = folder / "version-probe" / "journal.db"

    async def probe() -> None:
        async with Journal.open(path):
            pass

    anyio.run(probe)
    version = int(Database(path).execute("PRAGMA user_version").fetchone()[0])
    return version


def label(n: int) -> str:
    """1000 -> '1k', 1000000 -> '1m'.

    >>> label(1000), label(100_000), label(1_000_000), label(200)
    ('1k', '100k', '1m', '200')
    """
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def workspace_of(journal: Path) -> Path:
    """The workspace the journal's paths lie in (its files made only when measured)."""
    return journal.parent / "ws"


def _path(i: int, n: int, root: Path) -> str:
    k = i % max(1, n // PER_PATH)
    return f"{root}/d{k % 100}/f{k}.txt"


def old_file(root: Path, j: int) -> Path:
    """The file old transaction `j` (1..OLD) wrote."""
    return root / "old" / f"f{j}.txt"


def old_content(j: int) -> bytes:
    """What old transaction `j` wrote (one of the builder's blobs)."""
    return _blob(j % _BLOBS)


def _blob(k: int) -> bytes:
    return f"blob {k}\n".encode() * 8


def build(path: Path, n: int) -> float:
    """Create a journal of `n` committed, checkpointed transactions (and the OLD
    ones before them); return seconds."""
    start = time.perf_counter()
    tmp = path.with_suffix(".building")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)

    async def create() -> None:
        # The journal's own migrations make the schema (tables, indexes, version).
        async with Journal.open(tmp, durability="normal"):
            pass

    anyio.run(create)
    db = Database(tmp)
    conn = db.conn
    conn.execute("PRAGMA synchronous = OFF")
    root = workspace_of(path)
    blobs = [_blob(k) for k in range(_BLOBS)]
    hashes = [content_hash(b) for b in blobs]
    now = time.time() - n
    keys = [_codec.hash_key(h) for h in hashes]
    conn.execute("BEGIN")
    # As the blob store keeps them (schema version 4): in id order, every key merged.
    conn.executemany(
        "INSERT INTO blobs (id, hash, size, data) VALUES (?, ?, ?, ?)",
        ((i, k, len(b), b) for i, (k, b) in enumerate(zip(keys, blobs, strict=True), 1)),
    )
    conn.execute("INSERT INTO blob_keys (hash, id) SELECT hash, id FROM blobs ORDER BY hash")
    conn.execute("UPDATE blob_merged SET upto = ?", (_BLOBS,))

    def write(j: int) -> bytes:
        stored = _codec.Stored(
            ordinal=0,
            op="write",
            path=str(old_file(root, j)),
            destination=None,
            before=None,
            after=keys[j % _BLOBS],
            before_mode=None,
            after_mode=0o644,
        )
        return _codec.encode_mutations([stored])

    def edit(i: int) -> bytes:
        stored = _codec.Stored(
            ordinal=0,
            op="edit",
            path=_path(i, n, root),
            destination=None,
            before=keys[(i - 1) % _BLOBS],
            after=keys[i % _BLOBS],
            before_mode=0o644,
            after_mode=0o644,
        )
        return _codec.encode_mutations([stored])

    def row(tx: int) -> tuple[Any, ...]:
        if tx <= OLD:
            return (tx, "s0", now, now, None, f"write_file old/f{tx}.txt", write(tx))
        i = tx - OLD
        undo = i % UNDO_EVERY == 0
        summary = f"undo {tx - 1}" if undo else f"edit_file {_path(i, n, root)}"
        return (tx, f"s{i % _SESSIONS}", now + i, now + i, tx - 1 if undo else None, summary,
                edit(i))  # fmt: skip

    # The rows as the journal writes them (one row per transaction).
    conn.executemany(
        "INSERT INTO transactions (id, session, state, created_at, finished_at, undo_of,"
        " summary, owner, checkpointed, mutations, applied)"
        " VALUES (?, ?, 'committed', ?, ?, ?, ?, 'bench-builder', 1, ?, NULL)",
        (row(tx) for tx in range(1, n + OLD + 1)),
    )
    conn.executemany(
        "INSERT INTO paths (path, tx) VALUES (?, ?)",
        (
            (str(old_file(root, tx)) if tx <= OLD else _path(tx - OLD, n, root), tx)
            for tx in range(1, n + OLD + 1)
        ),
    )
    conn.executemany(
        "INSERT INTO sessions (id, budget_used, transactions, created_at, last_activity)"
        " VALUES (?, ?, ?, ?, ?)",
        ((f"s{k}", n // _SESSIONS, n // _SESSIONS, now, now + n) for k in range(_SESSIONS)),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.replace(tmp, path)
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    return time.perf_counter() - start


def cached_journal(n: int, version: int, verbose: bool = True, cache: Path | None = None) -> Path:
    """The cached journal of size `n` for this schema version, built if missing."""
    path = (cache or cache_folder()) / f"journal-v{version}-{label(n)}" / "journal.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        seconds = build(path, n)
        if verbose:
            print(f"built {path.name}: {n} transactions in {seconds:.1f} s", flush=True)
    workspace_of(path).mkdir(exist_ok=True)
    return path


def _intent() -> TxIntent:
    data = os.urandom(4096)
    digest = content_hash(data)
    mutation = MutationRecord(
        ordinal=0,
        op="write",
        path="/bench/probe.txt",
        destination=None,
        before_hash=None,
        after_hash=digest,
        before_mode=None,
        after_mode=0o644,
    )
    return TxIntent(
        session=PROBE_SESSION, mutations=[mutation], blobs={digest: data}, budget_charge=1
    )


async def measure(
    path: Path, n: int, durability: str, commits: int, queries: int
) -> dict[str, list[float]]:
    """Per-operation seconds of commits and history queries on the journal at `path`."""
    rng = random.Random(n)
    commit_s: list[float] = []
    history_s: list[float] = []
    async with Journal.open(path, durability=durability) as journal:  # type: ignore[arg-type]
        for _ in range(commits):
            intent = _intent()
            t0 = time.perf_counter()
            tx = await journal.begin(intent)
            await journal.commit(tx)
            commit_s.append(time.perf_counter() - t0)
        for _ in range(queries):
            target = _path(rng.randrange(1, n + 1), n, workspace_of(path))
            t0 = time.perf_counter()
            found = await journal.history(path=target, limit=PER_PATH)
            history_s.append(time.perf_counter() - t0)
            assert len(found) == min(PER_PATH, n), (target, len(found))
    _cleanup(path, n)
    return {"commit": commit_s, "history": history_s}


def _cleanup(path: Path, n: int) -> None:
    """Remove what a measurement added, so the cached journal keeps its size."""
    built = n + OLD
    conn = Database(path).conn
    conn.execute("BEGIN")
    added = conn.execute("SELECT id, mutations FROM transactions WHERE id > ?", (built,))
    conn.executemany(
        "DELETE FROM paths WHERE path = ? AND tx = ?",
        (
            (path, tx)
            for tx, data in added.fetchall()
            for path in _codec.named_paths(_codec.decode_mutations(data))
        ),
    )
    conn.execute("DELETE FROM transactions WHERE id > ?", (built,))
    conn.execute("DELETE FROM checkpoints")
    names = [f"s{k}" for k in range(_SESSIONS)]
    conn.execute(f"DELETE FROM sessions WHERE id NOT IN ({','.join('?' * len(names))})", names)
    # What was written is random or undone, so all new: every id above the built ones.
    conn.execute("DELETE FROM blob_keys WHERE id > ?", (_BLOBS,))
    conn.execute("DELETE FROM blobs WHERE id > ?", (_BLOBS,))
    conn.execute("DELETE FROM blob_chunks WHERE id > ?", (_BLOBS,))
    conn.execute("UPDATE blob_merged SET upto = min(upto, ?)", (_BLOBS,))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    # The journal went back to what it was built with: so does its loss mark.
    mark_path(path).unlink(missing_ok=True)


def evict(path: Path) -> None:
    """Drop the journal's pages from the page cache: the next reads go to the disk."""
    for suffix in ("", "-wal", "-shm"):
        try:
            fd = os.open(f"{path}{suffix}", os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _restore_old_files(path: Path) -> None:
    """Put back the files the oldest transactions wrote (what their undos take away)."""
    root = workspace_of(path)
    for j in range(1, OLD + 1):
        target = old_file(root, j)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(old_content(j))
        target.chmod(0o644)


async def engine_undos(path: Path, undos: int, cold: bool) -> list[float]:
    """Seconds of each engine `undo` of one of the oldest transactions (a different
    one each time); with `cold`, one undo with the journal out of the page cache."""
    _restore_old_files(path)
    config = {
        "roots": [str(workspace_of(path))],
        "journal": str(path),
        "durability": "normal",
        "auto_occ": "off",
    }
    seconds: list[float] = []
    if cold:
        evict(path)
    async with Engine.open(config) as engine:
        session = await engine.session()
        if not cold:  # the first call of an engine pays for what it sets up once
            await session.call("undo", {"transaction": OLD})
        for j in range(1, (1 if cold else undos) + 1):
            t0 = time.perf_counter()
            result: Any = await session.call("undo", {"transaction": j})
            seconds.append(time.perf_counter() - t0)
            assert result.transaction is not None
    return seconds


def run_command(path: Path, name: str, cold: bool = False) -> float:
    """Seconds of one `ledgerfs` command (a subprocess) on the cached journal."""
    args = [a.format(old=OLD // 2) for a in COMMANDS[name]]
    if name == "cli_undo":
        _restore_old_files(path)
    if cold:
        evict(path)
    argv = [sys.executable, "-m", "ledgerfs", *args, "--json"]
    argv += ["--root", str(workspace_of(path)), "--journal", str(path)]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    json.loads(done.stdout)  # a whole answer came back
    return took


def measure_operations(path: Path, n: int, repeats: int) -> dict[str, float]:
    """Median seconds of each operation (warm) and of a cold log and undo, at size `n`."""
    found: dict[str, float] = {}
    anyio.run(engine_undos, path, 1, False)  # this process's first undo imports what it needs
    _cleanup(path, n)
    found["undo"] = median(anyio.run(engine_undos, path, repeats, False))
    _cleanup(path, n)
    found["undo_cold"] = median(anyio.run(engine_undos, path, 1, True))
    _cleanup(path, n)
    for name in COMMANDS:
        times = []
        for _ in range(repeats):
            times.append(run_command(path, name))
            if name == "cli_undo":
                _cleanup(path, n)
        found[name] = median(times)
    found["log_cold"] = run_command(path, "log", cold=True)
    return found


def run(
    rounds: int,
    sizes: tuple[int, ...],
    commits: int,
    queries: int,
    verbose: bool = True,
    cache: Path | None = None,
    op_sizes: tuple[int, ...] = (),
    repeats: int = 3,
) -> dict[str, Any]:
    """Build (or reuse) every journal, then measure each size once per round
    (and the operations at each of `op_sizes`, `repeats` times each)."""
    private_state()
    cache = cache or cache_folder()
    version = schema_version(cache)
    builds = {n: cached_journal(n, version, verbose, cache) for n in (*sizes, *op_sizes)}
    # Each cell: per-round median seconds per operation.
    cells: dict[str, list[float]] = {}
    for r in range(rounds):
        for n in sizes:
            for durability in ("full", "normal"):
                times = anyio.run(measure, builds[n], n, durability, commits, queries)
                cells.setdefault(f"commit_{durability}_{label(n)}", []).append(
                    median(times["commit"])
                )
                if durability == "normal":
                    cells.setdefault(f"history_{label(n)}", []).append(median(times["history"]))
                if verbose:
                    print(
                        f"round {r + 1}/{rounds} {label(n):>5} {durability:>6}:"
                        f" commit {median(times['commit']) * 1e3:7.3f} ms"
                        f"  history {median(times['history']) * 1e3:7.3f} ms",
                        flush=True,
                    )
        for n in op_sizes:
            found = measure_operations(builds[n], n, repeats)
            for name, seconds in found.items():
                cells.setdefault(f"op_{name}_{label(n)}", []).append(seconds)
            if verbose:
                shown = "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in found.items())
                print(f"round {r + 1}/{rounds} {label(n):>5} operations: {shown}", flush=True)
    return {"schema_version": version, "cells": cells}


#: Transactions added after the verified point before each incremental verify.
VERIFY_NEW = 20


def _chained(path: Path) -> None:
    """Link the built journal's records into the audit chain (once: it is idempotent,
    as the migration that chains an older journal's records)."""
    db = Database(path)
    db.conn.execute("BEGIN IMMEDIATE")
    _chain.seal_all(db)
    db.conn.execute("COMMIT")
    db.conn.close()


def _point(path: Path) -> VerifiedPoint:
    """A verified point at the journal's head now, as a clean verify leaves it."""
    db = Database(path)
    seq, link = _chain.head(db)
    newest_tx, newest_blob = db.execute(
        "SELECT (SELECT coalesce(max(id), 0) FROM transactions),"
        " (SELECT coalesce(max(id), 0) FROM blobs)"
    ).fetchone()
    db.conn.close()
    return VerifiedPoint(
        journal=str(path),
        seq=seq,
        link=_codec.hash_text(link) or "",
        transaction=int(newest_tx),
        blob=int(newest_blob),
        at=time.time(),
    )


async def measure_verify(path: Path, n: int) -> float:
    """Seconds of one incremental verify after `VERIFY_NEW` transactions were chained
    since the last verified point (what `ledgerfs verify` runs on the journal)."""
    point = _point(path)
    async with Journal.open(path, durability="normal") as journal:
        for _ in range(VERIFY_NEW):
            tx = await journal.begin(_intent())
            await journal.commit(tx)
        await journal.checkpoint(tx)
        t0 = time.perf_counter()
        report = await journal.verify(since=point)
        seconds = time.perf_counter() - t0
    assert report.ok and report.links_checked == VERIFY_NEW, report
    db = Database(path)
    db.execute("DELETE FROM chain WHERE seq > ?", (point.seq,))
    db.conn.close()
    _cleanup(path, n)
    # The checkpoint raised the journal's loss mark past what the cleanup leaves.
    _marker.write_mark(path.absolute(), point.transaction, lower=True)
    return seconds


def verify_incremental(
    rounds: int, sizes: tuple[int, ...], verbose: bool = True, cache: Path | None = None
) -> dict[str, Any]:
    """Incremental verify at the biggest size over the smallest (per round): it should
    cost what was added since the last point, not the journal's size."""
    cache = cache or cache_folder()
    version = schema_version(cache)
    builds = {n: cached_journal(n, version, verbose, cache) for n in (sizes[0], sizes[-1])}
    for path in builds.values():
        _chained(path)
    cells: dict[int, list[float]] = {n: [] for n in builds}
    for r in range(rounds):
        for n, path in builds.items():
            cells[n].append(anyio.run(measure_verify, path, n))
            if verbose:
                print(
                    f"round {r + 1}/{rounds} {label(n):>5} verify (incremental):"
                    f" {cells[n][-1] * 1e3:7.3f} ms",
                    flush=True,
                )
    small, big = sizes[0], sizes[-1]
    ratios = [b / a for a, b in zip(cells[small], cells[big], strict=True)]
    full = {n: anyio.run(measure_full_verify, path) for n, path in builds.items()}
    if verbose:
        for n, seconds in full.items():
            print(f"{label(n):>5} verify --full: {seconds:8.3f} s", flush=True)
    return {
        f"verify_incremental_{label(big)}_vs_{label(small)}": summary(ratios),
        "seconds": {label(n): summary(v) for n, v in cells.items()},
        "full_seconds": {label(n): seconds for n, seconds in full.items()},
    }


async def measure_full_verify(path: Path) -> float:
    """Seconds of one full check of the journal (`verify --full`'s journal part: SQLite's
    integrity_check, every blob, every link): once per size, as it reads everything."""
    async with Journal.open(path, durability="normal") as journal:
        t0 = time.perf_counter()
        report = await journal.verify(full=True)
        seconds = time.perf_counter() - t0
    assert report.ok, report
    return seconds


#: The operations measured at each size, as their figures name them.
OPERATIONS = ("undo", "undo_cold", *COMMANDS, "log_cold")


def figures(
    cells: dict[str, list[float]], sizes: tuple[int, ...], op_sizes: tuple[int, ...] = ()
) -> dict[str, dict[str, Any]]:
    """Cost at each size over cost at the smallest (per round)."""
    base = label(sizes[0])
    figs: dict[str, dict[str, Any]] = {}

    def ratio(top: str, bottom: str) -> dict[str, Any]:
        return summary([a / b for a, b in zip(cells[top], cells[bottom], strict=True)])

    for n in op_sizes[1:]:
        big, small = label(n), label(op_sizes[0])
        for name in OPERATIONS:
            figs[f"{name}_{big}_vs_{small}"] = ratio(f"op_{name}_{big}", f"op_{name}_{small}")

    for n in sizes[1:]:
        big = label(n)
        figs[f"commit_cost_{big}_vs_{base}"] = ratio(f"commit_full_{big}", f"commit_full_{base}")
        figs[f"commit_cost_{big}_vs_{base}_normal"] = ratio(
            f"commit_normal_{big}", f"commit_normal_{base}"
        )
        figs[f"history_{big}_vs_{base}"] = ratio(f"history_{big}", f"history_{base}")
    return figs


# File sizes whose one-line edits `journal_bytes_per_line_edit` measures.
EDITED_SIZES = {"1kib": 1024, "1mib": 1 << 20, "50mib": 50 << 20}


def _text(size: int, seed: int) -> bytes:
    """`size` bytes of numbered lines of words, as source or prose reads (compressible
    like them, and every line unique so an edit's old text matches once)."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz_", k=rng.randint(2, 9)))
        for _ in range(4000)
    ]
    lines, total, n = [], 0, 0
    while total < size:
        line = f"{n:08d} " + " ".join(rng.choices(words, k=rng.randint(3, 12))) + "\n"
        lines.append(line)
        total += len(line)
        n += 1
    return "".join(lines).encode()[:size]


def _journal_used_bytes(path: Path) -> int:
    """Bytes of the journal's pages in use (the WAL's newest ones counted), so a
    file grown once and reused does not hide what an edit adds."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * db.execute("PRAGMA page_size").fetchone()[0])


async def _edit_growth(folder: Path, size: int, edits: int) -> tuple[float, float]:
    """Journal bytes and seconds per one-line edit of a `size`-byte text file over
    `edits` edits, through the engine, after one edit that stored its first image."""
    from ledgerfs.engine import Engine

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # Room for the edits' bytes: the 50 MiB file sits at the size limit.
    data = _text(size - edits - 1, size)
    (folder / "big.txt").write_bytes(data)
    count = data.count(b"\n")
    config = {"roots": [str(folder)], "durability": "normal", "auto_occ": "off"}
    async with Engine.open(config) as engine:
        session = await engine.session()
        journal = engine.config.journal_path()

        async def edit(k: int) -> None:
            # Lines spread over the file; each edit grows one by a byte, so every
            # image is new (a line changed back would bring back a stored image).
            line = f"{(k * 7919) % max(count, 1):08d} "
            change = [{"old_text": line, "new_text": line + " "}]
            await session.call("edit_file", {"path": "big.txt", "edits": change})

        await edit(0)
        before = _journal_used_bytes(journal)
        start = time.perf_counter()
        for k in range(1, edits + 1):
            await edit(k)
        seconds = time.perf_counter() - start
        grown = _journal_used_bytes(journal) - before
    shutil.rmtree(folder, ignore_errors=True)
    return grown / edits, seconds / edits


def journal_bytes_per_line_edit(
    folder: Path, rounds: int = 3, sizes: dict[str, int] = EDITED_SIZES
) -> dict[str, dict[str, Any]]:
    """Journal growth per one-line edit of a 1 KiB, a 1 MiB and a 50 MiB text file
    (the edit's images and its row, through the engine, pages in use counted) and
    each edit's seconds; each round averages enough edits that a page's worth of
    growth shows."""
    figs: dict[str, dict[str, Any]] = {}
    for name, size in sizes.items():
        edits = max(2, min(100, (8 << 20) // size))
        grown, seconds = [], []
        for r in range(rounds):
            # A folder per round: a journal deleted and made again at one path looks lost.
            per_edit, took = anyio.run(_edit_growth, folder / f"edit-{name}-{r}", size, edits)
            grown.append(per_edit)
            seconds.append(took)
        figs[f"journal_bytes_per_line_edit_{name}"] = summary(grown)
        figs[f"line_edit_seconds_{name}"] = summary(seconds)
        print(
            f"one-line edit of {name}: {median(grown) / 1024:8.1f} KiB of journal,"
            f" {median(seconds):.3f} s",
            flush=True,
        )
    return figs


def paging_figure(base: Path, rounds: int) -> dict[str, dict[str, Any]]:
    """``paging_50mib_vs_whole_read``: a file at the size limit paged through, over
    one whole read of it (`bench_bigfiles.paging`: its pages cost the page)."""
    folder = base / "scaling-paging"
    try:
        paged = anyio.run(bench_bigfiles.paging, folder, rounds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    figure = bench_bigfiles.figures(paged, None)
    print(f"paging_50mib_vs_whole_read: {figure['paging_50mib_vs_whole_read']['median']:.2f}x")
    return figure


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at 100k; 3 short rounds")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="accepted for symmetry; journals are cached")
    parser.add_argument("--sizes", help="comma-separated journal sizes (default 1k..1M)")
    parser.add_argument("--rounds", type=int, help="rounds (default 5; 3 with --quick)")
    parser.add_argument("--edits-only", action="store_true", help="only the bytes per line edit")
    args = parser.parse_args(argv)
    if args.edits_only:
        return journal_bytes_per_line_edit(bench_folder(args.dir))
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    else:
        sizes = SIZES[:3] if args.quick else SIZES
    # The operations start a process each: at the sizes the figures compare.
    op_sizes = tuple(n for n in sizes if n in OP_SIZES) if not args.sizes else sizes
    rounds, commits, queries = (3, 20, 30) if args.quick else (5, 60, 100)
    rounds = args.rounds or rounds
    big = sizes[-1]
    if big < 1_000_000:
        print(f"note: the biggest journal in this run is {label(big)}, not 1m", flush=True)
    result = run(rounds, sizes, commits, queries, op_sizes=op_sizes, repeats=3)
    figs = figures(result["cells"], sizes, op_sizes)
    verified = verify_incremental(rounds, sizes)
    verify_seconds = verified.pop("seconds")
    verify_full_seconds = verified.pop("full_seconds")
    figs.update(verified)
    print()
    for name, values in result["cells"].items():
        print(f"{name:>20}: median {median(values) * 1e3:8.3f} ms")
    for name, fig in figs.items():
        print(
            f"{name}: {fig['median']:.2f}x"
            f" (min {min(fig['rounds']):.2f}, max {max(fig['rounds']):.2f})"
        )
    # The quoted names always exist: with --quick they compare the big point used.
    top = label(big)
    headline = {
        "commit_cost_1m_vs_1k": figs[f"commit_cost_{top}_vs_{label(sizes[0])}"],
        "history_1m_vs_1k": figs[f"history_{top}_vs_{label(sizes[0])}"],
        "undo_1m_vs_1k": figs[f"undo_{top}_vs_{label(op_sizes[0])}"],
        "log_1m_vs_1k": figs[f"log_{top}_vs_{label(op_sizes[0])}"],
        "verify_incremental_1m_vs_1k": figs[f"verify_incremental_{top}_vs_{label(sizes[0])}"],
    }
    headline.update(journal_bytes_per_line_edit(bench_folder(args.dir)))
    headline.update(paging_figure(bench_folder(args.dir), 3 if args.quick else 7))
    payload = {
        "machine": machine_info(bench_folder(args.dir), {"rounds": rounds}),
        **figure_fields({**figs, **headline}),
        "raw": {
            "scaling": {
                "big_point": big,
                "big_point_label": top,
                "quick_uses_smaller_big_point": big < 1_000_000,
                "sizes": list(sizes),
                "commits_per_measurement": commits,
                "queries_per_measurement": queries,
                "operation_sizes": list(op_sizes),
                "operation_repeats": 3,
                "schema_version": result["schema_version"],
                "seconds_per_op": {k: summary(v) for k, v in result["cells"].items()},
                "ratios": figs,
                "verify_incremental_seconds": verify_seconds,
                "verify_full_seconds": verify_full_seconds,
            }
        },
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
