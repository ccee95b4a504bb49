"""The audit chain: every finished transaction linked to the one finished before it.

A transaction is chained once, when it reaches its final state: the statement
that sets its ``checkpointed`` flag (a checkpoint of a committed transaction, a
rollback, the outcome of its recovery). Nothing a transaction records changes
after that, so its link holds for good, while the states it passes through
before (pending, committed, its applied ordinals, its owner) change freely.
Links follow the order in which transactions were finished (``chain.seq``):
commit order, across every process that writes the journal, since each link is
written inside the write transaction that finishes its record.

    link(0) = 32 zero bytes
    link(n) = blake3(link(n-1) || body(n))

``body`` is the msgpack form of `ChainedTx` (or of `ChainedGc`, the entry gc
appends for the transactions it drops): array-like structs, so the encoding is
their fields in order and nothing else. A dropped transaction keeps its entry
(its link), so the chain stays checkable across it; the gc entry after it names
it, so a record deleted any other way is told apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import blake3
import msgspec
from sqlite_utils import Database

from . import _codec, _sql
from ._records import MutationFacts

__all__ = [
    "GENESIS",
    "ChainEntry",
    "ChainedGc",
    "ChainedMutation",
    "ChainedTx",
    "body",
    "create",
    "entries",
    "head",
    "link",
    "record_gc",
    "seal",
    "seal_all",
    "tx_bodies",
]

#: The link before the first entry.
GENESIS = bytes(32)
# Rows read at once while walking the chain.
_PAGE = 512


class ChainedMutation(MutationFacts, array_like=True, frozen=True, kw_only=True):
    """One mutation as the chain covers it: its facts, then its kind, whether its
    before image was kept and whether it was applied (an array, in this order)."""

    kind: str
    before_kept: bool
    applied: bool


class ChainedTx(msgspec.Struct, array_like=True, frozen=True, kw_only=True, tag="tx"):
    """A finished transaction as the chain covers it (its canonical form)."""

    transaction: int
    session: str
    summary: str
    undo_of: int | None
    created_at: float
    finished_at: float | None
    state: str
    outcome: str | None
    cause: str | None
    mutations: list[ChainedMutation]


class ChainedGc(msgspec.Struct, array_like=True, frozen=True, kw_only=True, tag="gc"):
    """A gc run as the chain covers it: when, and which transactions it dropped."""

    at: float
    transactions: list[int]


class ChainEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One stored link, with what it covers when that is still stored.

    `record` is None for a transaction gc dropped (`transaction` names it) and for a
    transaction whose row is gone otherwise; `prev` is the link before it.
    """

    seq: int
    transaction: int | None
    link: bytes
    prev: bytes
    record: ChainedTx | ChainedGc | None


_encoder = msgspec.msgpack.Encoder()
_ids = msgspec.msgpack.Decoder(list[int])


def body(record: ChainedTx | ChainedGc) -> bytes:
    """The bytes a link covers: the record's msgpack form (tag first, then its fields).

    >>> body(ChainedGc(at=1.5, transactions=[3]))
    b'\\x93\\xa2gc\\xcb?\\xf8\\x00\\x00\\x00\\x00\\x00\\x00\\x91\\x03'
    """
    return _encoder.encode(record)


def link(prev: bytes, record: ChainedTx | ChainedGc) -> bytes:
    """The link of `record` after the link `prev`: blake3 over both (32 bytes).

    >>> link(GENESIS, ChainedGc(at=0.0, transactions=[])).hex()[:16]
    'ce94dd8253208a5e'
    """
    hasher = blake3.blake3(prev)
    hasher.update(body(record))
    return hasher.digest()


def create(db: Database) -> None:
    """The chain's table and indexes (schema version 7)."""
    conn = db.conn
    # tx NULL: a gc entry, whose `pruned` lists the ids it dropped (msgpack).
    conn.execute(
        "CREATE TABLE chain (seq INTEGER PRIMARY KEY, tx INTEGER, link BLOB NOT NULL,"
        " pruned BLOB, at REAL)"
    )
    # No index on tx: a walk meets every link anyway, and an index entry per link
    # was half the cost of chaining a record at checkpoint.
    # The gc entries, read before a walk to tell dropped records from deleted ones.
    conn.execute("CREATE INDEX idx_chain_gc ON chain (seq) WHERE tx IS NULL")


_TX_COLUMNS = (
    "id, session, summary, undo_of, created_at, finished_at, state, outcome, cause,"
    " mutations, applied"
)


