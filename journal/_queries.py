"""The journal's SQL: one function per statement group, each taking the Database.

Write functions run on the writer thread inside a transaction opened by it; read
functions run on the read connection. All SQL is fixed text with parameters.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
from sqlite_utils import Database

from . import _owners
from ._errors import TransactionStateError
from ._records import IssueWrite, MutationRecord, TxIntent, TxRecord, Unfinished, content_hash

__all__ = [
    "begin",
    "claim_unfinished",
    "commit",
    "history",
    "last_change",
    "load_transactions",
]

_TX_COLUMNS = (
    "id, session, state, outcome, cause, created_at, finished_at, undo_of, summary, owner,"
    " checkpointed"
)
_MUT_COLUMNS = (
    "tx, ordinal, op, path, destination, before_hash, after_hash, before_mode, after_mode,"
    " kind, applied"
)
# Below SQLite's variable limit, with room to spare.
_CHUNK = 500
# Up to this size a blob is cheaper to offer to INSERT OR IGNORE than to look up.
_SMALL_BLOB = 64 * 1024


# -- writes ---------------------------------------------------------------------


def _store_blob(db: Database, digest: str, data: bytes) -> None:
    """Insert a blob unless it is stored already.

    Big blobs are looked up first, so their bytes are not copied into SQLite only
    to be ignored; small ones go straight to INSERT OR IGNORE (one statement).
    """
    if len(data) <= _SMALL_BLOB:
        db.execute(
            "INSERT OR IGNORE INTO blobs (hash, size, data) VALUES (?, ?, ?)",
            (digest, len(data), data),
        )
    elif db.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone() is None:
        db.execute(
            "INSERT INTO blobs (hash, size, data) VALUES (?, ?, ?)", (digest, len(data), data)
        )


def referenced_hashes(intent: TxIntent) -> set[str]:
    """Return every before/after hash the intent's mutations name."""
    refs: set[str] = set()
    for m in intent.mutations:
        refs.update(h for h in (m.before_hash, m.after_hash) if h is not None)
    return refs


def check_blobs(intent: TxIntent) -> None:
    """Refuse blobs whose bytes do not hash to their key (verify() relies on keys)."""
    for digest, data in intent.blobs.items():
        if content_hash(data) != digest:
            raise TransactionStateError(f"blob {digest} does not hash to its key")


def begin(db: Database, intent: TxIntent, owner: str, now: float) -> int:
    """Record the intent, its blobs and its budget charge; return the new tx id."""
    for digest, data in intent.blobs.items():
        _store_blob(db, digest, data)
    for digest in referenced_hashes(intent) - intent.blobs.keys():
        if db.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone() is None:
            raise TransactionStateError(f"blob {digest} is neither given nor stored")
    cursor = db.execute(
        "INSERT INTO transactions (session, state, created_at, undo_of, summary, owner,"
        " checkpointed) VALUES (?, 'pending', ?, ?, ?, ?, 0)",
        (intent.session, now, intent.undo_of, _text(intent.summary), owner),
    )
    tx = int(cursor.lastrowid or 0)
    for m in intent.mutations:
        db.execute(
            f"INSERT INTO mutations ({_MUT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                tx,
                m.ordinal,
                m.op,
                stored_path(m.path),
                None if m.destination is None else stored_path(m.destination),
                m.before_hash,
                m.after_hash,
                m.before_mode,
                m.after_mode,
                m.kind,
                int(m.applied),
            ),
        )
    db.execute(
        "INSERT INTO sessions (id, budget_used, created_at) VALUES (?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET budget_used = budget_used + excluded.budget_used",
        (intent.session, intent.budget_charge, now),
    )
    return tx


def commit(db: Database, tx: int, now: float) -> None:
    """Mark a pending transaction committed and all its mutations applied."""
    cursor = db.execute(
        "UPDATE transactions SET state = 'committed', finished_at = ?"
        " WHERE id = ? AND state = 'pending'",
        (now, tx),
    )
    if cursor.rowcount != 1:
        raise TransactionStateError(f"transaction {tx} is not pending")
    db.execute("UPDATE mutations SET applied = 1 WHERE tx = ?", (tx,))


