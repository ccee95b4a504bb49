"""Time to first render of `ledgerfs ui`'s pages on a journal of 100,000 transactions.

Two journals are written in the same run, one of SMALL (1,000) and one of LARGE
(100,000) transactions: one-file writes and edits over FILES files by SESSIONS
sessions with a checkpoint every 100 transactions, seeded, straight through the
journal's API in groups (the page reads only the journal, so how the transactions
got there does not matter). On each, the page is opened as `ledgerfs ui` opens it
(a read-only inspection, the app behind its guard) and each page is asked for
through httpx's in-process ASGI transport (no socket, no browser): the sessions
timeline, every transaction, the busiest session's, the newest transaction with its
diff (the newest edit), the busiest file's history, a path search, and the live-update probe.

Measured, per page: the first request after opening (templates compiled, the
journal's pages cold: the first render a person waits for) and the median of ROUNDS
requests after,
in milliseconds (printed, and in the JSON's raw part); figures: each page's median
at LARGE over the same at SMALL (a paged listing should stay near 1).

    python -m benchmarks.bench_ui [--quick] [--rounds N] [--passes N] [--json FILE]
        [--dir DIR] [--small N] [--large N]

After a warm-up pass, PASSES (3) passes open each journal in turn, so both meet the
same machine. `--quick`: a large journal of 5,000 transactions, 3 rounds, 1 pass.
"""

from __future__ import annotations

import argparse
import random
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from ledgerfs.engine import Inspection
from ledgerfs.engine.ui import build_app
from ledgerfs.journal import Journal, MutationRecord, TxIntent, content_hash

from ._stats import figure_fields, median, print_figures, summary, write_json
from .bench_engine import bench_folder, machine_info

__all__ = ["PAGES", "build_journal", "main", "measure"]

SMALL = 1_000
LARGE = 100_000
FILES = 2_000
SESSIONS = 200
#: Transactions written per journal commit while building.
GROUP = 1_000
TOKEN = "bench"
PORT = 8000
#: The pages measured: name -> path, filled in from the journal's contents.
PAGES = ("sessions", "transactions", "session", "transaction", "file", "search", "latest")


def _text(rng: random.Random, n: int) -> bytes:
    return "".join(f"line {i} of file {n}: {rng.random():.6f}\n" for i in range(30)).encode()


async def build_journal(root: Path, transactions: int, seed: int = 0) -> None:
    """ROOT/.ledgerfs/journal.db with `transactions` committed one-file changes."""
    rng = random.Random(seed)
    journal_path = root / ".ledgerfs" / "journal.db"
    journal_path.parent.mkdir(parents=True)
    held: dict[int, bytes] = {}
    async with await Journal.open(journal_path, durability="normal") as journal:
        done = 0
        while done < transactions:
            intents = []
            for _ in range(min(GROUP, transactions - done)):
                # A few files and sessions are busy, most are not (as agents work).
                n = min(int(rng.paretovariate(1.2)) - 1, FILES - 1)
                session = f"session-{min(int(rng.paretovariate(1.1)) - 1, SESSIONS - 1):03}"
                before = held.get(n)
                after = _text(rng, n)
                held[n] = after
                blobs = {content_hash(after): after}
                if before is not None:
                    blobs[content_hash(before)] = before
                mutation = MutationRecord(
                    ordinal=0,
                    op="write" if before is None else "edit",
                    path=str(root / "src" / f"module_{n:04}.py"),
                    destination=None,
                    before_hash=None if before is None else content_hash(before),
                    after_hash=content_hash(after),
                    before_mode=None if before is None else 0o644,
                    after_mode=0o644,
                    applied=True,
                )
                intents.append(
                    TxIntent(
                        session=session,
                        mutations=[mutation],
                        blobs=blobs,
                        budget_charge=1,
                        summary=f"edit_file src/module_{n:04}.py",
                    )
                )
            ids = await journal.begin_group(intents, [None] * len(intents), trusted=True)
            for tx in ids:
                assert isinstance(tx, int)
                await journal.commit(tx)
                if tx % 100 == 0:
                    await journal.record_checkpoint(session=intents[0].session, label=f"at {tx}")
            done += len(intents)


