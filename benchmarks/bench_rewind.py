"""Rewinding a session as one transaction, against undoing its transactions one by one.

An agent's session makes TRANSACTIONS one-line edits over FILES files of 40
lines (seeded, so every round and both ways start from the same journal and
files), while another session edits files of its own (undoing one by one is
refused as soon as someone else changed a file since, so here nobody does).
Then the agent's work is taken back two ways, each on its own fresh copy:

- `rewind {"session": "agent"}`: one transaction, every file merged;
- `undo` of each of the agent's transactions, newest first: one transaction each.

Measured: the wall time of each way, and how much the journal grew (its file
and WAL, after the engine closed and checkpointed), with the ratios
undo-one-by-one / rewind in the same round. Both ways must leave the same
files, or the run fails.

    python -m benchmarks.bench_rewind [--quick] [--rounds N] [--json FILE] [--dir DIR]
        [--files N] [--transactions N]

`--quick`: 100 transactions over 20 files, one round.
"""

from __future__ import annotations

import argparse
import random
import shutil
import time
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine

from ._stats import figure_fields, print_figures, summary, write_json
from .bench_engine import bench_folder, machine_info

__all__ = ["main", "measure", "run"]

LINES = 40


def _config(root: Path) -> dict[str, Any]:
    return {"roots": [str(root)], "auto_occ": "off", "durability": "full"}


def _journal_size(root: Path) -> int:
    folder = root / ".ledgerfs"
    return sum(p.stat().st_size for p in folder.glob("journal.db*") if p.is_file())


async def _make(root: Path, files: int, transactions: int, seed: int) -> None:
    """The agent's TRANSACTIONS edits and the other session's, interleaved."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    # The agent's files, then the other session's (a tenth as many).
    count = files + max(1, files // 10)
    for n in range(count):
        lines = "".join(f"file {n} line {i}\n" for i in range(LINES))
        (root / f"f{n:03}.txt").write_text(lines)
    texts = {n: [f"file {n} line {i}\n" for i in range(LINES)] for n in range(count)}
    async with Engine.open(_config(root)) as engine:
        agent, other = await engine.session("agent"), await engine.session("other")
        for step in range(transactions):
            n = rng.randrange(files)
            await _edit(agent, texts[n], n, rng.randrange(LINES), f"agent {step}\n")
            if step % 10 == 0:
                n = rng.randrange(files, count)
                await _edit(other, texts[n], n, rng.randrange(LINES), f"other {step}\n")


async def _edit(session: Any, text: list[str], n: int, line: int, new: str) -> None:
    edit = {"old_text": text[line], "new_text": new}
    await session.call("edit_file", {"path": f"f{n:03}.txt", "edits": [edit]})
    text[line] = new


async def _rewind(root: Path) -> int:
    async with Engine.open(_config(root)) as engine:
        session = await engine.session("person")
        result = await session.call("rewind", {"session": "agent"})
        return int(result.rewound_total)


async def _undo_each(root: Path) -> int:
    async with Engine.open(_config(root)) as engine:
        session = await engine.session("person")
        records = await engine.journal.history(session="agent", limit=1_000_000)
        for record in records:
            await session.call("undo", {"transaction": record.id})
        return len(records)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.txt"))}


def measure(folder: Path, files: int, transactions: int, seed: int) -> dict[str, float]:
    """One round: both ways from the same start; times in seconds, growth in bytes."""
    out: dict[str, float] = {}
    ends = []
    for way, job in (("rewind", _rewind), ("undo_each", _undo_each)):
        # A new path each round: a journal's loss mark remembers the last one's.
        root = folder / f"{way}-{seed}"
        shutil.rmtree(root, ignore_errors=True)
        anyio.run(_make, root, files, transactions, seed)
        size = _journal_size(root)
        start = time.perf_counter()
        reverted = anyio.run(job, root)
        out[f"{way}_s"] = time.perf_counter() - start
        out[f"{way}_journal_bytes"] = _journal_size(root) - size
        out[f"{way}_transactions"] = reverted
        ends.append(_files(root))
        shutil.rmtree(root, ignore_errors=True)
    if ends[0] != ends[1]:
        raise AssertionError("the rewind and the undos left different files")
    return out


def run(rounds: int, files: int, transactions: int, folder: Path) -> list[dict[str, float]]:
    samples = []
    for r in range(rounds):
        sample = measure(folder, files, transactions, seed=r)
        print(
            f"round {r + 1}/{rounds}: rewind {sample['rewind_s']:.2f} s, "
            f"{sample['rewind_journal_bytes'] / 1024:.0f} KiB; undo each "
            f"{sample['undo_each_s']:.2f} s, {sample['undo_each_journal_bytes'] / 1024:.0f} KiB"
        )
        samples.append(sample)
    return samples


def figures(samples: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    return {
        "undo_each_vs_rewind_time": summary([s["undo_each_s"] / s["rewind_s"] for s in samples]),
        "undo_each_vs_rewind_journal": summary(
            [s["undo_each_journal_bytes"] / max(s["rewind_journal_bytes"], 1) for s in samples]
        ),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 transactions, 20 files, 1 round")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; 1 with --quick)")
    parser.add_argument("--json", metavar="FILE", help="write results as JSON to FILE")
    parser.add_argument("--dir", metavar="DIR", help="bench folder (default .bench-cache/run)")
    parser.add_argument("--files", type=int, help="the agent's files (default 200)")
    parser.add_argument("--transactions", type=int, help="the agent's edits (default 1000)")
    args = parser.parse_args(argv)
    files, transactions = (20, 100) if args.quick else (200, 1000)
    files, transactions = args.files or files, args.transactions or transactions
    rounds = args.rounds or (1 if args.quick else 3)
    folder = bench_folder(args.dir) / "rewind"
    samples = run(rounds, files, transactions, folder)
    folder.rmdir()
    figs = figures(samples)
    print_figures(figs)
    payload = {
        "machine": machine_info(folder, {"rounds": rounds, "files": files}),
        **figure_fields(figs),
        "raw": {"rewind": {"transactions": transactions, "files": files, "rounds": samples}},
    }
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
