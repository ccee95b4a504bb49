"""One writer's edits per second on asyncio, uvloop and trio: what a lone call costs.

A lone `edit_file` (with `expected_hash`, 4 KiB file, one session) in a loop,
durability ``full`` and ``normal``, on each event loop anyio runs: asyncio,
uvloop (the served default) and trio. The gatherer (engine/gather.py) decides by
its own count of calls in flight whether a call waits for company, the same on
every loop; this shows what a lone call pays on each. Loops and durabilities
alternate inside a round; each figure is the median over rounds, with its spread.

    python -m benchmarks.bench_loops [--quick] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine

from ._stats import write_json

LOOPS: dict[str, tuple[str, dict[str, Any]]] = {
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}
DURABILITIES = ("full", "normal")
_COUNTER = "counter {}\n"


async def lone_edits(folder: Path, durability: str, window: float) -> float:
    """Edits per second of one writer editing one file for `window` seconds."""
    path = folder / "f.txt"
    path.write_text(_COUNTER.format(0) + "x" * 4000 + "\n")
    config = {"roots": [str(folder)], "durability": durability, "auto_occ": "off"}
    async with Engine.open(config) as engine:
        session = await engine.session()
        read = await session.call("read_file", {"path": path.name, "limit": 1})
        digest = read.content_hash  # type: ignore[attr-defined]
        n = 0
        start = time.perf_counter()
        while n < 5 or time.perf_counter() - start < window:
            result = await session.call(
                "edit_file",
                {
                    "path": path.name,
                    "edits": [{"old_text": _COUNTER.format(n), "new_text": _COUNTER.format(n + 1)}],
                    "expected_hash": digest,
                },
            )
            digest = result.files[0].content_hash  # type: ignore[attr-defined]
            n += 1
        return n / (time.perf_counter() - start)


def run(rounds: int, window: float, folder: Path) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        for durability in DURABILITIES:
            for name, (backend, options) in LOOPS.items():
                work = Path(tempfile.mkdtemp(dir=folder))
                try:
                    rate = anyio.run(
                        lone_edits,
                        work,
                        durability,
                        window,
                        backend=backend,
                        backend_options=options,
                    )
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                samples.setdefault(f"lone_{durability}_{name}", []).append(rate)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.5 s windows")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default: a temp dir)")
    args = parser.parse_args()
    rounds, window = (3, 0.5) if args.quick else (7, 1.5)
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-loops-"))
    folder.mkdir(parents=True, exist_ok=True)
    samples = run(rounds, window, folder)
    results = {}
    for name, rates in samples.items():
        median = statistics.median(rates)
        results[name] = {"edits_per_s": median, "min": min(rates), "max": max(rates)}
        print(f"{name:24} {median:9.0f} edits/s  (spread {min(rates):.0f}..{max(rates):.0f})")
    if args.json:
        write_json(args.json, {"benchmark": "bench_loops", "results": results})


if __name__ == "__main__":
    main()
