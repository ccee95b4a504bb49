"""The journal's group commit against another checkout's, interleaved in one process.

Whole-suite figures move by 15 to 25 % between runs on a shared machine, more than
most changes to the journal gain. This loads the other checkout's ``journal``
package beside this one and measures the two alternately (A B, then B A, ...),
each round on a fresh journal, so drift hits both alike; the figure is the median
of the per-round ratios this / other. A record is the journal bench's (a durable
4 KiB ``begin`` and its lazy commit mark, 32 writers, durability ``full``).

    python -m benchmarks.ab_journal OTHER_CHECKOUT [--rounds N] [--window S] [--single]

With ``--single`` each round also measures one commit per record (group commit
off) for both, and prints each one's ``journal_group_commit_32w_vs_single``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio

import ledgerfs.journal

from ._stats import median
from .bench_engine import private_state
from .bench_journal import _intent

WRITERS = 32


def load_journal(checkout: Path, name: str) -> ModuleType:
    """Import `checkout`/journal as the package `name`.journal (its imports are
    relative), under a parent that tells the journal it is a second checkout's."""
    parent = ModuleType(name)
    parent.OTHER_CHECKOUT = True  # type: ignore[attr-defined]
    sys.modules[name] = parent
    name = f"{name}.journal"
    spec = importlib.util.spec_from_file_location(
        name,
        checkout / "journal" / "__init__.py",
        submodule_search_locations=[str(checkout / "journal")],
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"no journal package in {checkout}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def _rate(j: Any, path: Path, group: bool, window: float) -> float:
    """Records per second that `WRITERS` tasks complete within `window` seconds."""
    done = 0
    counter = itertools.count()
    async with await j.Journal.open(path, durability="full", group_commit=group) as journal:
        deadline = time.perf_counter() + window

        async def writer() -> None:
            nonlocal done
            while True:  # one record at least, so a rate is never zero
                tx = await journal.begin(_intent(next(counter), j), trusted=True)
                journal.commit_nowait(tx)
                done += 1
                if time.perf_counter() >= deadline:
                    return

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(WRITERS):
                tg.start_soon(writer)
        return done / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (its journal/ is loaded)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--window", type=float, default=0.8, help="seconds per measurement")
    parser.add_argument("--single", action="store_true", help="also one commit per record")
    parser.add_argument("--dir", metavar="DIR", help="where journals go (default: a temp dir)")
    args = parser.parse_args(argv)
    private_state()
    journals = {"this": ledgerfs.journal, "other": load_journal(args.other, "other_journal")}
    group: dict[str, list[float]] = {k: [] for k in journals}
    single: dict[str, list[float]] = {k: [] for k in journals}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ab-journal-") as tmp:
        for r in range(args.rounds):
            order = ["this", "other"] if r % 2 else ["other", "this"]
            for key in order:
                folder = Path(tmp) / f"{r}-{key}"
                group[key].append(
                    anyio.run(_rate, journals[key], folder / "g.db", True, args.window)
                )
                if args.single:
                    rate = anyio.run(_rate, journals[key], folder / "s.db", False, args.window)
                    single[key].append(rate)
            print(f"round {r + 1}: this {group['this'][-1]:8.0f}  other {group['other'][-1]:8.0f}")
    ratios = [a / b for a, b in zip(group["this"], group["other"], strict=True)]
    spread = f"per round {min(ratios):.2f} - {max(ratios):.2f}"
    print(f"group commit, this / other: {median(ratios):.3f} ({spread})")
    if args.single:
        for key in journals:
            figure = median([g / s for g, s in zip(group[key], single[key], strict=True)])
            print(f"{key}: journal_group_commit_32w_vs_single {figure:.2f}")


if __name__ == "__main__":
    main()