def _chained(row: Any) -> ChainedTx:
    """A transaction row (in `_TX_COLUMNS` order) in its canonical form."""
    done = None if row[10] is None else set(_codec.decode_ordinals(row[10]))
    return ChainedTx(
        transaction=int(row[0]),
        session=row[1],
        summary=row[2],
        undo_of=row[3],
        # REAL columns may hand back an int: the encoding of a float is what is covered.
        created_at=float(row[4]),
        finished_at=None if row[5] is None else float(row[5]),
        state=row[6],
        outcome=row[7],
        cause=row[8],
        mutations=[
            ChainedMutation(
                ordinal=m.ordinal,
                op=m.op,
                # As stored: a name that is not UTF-8 is "b64:" and its bytes, which
                # msgpack and JSON can carry.
                path=m.path,
                destination=m.destination,
                before_hash=_codec.hash_text(m.before),
                after_hash=_codec.hash_text(m.after),
                before_mode=m.before_mode,
                after_mode=m.after_mode,
                kind=m.kind,
                before_kept=m.before_kept,
                applied=done is None or m.ordinal in done,
            )
            for m in _codec.decode_mutations(row[9])
        ],
    )


def tx_bodies(db: Database, ids: list[int], *, finished: bool = False) -> dict[int, ChainedTx]:
    """The canonical form of each of the transactions `ids` that is stored (and
    finished, with `finished`)."""
    also = " AND checkpointed = 1" if finished else ""
    sql = f"SELECT {_TX_COLUMNS} FROM transactions WHERE id IN ({{marks}}){also}"
    return {int(row[0]): _chained(row) for row in _sql.rows_in(db, sql, ids)}


def head(db: Database) -> tuple[int, bytes]:
    """The newest entry's (seq, link); (0, GENESIS) for an empty chain."""
    row = db.execute("SELECT seq, link FROM chain ORDER BY seq DESC LIMIT 1").fetchone()
    return (0, GENESIS) if row is None else (int(row[0]), bytes(row[1]))


def _append(db: Database, records: Iterable[ChainedTx | ChainedGc]) -> None:
    """Link `records` after the head, in order."""
    seq, prev = head(db)
    rows: list[tuple[int, int | None, bytes, bytes | None, float | None]] = []
    for record in records:
        seq, prev = seq + 1, link(prev, record)
        if isinstance(record, ChainedTx):
            rows.append((seq, record.transaction, prev, None, None))
        else:
            rows.append((seq, None, prev, _encoder.encode(record.transactions), record.at))
    db.conn.executemany(
        "INSERT INTO chain (seq, tx, link, pruned, at) VALUES (?, ?, ?, ?, ?)", rows
    )


def seal(db: Database, candidates: Iterable[int]) -> None:
    """Chain those of `candidates` (unchained until this statement) that are now
    finished (checkpointed), in id order."""
    ids = sorted(set(candidates))
    if ids:
        found = tx_bodies(db, ids, finished=True)
        _append(db, (found[tx] for tx in ids if tx in found))


def open_ids(db: Database, owner: str | None = None, up_to: int | None = None) -> list[int]:
    """Ids of the transactions not finished yet (few: the journal's open index),
    of `owner` and up to `up_to` when given."""
    sql = "SELECT id, owner FROM transactions WHERE checkpointed = 0"
    params: list[Any] = []
    if up_to is not None:
        sql += " AND id <= ?"
        params.append(up_to)
    rows = db.execute(sql, params).fetchall()
    return [int(r[0]) for r in rows if owner is None or r[1] == owner]


def seal_all(db: Database) -> int:
    """Chain every finished transaction above the newest chained one, in id order;
    return how many.

    What version 7 does to the records an older journal holds (its chain is empty).
    """
    chained = 0
    after = int(
        db.execute("SELECT coalesce(max(tx), 0) FROM chain WHERE tx IS NOT NULL").fetchone()[0]
    )
    while True:
        rows = db.execute(
            f"SELECT {_TX_COLUMNS} FROM transactions WHERE id > ? AND checkpointed = 1"
            " ORDER BY id LIMIT ?",
            (after, 4096),
        ).fetchall()
        if not rows:
            return chained
        _append(db, (_chained(r) for r in rows))
        chained += len(rows)
        after = int(rows[-1][0])


def record_gc(db: Database, dropped: Iterable[int], at: float) -> None:
    """Append the entry of a gc run that dropped `dropped` (nothing if it dropped none)."""
    ids = sorted(set(dropped))
    if ids:
        _append(db, [ChainedGc(at=at, transactions=ids)])


def pruned_ids(db: Database) -> set[int]:
    """Every transaction a gc entry names as dropped."""
    found: set[int] = set()
    for (data,) in db.execute("SELECT pruned FROM chain WHERE tx IS NULL AND pruned IS NOT NULL"):
        found.update(_ids.decode(data))
    return found


