"""Run the whole suite: journal, engine, scaling, server; one JSON of figures.

    python -m benchmarks [--quick] [--json FILE] [--dir DIR] [--skip NAME ...]

Each suite runs with its own rounds and baselines (every figure is a ratio
against a baseline measured in the same run, or a CPU cost per operation); this
collects their figures into ``{"machine": {...}, "figures": {name: median},
"spread": {name: {"spread", "min", "max", "rounds"}}, "raw": {suite: {...}}}``.
``--quick`` finishes in about 3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import (
    bench_engine,
    bench_hostile,
    bench_journal,
    bench_scaling,
    bench_search,
    bench_server,
)
from ._stats import figure_spread, write_json
from .bench_engine import bench_folder, machine_info

SUITES: dict[str, Callable[[list[str] | None], Any]] = {
    "journal": bench_journal.main,
    "engine": bench_engine.main,
    "scaling": bench_scaling.main,
    "server": bench_server.main,
    "search": bench_search.main,
    "hostile": bench_hostile.main,
}

#: The figures the docs quote; a run that lacks one says so in `missing`.
HEADLINE = (
    "journal_group_commit_32w_vs_single",
    "edit_full_1w_vs_floor",
    "edit_full_32w_vs_floor1w",
    "mcp_edits_normal_vs_reference",
    "mcp_edits_normal_conc8_vs_reference",
    "mcp_edits_full_vs_reference",
    "commit_cost_1m_vs_1k",
    "edit_cpu_us_32w_tmpfs",
    "edit_full_1w_p99_vs_p50",
    "hostile_unrelated_p99_vs_idle",
)


def run_suite(name: str, quick: bool, folder: Path) -> dict[str, Any]:
    """Run one suite's main() with a JSON file, and return what it wrote."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        out = Path(tmp) / "out.json"
        argv = ["--json", str(out), "--dir", str(folder)]
        if quick:
            argv.append("--quick")
        SUITES[name](argv)
        loaded: dict[str, Any] = json.loads(out.read_text())
        return loaded


def collect(part: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """A suite's figures as (medians, spreads), whichever shape the suite wrote.

    Suites write medians in ``figures`` and their spread in ``spread``; a figure
    written as a whole summary (median, spread, rounds) is split the same way,
    and a bare number without a spread gets none rather than a made-up one.

    >>> collect({"figures": {"a": {"median": 2.0, "spread": 0.5, "rounds": [1.5, 2.0, 2.5]}}})
    ({'a': 2.0}, {'a': {'spread': 0.5, 'min': 1.5, 'max': 2.5, 'rounds': 3}})
    >>> collect({"figures": {"b": 1.25}})
    ({'b': 1.25}, {})
    """
    medians: dict[str, float] = {}
    spreads: dict[str, dict[str, Any]] = {}
    written = part.get("spread", {})
    for name, value in part.get("figures", {}).items():
        if isinstance(value, Mapping):
            medians[name] = float(value["median"])
            spreads[name] = figure_spread(value)
        else:
            medians[name] = float(value)
            if name in written:
                spreads[name] = dict(written[name])
    return medians, spreads


def format_figure(name: str, value: float, spread: Mapping[str, Any] | None) -> str:
    """One printed line: the median, then the spread and the rounds' range when known.

    >>> format_figure("x", 1.5, {"spread": 0.2, "min": 1.4, "max": 1.7, "rounds": 3}).split()
    ['x', '1.500', 'spread', '0.20', '(1.40', '-', '1.70,', '3', 'rounds)']
    """
    line = f"{name:<44} {value:9.3f}"
    if spread:
        line += (
            f"  spread {spread['spread']:.2f}"
            f" ({spread['min']:.2f} - {spread['max']:.2f}, {spread['rounds']} rounds)"
        )
    return line


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse arguments, run every suite, print the headline figures, write JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (under 3 minutes)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument(
        "--skip", action="append", default=[], choices=list(SUITES), help="leave a suite out"
    )
    args = parser.parse_args(argv)
    folder = bench_folder(args.dir)
    figures: dict[str, float] = {}
    spreads: dict[str, dict[str, Any]] = {}
    raw: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    for name in SUITES:
        if name in args.skip:
            continue
        print(f"== {name} ==", flush=True)
        t0 = time.perf_counter()
        part = run_suite(name, args.quick, folder)
        seconds[name] = round(time.perf_counter() - t0, 1)
        medians, spread = collect(part)
        figures.update(medians)
        spreads.update(spread)
        raw[name] = {"machine": part.get("machine", {}), **part.get("raw", {})}
    total = round(time.perf_counter() - started, 1)
    missing = [name for name in HEADLINE if name not in figures]
    payload = {
        "machine": machine_info(folder, {"quick": args.quick}),
        "figures": figures,
        "spread": spreads,
        "headline": list(HEADLINE),
        "missing": missing,
        "seconds": {**seconds, "total": total},
        "raw": raw,
    }
    print("\n== figures (ratios against baselines of the same run; CPU in µs) ==")
    for name, value in figures.items():
        mark = "*" if name in HEADLINE else " "
        print(f"{mark} {format_figure(name, value, spreads.get(name))}")
    for name in missing:
        print(f"! {name:<44} not measured (see the suite's output)")
    print(f"suite seconds: {seconds} total {total}")
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
