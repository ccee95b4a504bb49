"""Journal size against cost: history queries and commits at 1k to 1M transactions.

For each journal size (1k, 10k, 100k, 1M committed transactions, one mutation
each, every path holding exactly 50 transactions so a history query returns the
same 50 records at every size) the benchmark measures

- commit cost: ``begin()`` + ``commit()`` of one record with a fresh 4 KiB blob,
  one writer, durability ``full`` and ``normal``;
- history latency: ``history(path=..., limit=50)`` of a random path.

Journals are built once with bulk inserts (plain SQL through sqlite-utils, one
transaction) into a file whose schema the journal's own migrations created
(``Journal.open``), and cached under ``.bench-cache/scaling/`` keyed by schema
version and size. Each measurement deletes the records it added, so the cached
file keeps its size. Sizes alternate inside each round; figures are medians of
per-round ratios (cost at N / cost at 1k; lower is better, 1.0 is flat).

    python -m benchmarks.bench_scaling [--quick] [--json FILE] [--dir DIR]

``--quick`` stops at 100k and says so (``big_point`` in the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from sqlite_utils import Database

from ledgerfs.journal import Journal, MutationRecord, TxIntent, _codec, content_hash

from ._stats import figure_fields, median, summary, write_json
from .bench_engine import bench_folder, machine_info, repo_root

SIZES = (1_000, 10_000, 100_000, 1_000_000)
PER_PATH = 50
PROBE_SESSION = "scaling-probe"
_BLOBS = 1000


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


def _path(i: int, n: int) -> str:
    k = i % max(1, n // PER_PATH)
    return f"/bench/d{k % 100}/f{k}.txt"


def build(path: Path, n: int) -> float:
    """Create a journal of `n` committed, checkpointed transactions; return seconds."""
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
    blobs = [f"blob {k}\n".encode() * 8 for k in range(_BLOBS)]
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

    def edit(i: int) -> bytes:
        stored = _codec.Stored(
            ordinal=0,
            op="edit",
            path=_path(i, n),
            destination=None,
            before=keys[(i - 1) % _BLOBS],
            after=keys[i % _BLOBS],
            before_mode=0o644,
            after_mode=0o644,
        )
        return _codec.encode_mutations([stored])

    # The rows as the journal writes them (one row per transaction).
    conn.executemany(
        "INSERT INTO transactions (id, session, state, created_at, finished_at, summary, owner,"
        " checkpointed, mutations, applied)"
        " VALUES (?, ?, 'committed', ?, ?, ?, 'bench-builder', 1, ?, NULL)",
        (
            (i, f"s{i % 50}", now + i, now + i, f"edit_file {_path(i, n)}", edit(i))
            for i in range(1, n + 1)
        ),
    )
    conn.executemany(
        "INSERT INTO paths (path, tx) VALUES (?, ?)", ((_path(i, n), i) for i in range(1, n + 1))
    )
    conn.executemany(
        "INSERT INTO sessions (id, budget_used, created_at) VALUES (?, ?, ?)",
        ((f"s{k}", n // 50, now) for k in range(50)),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("ANALYZE")
    conn.close()
    os.replace(tmp, path)
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    return time.perf_counter() - start


def cached_journal(n: int, version: int, verbose: bool = True, cache: Path | None = None) -> Path:
    """The cached journal of size `n` for this schema version, built if missing."""
    path = (cache or cache_folder()) / f"journal-v{version}-{label(n)}.db"
    if not path.exists():
        seconds = build(path, n)
        if verbose:
            print(f"built {path.name}: {n} transactions in {seconds:.1f} s", flush=True)
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
            target = _path(rng.randrange(1, n + 1), n)
            t0 = time.perf_counter()
            found = await journal.history(path=target, limit=PER_PATH)
            history_s.append(time.perf_counter() - t0)
            assert len(found) == min(PER_PATH, n), (target, len(found))
    _cleanup(path)
    return {"commit": commit_s, "history": history_s}


def _cleanup(path: Path) -> None:
    """Remove what a measurement added, so the cached journal keeps its size."""
    db = Database(path)
    conn = db.conn
    conn.execute("BEGIN")
    added = conn.execute(
        "SELECT id, mutations FROM transactions WHERE session = ?", (PROBE_SESSION,)
    ).fetchall()
    conn.executemany(
        "DELETE FROM paths WHERE path = ? AND tx = ?",
        (
            (path, tx)
            for tx, data in added
            for path in _codec.named_paths(_codec.decode_mutations(data))
        ),
    )
    conn.execute("DELETE FROM transactions WHERE session = ?", (PROBE_SESSION,))
    conn.execute("DELETE FROM sessions WHERE id = ?", (PROBE_SESSION,))
    # The probe's blobs are random, so all new: every id above the built ones.
    conn.execute("DELETE FROM blob_keys WHERE id > ?", (_BLOBS,))
    conn.execute("DELETE FROM blobs WHERE id > ?", (_BLOBS,))
    conn.execute("DELETE FROM blob_chunks WHERE id > ?", (_BLOBS,))
    conn.execute("UPDATE blob_merged SET upto = min(upto, ?)", (_BLOBS,))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def run(
    rounds: int,
    sizes: tuple[int, ...],
    commits: int,
    queries: int,
    verbose: bool = True,
    cache: Path | None = None,
) -> dict[str, Any]:
    """Build (or reuse) every journal, then measure each size once per round."""
    cache = cache or cache_folder()
    version = schema_version(cache)
    builds = {n: cached_journal(n, version, verbose, cache) for n in sizes}
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
    return {"schema_version": version, "cells": cells}


def figures(cells: dict[str, list[float]], sizes: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """Cost at each size over cost at the smallest (per round)."""
    base = label(sizes[0])
    figs: dict[str, dict[str, Any]] = {}

    def ratio(top: str, bottom: str) -> dict[str, Any]:
        return summary([a / b for a, b in zip(cells[top], cells[bottom], strict=True)])

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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at 100k; 3 short rounds")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="accepted for symmetry; journals are cached")
    parser.add_argument("--sizes", help="comma-separated journal sizes (default 1k..1M)")
    parser.add_argument("--edits-only", action="store_true", help="only the bytes per line edit")
    args = parser.parse_args(argv)
    if args.edits_only:
        return journal_bytes_per_line_edit(bench_folder(args.dir))
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    else:
        sizes = SIZES[:3] if args.quick else SIZES
    rounds, commits, queries = (3, 20, 30) if args.quick else (5, 60, 100)
    big = sizes[-1]
    if big < 1_000_000:
        print(f"note: the biggest journal in this run is {label(big)}, not 1m", flush=True)
    result = run(rounds, sizes, commits, queries)
    figs = figures(result["cells"], sizes)
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
    }
    headline.update(journal_bytes_per_line_edit(bench_folder(args.dir)))
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
                "schema_version": result["schema_version"],
                "seconds_per_op": {k: summary(v) for k, v in result["cells"].items()},
                "ratios": figs,
            }
        },
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
