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

__all__ = ["machine", "median", "spread", "summary", "write_json"]


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
