"""What writing commit marks for other processes costs an edit, in one run.

The engine notes a commit mark as its transaction commits and its flusher
writes the marks noted meanwhile `MARKS_DELAY` after a transaction finishes, so
another process reads the transaction committed within milliseconds. Measured,
one writer making 4 KiB ``edit_file`` edits with durability ``full`` on a tmpfs
when there is one (fsync taken out, so what is left is CPU), process CPU time
per edit under three policies, alternating inside each round:

- ``delayed``: the engine as it is (the marks ride along with a later
  begin's commit once the oldest is 2 ms old, or are written `MARKS_DELAY`
  later when none comes);
- ``each``: every mark written as its transaction finishes (one small
  transaction per edit);
- ``checkpoint``: no mark written before the next checkpoint (the engine before
  marks were written early: other processes read pending for up to a second).

Figures: ``marks_delayed_vs_checkpoint_cpu`` and ``marks_each_vs_checkpoint_cpu``
(CPU per edit over the checkpoint-only policy's; lower is better, 1.0 is free).

    python -m benchmarks.bench_marks [--rounds N] [--window S] [--json FILE]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from ledgerfs.engine import Engine
from ledgerfs.engine.flush import Flusher

from ._stats import figure_fields, machine, print_figures, summary, write_json
from .bench_engine import private_state, tmpfs_folder

POLICIES = ("delayed", "each", "checkpoint")
LINES = "".join(f"line {n}\n" for n in range(400))  # about 4 KiB


@contextmanager
def policy(name: str) -> Iterator[None]:
    """Run the engine's flusher under the policy `name` while inside."""
    finished, write_marks, started = Flusher.finished, Flusher.write_marks, Flusher.started

    def each(self: Flusher, tx: int) -> None:
        finished(self, tx)
        self.journal.write_marks_nowait()

    async def never(self: Flusher) -> None:
        await anyio.sleep_forever()

    def hold(self: Flusher, tx: int) -> None:
        started(self, tx)
        self.journal._marks_queued = True

    if name == "each":
        Flusher.finished = each  # type: ignore[method-assign]
    if name in ("each", "checkpoint"):
        Flusher.write_marks = never  # type: ignore[method-assign]
    if name == "checkpoint":
        # Nor does a begin take them along: the journal believes a write queued.
        Flusher.started = hold  # type: ignore[method-assign]
    try:
        yield
    finally:
        Flusher.finished = finished  # type: ignore[method-assign]
        Flusher.write_marks = write_marks  # type: ignore[method-assign]
        Flusher.started = started  # type: ignore[method-assign]


async def cpu_per_edit(folder: Path, window: float) -> float:
    """Process CPU seconds per edit of one writer over `window` seconds."""
    root = Path(tempfile.mkdtemp(dir=folder))
    try:
        async with Engine.open({"roots": [str(root)], "durability": "full"}) as engine:
            session = await engine.session()
            made = await session.call("write_file", {"path": "f.txt", "content": LINES})
            digest, old, done = made.files[0].content_hash, "line 0\n", 0
            cpu, deadline = time.process_time(), time.perf_counter() + window
            while done == 0 or time.perf_counter() < deadline:
                new = f"edit {done}\n"
                edit = {"old_text": old, "new_text": new}
                arguments = {"path": "f.txt", "edits": [edit], "expected_hash": digest}
                made = await session.call("edit_file", arguments)
                digest, old, done = made.files[0].content_hash, new, done + 1
            return (time.process_time() - cpu) / done
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(rounds: int, window: float, folder: Path) -> dict[str, list[float]]:
    """CPU per edit of each policy, per round (policies alternate inside a round)."""
    samples: dict[str, list[float]] = {name: [] for name in POLICIES}
    for index in range(rounds):
        order = POLICIES if index % 2 == 0 else tuple(reversed(POLICIES))
        for name in order:
            with policy(name):
                samples[name].append(anyio.run(cpu_per_edit, folder, window))
    return samples


def figures(samples: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    base = samples["checkpoint"]
    return {
        f"marks_{name}_vs_checkpoint_cpu": summary(
            [a / b for a, b in zip(samples[name], base, strict=True)]
        )
        for name in ("delayed", "each")
    } | {"marks_checkpoint_cpu_us_per_edit": summary([b * 1e6 for b in base])}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON to FILE")
    args = parser.parse_args(argv)
    private_state()
    folder = tmpfs_folder() or Path(tempfile.mkdtemp(prefix="ledgerfs-marks-"))
    try:
        figs = figures(run(args.rounds, args.window, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print_figures(figs)
    payload = {"machine": machine({"folder": str(folder)}), **figure_fields(figs), "raw": figs}
    if args.json:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
