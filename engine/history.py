"""The journal as its readers see it: one rendering of each record, for every reader.

The MCP `history` tool and the CLI (`ledgerfs log`, `show`, `verify`, `gc`) read the
same journal, so they share what a record becomes here:

- `entry_of`: a transaction record as an entry (its header and its mutations);
- `transaction_diff`: a journaled transaction's diff, rebuilt from its stored images
  exactly as its mutation result showed it (`changes_diff`): a folder adds no lines
  (as in `git diff`), a link made or deleted gets git's header, a move is a rename;
  a file whose images the journal does not hold (gc dropped them, or a delete of a
  file over `max_file_size` kept none) says so in one line instead of a diff;
- `journal_unavailable` and `reading_journal`: the one boundary where a
  `JournalError` becomes an envelope (TOOL_UNAVAILABLE, its cause in details);
- `recorded` and `not_recorded`: a transaction, checkpoint or session looked up
  by the id a caller gave, NOT_FOUND when the journal holds no record of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from ..journal import Journal, JournalError, MutationRecord, TxRecord
from . import bounds
from .changes import Change, is_link_mode
from .diffs import unified_diff
from .errors import Code, LedgerError
from .nonutf8 import reply_json
from .results import HistoryEntry, HistoryMutation
from .transaction import change_of, journal_error

__all__ = [
    "changes_diff",
    "entry_of",
    "journal_unavailable",
    "not_recorded",
    "reading_journal",
    "recorded",
    "recorded_diff",
    "transaction_diff",
]

Entry = TypeVar("Entry", bound=HistoryEntry)
R = TypeVar("R")

#: What a caller can look up by id, and how it finds an id the journal holds.
Recordable = Literal["transaction", "checkpoint", "session"]
_FIND_ONE: dict[Recordable, str] = {
    "transaction": "list the journaled transactions with history",
    "checkpoint": "pass the checkpoint id a checkpoint call returned",
    "session": "list the sessions with history and sessions: true",
}

#: An entry's fields that are its record's, by the same name.
_HEADER = ("session", "state", "outcome", "created_at", "finished_at", "undo_of", "summary")

#: What a diff says of a file whose images gc dropped, and of a file over
#: max_file_size whose content a delete did not keep.
DROPPED = "images dropped by gc"
NOT_KEPT = "over max_file_size, its content was not kept"


def journal_unavailable(exc: JournalError, *, suggestion: str | None = None) -> LedgerError:
    """The envelope of a journal that cannot be used: TOOL_UNAVAILABLE, naming the
    journal, with the journal's cause in `details`."""
    return LedgerError(
        Code.TOOL_UNAVAILABLE,
        exc.message,
        path=exc.path,
        details=journal_error(exc),
        suggestion=suggestion,
    )


@contextmanager
def reading_journal() -> Iterator[None]:
    """Raise `journal_unavailable` for a JournalError raised inside the block."""
    try:
        yield
    except JournalError as exc:
        raise journal_unavailable(exc) from exc


def not_recorded(kind: Recordable, wanted: int | str) -> LedgerError:
    """NOT_FOUND for a transaction, checkpoint or session the journal holds no record of.

    >>> not_recorded("checkpoint", 7).envelope.error.message
    'There is no checkpoint 7.'
    """
    return LedgerError(
        Code.NOT_FOUND,
        f"There is no {kind} {wanted!r}.",
        details={kind: wanted},
        suggestion=_FIND_ONE[kind],
    )


async def recorded(lookup: Awaitable[R | None], kind: Recordable, wanted: int | str) -> R:
    """What `lookup` reads of the journal: raises `not_recorded` when it finds nothing,
    TOOL_UNAVAILABLE when the journal cannot be read."""
    with reading_journal():
        record = await lookup
    if record is None:
        raise not_recorded(kind, wanted)
    return record


def entry_of(
    record: TxRecord,
    kind: type[Entry] = HistoryEntry,  # type: ignore[assignment]
    *,
    offset: int = 0,
    bounded: bool = True,
    **extra: Any,
) -> Entry:
    """A transaction record as `kind` shows it: its mutations from `offset`, bounded
    (when `bounded`) as a mutation result's files are; `extra` fills `kind`'s own fields.
    """
    total = len(record.mutations)
    if bounded:
        listed = [
            HistoryMutation.of(m) for m in record.mutations[offset : offset + bounds.MAX_FILES]
        ]
        listed = listed[: bounds.listed(len(reply_json(m)) for m in listed)]
    else:
        listed = [HistoryMutation.of(m) for m in record.mutations[offset:]]
    following = offset + len(listed)
    return kind(
        transaction=record.id,
        **{name: getattr(record, name) for name in _HEADER},
        mutations=listed,
        mutations_total=total,
        mutations_next_offset=following if following < total else None,
        **extra,
    )


async def transaction_diff(journal: Journal, record: TxRecord, label: Callable[[str], str]) -> str:
    """The whole diff of a journaled transaction, as its mutation result showed it.

    `label` names a path as the diff shows it. Raises TOOL_UNAVAILABLE when the
    journal cannot be read.
    """
    hashes = {h for m in record.mutations for h in (m.before_hash, m.after_hash) if h}
    with reading_journal():
        blobs = await journal.blobs(hashes)
    mutations = sorted(record.mutations, key=lambda m: m.ordinal)
    return "".join(recorded_diff(m, blobs, label) for m in mutations)


def recorded_diff(
    mutation: MutationRecord, blobs: dict[str, bytes], label: Callable[[str], str]
) -> str:
    if mutation.op != "move" and mutation.kind != "dir":
        gone = _images_gone(mutation, blobs)
        if gone is not None:
            return f"{mutation.op} {label(mutation.path)}: {gone}\n"
    return change_diff(change_of(mutation, blobs, label))


def _images_gone(mutation: MutationRecord, blobs: dict[str, bytes]) -> str | None:
    """Why the journal holds no image of a file's side, or None when it holds both."""
    after_gone = mutation.after_hash is not None and mutation.after_hash not in blobs
    if mutation.before_hash is not None and mutation.before_hash not in blobs:
        return DROPPED if mutation.before_kept or after_gone else NOT_KEPT
    return DROPPED if after_gone else None


def changes_diff(changes: Sequence[Change]) -> str:
    """The diff a mutation result shows for its changes."""
    return "".join(change_diff(change) for change in changes)


def change_diff(change: Change) -> str:
    """One change's part of a diff: a rename, nothing for a folder, else a unified diff."""
    if change.op == "move":
        return f"rename from {change.label}\nrename to {change.destination_label}\n"
    if change.kind == "dir":
        return ""
    body = unified_diff(change.label, change.before, change.after, regions=change.regions)
    return _link_header(change) + body if body else body


def _link_header(change: Change) -> str:
    """git's header of a link made or deleted: its lines are the target text, not content.

    >>> from ledgerfs.engine.changes import LINK_MODE
    >>> print(_link_header(Change(op="delete", path="/w/l", label="l", before_mode=LINK_MODE)))
    diff --git a/l b/l
    deleted file mode 120000
    <BLANKLINE>
    """
    if change.before_hash is None and is_link_mode(change.after_mode):
        mode = "new file mode 120000"
    elif change.after_hash is None and is_link_mode(change.before_mode):
        mode = "deleted file mode 120000"
    else:
        return ""
    return f"diff --git a/{change.label} b/{change.label}\n{mode}\n"
