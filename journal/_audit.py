"""The audit export: every transaction with its chain link, and a check of an export.

`Journal.audit` reads the chain in order and turns each entry into an
`AuditRecord`: the fields the link covers, as a JSON object (`ChainedTx`'s
fields, with its mutations as objects), plus what helps reading it and is not
covered (the session's client, the tool named in the summary, the paths).
`check_export` recomputes the links of such records from the records alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

from . import _chain, _codec

__all__ = ["AuditMutation", "AuditRecord", "ExportCheck", "check_export", "record_of"]


class AuditMutation(_chain.ChainedMutation, array_like=False, frozen=True, kw_only=True):
    """One mutation in an export: the fields the chain covers (`_chain.ChainedMutation`),
    by name."""


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """One line of `ledgerfs log --format jsonl`: a transaction, or a gc run.

    Covered by `chain` (the link, "blake3:" + hex, over `prev` and these fields):
    for a transaction, `transaction`, `session`, `summary`, `undo_of`,
    `created_at`, `finished_at`, `state`, `outcome`, `cause`, `mutations`; for a
    gc run (`kind` "gc"), `created_at` (when it ran) and `dropped` (the ids it
    dropped). Not covered: `client_name`, `client_version` (the session's, as
    recorded now), `tool` (the summary's first word, which is covered), `paths`
    (the mutations' paths, which are covered). A transaction not finished yet has
    no `seq`, `chain` or `prev`; one gc dropped has its link and `pruned` true,
    and its fields are gone.
    """

    kind: Literal["tx", "gc"]
    seq: int | None
    chain: str | None
    prev: str | None
    transaction: int | None = None
    session: str | None = None
    client_name: str | None = None
    client_version: str | None = None
    tool: str | None = None
    summary: str | None = None
    paths: list[str] = msgspec.field(default_factory=list)
    undo_of: int | None = None
    created_at: float | None = None
    finished_at: float | None = None
    state: str | None = None
    outcome: str | None = None
    cause: str | None = None
    mutations: list[AuditMutation] = msgspec.field(default_factory=list)
    dropped: list[int] = msgspec.field(default_factory=list)
    pruned: bool = False


def _tool(summary: str) -> str | None:
    """The tool a summary names first.

    >>> _tool("edit_file a.txt"), _tool("")
    ('edit_file', None)
    """
    return summary.split(" ", 1)[0] or None


def _mutations(record: _chain.ChainedTx) -> list[AuditMutation]:
    return [AuditMutation(**msgspec.structs.asdict(m)) for m in record.mutations]


def record_of(
    record: _chain.ChainedTx,
    *,
    seq: int | None,
    link: bytes | None,
    prev: bytes | None,
    client: tuple[str | None, str | None] = (None, None),
    place: Callable[[str], str] = str,
) -> AuditRecord:
    """A transaction's export line (without a link: not chained yet).

    `place` turns a path as stored (and covered) into the one `paths` shows: where
    it is now, absolute.
    """
    paths: dict[str, None] = {}
    for m in record.mutations:
        paths[place(m.path)] = None
        if m.destination is not None:
            paths[place(m.destination)] = None
    return AuditRecord(
        kind="tx",
        seq=seq,
        chain=_codec.hash_text(link),
        prev=_codec.hash_text(prev),
        transaction=record.transaction,
        session=record.session,
        client_name=client[0],
        client_version=client[1],
        tool=_tool(record.summary),
        summary=record.summary,
        paths=list(paths),
        undo_of=record.undo_of,
        created_at=record.created_at,
        finished_at=record.finished_at,
        state=record.state,
        outcome=record.outcome,
        cause=record.cause,
        mutations=_mutations(record),
    )


def entry_record(
    entry: _chain.ChainEntry,
    clients: dict[str, tuple[str | None, str | None]],
    place: Callable[[str], str] = str,
) -> AuditRecord:
    """A chain entry's export line."""
    record = entry.record
    if isinstance(record, _chain.ChainedTx):
        return record_of(
            record,
            seq=entry.seq,
            link=entry.link,
            prev=entry.prev,
            client=clients.get(record.session, (None, None)),
            place=place,
        )
    seq, chain, prev = entry.seq, _codec.hash_text(entry.link), _codec.hash_text(entry.prev)
    if isinstance(record, _chain.ChainedGc):
        return AuditRecord(
            kind="gc",
            seq=seq,
            chain=chain,
            prev=prev,
            created_at=record.at,
            dropped=record.transactions,
        )
    return AuditRecord(
        kind="tx", seq=seq, chain=chain, prev=prev, transaction=entry.transaction, pruned=True
    )


def _covered(line: AuditRecord) -> _chain.ChainedTx | _chain.ChainedGc:
    """What a line's link covers, rebuilt from the line."""
    if line.kind == "gc":
        return _chain.ChainedGc(at=line.created_at or 0.0, transactions=line.dropped)
    return _chain.ChainedTx(
        transaction=line.transaction or 0,
        session=line.session or "",
        summary=line.summary or "",
        undo_of=line.undo_of,
        created_at=line.created_at or 0.0,
        finished_at=line.finished_at,
        state=line.state or "",
        outcome=line.outcome,
        cause=line.cause,
        mutations=[_chain.ChainedMutation(**msgspec.structs.asdict(m)) for m in line.mutations],
    )


class ExportCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What `check_export` found: `ok` when `problems` is empty."""

    ok: bool
    lines: int
    links_checked: int
    #: Lines of transactions not finished when exported (no link to check).
    unchained: int
    #: The link of the last chained line: compare it with a head kept elsewhere.
    head: str | None
    #: The link the first chained line follows (32 zero bytes: the chain's start).
    start: str | None
    problems: list[str]


_decoder = msgspec.json.Decoder(AuditRecord)


def check_export(lines: Iterable[bytes | str]) -> ExportCheck:
    """Recompute the chain of an export (`ledgerfs log --format jsonl`) from its lines.

    Each chained line's link must be blake3 over its `prev` and what it covers,
    its `prev` must be the link of the line before, and positions must follow one
    another: so a line altered, removed or moved is reported, by line number. The
    first line's `prev` is taken as given (`start`: the chain's start for a whole
    export; any link for one cut by --since). A line of a transaction gc dropped
    carries its link only: it is taken as given.
    """
    problems: list[str] = []
    count = checked = unchained = 0
    head: bytes | None = None
    start: bytes | None = None
    seq: int | None = None
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        count += 1
        try:
            line = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            problems.append(f"line {number}: not an export record ({exc})")
            continue
        if line.seq is None:
            unchained += 1
            continue
        try:
            link, prev = _codec.hash_key(line.chain), _codec.hash_key(line.prev)
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        if link is None or prev is None:
            problems.append(f"line {number}: a chained record without its links")
            continue
        if seq is None:
            start = prev
        elif line.seq != seq + 1:
            problems.append(
                f"line {number}: chain position {line.seq} follows {seq}:"
                " records are missing or out of order"
            )
        elif prev != head:
            problems.append(f"line {number}: its prev is not the link of the line before")
        seq, head = line.seq, link
        if line.pruned:
            continue
        checked += 1
        if _chain.link(prev, _covered(line)) != link:
            problems.append(
                f"line {number}: transaction {line.transaction} does not match its link"
                if line.kind == "tx"
                else f"line {number}: the gc entry does not match its link"
            )
    return ExportCheck(
        ok=not problems,
        lines=count,
        links_checked=checked,
        unchained=unchained,
        head=_codec.hash_text(head),
        start=_codec.hash_text(start),
        problems=problems,
    )
