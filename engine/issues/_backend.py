"""The interface both adapters implement, so the service holds the shared logic."""

from __future__ import annotations

from typing import Protocol

import msgspec

from .models import Issue, ListState, RepoRef

__all__ = ["Backend", "Posted"]


class Posted(msgspec.Struct, frozen=True, kw_only=True):
    """What a provider says about one posted (or found) issue or comment."""

    number: int
    url: str
    comment_id: int | None = None


class Backend(Protocol):
    """One provider's issue calls; each raises LedgerError with that provider's codes.

    `read=True` on the finders marks a lookup made on behalf of a read
    (issue_reconcile); a lookup inside a write call passes False.
    """

    async def read(self, ref: RepoRef, number: int) -> Issue: ...

    async def list(self, ref: RepoRef, state: ListState, limit: int) -> list[Issue]: ...

    async def create(self, ref: RepoRef, title: str, body: str) -> Posted: ...

    async def comment(self, ref: RepoRef, number: int, body: str) -> Posted: ...

    async def find_issue(self, ref: RepoRef, marker: str, *, read: bool) -> Posted | None: ...

    async def find_comment(
        self, ref: RepoRef, number: int, marker: str, *, read: bool
    ) -> Posted | None: ...
