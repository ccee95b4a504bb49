"""search_files against `grep -rn` on the same tree, in the same run.

The tree is a copy of this Python's standard library (its `.py` files, without
site-packages) made in the bench folder: a few thousand files of real code. Each
round times, on the same tree:

- ``grep``: ``grep -rn PATTERN TREE`` as a subprocess (output discarded);
- ``ledgerfs``: ``search_files`` through an open engine's session (the sandbox
  walk, a resolve and read of every file, the match and the result struct).

Patterns: a literal found in many files (``def __init__``), one found nowhere (a
full scan) and a case-insensitive regex. Figures are medians of per-round ratios
ledgerfs seconds / grep seconds (lower is better; 1.0 would be grep's speed).

    python -m benchmarks.bench_search [--quick] [--json FILE] [--dir DIR] [--source DIR]

``--source`` searches a copy of another tree's ``.py`` files instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sysconfig
import time
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine

from ._stats import figure_fields, median, summary, write_json
from .bench_engine import bench_folder, machine_info

#: (figure name, search_files arguments, grep arguments)
PATTERNS: tuple[tuple[str, dict[str, Any], list[str]], ...] = (
    ("literal_common", {"content": "def __init__"}, ["-F", "def __init__"]),
    ("literal_absent", {"content": "xyzzy_plugh_absent"}, ["-F", "xyzzy_plugh_absent"]),
    (
        "regex_ignore_case",
        {"content": r"class \w+error\b", "regex": True, "case_sensitive": False},
        ["-i", "-E", r"class \w+error\b"],
    ),
)
MAX_RESULTS = 10_000


def build_tree(folder: Path, source: Path | None = None) -> tuple[Path, int, int]:
    """Copy the .py files of `source` (default: the standard library) into
    folder/stdlib, once; (that folder, its files, their bytes)."""
    tree = folder / "stdlib"
    source = source or Path(sysconfig.get_paths()["stdlib"])
    if not tree.exists():
        staging = folder / "stdlib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        for dirpath, dirnames, filenames in os.walk(source):
            dirnames[:] = [d for d in dirnames if d not in ("site-packages", "__pycache__")]
            for name in filenames:
                if name.endswith(".py"):
                    src = Path(dirpath) / name
                    dst = staging / src.relative_to(source)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
        staging.rename(tree)
    sizes = [p.stat().st_size for p in tree.rglob("*.py")]
    return tree, len(sizes), sum(sizes)


def time_grep(tree: Path, arguments: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(["grep", "-rn", *arguments, str(tree)], capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    return elapsed, done.stdout.count(b"\n")


async def time_search(
    folder: Path, tree: Path, arguments: dict[str, Any], rounds: int
) -> list[tuple[float, int]]:
    config = {"roots": [str(tree)], "journal": str(folder / "search-journal.db")}
    times = []
    async with Engine.open(config) as engine:
        session = await engine.session()
        for _ in range(rounds):
            start = time.perf_counter()
            result: Any = await session.call(
                "search_files", {"path": ".", "max_results": MAX_RESULTS, **arguments}
            )
            times.append((time.perf_counter() - start, len(result.matches)))
    return times


def run(folder: Path, rounds: int, source: Path | None = None) -> dict[str, Any]:
    """Every pattern, `rounds` times each way; figures and raw seconds."""
    tree, files, size = build_tree(folder, source)
    figures: dict[str, Any] = {}
    raw: dict[str, Any] = {"tree": {"files": files, "bytes": size}}
    for name, search_args, grep_args in PATTERNS:
        ours = anyio.run(time_search, folder, tree, search_args, rounds)
        theirs = [time_grep(tree, grep_args) for _ in range(rounds)]
        ratios = [o[0] / t[0] for o, t in zip(ours, theirs, strict=True)]
        figures[f"search_{name}_vs_grep"] = summary(ratios)
        raw[name] = {
            "ledgerfs_seconds": median([o[0] for o in ours]),
            "grep_seconds": median([t[0] for t in theirs]),
            "ledgerfs_matches": ours[0][1],
            "grep_lines": theirs[0][1],
        }
    return {**figure_fields(figures), "raw": {**raw, "ratios": figures}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument(
        "--source", metavar="DIR", help="copy this tree's .py files (default: the stdlib)"
    )
    args = parser.parse_args(argv)
    folder = bench_folder(args.dir)
    result = run(folder, 3 if args.quick else 7, Path(args.source) if args.source else None)
    result["machine"] = machine_info(folder)
    for name, value in result["figures"].items():
        print(f"{name}: x{value:.2f} (spread {result['spread'][name]['spread']:.2f})")
    for name, raw in result["raw"].items():
        if name != "ratios":
            print(name, raw)
    if args.json:
        write_json(Path(args.json), result)
    return result


if __name__ == "__main__":
    main()
