"""Fixtures for the journal tests: a journal file, an open journal, intents, faults."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from ledgerfs.journal import Journal, MutationRecord, TxIntent, content_hash


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "journal.db"


@pytest.fixture
async def journal(journal_path: Path) -> AsyncIterator[Journal]:
    j = await Journal.open(journal_path)
    async with j:
        yield j


def write_intent(
    path: str,
    after: bytes,
    *,
    before: bytes | None = None,
    session: str = "s1",
    charge: int = 1,
    op: str = "write",
    destination: str | None = None,
) -> TxIntent:
    """Build a one-mutation intent carrying its images."""
    blobs = {content_hash(after): after}
    if before is not None:
        blobs[content_hash(before)] = before
    mutation = MutationRecord(
        ordinal=0,
        op=op,
        path=path,
        destination=destination,
        before_hash=None if before is None else content_hash(before),
        after_hash=content_hash(after),
        before_mode=None if before is None else 0o644,
        after_mode=0o644,
    )
    return TxIntent(
        session=session, mutations=[mutation], blobs=blobs, budget_charge=charge, summary=op
    )


def raw(path: Path) -> sqlite3.Connection:
    """Open the journal file directly, to look at the disk without the Journal."""
    return sqlite3.connect(str(path), isolation_level=None)


class FaultyConnection(sqlite3.Connection):
    """A real connection that raises `error` on statements containing `trigger`."""

    trigger: str | None = None
    error: Callable[[], BaseException] | None = None
    hits = 0

    def _check(self, sql: str) -> None:
        cls = type(self)
        if cls.trigger is not None and cls.error is not None and cls.trigger in sql:
            cls.hits += 1
            raise cls.error()

    def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        self._check(sql)
        return super().execute(sql, parameters)  # type: ignore[arg-type]

    def executemany(self, sql: str, parameters: object, /) -> sqlite3.Cursor:  # type: ignore[override]
        self._check(sql)
        return super().executemany(sql, parameters)  # type: ignore[arg-type]


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> type[FaultyConnection]:
    """Make every journal connection a FaultyConnection (disarmed until a test arms it)."""
    import ledgerfs.journal._schema as schema

    class Armed(FaultyConnection):
        pass

    monkeypatch.setattr(schema, "connection_factory", Armed)
    return Armed
