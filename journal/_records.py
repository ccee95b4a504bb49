"""The journal's records: frozen msgspec Structs, and the content hash.

Stored records follow msgspec's schema-evolution rules: new fields get defaults,
fields are never renamed or retyped.
"""

from __future__ import annotations

from typing import Literal

import blake3
import msgspec

__all__ = [
    "CheckpointRecord",
    "Durability",
    "GcReport",
    "IntegrityReport",
    "IssueWrite",
    "JournalLoss",
    "JournalStatistics",
    "MutationFacts",
    "MutationRecord",
    "Relocation",
    "SessionFacts",
    "SessionRecord",
    "TxIntent",
    "TxRecord",
    "Unfinished",
    "VerifiedPoint",
    "content_hash",
]

Durability = Literal["full", "normal"]

# Below this size a second hashing thread costs more than it saves.
_THREADED_HASH_MIN = 4 * 1024 * 1024


def content_hash(data: bytes) -> str:
    """Return ``"blake3:"`` + 64 lowercase hex digits of `data`.

    >>> content_hash(b"")
    'blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262'
    """
    threads = blake3.blake3.AUTO if len(data) > _THREADED_HASH_MIN else 1
    return "blake3:" + blake3.blake3(data, max_threads=threads).hexdigest()


class MutationFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What one file operation did: its place in the transaction, to which path,
    from which image (hash and mode) to which. A record and the audit chain's form
    of it both start with these fields, in this order."""

    ordinal: int
    op: str
    path: str
    destination: str | None
    before_hash: str | None
    after_hash: str | None
    before_mode: int | None
    after_mode: int | None


class MutationRecord(MutationFacts, frozen=True, kw_only=True):
    """One file operation of a transaction, with its before and after images."""

    kind: str = "file"
    applied: bool = False
    #: False when the before image's bytes were not kept (only its hash): such a
    #: change cannot be undone, and no blob is expected for `before_hash`.
    before_kept: bool = True


class TxIntent(msgspec.Struct, frozen=True, kw_only=True):
    """What `Journal.begin` records: the mutations, their images and the budget charge."""

    session: str
    mutations: list[MutationRecord]
    blobs: dict[str, bytes]
    budget_charge: int
    undo_of: int | None = None
    summary: str = ""


class TxRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A transaction as stored, with its mutations in ordinal order."""

    id: int
    session: str
    state: str
    outcome: str | None
    cause: str | None
    created_at: float
    finished_at: float | None
    undo_of: int | None
    summary: str
    owner: str
    checkpointed: bool
    mutations: list[MutationRecord]


class SessionFacts(msgspec.Struct, frozen=True, kw_only=True):
    """Who opened a session and what it did (a record, and the engine's listing of it)."""

    id: str
    #: What the client gave as its name and version (MCP clientInfo), if it did.
    client_name: str | None
    client_version: str | None
    #: When it was first recorded (opened with a client name, or its first record).
    started: float
    #: Its newest record: a transaction begun, a checkpoint, an open.
    last_activity: float
    #: The transactions it recorded (rolled-back ones included).
    transactions: int
    #: Per transaction, the paths it named (a move: source and destination), summed.
    files_changed: int


class SessionRecord(SessionFacts, frozen=True, kw_only=True):
    """A session as the journal knows it: who opened it, what it did, what it spent."""

    budget_used: int


class CheckpointRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A named point in the journal: what had committed when a session asked for it."""

    id: int
    label: str | None
    session: str
    #: The newest transaction in effect (committed or rolled forward) when it was
    #: made, whoever made it; None when there was none.
    transaction: int | None
    created_at: float


class PathSeen(msgspec.Struct, frozen=True, kw_only=True):
    """A path the journal's transactions named, how many named it and the newest."""

    path: str
    transactions: int
    newest: int


class Unfinished(msgspec.Struct, frozen=True, kw_only=True):
    """A transaction of a dead owner, claimed for recovery, and what to do with it."""

    tx: TxRecord
    action: Literal["roll_back", "roll_forward"]
    #: The dead owner it was claimed from (its temp files carry this id).
    previous_owner: str = ""


class GcReport(msgspec.Struct, frozen=True, kw_only=True):
    """What `Journal.gc` removed."""

    transactions_dropped: int
    blobs_dropped: int
    bytes_freed: int
    #: How much smaller the journal's files are on disk afterwards (VACUUM).
    bytes_returned: int = 0


class VerifiedPoint(msgspec.Struct, frozen=True, kw_only=True):
    """How far a verify got: the audit chain's head then, and the newest ids it covered."""

    journal: str
    #: The chain's head position, and its link ("blake3:" + 64 hex digits).
    seq: int
    link: str
    #: The newest transaction id and blob id there were.
    transaction: int
    blob: int
    #: When (seconds since the epoch).
    at: float
    #: What the caller expects each journaled path to hold at this point, kept with
    #: it ({path: [transaction, kind, hash]}; the engine's file check fills it).
    files: dict[str, tuple[int, str, str | None]] = msgspec.field(default_factory=dict)


class IntegrityReport(msgspec.Struct, frozen=True, kw_only=True):
    """What `Journal.verify` found; `ok` is true only when every list is empty."""

    ok: bool
    blobs_checked: int
    missing: list[str]
    corrupt: list[str]
    problems: list[str]
    #: Audit-chain links recomputed (their records' problems are in `problems`).
    links_checked: int = 0
    #: Where this check reached: the chain's head (keep its link elsewhere to anchor it).
    point: VerifiedPoint | None = None
    #: The point it started after (None: everything was checked).
    since: VerifiedPoint | None = None
    #: The transactions whose links it checked, whose records are stored.
    transactions: list[int] = msgspec.field(default_factory=list)


class IssueWrite(msgspec.Struct, frozen=True, kw_only=True):
    """An issue-tracker write recorded before it is sent, for idempotent retries."""

    id: int
    key: str
    provider: str
    repo: str
    kind: str
    payload: str
    marker: str
    state: str
    result: str | None
    created_at: float
    finished_at: float | None


class JournalStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one Journal instance since it was opened (trio-style `statistics()`).

    `records` is the number of write requests executed, `commits` the number of
    SQLite COMMITs that carried them, `groups` the number of batches drained from
    the queue (or run inline); `records / commits` is the mean group size.
    `inline` counts the begins that ran on their event loop's thread (alone or batched).
    """

    durability: Durability
    group_commit: bool
    #: The writer's counters: 0 for a journal opened without one (read-only).
    records: int = 0
    commits: int = 0
    groups: int = 0
    largest_group: int = 0
    failed_requests: int = 0
    failed_commits: int = 0
    queued: int = 0
    reads: int
    inline: int = 0


class JournalLoss(msgspec.Struct, frozen=True, kw_only=True):
    """A journal found holding fewer transactions than its mark says it had."""

    had: int
    holds: int
    mark: str


class Relocation(msgspec.Struct, frozen=True, kw_only=True):
    """A journal opened from another place than the one it last recorded.

    Its paths inside roots are kept relative to them, so its history and undo
    follow it; a writable open records the new place (the next opens from there
    are no relocation).
    """

    #: Where the journal file was when last recorded, and since when.
    previous: str
    previous_since: float
    #: Where it is opened from now (resolved).
    current: str