def entries(db: Database, after: int, limit: int | None = None) -> Iterator[ChainEntry]:
    """The entries after position `after`, in order, with what each covers.

    `prev` is the stored link of the entry before (GENESIS before the first); an
    entry before `after` that is missing gives GENESIS too (the walk reports it).
    """
    row = db.execute("SELECT link FROM chain WHERE seq = ?", (after,)).fetchone()
    prev = bytes(row[0]) if row is not None else GENESIS
    left = limit
    while left is None or left > 0:
        page = _PAGE if left is None else min(_PAGE, left)
        rows = db.execute(
            "SELECT seq, tx, link, pruned, at FROM chain WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, page),
        ).fetchall()
        if not rows:
            return
        bodies = tx_bodies(db, [int(r[1]) for r in rows if r[1] is not None])
        for seq, tx, stored, pruned, at in rows:
            record: ChainedTx | ChainedGc | None
            if tx is None:
                record = ChainedGc(at=at, transactions=_ids.decode(pruned or b"\x90"))
            else:
                record = bodies.get(int(tx))
            yield ChainEntry(
                seq=int(seq),
                transaction=None if tx is None else int(tx),
                link=bytes(stored),
                prev=prev,
                record=record,
            )
            prev = bytes(stored)
        after = int(rows[-1][0])
        if left is not None:
            left -= len(rows)


class ChainCheck(msgspec.Struct, kw_only=True):
    """What a walk of the chain found, and where it ended."""

    checked: int = 0
    problems: list[str] = msgspec.field(default_factory=list)
    head_seq: int = 0
    head_link: bytes = GENESIS
    #: The transactions the walk covered, whose rows are stored.
    transactions: list[int] = msgspec.field(default_factory=list)


def check(
    db: Database, after: int = 0, anchor: bytes | None = None, above_tx: int = 0
) -> ChainCheck:
    """Walk the chain after position `after`, recomputing every link.

    `anchor` is the link position `after` had when it was last verified: a
    different one now means the records up to it were rewritten. Reports a
    record altered (its link does not match what it holds, or it moved to
    another position), deleted (a position without its record, or a missing
    position) and a finished transaction with no link (checked for ids above
    `above_tx`).
    """
    found = ChainCheck(head_seq=after)
    if after:
        row = db.execute("SELECT link FROM chain WHERE seq = ?", (after,)).fetchone()
        if row is not None:
            found.head_link = bytes(row[0])
        if row is None or (anchor is not None and bytes(row[0]) != anchor):
            found.problems.append(
                f"the chain up to position {after} is not the one verified before:"
                " records up to there were rewritten or deleted (run verify --full)"
            )
    pruned = pruned_ids(db)
    expected = after + 1
    met: set[int] = set()
    for entry in entries(db, after):
        found.checked += 1
        if entry.transaction is not None:
            met.add(entry.transaction)
        gap = entry.seq != expected
        if gap:
            found.problems.append(
                f"chain positions {expected} to {entry.seq - 1} are missing:"
                " their records were deleted"
            )
        found.problems.extend(_entry_problems(entry, pruned, gap))
        if isinstance(entry.record, ChainedTx):
            found.transactions.append(entry.record.transaction)
        expected = entry.seq + 1
        found.head_seq, found.head_link = entry.seq, entry.link
    found.problems.extend(_unchained(db, above_tx, met))
    return found


def _entry_problems(entry: ChainEntry, pruned: set[int], gap: bool) -> list[str]:
    where = f"chain position {entry.seq}"
    if entry.record is None:
        if entry.transaction in pruned:
            return []  # dropped by gc: its link stands for it
        return [f"transaction {entry.transaction} ({where}) was deleted from the journal"]
    if gap:
        return []  # its predecessor is gone: the link cannot match, and that is reported
    if link(entry.prev, entry.record) == entry.link:
        return []
    if isinstance(entry.record, ChainedGc):
        return [f"the gc entry at {where} was altered"]
    return [
        f"transaction {entry.record.transaction} ({where}) does not match its link:"
        " it was altered, or moved in the chain"
    ]


def _unchained(db: Database, above: int, met: set[int]) -> list[str]:
    """Finished transactions above id `above` that the walk did not meet (no link
    after its start: links are made in finishing order, and a record finished
    after the start was above `above` or open then, so its link is after it)."""
    rows = db.execute(
        "SELECT id FROM transactions WHERE id > ? AND checkpointed = 1 ORDER BY id", (above,)
    )
    missing = [int(tx) for (tx,) in rows if int(tx) not in met]
    return [f"transaction {tx} is finished but not in the chain" for tx in missing[:20]]
