"""The journal's high-water mark, kept outside its folder, so a lost journal is noticed.

A journal that lost transactions (its file deleted, truncated or replaced, its
folder deleted, its WAL deleted, cut or corrupted) opens as a valid, smaller
SQLite database: nothing inside it can tell. So each checkpoint also records,
in a small file elsewhere, the highest transaction id the journal holds durably,
and opening compares: a journal whose newest transaction is older than its mark
went backwards.

The mark lives in the user's state folder (`$LEDGERFS_STATE_DIR`, else
`$XDG_STATE_HOME/ledgerfs`, else `~/.local/state/ledgerfs`), one file per journal
path. It is written after the checkpoint it records is durable, so it is never
ahead of the journal; it is not fsynced, so a power loss may leave an older mark
(less is noticed, nothing is falsely reported).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import TypeVar

import msgspec

from ._records import VerifiedPoint

__all__ = ["Mark", "mark_path", "read_kept", "read_mark", "write_kept", "write_mark"]


class Mark(msgspec.Struct, frozen=True, kw_only=True):
    """What a journal held durably when it was last checkpointed."""

    journal: str
    last_tx: int


# What is kept in the state folder for a journal: each names the journal it is for.
Kept = TypeVar("Kept", Mark, VerifiedPoint)


def _state_dir() -> Path:
    explicit = os.environ.get("LEDGERFS_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "ledgerfs"


def mark_path(journal: Path) -> Path:
    """Where the mark of the journal at `journal` (an absolute path) is kept."""
    digest = hashlib.sha256(str(journal).encode("utf-8", "surrogateescape")).hexdigest()
    return _state_dir() / "journals" / f"{digest[:32]}.json"


def read_mark(journal: Path) -> Mark | None:
    """The journal's mark, or None when there is none (or it cannot be read)."""
    return read_kept(mark_path(journal), Mark, journal)


def write_mark(journal: Path, last_tx: int, *, lower: bool = False) -> None:
    """Record that the journal holds transactions up to `last_tx`.

    The mark only rises (another process may have recorded a higher one) unless
    `lower` says the journal was accepted as it is. A mark that cannot be written
    is skipped: it only helps notice a loss.
    """
    current = read_mark(journal)
    if current is not None and current.last_tx >= last_tx and not lower:
        return
    write_kept(mark_path(journal), Mark(journal=str(journal), last_tx=last_tx))


def read_kept(path: Path, type: type[Kept], journal: Path) -> Kept | None:
    """What is kept at `path` for the journal at `journal`; None when there is
    nothing, it cannot be read, or it names another journal."""
    try:
        kept = msgspec.json.decode(path.read_bytes(), type=type)
    except (OSError, msgspec.DecodeError):
        return None
    return kept if kept.journal == str(journal) else None


def write_kept(path: Path, kept: Mark | VerifiedPoint) -> bool:
    """Replace what `path` keeps with `kept` (atomically); False when it cannot be written."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(msgspec.json.encode(kept))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True