async def _paths(view: Inspection, root: Path) -> dict[str, str]:
    # The newest edit, so that both journals show a diff of the same shape.
    newest = next(r for r in await view.journal.history(limit=100) if r.mutations[0].op == "edit")
    busiest = max(await view.journal.sessions(limit=SESSIONS), key=lambda s: s.transactions)
    return {
        "sessions": "/",
        "transactions": "/transactions",
        "session": f"/session?id={busiest.id}",
        "transaction": f"/tx/{newest.id}",
        "file": f"/file?path={root / 'src' / 'module_0000.py'}",
        "search": "/search?q=module_00",
        "latest": "/latest",
    }


async def _measure_one(root: Path, rounds: int) -> dict[str, dict[str, float]]:
    """Each page's first request and the median of `rounds` more, in ms."""
    config = {"roots": [str(root)], "journal": str(root / ".ledgerfs" / "journal.db")}
    out: dict[str, dict[str, float]] = {}
    async with Inspection.open(config) as view:
        paths = await _paths(view, root)
        app = build_app(view, token=TOKEN, port=PORT, readonly=True)
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        headers = {"cookie": f"ledgerfs_ui_{PORT}={TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url=f"http://127.0.0.1:{PORT}", headers=headers
        ) as client:
            for page in PAGES:
                times = []
                for _ in range(rounds + 1):
                    start = time.perf_counter()
                    response = await client.get(paths[page])
                    _ = response.text
                    times.append((time.perf_counter() - start) * 1000)
                    if response.status_code != 200:
                        raise AssertionError(f"{page}: {response.status_code} {response.text}")
                out[page] = {"first_ms": times[0], "median_ms": median(times[1:])}
    return out


def measure(folder: Path, sizes: tuple[int, int], rounds: int, repeats: int) -> dict[str, Any]:
    """Both journals built, a warm-up pass, then `repeats` passes over both in turn
    (each a fresh app: its first request is a first render); the raw figures per size."""
    roots = {}
    result: dict[str, Any] = {}
    for size in sizes:
        root = roots[size] = folder / f"ui-{size}"
        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        anyio.run(build_journal, root, size)
        result[str(size)] = {"build_s": time.perf_counter() - start, "passes": []}
    # Imports, the lexers' lookups: once per process, not a page's cost.
    anyio.run(_measure_one, roots[sizes[0]], 1)
    for n in range(repeats):
        for size in sizes:
            pages = anyio.run(_measure_one, roots[size], rounds)
            result[str(size)]["passes"].append(pages)
            print(f"pass {n + 1}/{repeats}, {size} transactions:")
            for page, times in pages.items():
                print(
                    f"  {page:<13} first {times['first_ms']:8.1f} ms"
                    f"  then {times['median_ms']:8.1f} ms"
                )
    for root in roots.values():
        shutil.rmtree(root, ignore_errors=True)
    for size in sizes:
        passes = result[str(size)]["passes"]
        result[str(size)]["pages"] = {
            page: {key: median([p[page][key] for p in passes]) for key in ("first_ms", "median_ms")}
            for page in PAGES
        }
    return result


def figures(raw: dict[str, Any], small: int, large: int) -> dict[str, dict[str, Any]]:
    """Per page, the large journal's median over the small one's, pass by pass."""
    out: dict[str, dict[str, Any]] = {}
    for page in PAGES:
        bigs, littles = raw[str(large)]["passes"], raw[str(small)]["passes"]
        out[f"ui_{page}_large_vs_small"] = summary(
            [
                b[page]["median_ms"] / s[page]["median_ms"]
                for b, s in zip(bigs, littles, strict=True)
            ]
        )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 transactions, 3 rounds")
    parser.add_argument("--rounds", type=int, help="requests per page after the first (default 20)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument("--large", type=int, help=f"the large journal's size (default {LARGE})")
    parser.add_argument("--small", type=int, help=f"the small journal's size (default {SMALL})")
    parser.add_argument("--passes", type=int, help="passes over both journals (default 3)")
    args = parser.parse_args(argv)
    large = args.large or (5_000 if args.quick else LARGE)
    small = args.small or SMALL
    rounds = args.rounds or (3 if args.quick else 20)
    folder = bench_folder(args.dir) / "ui"
    folder.mkdir(exist_ok=True)
    passes = args.passes or (1 if args.quick else 3)
    raw = measure(folder, (small, large), rounds, passes)
    folder.rmdir()
    figs = figures(raw, small, large)
    print_figures(figs)
    payload = {
        "machine": machine_info(folder.parent, {"rounds": rounds, "small": small, "large": large}),
        **figure_fields(figs),
        "raw": {"ui": raw},
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
