"""The mutation budget: how many files a session may change.

Every tool pays per file: a write, an edit, a move or a delete of one file costs
1; a patch costs one per file it names, a batch the sum of its operations, a
recursive delete one per file it removes, and an undo one per file it puts back
(`files_changed`). Making folders costs 1 per operation. A call whose cost would
pass the limit is refused whole (BUDGET_EXCEEDED) and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import Code, LedgerError

if TYPE_CHECKING:
    from .changes import Change

__all__ = ["Budget", "files_changed"]


def files_changed(changes: Sequence[Change]) -> int:
    """What planned changes cost when no operation says it: one per file or link
    they write, delete or move, and one per folder they move (made and removed
    folders cost nothing more); at least 1."""
    return max(1, sum(1 for change in changes if change.kind == "file" or change.op == "move"))


class Budget:
    """One session's budget; the count used lives in the journal across restarts.

    `reserve` and `release` never await, so a check and its reservation cannot be
    split by another task of the same session.
    """

    def __init__(self, limit: int | None, used: int) -> None:
        self.limit = limit
        self.used = used
        self._reserved = 0

    def reserve(self, count: int) -> None:
        """Reserve `count` operations, or raise BUDGET_EXCEEDED and change nothing."""
        if self.limit is None:
            return
        if self.used + self._reserved + count > self.limit:
            raise LedgerError(
                Code.BUDGET_EXCEEDED,
                f"This change needs {count} operation(s); {self.remaining} of "
                f"{self.limit} remain in this session.",
                details={
                    "limit": self.limit,
                    "used": self.used,
                    "requested": count,
                    "remaining": self.remaining,
                },
            )
        self._reserved += count

    def release(self, count: int, *, charged: bool) -> None:
        """End a reservation: charged ones count as used from now on."""
        if self.limit is None:
            if charged:
                self.used += count
            return
        self._reserved -= count
        if charged:
            self.used += count

    @property
    def remaining(self) -> int | None:
        if self.limit is None:
            return None
        return max(0, self.limit - self.used - self._reserved)
