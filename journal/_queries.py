"""The journal's SQL: one function per statement group, each taking the Database.

Write functions run on the writer thread inside a transaction opened by it; read
functions run on the read connection. All SQL is fixed text with parameters.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
from sqlite_utils import Database

from . import _blobstore, _chain, _codec, _images, _owners, _sql
from ._errors import TransactionStateError
from ._places import Places, loaded_key, stored_key
from ._records import (
    CheckpointRecord,
    IssueWrite,
    MutationRecord,
    PathSeen,
    SessionRecord,
    TxIntent,
    TxRecord,
    Unfinished,
    content_hash,
)

__all__ = [
    "Prepared",
    "begin_many",
    "claim_unfinished",
    "commit",
    "history",
    "last_change",
    "load_transactions",
    "prepare",
]

# A transaction row's scalar columns, each the TxRecord field of its name; its
# checkpointed flag, mutations and applied ordinals follow them (see `_tx`).
_TX = {
    name: name
    for name in (
        "id",
        "session",
        "state",
        "outcome",
        "cause",
        "created_at",
        "finished_at",
        "undo_of",
        "summary",
        "owner",
    )
}
_TX_COLUMNS = _sql.select_list(_TX) + ", checkpointed, mutations, applied"
# A transaction row's applied ordinals when none is applied yet.
_NONE_APPLIED = _codec.encode_ordinals(())


# -- writes ---------------------------------------------------------------------


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """An intent turned into the values its rows bind (built on the caller's thread)."""

    session: str
    created_at: float
    undo_of: int | None
    summary: str | None
    owner: str
    mutations: bytes
    applied: bytes
    paths: list[str]
    images: list[_images.Image]
    refs: list[bytes]
    charge: int


def check_blobs(intent: TxIntent) -> None:
    """Refuse blobs whose bytes do not hash to their key (verify() relies on keys)."""
    for digest, data in intent.blobs.items():
        if content_hash(data) != digest:
            raise TransactionStateError(f"blob {digest} does not hash to its key")


def _key(digest: str | None) -> bytes | None:
    try:
        return _codec.hash_key(digest)
    except ValueError as exc:
        raise TransactionStateError(str(exc)) from None


def prepare(intent: TxIntent, owner: str, now: float, places: Places) -> Prepared:
    """The rows of `intent` (paths inside `places`' roots as keys), its images cut
    into chunks where they are big (`_images.image`); TransactionStateError if a
    hash is not a content hash."""
    # Each given blob's key once: a mutation's images are usually among them.
    keys = {digest: _key(digest) or b"" for digest in intent.blobs}
    stored: list[_codec.Stored] = []
    refs: dict[bytes, None] = {}
    applied: list[int] = []
    for m in intent.mutations:
        before, after = (
            # A before image not kept is its hash alone: no blob to find.
            _stored_key(m.before_hash, keys, refs) if m.before_kept else _key(m.before_hash),
            _stored_key(m.after_hash, keys, refs),
        )
        if m.applied:
            applied.append(m.ordinal)
        stored.append(
            _codec.Stored(
                ordinal=m.ordinal,
                op=m.op,
                path=stored_key(m.path, places),
                destination=None if m.destination is None else stored_key(m.destination, places),
                before=before,
                after=after,
                before_mode=m.before_mode,
                after_mode=m.after_mode,
                kind=m.kind,
                before_kept=m.before_kept,
            )
        )
    return Prepared(
        session=intent.session,
        created_at=now,
        undo_of=intent.undo_of,
        summary=_text(intent.summary),
        owner=owner,
        mutations=_codec.encode_mutations(stored),
        applied=_codec.encode_ordinals(applied) if applied else _NONE_APPLIED,
        paths=_codec.named_paths(stored),
        images=[_images.image(keys[digest], data) for digest, data in intent.blobs.items()],
        refs=list(refs),
        charge=intent.budget_charge,
    )


def _stored_key(
    digest: str | None, given: dict[str, bytes], refs: dict[bytes, None]
) -> bytes | None:
    """The stored key of a mutation's image; one not given is noted in `refs`."""
    if digest is None:
        return None
    key = given.get(digest)
    if key is None:
        key = _key(digest) or b""
        refs[key] = None
    return key


def begin_many(
    db: Database, batch: list[Prepared], tail: _blobstore.Tail | None = None
) -> list[int]:
    """Record every intent of `batch`, their blobs and budget charges; return their ids.

    One statement per table for the whole batch. The ids are consecutive after
    the newest (this connection holds the write lock, so nobody else takes them).
    `tail`, the writer's cache of the blob store's tail, synced in this transaction,
    spares a scan of it.
    """
    conn = db.conn
    images = [image for p in batch for image in p.images]
    _blobstore.store(db, images, tail)
    given = {image.key for image in images}
    refs = {ref for p in batch for ref in p.refs} - given
    if refs:
        absent = refs - _blobstore.find(db, refs, tail)
        if absent:
            text = _codec.hash_text(min(absent))
            raise TransactionStateError(f"blob {text} is neither given nor stored")
    first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM transactions").fetchone()[0])
    ids = list(range(first, first + len(batch)))
    conn.executemany(
        "INSERT INTO transactions (id, session, state, created_at, undo_of, summary, owner,"
        " checkpointed, mutations, applied) VALUES (?, ?, 'pending', ?, ?, ?, ?, 0, ?, ?)",
        [
            (
                tx,
                p.session,
                p.created_at,
                p.undo_of,
                p.summary or "",
                p.owner,
                p.mutations,
                p.applied,
            )
            for tx, p in zip(ids, batch, strict=True)
        ],
    )
    conn.executemany(
        "INSERT INTO paths (path, tx) VALUES (?, ?)",
        [(path, tx) for tx, p in zip(ids, batch, strict=True) for path in p.paths],
    )
    # Per session: budget charged, transactions, files, first and last time.
    counts: dict[str, list[Any]] = {}
    for p in batch:
        count = counts.get(p.session)
        if count is None:
            count = counts[p.session] = [0, 0, 0, p.created_at, p.created_at]
        count[0] += p.charge
        count[1] += 1
        count[2] += len(p.paths)
        count[4] = p.created_at
    conn.executemany(
        "INSERT INTO sessions (id, budget_used, transactions, files_changed, created_at,"
        " last_activity) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET budget_used = budget_used + excluded.budget_used,"
        " transactions = transactions + excluded.transactions,"
        " files_changed = files_changed + excluded.files_changed,"
        " last_activity = excluded.last_activity",
        [(session, *count) for session, count in counts.items()],
    )
    return ids


def open_session(
    db: Database, session: str, client_name: str | None, client_version: str | None, now: float
) -> SessionRecord:
    """Record that `session` opened (with its client, when given); return its row.

    A session opened again keeps its counts and the client it had, unless this
    open names one.
    """
    db.execute(
        "INSERT INTO sessions (id, budget_used, created_at, last_activity, client_name,"
        " client_version) VALUES (?, 0, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET last_activity = excluded.last_activity,"
        " client_name = coalesce(excluded.client_name, client_name),"
        " client_version = coalesce(excluded.client_version, client_version)",
        (session, now, now, _text(client_name), _text(client_version)),
    )
    found = session_records(db, [session])
    return found[0]


# A session row's SELECT list, by the SessionRecord field each column fills.
_SESSION = {
    "id": "id",
    "client_name": "client_name",
    "client_version": "client_version",
    "started": "created_at",
    "last_activity": "coalesce(last_activity, created_at)",
    "transactions": "transactions",
    "files_changed": "files_changed",
    "budget_used": "budget_used",
}
_SESSION_COLUMNS = _sql.select_list(_SESSION)


def _session(row: Any) -> SessionRecord:
    return SessionRecord(**_sql.fields(_SESSION, row))


def session_records(db: Database, ids: list[str]) -> list[SessionRecord]:
    """The sessions `ids` that are recorded, in the order of `ids`."""
    found = {
        row[0]: _session(row)
        for row in _sql.rows_in(
            db, f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id IN ({{marks}})", ids
        )
    }
    return [found[i] for i in ids if i in found]


def session_clients(db: Database, ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """{session: (client name, client version)} of the sessions `ids` that are recorded."""
    return {s.id: (s.client_name, s.client_version) for s in session_records(db, ids)}


def sessions(db: Database, limit: int, started_before: float | None) -> list[SessionRecord]:
    """Sessions newest first (by when they started), started before `started_before`."""
    rows = db.execute(
        f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE created_at < ?"
        " ORDER BY created_at DESC LIMIT ?",
        (float("inf") if started_before is None else started_before, limit),
    ).fetchall()
    return [_session(row) for row in rows]


def newest_in_effect(db: Database, committing: frozenset[int]) -> int | None:
    """The id of the newest transaction in effect (`committing`: marks noted, in effect).

    Walks down the primary key a page at a time: only transactions pending or
    rolled back lie above it, and there are few.
    """
    below = _MAX_ID
    while True:
        rows = db.execute(
            "SELECT id, state, outcome FROM transactions WHERE id < ? ORDER BY id DESC LIMIT 64",
            (below,),
        ).fetchall()
        for tx, state, outcome in rows:
            if _in_effect(state, outcome) or tx in committing:
                return int(tx)
        if len(rows) < 64:
            return None
        below = int(rows[-1][0])


def record_checkpoint(
    db: Database, session: str, label: str | None, committing: frozenset[int], now: float
) -> CheckpointRecord:
    """Insert a checkpoint of `session` at the newest transaction in effect; return it."""
    tx = newest_in_effect(db, committing)
    cursor = db.execute(
        "INSERT INTO checkpoints (label, session, tx, created_at) VALUES (?, ?, ?, ?)",
        (_text(label), session, tx, now),
    )
    db.execute(
        "INSERT INTO sessions (id, budget_used, created_at, last_activity) VALUES (?, 0, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET last_activity = excluded.last_activity",
        (session, now, now),
    )
    return CheckpointRecord(
        id=int(cursor.lastrowid or 0),
        label=_text(label),
        session=session,
        transaction=tx,
        created_at=now,
    )


_CHECKPOINT_COLUMNS = "id, label, session, tx, created_at"


def _checkpoint(row: Any) -> CheckpointRecord:
    return CheckpointRecord(
        id=row[0], label=row[1], session=row[2], transaction=row[3], created_at=row[4]
    )


def checkpoint_record(db: Database, id: int) -> CheckpointRecord | None:
    """Checkpoint `id`, or None."""
    row = db.execute(
        f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE id = ?", (id,)
    ).fetchone()
    return None if row is None else _checkpoint(row)


def checkpoints(db: Database, session: str | None, limit: int) -> list[CheckpointRecord]:
    """Checkpoints newest first, of one session when `session` is given."""
    # `id < _MAX_ID`: the newest rows are found by walking the key down from a bound.
    if session is None:
        rows = db.execute(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE id < ? ORDER BY id DESC LIMIT ?",
            (_MAX_ID, limit),
        ).fetchall()
    else:
        rows = db.execute(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE session = ? AND id < ?"
            " ORDER BY id DESC LIMIT ?",
            (session, _MAX_ID, limit),
        ).fetchall()
    return [_checkpoint(row) for row in rows]


def commit(db: Database, tx: int, now: float) -> None:
    """Mark a pending transaction committed and all its mutations applied."""
    cursor = db.execute(
        "UPDATE transactions SET state = 'committed', finished_at = ?, applied = NULL"
        " WHERE id = ? AND state = 'pending'",
        (now, tx),
    )
    if cursor.rowcount != 1:
        raise TransactionStateError(f"transaction {tx} is not pending")


def mark_applied(db: Database, tx: int, ordinal: int) -> None:
    """Set one mutation's applied flag."""
    row = db.execute("SELECT applied FROM transactions WHERE id = ?", (tx,)).fetchone()
    if row is None or row[0] is None:
        return  # no such transaction, or every mutation is applied already
    applied = _codec.decode_ordinals(row[0])
    set_applied(db, tx, [*applied, ordinal])


def set_applied(db: Database, tx: int, applied: Iterable[int]) -> None:
    """Make exactly the ordinals in `applied` flagged as applied."""
    db.execute(
        "UPDATE transactions SET applied = ? WHERE id = ?", (_codec.encode_ordinals(applied), tx)
    )


def rollback(
    db: Database, tx: int, *, outcome: str, cause: str | None, applied: list[int], now: float
) -> None:
    """Mark a pending transaction rolled back; nothing is left to checkpoint."""
    cursor = db.execute(
        "UPDATE transactions SET state = 'rolled_back', outcome = ?, cause = ?, finished_at = ?,"
        " checkpointed = 1, applied = ? WHERE id = ? AND state = 'pending'",
        (outcome, _text(cause), now, _codec.encode_ordinals(applied), tx),
    )
    if cursor.rowcount != 1:
        raise TransactionStateError(f"transaction {tx} is not pending")
    _chain.seal(db, [tx])


def checkpoint(db: Database, owner: str, up_to: int, marks: dict[int, float]) -> int:
    """Mark this owner's committed transactions up to `up_to` checkpointed.

    `marks` are commit marks not written yet ({tx: when}): those pending
    transactions become committed and checkpointed in the same statement.
    Those it finishes are chained (`_chain`), in id order.
    """
    # The open index holds only unfinished rows: these are the ones it may finish.
    candidates = _chain.open_ids(db, owner, up_to)
    done = write_marks(db, owner, marks, checkpointed=True)
    cursor = db.execute(
        "UPDATE transactions SET checkpointed = 1 WHERE checkpointed = 0"
        " AND state = 'committed' AND owner = ? AND id <= ?",
        (owner, up_to),
    )
    _chain.seal(db, candidates)
    return done + int(cursor.rowcount)


def write_marks(db: Database, owner: str, marks: dict[int, float], *, checkpointed: bool) -> int:
    """Mark the pending transactions in `marks` ({tx: when}) committed, in one statement."""
    if not marks:
        return 0
    # A pending row is not checkpointed: leaving the column out of SET spares the
    # partial index on it an update per row (a quarter of the statement's time).
    also = " checkpointed = 1," if checkpointed else ""
    # One JSON object {"tx": when}: json_each hands out each member's key and value
    # as they are, where pairs would need two json_extract calls a row (1.8 against
    # 1.3 µs a mark).
    cursor = db.execute(
        f"UPDATE transactions SET state = 'committed', applied = NULL,{also}"
        " finished_at = m.value FROM json_each(?) AS m"
        " WHERE transactions.id = CAST(m.key AS INTEGER) AND state = 'pending' AND owner = ?",
        (msgspec.json.encode(marks).decode(), owner),  # int keys become member names
    )
    return int(cursor.rowcount)


def _unfinished_rows(db: Database) -> list[tuple[int, str, str]]:
    """Return (id, owner, state) of every pending or not-checkpointed committed tx."""
    rows = db.execute(
        "SELECT id, owner, state FROM transactions WHERE checkpointed = 0"
        " AND state IN ('pending', 'committed') ORDER BY id"
    ).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


def unfinished_of_dead(db: Database, owner: str, folder: Path) -> list[int]:
    """Ids of the unfinished transactions whose owner is dead (nothing is claimed)."""
    rows = _unfinished_rows(db)
    alive = {o: _owners.owner_alive(folder, o) for o in {r[1] for r in rows} if o != owner}
    return [tx for tx, old, _ in rows if old != owner and not alive.get(old, True)]


def claim_unfinished(db: Database, owner: str, folder: Path, places: Places) -> list[Unfinished]:
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
    records = {r.id: r for r in load_transactions(db, [tx for tx, _, _ in claimed], places)}
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
    _chain.seal(db, [tx])


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


def _mutations(
    data: bytes, applied: bytes | None, places: Places, db: Database
) -> list[MutationRecord]:
    """A transaction row's mutations as records (paths where their roots are now),
    with their applied flags."""
    done = None if applied is None else set(_codec.decode_ordinals(applied))
    return [
        MutationRecord(
            ordinal=m.ordinal,
            op=m.op,
            path=loaded_key(m.path, places, db),
            destination=None if m.destination is None else loaded_key(m.destination, places, db),
            before_hash=_codec.hash_text(m.before),
            after_hash=_codec.hash_text(m.after),
            before_mode=m.before_mode,
            after_mode=m.after_mode,
            kind=m.kind,
            applied=done is None or m.ordinal in done,
            before_kept=m.before_kept,
        )
        for m in _codec.decode_mutations(data)
    ]


def load_transactions(db: Database, ids: list[int], places: Places) -> list[TxRecord]:
    """Return the transactions `ids` with their mutations, in the order of `ids`."""
    rows = {
        int(row[0]): row
        for row in _sql.rows_in(
            db, f"SELECT {_TX_COLUMNS} FROM transactions WHERE id IN ({{marks}})", ids
        )
    }
    return [_tx(rows[i], places, db) for i in ids if i in rows]


def _tx(row: Any, places: Places, db: Database) -> TxRecord:
    """Build a TxRecord from a row in _TX_COLUMNS order."""
    *scalars, checkpointed, mutations, applied = row
    return TxRecord(
        **_sql.fields(_TX, scalars),
        checkpointed=bool(checkpointed),
        mutations=_mutations(mutations, applied, places, db),
    )


#: Above every transaction id (SQLite's integers are 64-bit).
_MAX_ID = 2**63 - 1


def _ids_for_path(db: Database, key: str, limit: int, before: int | None) -> list[int]:
    """Newest tx ids touching `path` as source or destination (one index walk),
    older than `before` when given."""
    rows = db.execute(
        "SELECT tx FROM paths WHERE path = ? AND tx < ? ORDER BY tx DESC LIMIT ?",
        (key, _MAX_ID if before is None else before, limit),
    ).fetchall()
    return [int(r[0]) for r in rows]


def paths_containing(db: Database, text: str, limit: int) -> list[PathSeen]:
    """Paths with `text` in them, the most recently changed first (one scan of `paths`).

    Names stored encoded (not UTF-8) match only by their encoded form.
    """
    rows = db.execute(
        "SELECT path, count(*), max(tx) FROM paths WHERE instr(path, ?) > 0"
        " GROUP BY path ORDER BY max(tx) DESC LIMIT ?",
        (text, limit),
    ).fetchall()
    return [
        PathSeen(path=_codec.loaded_path(p), transactions=int(n), newest=int(tx))
        for p, n, tx in rows
    ]


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """A span of `created_at`: `since` included, `until` excluded; None is open."""

    since: float | None = None
    until: float | None = None

    @property
    def bounded(self) -> bool:
        return self.since is not None or self.until is not None


def history(
    db: Database,
    places: Places,
    *,
    path: str | None,
    tx: int | None,
    session: str | None,
    window: Window | None = None,
    limit: int,
    before: int | None = None,
    after: int | None = None,
) -> list[TxRecord]:
    """Return matching transactions, newest first (older than `before`, newer than
    `after`, when given)."""
    window = window or Window()
    plain = tx is None and session is None and after is None and not window.bounded
    key = None if path is None else stored_key(path, places)
    if key is not None and plain:
        return load_transactions(db, _ids_for_path(db, key, limit, before), places)
    # Bounded above even without `before`: walking ids down from a bound is what
    # an index serves; a bare ORDER BY id DESC is a scan that LIMIT happens to stop.
    where: list[str] = ["id < ?"]
    params: list[Any] = [_MAX_ID if before is None else before]
    if after is not None:
        where.append("id > ?")
        params.append(after)
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
    if key is not None:
        where.append("id IN (SELECT tx FROM paths WHERE path = ?)")
        params.append(key)
    # A window alone walks the time index newest first and stops at `limit`;
    # ordered by id it would read every row of the window (or of the journal).
    by_time = window.bounded and tx is None and session is None and path is None
    order = "created_at DESC, id DESC" if by_time else "id DESC"
    rows = db.execute(
        f"SELECT id FROM transactions WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?",
        [*params, limit],
    ).fetchall()
    return load_transactions(db, [int(r[0]) for r in rows], places)


def _in_effect(state: str, outcome: str | None) -> bool:
    """A committed change, or a rolled-forward recovery (a committed change too)."""
    return state == "committed" or (state == "recovered" and outcome == "rolled_forward")


def undone_by(
    db: Database, txs: list[int], committing: frozenset[int] = frozenset()
) -> dict[int, int]:
    """Map each of `txs` that an in-effect undo reverted to that undo's id (the newest).

    `committing` names pending transactions whose commit mark is queued: in effect.
    An undo is begun after what it reverts, so only ids above the chunk's lowest are
    read: a page of the newest transactions reads the rows above it, not the journal.
    """
    found: dict[int, int] = {}
    for chunk in _sql.chunks(txs):
        marks = ",".join("?" * len(chunk))
        rows = db.execute(
            "SELECT undo_of, id, state, outcome FROM transactions"
            f" WHERE id > ? AND undo_of IN ({marks})",
            [min(chunk), *chunk],
        ).fetchall()
        for of, by, state, outcome in rows:
            if _in_effect(state, outcome) or by in committing:
                found[int(of)] = max(found.get(int(of), 0), int(by))
    return found


def last_change(
    db: Database, path: str, places: Places, committing: frozenset[int] = frozenset()
) -> tuple[TxRecord, MutationRecord] | None:
    """Return the newest committed mutation whose path or destination is `path`.

    `committing` names pending transactions whose commit mark is queued: in effect.
    """
    rows = db.execute(
        "SELECT p.tx, t.state, t.outcome FROM paths p JOIN transactions t ON t.id = p.tx"
        " WHERE p.path = ? ORDER BY p.tx DESC",
        (stored_key(path, places),),
    )
    for tx, state, outcome in rows:
        if _in_effect(state, outcome) or tx in committing:
            record = load_transactions(db, [int(tx)], places)[0]
            mutation = max(
                (m for m in record.mutations if path in (m.path, m.destination)),
                key=lambda m: m.ordinal,
            )
            return record, mutation
    return None


def undos_of(db: Database, tx: int, committing: frozenset[int] = frozenset()) -> list[int]:
    """Ids of the transactions in effect (or pending) that undo `tx`, oldest first."""
    rows = db.execute(
        "SELECT id, state, outcome FROM transactions WHERE undo_of = ? ORDER BY id", (tx,)
    ).fetchall()
    return [
        int(by)
        for by, state, outcome in rows
        if _in_effect(state, outcome) or state == "pending" or by in committing
    ]


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


def _text(value: str | None) -> str | None:
    """Free text (summaries, causes) with what SQLite cannot hold made visible."""
    if value is None or value.isascii():
        return value
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
