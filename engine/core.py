"""The engine: one journal, one workspace, and the sessions that call its tools.

`Engine.open(config)` opens the journal, recovers what a dead process left, starts
the flusher and hands out sessions. `Session.call` finds a tool in the
registry (engine/tools.py), checks the configuration allows it, decodes the
arguments and runs its handler; every mutation then takes the one path of
engine/pipeline.py.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Unpack

import anyio
import msgspec

from ..journal import Journal, JournalError, JournalLoss
from . import git
from .budget import Budget
from .changes import Change
from .config import Config, parse_config
from .discovery import JOURNAL_DIR, point_roots_at
from .errors import Code, LedgerError
from .fileops import FileOps
from .flush import Flusher
from .gather import Gatherer
from .history import journal_unavailable, reading_journal
from .incidents import describe, record_incident
from .issues import IssueService
from .locks import PathLocks
from .nonutf8 import escape_text
from .pages import LineIndexes
from .paths import Resolved, ResolveOptions, Workspace, inside_root
from .recovery import recover
from .requests import decode_request
from .results import RecoveryOutcome
from .searchers import SearchWorkers
from .stale import KeptReads
from .tools import ISSUE_TOOLS, TOOLS, Tool, find_tool
from .transaction import Applier

__all__ = ["Engine", "Session", "load_config", "unexpected_failure"]

log = logging.getLogger(__name__)


def load_config(raw: Config | dict[str, Any]) -> Config:
    """Validate a configuration: its fields (`parse_config`), then the `tools` it names.

    Raises what `parse_config` raises; VALIDATION for a name no tool has, or for
    `tools` naming an issue tool while `issue_tools` is off.
    """
    config = parse_config(raw)
    if config.tools is None:
        return config
    unknown = sorted(set(config.tools) - set(TOOLS))
    if unknown:
        raise LedgerError(
            Code.VALIDATION,
            f"Unknown tools in configuration: {', '.join(unknown)}",
            details={"field": "tools", "unknown": unknown},
        )
    # Naming an issue tool does not enable them: that takes the operator's own switch.
    issue = [name for name in config.tools if name in ISSUE_TOOLS]
    if issue and not config.issue_tools:
        raise LedgerError(
            Code.VALIDATION,
            f"tools names issue tools ({', '.join(issue)}) but the issue tools are off.",
            details={"field": "tools", "reason": "issue_tools_off", "tools": issue},
            suggestion="add --issue-tools (issue_tools: true) to serve them, or leave "
            "them out of --tools",
        )
    return config


def unexpected_failure(exc: BaseException, tool: str) -> LedgerError:
    """The envelope of a tool call that raised what no boundary mapped, logged first.

    TOOL_UNAVAILABLE whose `details.incident` names the log entry.
    """
    # A tool name is the client's text: only the surface's go in the log.
    incident = record_incident(exc, f"tool {tool}" if tool in TOOLS else "a tool call")
    return LedgerError(
        Code.TOOL_UNAVAILABLE,
        f"The tool failed unexpectedly: {type(exc).__name__}: {exc}",
        details={"exception": type(exc).__name__, "incident": incident},
        suggestion=(
            f"report incident {incident} to the server's operator (the server's log holds "
            "its traceback); files are as the journal says"
        ),
    )


class Engine:
    """The transactional core over one journal and one workspace."""

    def __init__(self, config: Config, *, fileops: FileOps | None = None) -> None:
        self.config = config
        self.workspace = Workspace(config.roots, allow_secrets=config.allow_secrets)
        # Each root with what a path inside it starts with (labels cut that off).
        self._root_prefixes = tuple(
            (root, root.rstrip(os.sep) + os.sep) for root in self.workspace.roots
        )
        self.fileops = fileops or FileOps()
        self.recovered: list[RecoveryOutcome] = []
        self.journal_loss: JournalLoss | None = None
        self._journal: Journal | None = None
        self._locks = PathLocks()
        # One-file calls that arrive together are written together (engine/gather.py).
        self.gatherer = Gatherer()
        #: Where each line starts in the versions read lately: read_file's pages.
        self.line_indexes = LineIndexes()
        #: The processes content searches share their reading with (engine/searchers.py).
        self.searchers = SearchWorkers()
        self._applier: Applier | None = None
        # Tool calls between `Session.call`'s start and end (`alone`).
        self._calls = 0
        self._flusher: Flusher | None = None
        self._issues: IssueService | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: Config | dict[str, Any],
        *,
        fileops: FileOps | None = None,
        recover: bool = True,
        accept_journal_loss: bool = False,
    ) -> AsyncIterator[Engine]:
        """Open the engine: journal, recovery, flushes; close them on exit.

        `recover=False` leaves what a dead process left unfinished for a later
        open (`verify` reports, never repairs). `accept_journal_loss` opens a
        journal that lost transactions as it is (`journal_loss` says what was
        lost); without it such a journal is refused.

        Raises ROOTS_EMPTY, VALIDATION or NOT_FOUND for a bad configuration and
        TOOL_UNAVAILABLE when the journal cannot be opened (details say why;
        `details.kind == "lost"` for a journal that lost transactions).
        """
        engine = cls(load_config(config), fileops=fileops)
        await engine._start(recovering=recover, accept_journal_loss=accept_journal_loss)
        # An error of the caller's block is re-raised as itself, not wrapped in the
        # ExceptionGroup of the task group that runs the flusher.
        raised: BaseException | None = None
        try:
            async with anyio.create_task_group() as group:
                assert engine._flusher is not None
                group.start_soon(engine._flusher.run)
                group.start_soon(engine._flusher.write_marks)
                try:
                    yield engine
                except BaseException as exc:
                    raised = exc
                finally:
                    group.cancel_scope.cancel()
        finally:
            await engine.aclose()
        if raised is not None:
            raise raised

    async def _start(self, *, recovering: bool, accept_journal_loss: bool) -> None:
        path = self.config.journal_path()
        try:
            self._journal = await Journal.open(
                path,
                durability=self.config.durability,
                datasync=self.fileops.datasync,
                accept_loss=accept_journal_loss,
                roots=self.workspace.roots,
            )
        except JournalError as exc:
            raise journal_unavailable(
                exc,
                suggestion="restore the journal, or run `ledgerfs recover` to go on with it"
                if exc.kind == "lost"
                else "fix the journal file as the message says, or pass --journal",
            ) from exc
        self.journal_loss = self._journal.loss
        moved = self._journal.relocation
        if moved is not None:
            log.warning(
                "the journal %s was at %s (recorded there since %s): its paths inside the"
                " roots follow them here",
                escape_text(moved.current),
                escape_text(moved.previous),
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moved.previous_since)),
            )
        self.workspace.protect_journal(str(path))
        if self.config.journal is None:
            # Each other root names the journal, so the commands run inside it find
            # it. A journal kept elsewhere (--journal) leaves the roots untouched.
            await anyio.to_thread.run_sync(point_roots_at, str(path), self.workspace.roots)
        self._flusher = Flusher(
            self._journal, self._syncfs, interval=self.config.checkpoint_interval
        )
        self._applier = Applier(
            self._journal,
            self.fileops,
            on_started=self._flusher.started,
            on_finished=self._flusher.finished,
            max_file_size=self.config.max_file_size,
        )
        try:
            if recovering:
                self.recovered = await recover(self._journal, self._applier, self._syncfs)
        except JournalError as exc:
            await self.aclose()
            raise journal_unavailable(exc) from exc
        await self._exclude_journal_from_git()
        config = self.config
        self._issues = IssueService(
            self._journal,
            default_repo_path=self.workspace.roots[0],
            git_remote_allow=config.git_remote_allow,
            github_hosts=config.github_hosts,
            gitlab_hosts=config.gitlab_hosts,
            gitlab_token=config.gitlab_token,
            gitlab_api_urls=config.gitlab_api_urls,
        )

    def _syncfs(self) -> None:
        """Make every file written so far durable (durability `full`; blocking)."""
        # The journal's durability, as the applier reads it: one source for both.
        if self.journal.durability == "full":
            self.fileops.syncfs(self.workspace.roots)

    async def _exclude_journal_from_git(self) -> None:
        # The engine's own files must never change a repository's status hash.
        for root in self.workspace.roots:
            if os.path.exists(os.path.join(root, ".git")):
                try:
                    await git.ensure_excluded(root, f"{JOURNAL_DIR}/")
                except LedgerError:
                    continue

    async def aclose(self) -> None:
        """Flush, close the journal and release locks (shielded, idempotent)."""
        with anyio.CancelScope(shield=True):
            if self._applier is not None and self._journal is not None:
                await self._applier.record_rollbacks()
            if self._flusher is not None and self._journal is not None:
                try:
                    await self._flusher.flush()
                except (JournalError, OSError) as exc:
                    # Acknowledged changes stay safe in the journal: the next open
                    # rolls them forward (`ledgerfs verify` lists them as acknowledged).
                    log.warning(
                        "the last flush failed (%s): the next open rolls the changes "
                        "since the previous one forward from the journal",
                        describe(exc),
                    )
            if self._journal is not None:
                await self._journal.aclose()
                self._journal = None
            self._locks.close()
            await anyio.to_thread.run_sync(self.searchers.close)

    @property
    def journal(self) -> Journal:
        if self._journal is None:
            raise LedgerError(Code.TOOL_UNAVAILABLE, "The engine is closed.")
        return self._journal

    @property
    def issues(self) -> IssueService:
        if self._issues is None:
            raise LedgerError(Code.TOOL_UNAVAILABLE, "The engine is closed.")
        return self._issues

    @property
    def applier(self) -> Applier:
        assert self._applier is not None
        return self._applier

    async def session(
        self,
        session_id: str | None = None,
        *,
        client_name: str | None = None,
        client_version: str | None = None,
    ) -> Session:
        """Open a session: its own budget (persisted by id) and last-read hashes.

        The session is recorded in the journal (with the client that opened it,
        when named), so `history` lists it, by any process, after this one ends.
        A `session_id` opened before is the same session again: its budget and
        counts go on. Raises TOOL_UNAVAILABLE when the journal cannot record it.
        """
        sid = session_id or uuid.uuid4().hex
        with reading_journal():
            record = await self.journal.open_session(
                sid, client_name=client_name, client_version=client_version
            )
        return Session(self, sid, Budget(self.config.mutation_budget, record.budget_used))

    async def flush(self) -> None:
        """Make every finished transaction's files durable now (normally periodic)."""
        if self._flusher is not None:
            await self._flusher.flush()

    def label(self, path: str) -> str:
        """A path as diffs show it: relative to its root."""
        for root, inside in self._root_prefixes:
            if path == root:
                return "."
            if path.startswith(inside):
                return inside_root(path, root)
        return path

    @property
    def locks(self) -> PathLocks:
        return self._locks

    @property
    def alone(self) -> bool:
        """Whether at most one tool call is in flight: a call that asks has the
        event loop to itself, so what it waits for may block the loop's thread."""
        return self._calls <= 1

    def check_tool(self, tool: Tool) -> None:
        """Raise TOOL_UNAVAILABLE or READONLY when the configuration forbids the call."""
        if tool.issue and not self.config.issue_tools:
            raise LedgerError(
                Code.TOOL_UNAVAILABLE,
                f"The tool {tool.name} is off: the issue tools are served only when the "
                "server's operator enables them.",
                details={"tool": tool.name, "reason": "issue_tools_off"},
                suggestion="the operator can start the server with --issue-tools "
                "(issue_tools: true in the configuration)",
            )
        if self.config.tools is not None and tool.name not in self.config.tools:
            raise LedgerError(
                Code.TOOL_UNAVAILABLE,
                f"The tool {tool.name} is not enabled in this configuration.",
                details={"tool": tool.name},
            )
        if self.config.readonly and tool.mutating:
            raise LedgerError(
                Code.READONLY,
                f"{tool.name} changes files and the server is read-only.",
                details={"tool": tool.name},
            )


