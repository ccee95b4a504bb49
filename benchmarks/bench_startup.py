"""The first edits after the journal opens, against the raw durable floor, in one run.

    python -m benchmarks.bench_startup [--edits N] [--rounds R] [--json FILE] [--dir DIR]

An MCP server starts with its client's session, and its journal opens with it
(SQLite removes the WAL when the last connection closes), so a short session's
edits are all among the first after an open: the WAL is still growing then,
unless the open wrote it ahead (`journal/_walspace.py`). Each round runs the
floor (`--edits` durable replaces of a 4 KiB file: temp file, fsync, rename,
fsync of the folder) and then a fresh engine's first `--edits` edits (one
writer, durability ``full``, as ``bench_engine`` makes them), in new folders of
the bench file system; the clocks start once the engine is open and the file
read. Figures are medians of per-round ratios: edits/s over the floor's
operations/s, and the edits' median latency over the floor's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import anyio

from ._stats import figure_fields, print_figures, summary, write_json
from .bench_engine import (
    Sample,
    bench_folder,
    engine_edits,
    machine_info,
    private_state,
    raw_replace,
)

SIZE = 4096


def first_edits(folder: Path, edits: int) -> Sample:
    """A fresh engine's first `edits` edits of one 4 KiB file."""
    return anyio.run(lambda: engine_edits(folder, "full", 1, SIZE, 0.0, min_ops=edits))


def floor(folder: Path, edits: int) -> Sample:
    return raw_replace(folder, SIZE, 0.0, sync=True, min_ops=edits)


def run(base: Path, edits: int, rounds: int) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {"floor": [], "engine": []}
    for r in range(rounds):
        for name, measure in (("floor", floor), ("engine", first_edits)):
            folder = base / f"{name}-{r}"
            try:
                sample = measure(folder, edits)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            samples[name].append(sample)
            print(
                f"round {r + 1}/{rounds} {name:>6}: {sample.rate:7.1f} ops/s"
                f"  p50 {statistics.median(sample.latencies) * 1e3:5.2f} ms",
                flush=True,
            )
    return samples


def figures(samples: dict[str, list[Sample]], edits: int) -> dict[str, dict[str, Any]]:
    pairs = list(zip(samples["engine"], samples["floor"], strict=True))
    p50 = statistics.median
    return {
        f"edit_full_first{edits}_vs_floor": summary([e.rate / f.rate for e, f in pairs]),
        f"edit_full_first{edits}_p50_latency_vs_floor": summary(
            [p50(e.latencies) / p50(f.latencies) for e, f in pairs]
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=500, help="edits (and floor operations)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (floor, then engine)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    args = parser.parse_args(argv)
    private_state()
    base = bench_folder(args.dir) / "startup"
    try:
        samples = run(base, args.edits, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    found = figures(samples, args.edits)
    print_figures(found)
    if args.json:
        write_json(
            args.json,
            {
                "machine": machine_info(base.parent),
                "results": {
                    name: [
                        {"ops_per_s": s.rate, "p50_ms": statistics.median(s.latencies) * 1e3}
                        for s in runs
                    ]
                    for name, runs in samples.items()
                },
                **figure_fields(found),
            },
        )


if __name__ == "__main__":
    main(sys.argv[1:])
