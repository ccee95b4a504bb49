"""Journal write throughput: group commit against one commit per record.

A record is one transaction as the engine writes it: a durable ``begin()`` (the
commit point: intent, one mutation and a fresh 4 KiB blob; ``trusted``, as the
engine hashed the image itself) followed by the lazy ``commit_nowait()`` mark.
For each configuration (durability full/normal, group commit on/off, 1 or 32
concurrent writers) the benchmark counts the records completed in a fixed time
window on a fresh journal. Configurations alternate inside each round, so slow
drift of the machine hits all of them alike; figures are medians of per-round
ratios, measured in the same run.

    python -m benchmarks.bench_journal [--quick] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import ledgerfs.journal
from ledgerfs.journal import Journal, TxIntent

from ._stats import figure_fields, machine, median, summary, write_json
from .bench_engine import private_state

BLOB_SIZE = 4096
WRITERS = (1, 32)
DURABILITIES = ("full", "normal")
MODES = (True, False)  # group_commit


# Random filler made once: os.urandom per record costs more than a journal write here.
_FILLER = os.urandom(BLOB_SIZE)


def _intent(n: int, j: Any = ledgerfs.journal) -> TxIntent:
    """One mutation with a fresh 4 KiB after image (unique, so never deduplicated),
    built with the journal package `j` (another checkout's, for `ab_journal`)."""
    data = n.to_bytes(8, "little") + _FILLER[8:]
    digest = j.content_hash(data)
    mutation = j.MutationRecord(
        ordinal=0,
        op="write",
        path=f"/bench/{n % 1000}.txt",
        destination=None,
        before_hash=None,
        after_hash=digest,
        before_mode=None,
        after_mode=0o644,
    )
    intent: TxIntent = j.TxIntent(
        session="bench", mutations=[mutation], blobs={digest: data}, budget_charge=1
    )
    return intent


async def _measure(path: Path, durability: str, group: bool, writers: int, window: float) -> float:
    """Return records per second completed by `writers` tasks within `window` seconds."""
    done = 0
    counter = itertools.count()
    async with await Journal.open(path, durability=durability, group_commit=group) as j:  # type: ignore[arg-type]
        deadline = time.perf_counter() + window

        async def writer() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                # As the engine does: it hashed each image when it built the intent.
                tx = await j.begin(_intent(next(counter)), trusted=True)
                j.commit_nowait(tx)
                done += 1

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(writers):
                tg.start_soon(writer)
        elapsed = time.perf_counter() - start
        stats = await j.statistics()
    assert stats.records >= done  # the lazy commit marks may still be queued
    return done / elapsed


def _key(durability: str, group: bool, writers: int) -> str:
    return f"{durability}_{'group' if group else 'single'}_{writers}w"


def run(rounds: int, window: float, folder: Path) -> dict[str, Any]:
    """Run every configuration `rounds` times, alternating; return raw rates by key."""
    rates: dict[str, list[float]] = {}
    configs = list(itertools.product(DURABILITIES, MODES, WRITERS))
    for r in range(rounds):
        for durability, group, writers in configs:
            key = _key(durability, group, writers)
            path = folder / f"r{r}-{key}" / "journal.db"
            rate = anyio.run(_measure, path, durability, group, writers, window)
            rates.setdefault(key, []).append(rate)
            print(f"round {r + 1}/{rounds} {key:>20}: {rate:10.0f} records/s", flush=True)
    return rates


def _ratio(rates: dict[str, list[float]], top: str, bottom: str) -> dict[str, Any]:
    """Per-round ratios of two configurations (paired by round), summarised."""
    return summary([a / b for a, b in zip(rates[top], rates[bottom], strict=True)])


def figures(rates: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """The ratios the docs quote."""
    return {
        "journal_group_commit_32w_vs_single": _ratio(rates, "full_group_32w", "full_single_32w"),
        "journal_group_commit_32w_vs_single_normal": _ratio(
            rates, "normal_group_32w", "normal_single_32w"
        ),
        "journal_group_commit_1w_vs_single": _ratio(rates, "full_group_1w", "full_single_1w"),
        "journal_group_32w_vs_1w": _ratio(rates, "full_group_32w", "full_group_1w"),
        "journal_normal_vs_full_group_32w": _ratio(rates, "normal_group_32w", "full_group_32w"),
    }


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run, print the figures and optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.8 s (under a minute)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="where journals go (default: a temp dir)")
    args = parser.parse_args(argv)
    rounds, window = (3, 0.8) if args.quick else (5, 2.0)
    private_state()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-journal-") as tmp:
        rates = run(rounds, window, Path(tmp))
    figs = figures(rates)
    print()
    for key, values in sorted(rates.items()):
        print(f"{key:>20}: median {median(values):10.0f} records/s")
    for name, fig in figs.items():
        print(f"{name}: {fig['median']:.2f}x (spread {fig['spread']:.0%})")
    if args.json:
        payload = {
            "machine": machine({"rounds": rounds, "window_s": window, "blob_bytes": BLOB_SIZE}),
            **figure_fields(figs),
            "raw": {
                "records_per_second": {k: summary(v) for k, v in sorted(rates.items())},
                "ratios": figs,
            },
        }
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
