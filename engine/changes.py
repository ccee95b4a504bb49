"""What a path holds and what a change does to it: the data planning, effects and
the transaction share.

Entry is one path's content (a file's bytes, a link's target, a folder, or
nothing); Change is one planned mutation of one path with its before and after.
They sit below every module that plans, models or applies changes, so those
modules import them and never each other for their data.
"""

from __future__ import annotations

import os
import stat
from typing import Literal

import msgspec

from .edits import LooseMatch

__all__ = [
    "ABSENT",
    "LINK_MODE",
    "NEW_DIR_MODE",
    "NEW_FILE_MODE",
    "Change",
    "Entry",
    "Kind",
    "is_link_mode",
    "unkept",
]

Kind = Literal["file", "dir"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
NEW_FILE_MODE = 0o666 & ~_UMASK
NEW_DIR_MODE = 0o777 & ~_UMASK
#: The mode of a symbolic link. A file's mode is its permission bits alone; a
#: link's carries the link type bit, so a mode says which of the two a path is
#: (and a journal record's modes say so for its before and after images).
LINK_MODE = stat.S_IFLNK | 0o777


def is_link_mode(mode: int | None) -> bool:
    """Whether a mode is a symbolic link's (its data is then the link's target).

    >>> is_link_mode(LINK_MODE), is_link_mode(0o644), is_link_mode(None)
    (True, False, False)
    """
    return mode is not None and stat.S_ISLNK(mode)


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """What a path holds: a file's bytes, a link's target, a folder, or nothing."""

    data: bytes | None = None
    hash: str | None = None
    mode: int | None = None
    is_dir: bool = False

    @property
    def exists(self) -> bool:
        # A file known by its hash only (from the journal's records) exists too.
        return self.is_dir or self.data is not None or self.hash is not None

    @property
    def is_link(self) -> bool:
        return is_link_mode(self.mode)


ABSENT = Entry()


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One planned mutation of one path (a move also names its destination)."""

    op: str
    path: str
    label: str
    kind: Kind = "file"
    destination: str | None = None
    destination_label: str | None = None
    before: bytes | None = None
    after: bytes | None = None
    before_hash: str | None = None
    after_hash: str | None = None
    before_mode: int | None = None
    after_mode: int | None = None
    #: Line spans (old start, old end, new start, new end) outside which before
    #: and after are equal, when the planner knows them (a patch's hunks): the
    #: result's diff then compares only those lines. Never journaled.
    regions: tuple[tuple[int, int, int, int], ...] | None = None
    #: The edits of this change that `match: "loose"` applied. Never journaled.
    loose: tuple[LooseMatch, ...] = ()


def unkept(change: Change) -> bool:
    """Whether a change's before image is its hash alone, without the bytes.

    So is a file over `max_file_size` deleted: nothing can put it back.

    >>> unkept(Change(op="delete", path="/a", label="a", before_hash="blake3:00"))
    True
    """
    return (
        change.op != "move"
        and change.kind == "file"
        and change.before_hash is not None
        and change.before is None
    )
