"""Small helpers shared by the benchmarks: rounds, median, spread, machine facts, JSON."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "figure_fields",
    "figure_spread",
    "machine",
    "median",
    "print_figures",
    "spread",
    "summary",
    "write_json",
]


def median(values: Sequence[float]) -> float:
    """Return the median of `values`.

    >>> median([3.0, 1.0, 2.0])
    2.0
    """
    return float(statistics.median(values))


def spread(values: Sequence[float]) -> float:
    """Return (max - min) / median: how far apart the rounds were, as a fraction.

    >>> spread([9.0, 10.0, 11.0])
    0.2
    """
    mid = median(values)
    return round((max(values) - min(values)) / mid, 6) if mid else 0.0


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Return median, spread and the raw rounds of one measured quantity."""
    return {"median": median(values), "spread": spread(values), "rounds": list(values)}


def figure_spread(fig: Mapping[str, Any]) -> dict[str, Any]:
    """The spread of one summarised figure: (max - min) / median, min, max, rounds.

    >>> figure_spread(summary([0.9, 1.0, 1.2]))
    {'spread': 0.3, 'min': 0.9, 'max': 1.2, 'rounds': 3}
    """
    rounds = list(fig.get("rounds") or [fig["median"]])
    return {
        "spread": fig.get("spread", 0.0),
        "min": min(rounds),
        "max": max(rounds),
        "rounds": len(rounds),
    }


def print_figures(figs: Mapping[str, Mapping[str, Any]]) -> None:
    """Print each summarised figure: its median and its rounds' min and max.

    >>> print_figures({"x_vs_y": summary([1.0, 2.0, 3.0])})
    x_vs_y: 2.00x (min 1.00, max 3.00)
    """
    for name, fig in figs.items():
        rounds = fig["rounds"]
        print(f"{name}: {fig['median']:.2f}x (min {min(rounds):.2f}, max {max(rounds):.2f})")


def figure_fields(figs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The two JSON fields every suite writes for its summarised figures.

    ``figures`` maps each name to its median (the number the docs quote) and
    ``spread`` maps it to how far its rounds were apart, so a reader never
    compares medians without their spread.

    >>> figure_fields({"x_vs_y": summary([1.0, 2.0, 3.0])})["figures"]
    {'x_vs_y': 2.0}
    """
    return {
        "figures": {name: fig["median"] for name, fig in figs.items()},
        "spread": {name: figure_spread(fig) for name, fig in figs.items()},
    }


def machine(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Describe the machine a run happened on, so figures are never compared blind."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
    }
    info.update(extra or {})
    return info


def write_json(path: str | Path, payload: Mapping[str, Any]) -> None:
    """Write `payload` as indented JSON to `path`."""
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
