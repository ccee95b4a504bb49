"""Optimistic concurrency: expected hashes, auto-OCC, and what a conflict was."""

from __future__ import annotations

import re
from typing import Any, Literal

from ..journal import Journal
from .changes import Entry
from .diffs import unified_diff
from .effects import file_state, state_of
from .errors import Code, LedgerError

__all__ = ["HASH_PATTERN", "AutoOcc", "check_hash_format", "conflict_error", "precondition"]

#: What a mutation of an existing file without `expected_hash` meets.
AutoOcc = Literal["off", "warn", "block"]

HASH_PATTERN = re.compile(r"blake3:[0-9a-f]{64}")
_SHORT_DIFF = 4000


def check_hash_format(value: str, field: str) -> None:
    """Raise VALIDATION unless `value` is `blake3:` and 64 lowercase hex digits.

    >>> check_hash_format("blake3:" + "0" * 64, "expected_hash")
    """
    if not HASH_PATTERN.fullmatch(value):
        raise LedgerError(
            Code.VALIDATION,
            f"{field} must be 'blake3:' followed by 64 lowercase hex digits.",
            details={"field": field, "value": value[:80]},
        )


def precondition(
    label: str,
    entry: Entry,
    expected: str | None,
    auto_occ: AutoOcc,
    *,
    last_read: str | None,
) -> tuple[bool, str | None]:
    """Judge one target before it changes: (mismatch?, warning).

    Raises HASH_REQUIRED when auto-OCC blocks an unguarded change of an existing
    file. A mismatch is returned, not raised, so the caller can describe it.
    """
    if expected is not None:
        return expected != entry.hash, None
    if entry.data is None or auto_occ == "off":
        return False, None
    if auto_occ == "block":
        raise LedgerError(
            Code.HASH_REQUIRED,
            f"{label} exists; changing it needs expected_hash.",
            path=label,
            # Not the current hash: the point is that the client reads the file first.
            details={"last_read_hash": last_read},
        )
    if last_read is None:
        return False, f"{label} changed without expected_hash and was not read in this session"
    if last_read != entry.hash:
        return False, f"{label} changed since this session last read it (no expected_hash given)"
    return False, f"{label} changed without expected_hash"


async def conflict_error(
    journal: Journal,
    label: str,
    path: str,
    expected: str | None,
    entry: Entry,
    *,
    expected_text: str | None = None,
) -> LedgerError:
    """OCC_MISMATCH naming who changed the file: a transaction or `external`.

    `expected_text` says what was expected when it is not a file's hash (a
    folder, an empty folder, or nothing), so the message names it.
    """
    conflict: dict[str, Any] = {"source": "external"}
    last = await journal.last_change(path)
    if last is not None:
        record, mutation = last
        # A move leaves nothing at its source; its after_hash is the destination's.
        moved_away = mutation.op == "move" and mutation.path == path
        holds = None if moved_away else mutation.after_hash
        if holds == entry.hash and record.state in ("committed", "recovered"):
            conflict = {
                "source": "transaction",
                "transaction": record.id,
                "session": record.session,
                "at": record.created_at,
                "summary": record.summary,
            }
    if expected is not None:
        old = await journal.blob(expected)
        if old is not None or entry.data is None:
            diff = unified_diff(label, old, entry.data)
            if len(diff) <= _SHORT_DIFF:
                conflict["diff"] = diff
    return LedgerError(
        Code.OCC_MISMATCH,
        f"{label} changed: expected {expected_text or file_state(expected).describe()},"
        f" found {state_of(entry).describe()}.",
        path=path,
        expected_hash=expected,
        current_hash=entry.hash,
        conflict=conflict,
    )