def mark_applied(db: Database, tx: int, ordinal: int) -> None:
    """Set one mutation's applied flag."""
    db.execute("UPDATE mutations SET applied = 1 WHERE tx = ? AND ordinal = ?", (tx, ordinal))


def set_applied(db: Database, tx: int, applied: Iterable[int]) -> None:
    """Make exactly the ordinals in `applied` flagged as applied."""
    db.execute("UPDATE mutations SET applied = 0 WHERE tx = ?", (tx,))
    for ordinal in applied:
        mark_applied(db, tx, ordinal)


def rollback(
    db: Database, tx: int, *, outcome: str, cause: str | None, applied: list[int], now: float
) -> None:
    """Mark a pending transaction rolled back; nothing is left to checkpoint."""
    cursor = db.execute(
        "UPDATE transactions SET state = 'rolled_back', outcome = ?, cause = ?, finished_at = ?,"
        " checkpointed = 1 WHERE id = ? AND state = 'pending'",
        (outcome, _text(cause), now, tx),
    )
    if cursor.rowcount != 1:
        raise TransactionStateError(f"transaction {tx} is not pending")
    set_applied(db, tx, applied)


def checkpoint(db: Database, owner: str, up_to: int) -> int:
    """Mark this owner's committed transactions up to `up_to` checkpointed."""
    cursor = db.execute(
        "UPDATE transactions SET checkpointed = 1 WHERE state = 'committed'"
        " AND checkpointed = 0 AND owner = ? AND id <= ?",
        (owner, up_to),
    )
    return int(cursor.rowcount)


def _unfinished_rows(db: Database) -> list[tuple[int, str, str]]:
    """Return (id, owner, state) of every pending or not-checkpointed committed tx."""
    rows = db.execute(
        "SELECT id, owner, state FROM transactions WHERE state = 'pending' AND checkpointed = 0"
        " UNION ALL SELECT id, owner, state FROM transactions"
        " WHERE state = 'committed' AND checkpointed = 0 ORDER BY id"
    ).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


def claim_unfinished(db: Database, owner: str, folder: Path) -> list[Unfinished]:
    """Move the unfinished transactions of dead owners to `owner`; return them by id."""
    rows = _unfinished_rows(db)
    alive = {o: _owners.owner_alive(folder, o) for o in {r[1] for r in rows} if o != owner}
    claimed: list[tuple[int, str, str]] = []
    for tx, old, state in rows:
        if old == owner or alive.get(old, True):
            continue
        # The owner condition makes the claim atomic across processes.
        cursor = db.execute(
            "UPDATE transactions SET owner = ? WHERE id = ? AND owner = ?", (owner, tx, old)
        )
        if cursor.rowcount == 1:
            claimed.append((tx, state, old))
    for old, is_alive in alive.items():
        if not is_alive:
            _owners.remove_if_dead(folder, old)
    _owners.sweep_dead(folder)
    records = {r.id: r for r in load_transactions(db, [tx for tx, _, _ in claimed])}
    return [
        Unfinished(
            tx=records[tx],
            action="roll_back" if state == "pending" else "roll_forward",
            previous_owner=old,
        )
        for tx, state, old in claimed
    ]


def finish_recovery(
    db: Database,
    tx: int,
    owner: str,
    *,
    state: str,
    outcome: str,
    cause: str | None,
    applied: list[int] | None,
    now: float,
) -> None:
    """Record the outcome of recovering a claimed transaction."""
    cursor = db.execute(
        "UPDATE transactions SET state = ?, outcome = ?, cause = ?, finished_at = ?,"
        " checkpointed = 1 WHERE id = ? AND owner = ? AND state IN ('pending', 'committed')"
        " AND checkpointed = 0",
        (state, outcome, _text(cause), now, tx, owner),
    )
    if cursor.rowcount != 1:
        raise TransactionStateError(f"transaction {tx} is not claimed by this journal or finished")
    if applied is not None:
        set_applied(db, tx, applied)


def record_issue_write(db: Database, fields: dict[str, str], now: float) -> int:
    """Insert a pending issue write; return its id."""
    cursor = db.execute(
        "INSERT INTO issue_writes (key, provider, repo, kind, payload, marker, state, created_at)"
        " VALUES (:key, :provider, :repo, :kind, :payload, :marker, 'pending', :now)",
        {**fields, "now": now},
    )
    return int(cursor.lastrowid or 0)


