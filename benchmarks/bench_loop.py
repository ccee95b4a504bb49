"""The served process on uvloop against asyncio's own loop, over MCP stdio, in one run.

    python -m benchmarks.bench_loop [--edits N] [--rounds R] [--modes normal,full_conc8]
                                    [--json FILE] [--dir DIR]

`ledgerfs serve` runs its loop on uvloop where it is installed
(`engine/stdio.py`, ``loop_options``). Each round starts the same server twice
per mode, once as it runs (``uvloop``) and once with ``loop_options`` made to
return no options (``asyncio``: the standard loop), and times `--edits`
``edit_file`` calls through ``bench_server.run_server``: durability ``normal``
and ``full``, one call after another and 8 in flight on one session. The two
loops alternate inside each round, the first one taking turns. Figures are
medians of per-round ratios, uvloop's calls/s over asyncio's
(``mcp_edits_{normal,full}[_conc8]_uvloop_vs_asyncio``), and the server's CPU per
call the same way (``..._cpu_uvloop_vs_asyncio``; below 1, uvloop costs less).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio

from ._stats import figure_fields, print_figures, summary, write_json
from .bench_engine import bench_folder, machine_info
from .bench_server import CONCURRENT, ledgerfs_command, run_server

#: A served process with uvloop hidden from `loop_options`, so it runs asyncio's loop.
_ASYNCIO = (
    "import ledgerfs.engine.stdio as stdio; stdio.loop_options = lambda: {}; "
    "from ledgerfs.engine.cli import main; main()"
)
#: (figure infix, durability, calls in flight).
MODES = (
    ("normal", "normal", 1),
    ("normal_conc8", "normal", CONCURRENT),
    ("full", "full", 1),
    ("full_conc8", "full", CONCURRENT),
)
LOOPS = ("uvloop", "asyncio")


def server_argv(loop: str, durability: str) -> list[str]:
    """How to start `ledgerfs serve` on `loop`, without its root."""
    if loop == "uvloop":
        prefix, why = ledgerfs_command()
        if prefix is None:
            raise SystemExit(why)
    else:
        prefix = [sys.executable, "-c", _ASYNCIO, "serve"]
    return [*prefix, "--auto-occ", "off", "--durability", durability]


def run(
    base: Path, edits: int, rounds: int, modes: tuple[str, ...]
) -> dict[str, list[dict[str, dict[str, float]]]]:
    """Per loop, per round: each mode's calls/s and the server's CPU µs per call."""
    results: dict[str, list[dict[str, dict[str, float]]]] = {loop: [] for loop in LOOPS}
    for r in range(rounds):
        for loop in LOOPS:
            results[loop].append({})
        for key, durability, conc in MODES:
            if key not in modes:
                continue
            for loop in LOOPS if r % 2 == 0 else LOOPS[::-1]:
                folder = base / f"{loop}-{key}-{r}"
                try:
                    argv = server_argv(loop, durability)
                    sample = anyio.run(run_server, "ledgerfs", argv, folder, edits, conc)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
                cpu = sample["cpu_per_call"]
                results[loop][r][key] = {
                    "calls_per_s": sample["rate"],
                    "cpu_us_per_call": 0.0 if cpu is None else cpu * 1e6,
                }
                print(
                    f"round {r + 1}/{rounds} {key:>12} {loop:>7}: {sample['rate']:7.1f} calls/s",
                    flush=True,
                )
    return results


def figures(results: dict[str, list[dict[str, dict[str, float]]]]) -> dict[str, dict[str, Any]]:
    pairs = list(zip(results["uvloop"], results["asyncio"], strict=True))
    found: dict[str, dict[str, Any]] = {}
    for key in pairs[0][0] if pairs else ():
        found[f"mcp_edits_{key}_uvloop_vs_asyncio"] = summary(
            [u[key]["calls_per_s"] / a[key]["calls_per_s"] for u, a in pairs]
        )
        if all(a[key]["cpu_us_per_call"] for _, a in pairs):
            found[f"mcp_edits_{key}_cpu_uvloop_vs_asyncio"] = summary(
                [u[key]["cpu_us_per_call"] / a[key]["cpu_us_per_call"] for u, a in pairs]
            )
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--edits", type=int, default=300, help="edits per measurement")
    parser.add_argument("--rounds", type=int, default=4, help="rounds")
    parser.add_argument(
        "--modes",
        default=",".join(key for key, _, _ in MODES),
        help="modes to measure (default: every one)",
    )
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    args = parser.parse_args(argv)
    base = bench_folder(args.dir) / "loop"
    try:
        modes = tuple(args.modes.split(","))
        unknown = set(modes) - {key for key, _, _ in MODES}
        if unknown:
            parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
        results = run(base, args.edits, args.rounds, modes)
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
