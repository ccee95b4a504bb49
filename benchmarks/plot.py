"""Plot engine results: throughput against concurrency, and against file size.

    python -m benchmarks.plot [RESULTS.json] [--out docs/benchmarks]

Reads the JSON written by ``python -m benchmarks --json`` (or by
``python -m benchmarks.bench_engine --json``) and writes ``concurrency.png`` and
``filesize.png``. Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .bench_engine import FLOOR_THREADS, SIZES, WRITERS, repo_root, size_label

__all__ = ["engine_raw", "main", "plot_concurrency", "plot_filesize"]


def engine_raw(results: dict[str, Any]) -> dict[str, Any]:
    """The per-configuration engine numbers, from a suite or a bench_engine JSON."""
    raw = results.get("raw", {})
    inner = raw.get("engine", {})
    if "engine" in inner:  # python -m benchmarks nests each suite's raw under its name
        inner = inner["engine"]
    if not inner:
        raise SystemExit("no engine results in this file (run bench_engine or the suite)")
    return dict(inner)


def _point(cfg: dict[str, Any], key: str) -> tuple[float, float, float]:
    """(median, median - min, max - median) of one quantity, for error bars."""
    values = cfg[key]["rounds"]
    mid = cfg[key]["median"]
    return mid, mid - min(values), max(values) - mid


def plot_concurrency(raw: dict[str, Any], out: Path, title: str) -> Path:
    """Edits per second against concurrent writers, with the floors as references."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for durability, marker in (("full", "o"), ("normal", "s")):
        xs, ys, lo, hi = [], [], [], []
        for writers in WRITERS:
            name = f"edit_{durability}_{writers}w"
            if name in raw:
                mid, down, up = _point(raw[name], "ops_per_s")
                xs.append(writers)
                ys.append(mid)
                lo.append(down)
                hi.append(up)
        if xs:
            ax.errorbar(
                xs,
                ys,
                yerr=[lo, hi],
                marker=marker,
                capsize=3,
                label=f"ledgerfs edit_file, {durability}",
            )
    for name, style, text in (
        ("floor_1w", "--", "floor: temp+fsync+rename+fsync dir, 1 writer"),
        ("rename_1w", ":", "plain temp+rename (no fsync), 1 writer"),
    ):
        if name in raw:
            ax.axhline(raw[name]["ops_per_s"]["median"], linestyle=style, color="gray", label=text)
    name = f"floor_{FLOOR_THREADS}t"
    if name in raw:
        mid, down, up = _point(raw[name], "ops_per_s")
        ax.errorbar(
            [FLOOR_THREADS],
            [mid],
            yerr=[[down], [up]],
            marker="^",
            color="black",
            capsize=3,
            linestyle="none",
            label=f"floor, {FLOOR_THREADS} threads",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(WRITERS), [str(w) for w in WRITERS])
    ax.set_yscale("log")
    ax.set_xlabel("concurrent writers (one file and one session each)")
    ax.set_ylabel("edits per second (4 KiB files), median of rounds")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "concurrency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_filesize(raw: dict[str, Any], out: Path, title: str) -> Path:
    """MB/s written by one writer against file size: ledgerfs full against the floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for prefix, label, marker in (
        ("edit_full_1w", "ledgerfs edit_file, full, 1 writer", "o"),
        ("floor_1w", "floor: temp+fsync+rename+fsync dir", "^"),
    ):
        xs, ys, lo, hi = [], [], [], []
        for size in SIZES:
            name = prefix if size == 4096 else f"{prefix}_{size_label(size)}"
            if name in raw:
                mid, down, up = _point(raw[name], "mb_per_s")
                xs.append(size / 1024)
                ys.append(mid)
                lo.append(down)
                hi.append(up)
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker=marker, capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([s / 1024 for s in SIZES], [size_label(s) for s in SIZES])
    ax.set_xlabel("file size (each edit changes one line and rewrites the file)")
    ax.set_ylabel("MB/s of file content replaced, median of rounds")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "filesize.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[Path]:
    """Parse arguments, read the results, write the plots; return their paths."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("results", nargs="?", default="results.json", help="results JSON")
    parser.add_argument(
        "--out", default=str(repo_root() / "docs" / "benchmarks"), help="folder for the PNGs"
    )
    args = parser.parse_args(argv)
    results = json.loads(Path(args.results).read_text())
    raw = engine_raw(results)
    info = results.get("machine", {})
    cpus, fs, date = info.get("cpu_count", "?"), info.get("filesystem", "?"), info.get("date", "")
    title = f"{cpus} CPUs, {fs}, {date[:10]}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_concurrency(raw, out, title), plot_filesize(raw, out, title)]
    for path in paths:
        print(f"wrote {path}")
    return paths


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