def finish_issue_write(db: Database, id: int, state: str, result: str | None, now: float) -> None:
    """Set an issue write's final state."""
    cursor = db.execute(
        "UPDATE issue_writes SET state = ?, result = ?, finished_at = ? WHERE id = ?",
        (state, result, now, id),
    )
    if cursor.rowcount != 1:
        raise TransactionStateError(f"issue write {id} does not exist")


# -- reads ----------------------------------------------------------------------


def _chunks(items: list[int]) -> Iterator[list[int]]:
    """Yield `items` in slices small enough for one statement's variables."""
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _mutation(row: Any) -> MutationRecord:
    """Build a MutationRecord from a row in _MUT_COLUMNS order."""
    return MutationRecord(
        ordinal=row[1],
        op=row[2],
        path=loaded_path(row[3]),
        destination=None if row[4] is None else loaded_path(row[4]),
        before_hash=row[5],
        after_hash=row[6],
        before_mode=row[7],
        after_mode=row[8],
        kind=row[9],
        applied=bool(row[10]),
    )


def load_transactions(db: Database, ids: list[int]) -> list[TxRecord]:
    """Return the transactions `ids` with their mutations, in the order of `ids`."""
    rows: dict[int, Any] = {}
    mutations: dict[int, list[MutationRecord]] = {}
    for chunk in _chunks(ids):
        marks = ",".join("?" * len(chunk))
        for row in db.execute(
            f"SELECT {_TX_COLUMNS} FROM transactions WHERE id IN ({marks})", chunk
        ).fetchall():
            rows[int(row[0])] = row
        for row in db.execute(
            f"SELECT {_MUT_COLUMNS} FROM mutations WHERE tx IN ({marks}) ORDER BY tx, ordinal",
            chunk,
        ).fetchall():
            mutations.setdefault(int(row[0]), []).append(_mutation(row))
    return [_tx(rows[i], mutations.get(i, [])) for i in ids if i in rows]


def _tx(row: Any, mutations: list[MutationRecord]) -> TxRecord:
    """Build a TxRecord from a row in _TX_COLUMNS order."""
    return TxRecord(
        id=row[0],
        session=row[1],
        state=row[2],
        outcome=row[3],
        cause=row[4],
        created_at=row[5],
        finished_at=row[6],
        undo_of=row[7],
        summary=row[8],
        owner=row[9],
        checkpointed=bool(row[10]),
        mutations=mutations,
    )


def _ids_for_path(db: Database, path: str, limit: int) -> list[int]:
    """Newest tx ids touching `path` as source or destination; each side walks its index."""
    rows = db.execute(
        "SELECT tx FROM (SELECT tx FROM mutations WHERE path = ?1 ORDER BY tx DESC LIMIT ?2)"
        " UNION SELECT tx FROM (SELECT tx FROM mutations WHERE destination = ?1"
        " ORDER BY tx DESC LIMIT ?2) ORDER BY tx DESC LIMIT ?2",
        (stored_path(path), limit),
    ).fetchall()
    return [int(r[0]) for r in rows]


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """A span of `created_at`: `since` included, `until` excluded; None is open."""

    since: float | None = None
    until: float | None = None

    @property
    def bounded(self) -> bool:
        return self.since is not None or self.until is not None


def history(
    db: Database,
    *,
    path: str | None,
    tx: int | None,
    session: str | None,
    window: Window | None = None,
    limit: int,
) -> list[TxRecord]:
    """Return matching transactions, newest first."""
    window = window or Window()
    if path is not None and tx is None and session is None and not window.bounded:
        return load_transactions(db, _ids_for_path(db, path, limit))
    where: list[str] = []
    params: list[Any] = []
    if window.since is not None:
        where.append("created_at >= ?")
        params.append(window.since)
    if window.until is not None:
        where.append("created_at < ?")
        params.append(window.until)
    if tx is not None:
        where.append("id = ?")
        params.append(tx)
    if session is not None:
        where.append("session = ?")
        params.append(session)
    if path is not None:
        where.append(
            "id IN (SELECT tx FROM mutations WHERE path = ? UNION"
            " SELECT tx FROM mutations WHERE destination = ?)"
        )
        params += [stored_path(path), stored_path(path)]
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = db.execute(
        f"SELECT id FROM transactions {clause} ORDER BY id DESC LIMIT ?", [*params, limit]
    ).fetchall()
    return load_transactions(db, [int(r[0]) for r in rows])


