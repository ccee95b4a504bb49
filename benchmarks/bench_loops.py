"""What the event loop costs: a lone edit on each loop, and the served process on
uvloop against asyncio's own loop, in one run.

    python -m benchmarks.bench_loops [--quick] [--parts embedded,served]
                                     [--rounds R] [--edits N] [--modes M,...]
                                     [--json FILE] [--dir DIR]

``embedded``: a lone ``edit_file`` (with ``expected_hash``, 4 KiB file, one
session) in a loop for a window, durability ``full`` and ``normal``, the engine
embedded on each loop anyio runs: asyncio, uvloop (the served default) and trio.
The gatherer (engine/gather.py) decides by its own count of calls in flight
whether a call waits for company, the same on every loop; this shows what a
lone call pays on each. Figures: ``lone_{full,normal}_{uvloop,trio}_vs_asyncio``
(edits/s), and each loop's edits/s in the results.

``served``: `ledgerfs serve` started twice per mode, once as it runs (uvloop)
and once with ``loop_options`` made to return no options (asyncio's loop),
timing `--edits` ``edit_file`` calls through ``bench_server.run_server``:
durability ``normal`` and ``full``, one call after another and 8 in flight on
one session. Figures: ``mcp_edits_{normal,full}[_conc8]_uvloop_vs_asyncio``
(calls/s) and ``..._cpu_uvloop_vs_asyncio`` (the server's CPU per call; below
1, uvloop costs less).

Loops alternate inside each round, the first one taking turns; every figure is
the median of per-round ratios, with its spread.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine

from ._stats import figure_fields, print_figures, summary, write_json
from .bench_engine import bench_folder, machine_info
from .bench_server import CONCURRENT, ledgerfs_command, run_server

#: Each loop anyio runs the embedded engine on: (backend, backend options).
EMBEDDED_LOOPS: dict[str, tuple[str, dict[str, Any]]] = {
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}
DURABILITIES = ("full", "normal")
_COUNTER = "counter {}\n"

#: A served process with uvloop hidden from `loop_options`, so it runs asyncio's loop.
_ASYNCIO = (
    "import ledgerfs.engine.stdio as stdio; stdio.loop_options = lambda: {}; "
    "from ledgerfs.engine.cli import main; main()"
)
#: (figure infix, durability, calls in flight) of the served part.
MODES = (
    ("normal", "normal", 1),
    ("normal_conc8", "normal", CONCURRENT),
    ("full", "full", 1),
    ("full_conc8", "full", CONCURRENT),
)
SERVED_LOOPS = ("uvloop", "asyncio")
PARTS = ("embedded", "served")

#: Per variant (a loop, or ``lone_{durability}_{loop}``), per round: what was measured.
Results = dict[str, list[dict[str, float]]]


def alternate(names: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """`names` in order on even rounds and reversed on odd ones."""
    return names if round_ % 2 == 0 else names[::-1]


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


def run_embedded(base: Path, rounds: int, window: float) -> Results:
    """Per ``lone_{durability}_{loop}``, per round: edits/s."""
    results: Results = {}
    for r in range(rounds):
        for durability in DURABILITIES:
            for name in alternate(tuple(EMBEDDED_LOOPS), r):
                backend, options = EMBEDDED_LOOPS[name]
                work = Path(tempfile.mkdtemp(dir=base))
                try:
                    rate = anyio.run(
                        lone_edits, work, durability, window, backend=backend,
                        backend_options=options,
                    )  # fmt: skip
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                results.setdefault(f"lone_{durability}_{name}", []).append({"edits_per_s": rate})
                print(f"round {r + 1}/{rounds} lone {durability:>6} {name:>7}: {rate:7.0f} edits/s")
    return results


def server_argv(loop: str, durability: str) -> list[str]:
    """How to start `ledgerfs serve` on `loop`, without its root."""
    if loop == "uvloop":
        prefix, why = ledgerfs_command()
        if prefix is None:
            raise SystemExit(why)
    else:
        prefix = [sys.executable, "-c", _ASYNCIO, "serve"]
    return [*prefix, "--auto-occ", "off", "--durability", durability]


def run_served(base: Path, edits: int, rounds: int, modes: tuple[str, ...]) -> Results:
    """Per loop, per round: each mode's calls/s and the server's CPU µs per call."""
    results: Results = {loop: [] for loop in SERVED_LOOPS}
    for r in range(rounds):
        for loop in SERVED_LOOPS:
            results[loop].append({})
        for key, durability, conc in MODES:
            if key not in modes:
                continue
            for loop in alternate(SERVED_LOOPS, r):
                folder = base / f"{loop}-{key}-{r}"
                try:
                    argv = server_argv(loop, durability)
                    sample = anyio.run(run_server, "ledgerfs", argv, folder, edits, conc)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
                cpu = sample["cpu_per_call"]
                results[loop][r][f"{key}_calls_per_s"] = sample["rate"]
                results[loop][r][f"{key}_cpu_us_per_call"] = 0.0 if cpu is None else cpu * 1e6
                print(f"round {r + 1}/{rounds} {key:>12} {loop:>7}: {sample['rate']:7.1f} calls/s")
    return results


def ratios(mine: list[dict[str, float]], base: list[dict[str, float]], key: str) -> list[float]:
    """Per round, `key` of `mine` over `key` of `base` (rounds where both have it)."""
    return [m[key] / b[key] for m, b in zip(mine, base, strict=True) if b.get(key)]


def figures(results: Results) -> dict[str, dict[str, Any]]:
    """The ratios the module's docstring names, for whatever parts were measured."""
    found: dict[str, dict[str, Any]] = {}
    for durability in DURABILITIES:
        base = results.get(f"lone_{durability}_asyncio")
        for loop in ("uvloop", "trio"):
            mine = results.get(f"lone_{durability}_{loop}")
            if base and mine:
                found[f"lone_{durability}_{loop}_vs_asyncio"] = summary(
                    ratios(mine, base, "edits_per_s")
                )
    uv, aio = results.get("uvloop"), results.get("asyncio")
    for key, _, _ in MODES if uv and aio else ():
        for measure, figure in (("calls_per_s", ""), ("cpu_us_per_call", "_cpu")):
            per_round = ratios(uv, aio, f"{key}_{measure}")  # type: ignore[arg-type]
            if per_round:
                found[f"mcp_edits_{key}{figure}_uvloop_vs_asyncio"] = summary(per_round)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, 0.5 s windows, 100 edits")
    parser.add_argument("--parts", default=",".join(PARTS), help="parts to run (default: both)")
    parser.add_argument("--rounds", type=int, help="rounds (default 7, quick 3)")
    parser.add_argument("--window", type=float, help="embedded window in s (default 1.5)")
    parser.add_argument("--edits", type=int, help="served edits per measurement (default 300)")
    parser.add_argument(
        "--modes", default=",".join(key for key, _, _ in MODES), help="served modes to measure"
    )
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    args = parser.parse_args(argv)
    parts, modes = tuple(args.parts.split(",")), tuple(args.modes.split(","))
    for given, known, what in ((parts, PARTS, "parts"), (modes, [k for k, _, _ in MODES], "modes")):
        if unknown := set(given) - set(known):
            parser.error(f"unknown {what}: {', '.join(sorted(unknown))}")
    rounds = args.rounds or (3 if args.quick else 7)
    window = args.window or (0.5 if args.quick else 1.5)
    edits = args.edits or (100 if args.quick else 300)
    base = bench_folder(args.dir) / "loops"
    base.mkdir(parents=True, exist_ok=True)
    results: Results = {}
    try:
        if "embedded" in parts:
            results.update(run_embedded(base, rounds, window))
        if "served" in parts:
            results.update(run_served(base, edits, rounds, modes))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    found = figures(results)
    print_figures(found)
    if args.json:
        write_json(
            args.json,
            {"machine": machine_info(base.parent), "results": results, **figure_fields(found)},
        )


if __name__ == "__main__":
    main(sys.argv[1:])
