"""What the write route needs of the session a call carries, named below the engine.

The route (`pipeline.py`, `gather.py`, `rewind.py`) sits a layer below
`core.py`, whose `Session` carries each call down it. It names what it uses of
that session here, and nothing more: whose call it is, the budget it spends, the
hashes and bytes it last read, and the engine's parts a write goes through. A
`core.Session` is a `Caller` by its shape (mypy checks it wherever a handler
hands one to the route), so the route imports nothing above its own layer.

Every member is read-only: the route changes a session only through its budget
(`reserve`, `release`) and `remember`, once a change is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, Unpack

from ..journal import Journal
from .budget import Budget
from .changes import Change
from .config import Config
from .locks import PathLocks
from .paths import Resolved, ResolveOptions, Workspace
from .stale import KeptReads
from .transaction import Applier

__all__ = ["Caller", "EngineParts"]


class EngineParts(Protocol):
    """The parts of an engine a write goes through (engine/core.py's `Engine` has them)."""

    @property
    def config(self) -> Config: ...

    @property
    def workspace(self) -> Workspace: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def locks(self) -> PathLocks: ...

    @property
    def applier(self) -> Applier: ...

    @property
    def alone(self) -> bool:
        """Whether at most one tool call is in flight (the engine's `alone`)."""
        ...

    def label(self, path: str) -> str:
        """A path as diffs show it: relative to its root."""
        ...


class Caller(Protocol):
    """The session a call carries down the route (engine/core.py's `Session` is one)."""

    @property
    def id(self) -> str: ...

    @property
    def engine(self) -> EngineParts: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def last_read(self) -> Mapping[str, str]:
        """The content hash of each path as this session last read or wrote it."""
        ...

    @property
    def kept(self) -> KeptReads:
        """The bytes its reads returned, bounded: the bases a stale change merges from."""
        ...

    def remember(self, change: Change) -> None:
        """Record a committed change's new hash as what this session last saw."""
        ...

    async def resolve(self, raw: object, **options: Unpack[ResolveOptions]) -> Resolved:
        """Resolve a client's path inside the roots, as `Workspace.resolve` does."""
        ...