# A rolled-forward recovery is a committed change too.
_IN_EFFECT = "(t.state = 'committed' OR (t.state = 'recovered' AND t.outcome = 'rolled_forward'))"


def undone_by(db: Database, txs: list[int]) -> dict[int, int]:
    """Map each of `txs` that an in-effect undo reverted to that undo's id (the newest)."""
    found: dict[int, int] = {}
    for chunk in _chunks(txs):
        marks = ",".join("?" * len(chunk))
        rows = db.execute(
            f"SELECT t.undo_of, max(t.id) FROM transactions t"
            f" WHERE t.undo_of IN ({marks}) AND {_IN_EFFECT} GROUP BY t.undo_of",
            chunk,
        ).fetchall()
        found.update({int(of): int(by) for of, by in rows})
    return found


def last_change(
    db: Database, path: str, committing: frozenset[int] = frozenset()
) -> tuple[TxRecord, MutationRecord] | None:
    """Return the newest committed mutation whose path or destination is `path`.

    `committing` names pending transactions whose commit mark is queued: in effect.
    """
    best: tuple[int, int] | None = None
    marks = ", ".join(str(int(tx)) for tx in committing)
    in_effect = f"({_IN_EFFECT} OR t.id IN ({marks}))" if marks else _IN_EFFECT
    for column in ("path", "destination"):
        row = db.execute(
            f"SELECT m.tx, m.ordinal FROM mutations m JOIN transactions t ON t.id = m.tx"
            f" WHERE m.{column} = ? AND {in_effect} ORDER BY m.tx DESC, m.ordinal DESC LIMIT 1",
            (stored_path(path),),
        ).fetchone()
        if row is not None and (best is None or (row[0], row[1]) > best):
            best = (int(row[0]), int(row[1]))
    if best is None:
        return None
    record = load_transactions(db, [best[0]])[0]
    return record, next(m for m in record.mutations if m.ordinal == best[1])


def issue_writes(db: Database, state: str | None, key: str | None) -> list[IssueWrite]:
    """Return issue writes filtered by state and key, oldest first."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("state", state), ("key", key)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = db.execute(
        "SELECT id, key, provider, repo, kind, payload, marker, state, result, created_at,"
        f" finished_at FROM issue_writes {clause} ORDER BY id",
        params,
    ).fetchall()
    names = (
        "id",
        "key",
        "provider",
        "repo",
        "kind",
        "payload",
        "marker",
        "state",
        "result",
        "created_at",
        "finished_at",
    )
    return [IssueWrite(**dict(zip(names, row, strict=True))) for row in rows]


def now() -> float:
    """Return the wall-clock time stored in records."""
    return time.time()


# Paths are absolute, so a stored value that does not start with "/" is an
# encoded one: a name that is not UTF-8 (a lone surrogate from surrogateescape,
# which SQLite text cannot hold) is stored as "b64:" and its bytes.
_ENCODED = "b64:"


def stored_path(path: str) -> str:
    """`path` as the journal stores it (lossless for names that are not UTF-8).

    >>> stored_path("/w/a.txt"), loaded_path(stored_path("/w/caf\\udce9"))
    ('/w/a.txt', '/w/caf\\udce9')
    """
    if path.isascii():
        return path
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return _ENCODED + base64.b64encode(path.encode("utf-8", "surrogateescape")).decode()
    return path


def loaded_path(text: str) -> str:
    """A stored path as the engine gave it."""
    if text.startswith(_ENCODED):
        return base64.b64decode(text[len(_ENCODED) :]).decode("utf-8", "surrogateescape")
    return text


def _text(value: str | None) -> str | None:
    """Free text (summaries, causes) with what SQLite cannot hold made visible."""
    if value is None or value.isascii():
        return value
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
