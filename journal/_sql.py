"""Statements over many values: a list bound in slices, and rows read into records.

SQLite binds at most a few hundred variables in one statement on old builds
(999 before 3.32), so a lookup of many ids runs once per slice of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from sqlite_utils import Database

__all__ = ["CHUNK", "chunks", "fields", "rows_in", "select_list"]

# Below SQLite's variable limit, with room to spare.
CHUNK = 500

K = TypeVar("K")


def chunks(values: Sequence[K]) -> Iterator[list[K]]:
    """`values` in slices small enough for one statement's variables.

    >>> [len(c) for c in chunks(range(1200))]
    [500, 500, 200]
    """
    for start in range(0, len(values), CHUNK):
        yield list(values[start : start + CHUNK])


def rows_in(db: Database, sql: str, values: Sequence[Any]) -> Iterator[Any]:
    """The rows of `sql` run once per slice of `values`, the slice bound where
    `sql` says ``{marks}`` (``... WHERE id IN ({marks})``)."""
    for chunk in chunks(values):
        yield from db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk).fetchall()


def select_list(columns: Mapping[str, str]) -> str:
    """The SELECT list of a {field: column expression} table, in its order.

    >>> select_list({"id": "id", "started": "created_at"})
    'id, created_at'
    """
    return ", ".join(columns.values())


def fields(columns: Mapping[str, str], row: Sequence[Any]) -> dict[str, Any]:
    """{field: value} of a row read with ``select_list(columns)``.

    >>> fields({"id": "id", "started": "created_at"}, (7, 1.5))
    {'id': 7, 'started': 1.5}
    """
    return dict(zip(columns, row, strict=True))