class Session:
    """One client's view of the engine: its budget and what it last read."""

    def __init__(self, engine: Engine, session_id: str, budget: Budget) -> None:
        self.engine = engine
        self.id = session_id
        self.budget = budget
        self.last_read: dict[str, str] = {}
        #: The bytes its reads returned, bounded: the versions a stale change of
        #: this session can be merged from (engine/stale.py).
        self.kept = KeptReads()

    async def call(self, tool: str, arguments: Any) -> msgspec.Struct:
        """Decode a client's arguments for `tool`, run it, return the typed result.

        Raises LedgerError with the code the contract names for each failure.
        """
        spec = find_tool(tool)
        engine = self.engine
        engine.check_tool(spec)
        request = decode_request(spec.request, arguments)
        engine._calls += 1
        try:
            return await spec.handler(self, request)
        finally:
            engine._calls -= 1

    async def resolve(self, raw: object, **options: Unpack[ResolveOptions]) -> Resolved:
        """Resolve a client's path inside the roots; raises what `Workspace.resolve` raises."""
        # Inline, not in a worker thread: resolving is a few cached metadata calls
        # (~40 us), a thread hop costs ~270 us. No flush either: every tool
        # awaits the journal, a worker thread or a lock right after resolving.
        return self.engine.workspace.resolve(raw, **options)

    def remember(self, change: Change) -> None:
        """Record a committed change's new hash as what this session last saw."""
        if change.op == "move":
            self.last_read.pop(change.path, None)
            if change.destination and change.after_hash:
                self.last_read[change.destination] = change.after_hash
        elif change.after_hash:
            self.last_read[change.path] = change.after_hash
        else:
            self.last_read.pop(change.path, None)
