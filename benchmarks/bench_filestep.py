"""One file step: a rename over the file against `FileOps.swap_in`, in one run.

    python -m benchmarks.bench_filestep [--writes N] [--rounds R] [--json FILE] [--dir DIR]

Each variant rewrites one 4 KiB file `--writes` times with `FileOps.install`
(temp file, write, then a rename over the file or a swap of the two names and
an unlink), as the engine's file step does, and reports per rewrite the wall
time and the calling thread's CPU (`time.thread_time`). On ext4 (and btrfs) a
rename over a file makes the file system start writing the new file's bytes
(ext4's `auto_da_alloc`); with durability `full` the journal already holds
them, so the engine swaps the file in instead (docs/design.md, "Durability").
The variants alternate inside each round, in the same folder of the bench
file system; figures are medians of per-round ratios (swap over rename: below 1
is cheaper). After each variant the file system is synced, outside the timing,
so neither inherits the other's write-back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ledgerfs.engine import FileOps

from ._stats import figure_fields, print_figures, summary, write_json
from .bench_engine import bench_folder, machine_info

SIZE = 4096
OWNER = "0123456789abcdef" * 2
VARIANTS = {"rename": False, "swap": True}


def rewrite(path: str, writes: int, journaled: bool) -> dict[str, float]:
    """Rewrite `path` `writes` times; µs of wall and thread CPU per rewrite."""
    ops = FileOps()
    body = os.urandom(SIZE - 16)
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(writes):
        ops.install(path, b"%015d\n" % i + body, 0o644, OWNER, journaled=journaled)
    return {
        "wall_us": (time.perf_counter() - wall) / writes * 1e6,
        "cpu_us": (time.thread_time() - cpu) / writes * 1e6,
    }


def run(folder: Path, writes: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / "f.txt")
    Path(path).write_bytes(b"\0" * SIZE)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for r in range(rounds):
        for name, journaled in VARIANTS.items():
            os.sync()
            got = rewrite(path, writes, journaled)
            results[name].append(got)
            print(
                f"round {r + 1}/{rounds} {name:>7}: wall {got['wall_us']:7.1f} us"
                f"  cpu {got['cpu_us']:6.1f} us",
                flush=True,
            )
    return results


def figures(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for key in ("wall_us", "cpu_us"):
        ratios = [s[key] / r[key] for s, r in zip(results["swap"], results["rename"], strict=True)]
        out[f"filestep_swap_vs_rename_{key[:-3]}"] = summary(ratios)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2000, help="rewrites per variant and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (variants alternate)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    args = parser.parse_args(argv)
    folder = bench_folder(args.dir) / "filestep"
    try:
        results = run(folder, args.writes, args.rounds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    found = figures(results)
    for name in VARIANTS:
        wall = statistics.median(r["wall_us"] for r in results[name])
        cpu = statistics.median(r["cpu_us"] for r in results[name])
        print(f"{name:>7}: median wall {wall:7.1f} us  cpu {cpu:6.1f} us per rewrite")
    print_figures(found)
    if args.json:
        write_json(
            args.json,
            {
                "machine": machine_info(folder.parent),
                "results": results,
                **figure_fields(found),
            },
        )


if __name__ == "__main__":
    main(sys.argv[1:])
