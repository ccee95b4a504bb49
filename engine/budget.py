"""The mutation budget: how many mutating operations a session may commit."""

from __future__ import annotations

from .errors import Code, LedgerError

__all__ = ["Budget"]


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
