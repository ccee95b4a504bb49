"""Lookups over many values: every value bound once, whatever the slices."""

from __future__ import annotations

import sqlite3

import pytest
from sqlite_utils import Database

from ledgerfs.journal import _sql


@pytest.mark.parametrize("count", [0, 1, _sql.CHUNK - 1, _sql.CHUNK, _sql.CHUNK + 1, 1234])
def test_rows_in_reads_each_value_once_across_slices(count: int) -> None:
    db = Database(sqlite3.connect(":memory:"))
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    db.conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(2000)])
    # Odd ids only, and one that is not stored: rows come for stored ones only.
    wanted = [2 * i + 1 for i in range(count)] + [5000]
    rows = list(_sql.rows_in(db, "SELECT id, v FROM t WHERE id IN ({marks})", wanted))
    assert sorted(rows) == [(i, f"v{i}") for i in wanted if i < 2000]


def test_a_row_read_by_its_table_fills_fields_by_name() -> None:
    columns = {"id": "id", "started": "created_at", "last": "coalesce(last, created_at)"}
    assert _sql.select_list(columns) == "id, created_at, coalesce(last, created_at)"
    assert _sql.fields(columns, (1, 2.0, 3.0)) == {"id": 1, "started": 2.0, "last": 3.0}
    with pytest.raises(ValueError):
        _sql.fields(columns, (1, 2.0))
