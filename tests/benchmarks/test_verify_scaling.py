"""The incremental-verify figure of bench_scaling runs at its smallest sizes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from benchmarks import bench_scaling


def test_incremental_verify_figure_at_the_smallest_sizes(tmp_path: Path) -> None:
    found = bench_scaling.verify_incremental(1, (1000, 2000), verbose=False, cache=tmp_path)
    assert found["verify_incremental_2k_vs_1k"]["median"] > 0
    assert found["full_seconds"]["2k"] > 0
    # The cached journals come out chained, and without what the measurement added.
    for path in sorted(tmp_path.glob("journal-v*.db")):
        db = sqlite3.connect(path)
        chained, rows = db.execute(
            "SELECT (SELECT count(*) FROM chain), (SELECT count(*) FROM transactions)"
        ).fetchone()
        assert chained == rows
