"""The engine: one journal, one workspace, sessions, and every operation.

`Engine.open(config)` opens the journal, recovers what a dead process left, starts
the checkpointer and hands out sessions. Every mutation follows one path:
prepare (decode and resolve, no locks) -> lock -> load -> check (OCC, auto-OCC)
-> plan (pure) -> reserve budget -> apply through the journal -> commit.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from ledgerfs.journal import Journal, JournalError

from . import git, patch
from .anchored import open_dir
from .budget import Budget
from .checkpoint import Checkpointer
from .config import Config, load_config
from .diffs import unified_diff
from .errors import Code, LedgerError
from .fileops import FileOps, TooLarge, load_entry
from .issues import (
    CreatedComment,
    CreatedIssue,
    Issue,
    IssueCommentRequest,
    IssueCreateRequest,
    IssueList,
    IssueListRequest,
    IssueReadRequest,
    IssueReconcileRequest,
    IssueService,
    ReconcileReport,
)
from .locks import PathLocks
from .occ import check_hash_format, conflict_error, precondition
from .oserrors import os_error
from .paths import Resolved, Workspace, inside_root
from .planning import ABSENT, NEW_DIR_MODE, Change, Entry, Planner, decode_content
from .reads import file_info, list_directory, read_file, too_large
from .recovery import recover
from .requests import (
    REQUESTS,
    ApplyPatch,
    Batch,
    BatchOp,
    CreateDirectory,
    DeleteFile,
    DeleteOp,
    EditFile,
    EditOp,
    GetFileInfo,
    GitStatusRequest,
    HistoryRequest,
    ListDirectory,
    MkdirOp,
    MoveFile,
    MoveOp,
    PatchOp,
    ReadFile,
    Undo,
    WriteFile,
    WriteOp,
    decode_request,
)
from .results import (
    AllowedDirectories,
    DirectoryListing,
    FileChange,
    FileContent,
    FileInfo,
    HistoryEntry,
    HistoryMutation,
    HistoryResult,
    MutationResult,
    RecoveryOutcome,
)
from .transaction import INLINE_MAX, Applier, change_of, inverse, journal_error

__all__ = ["Engine", "Session"]

MUTATING = frozenset(
    {
        "write_file",
        "edit_file",
        "apply_patch",
        "move_file",
        "delete_file",
        "create_directory",
        "batch",
        "undo",
        "issue_create",
        "issue_comment",
        "issue_reconcile",
    }
)


class _Step(msgspec.Struct, kw_only=True):
    """One operation, resolved and ready to plan; no locks held yet."""

    paths: list[str]
    checks: list[tuple[str, str | None]]
    plan: Callable[[Planner], None]
    new_folders: list[str] = []


class Engine:
    """The transactional core over one journal and one workspace."""

    def __init__(self, config: Config, *, fileops: FileOps | None = None) -> None:
        self.config = config
        self.workspace = Workspace(config.roots, allow_secrets=config.allow_secrets)
        self.fileops = fileops or FileOps()
        self.recovered: list[RecoveryOutcome] = []
        self._journal: Journal | None = None
        self._locks = PathLocks(config.journal_path().parent / "locks")
        self._applier: Applier | None = None
        self._checkpointer: Checkpointer | None = None
        self._issues: IssueService | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls, config: Config | dict[str, Any], *, fileops: FileOps | None = None
    ) -> AsyncIterator[Engine]:
        """Open the engine: journal, recovery, checkpoints; close them on exit.

        Raises ROOTS_EMPTY, VALIDATION or NOT_FOUND for a bad configuration and
        TOOL_UNAVAILABLE when the journal cannot be opened (details say why).
        """
        engine = cls(load_config(config), fileops=fileops)
        await engine._start()
        # An error of the caller's block is re-raised as itself, not wrapped in the
        # ExceptionGroup of the task group that runs the checkpointer.
        raised: BaseException | None = None
        try:
            async with anyio.create_task_group() as group:
                assert engine._checkpointer is not None
                group.start_soon(engine._checkpointer.run)
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

    async def _start(self) -> None:
        path = self.config.journal_path()
        try:
            self._journal = await Journal.open(path, durability=self.config.durability)
        except JournalError as exc:
            raise LedgerError(
                Code.TOOL_UNAVAILABLE,
                exc.message,
                path=str(path),
                details=journal_error(exc),
                suggestion="fix the journal file as the message says, or pass --journal",
            ) from exc
        self.workspace.protect_journal(str(path))
        full = self.config.durability == "full"
        self._checkpointer = Checkpointer(
            self._journal,
            list(self.workspace.roots),
            sync=full,
            interval=self.config.checkpoint_interval,
        )
        self._applier = Applier(
            self._journal,
            self.fileops,
            sync_files=False,
            on_started=self._checkpointer.started,
            on_finished=self._checkpointer.finished,
        )
        try:
            self.recovered = await recover(self._journal, self._applier)
        except JournalError as exc:
            await self.aclose()
            raise LedgerError(
                Code.TOOL_UNAVAILABLE, exc.message, path=str(path), details=journal_error(exc)
            ) from exc
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

    async def _exclude_journal_from_git(self) -> None:
        # The engine's own files must never change a repository's status hash.
        for root in self.workspace.roots:
            if os.path.exists(os.path.join(root, ".git")):
                try:
                    await git.ensure_excluded(root, ".ledgerfs/")
                except LedgerError:
                    continue

    async def aclose(self) -> None:
        """Checkpoint, close the journal and release locks (shielded, idempotent)."""
        with anyio.CancelScope(shield=True):
            if self._applier is not None and self._journal is not None:
                await self._applier.record_rollbacks()
            if self._checkpointer is not None and self._journal is not None:
                with suppress(JournalError, OSError):
                    await self._checkpointer.checkpoint()
            if self._applier is not None:
                self._applier.close()
            if self._journal is not None:
                await self._journal.aclose()
                self._journal = None
            self._locks.close()

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

    async def session(self, session_id: str | None = None) -> Session:
        """A session: its own budget (persisted by id) and last-read hashes."""
        sid = session_id or uuid.uuid4().hex
        used = await self.journal.budget_used(sid)
        return Session(self, sid, Budget(self.config.mutation_budget, used))

    async def checkpoint(self) -> None:
        """Make every finished transaction durable now (normally periodic)."""
        if self._checkpointer is not None:
            await self._checkpointer.checkpoint()

    def label(self, path: str) -> str:
        """A path as diffs show it: relative to its root."""
        for root in self.workspace.roots:
            if path == root:
                return "."
            if path.startswith(root.rstrip(os.sep) + os.sep):
                return inside_root(path, root)
        return path

    def check_tool(self, tool: str) -> None:
        """Raise TOOL_UNAVAILABLE or READONLY when the configuration forbids the call."""
        if not self.config.tool_enabled(tool):
            raise LedgerError(
                Code.TOOL_UNAVAILABLE,
                f"The tool {tool} is not enabled in this configuration.",
                details={"tool": tool},
            )
        if self.config.readonly and tool in MUTATING:
            raise LedgerError(
                Code.READONLY,
                f"{tool} changes files and the server is read-only.",
                details={"tool": tool},
            )


class Session:
    """One client's view of the engine: its budget and what it last read."""

    def __init__(self, engine: Engine, session_id: str, budget: Budget) -> None:
        self.engine = engine
        self.id = session_id
        self.budget = budget
        self.last_read: dict[str, str] = {}

    async def call(self, tool: str, arguments: Any) -> msgspec.Struct:
        """Decode a client's arguments for `tool`, run it, return the typed result.

        Raises LedgerError with the code the contract names for each failure.
        """
        kind = REQUESTS.get(tool)
        handler = getattr(self, tool, None) if kind is not None else None
        if kind is None or handler is None:
            raise LedgerError(
                Code.TOOL_UNAVAILABLE, f"There is no tool named {tool!r}.", details={"tool": tool}
            )
        self.engine.check_tool(tool)
        request = decode_request(kind, arguments)
        result: msgspec.Struct = await handler(request)
        return result

    # Reads -----------------------------------------------------------------

    async def list_allowed_directories(self, request: object = None) -> AllowedDirectories:
        return AllowedDirectories(directories=list(self.engine.workspace.roots))

    async def read_file(self, request: ReadFile) -> FileContent:
        target = await self._resolve(request.path)
        result: FileContent = await anyio.to_thread.run_sync(
            _guard_os(read_file),
            target,
            request.offset,
            request.limit,
            self.engine.config.max_file_size,
            self.engine.workspace.vet,
        )
        self.last_read[target.path] = result.content_hash
        return result

    async def list_directory(self, request: ListDirectory) -> DirectoryListing:
        target = await self._resolve(request.path)
        return await anyio.to_thread.run_sync(_guard_os(list_directory), target)

    async def get_file_info(self, request: GetFileInfo) -> FileInfo:
        target = await self._resolve(request.path)
        return await anyio.to_thread.run_sync(
            _guard_os(file_info),
            target,
            self.engine.config.max_file_size,
            self.engine.workspace.vet,
        )

    async def git_status(self, request: GitStatusRequest) -> git.GitStatus:
        target = await self._resolve(request.path or self.engine.workspace.roots[0])
        return await git.git_status(target.path, ceiling=target.root)

    async def history(self, request: HistoryRequest) -> HistoryResult:
        path = None
        if request.path is not None:
            path = (await self._resolve(request.path, must_exist=False)).path
        records = await self.engine.journal.history(
            path=path, tx=request.transaction, limit=request.limit
        )
        return HistoryResult(entries=[_history_entry(r) for r in records])

    # Mutations ---------------------------------------------------------------

    async def write_file(self, request: WriteFile) -> MutationResult:
        op = WriteOp(
            path=request.path,
            content=request.content,
            encoding=request.encoding,
            expected_hash=request.expected_hash,
        )
        return await self._mutate("write_file", [op], request.dry_run, request.expected_status_hash)

    async def edit_file(self, request: EditFile) -> MutationResult:
        op = EditOp(
            path=request.path,
            edits=request.edits,
            expected_hash=request.expected_hash,
            allow_rewrite=request.allow_rewrite,
        )
        return await self._mutate("edit_file", [op], request.dry_run, request.expected_status_hash)

    async def apply_patch(self, request: ApplyPatch) -> MutationResult:
        op = PatchOp(patch=request.patch, expected_hashes=request.expected_hashes)
        return await self._mutate(
            "apply_patch", [op], request.dry_run, request.expected_status_hash
        )

    async def move_file(self, request: MoveFile) -> MutationResult:
        op = MoveOp(
            source=request.source,
            destination=request.destination,
            expected_hash=request.expected_hash,
        )
        return await self._mutate("move_file", [op], request.dry_run, request.expected_status_hash)

    async def delete_file(self, request: DeleteFile) -> MutationResult:
        op = DeleteOp(path=request.path, expected_hash=request.expected_hash)
        return await self._mutate(
            "delete_file", [op], request.dry_run, request.expected_status_hash
        )

    async def create_directory(self, request: CreateDirectory) -> MutationResult:
        op = MkdirOp(path=request.path)
        return await self._mutate(
            "create_directory", [op], request.dry_run, request.expected_status_hash
        )

    async def batch(self, request: Batch) -> MutationResult:
        return await self._mutate(
            "batch", list(request.operations), request.dry_run, request.expected_status_hash
        )

    async def undo(self, request: Undo) -> MutationResult:
        """Undo a committed transaction as a new one, OCC-checked against its after images.

        Raises NOT_FOUND (no such transaction), VALIDATION (it never committed),
        OCC_MISMATCH (a file changed since; nothing changes), and what any
        mutation raises.
        """
        self.engine.check_tool("undo")
        engine = self.engine
        record = await engine.journal.transaction(request.transaction)
        if record is None:
            raise LedgerError(
                Code.NOT_FOUND,
                f"There is no transaction {request.transaction}.",
                details={"transaction": request.transaction},
            )
        # A pending transaction's durable intent is its commit point; its files are
        # checked below, under the locks, after any apply in flight has finished.
        if not (record.state in ("committed", "pending") or record.outcome == "rolled_forward"):
            raise LedgerError(
                Code.VALIDATION,
                f"Transaction {record.id} is {record.state}; only committed ones can be undone.",
                details={"transaction": record.id, "state": record.state},
            )
        hashes = {h for m in record.mutations for h in (m.before_hash, m.after_hash) if h}
        blobs = await engine.journal.blobs(hashes)
        changes = [change_of(m, blobs, engine.label) for m in record.mutations]
        inverses = [inverse(c) for c in reversed(changes)]
        made_by_undo = {c.path for c in inverses if c.op == "mkdir"}
        folders: list[str] = []
        for change in inverses:
            for path in filter(None, (change.path, change.destination)):
                target = await self._resolve(path, must_exist=False)
                # A folder removed since (by another transaction) is made again,
                # as a write into a new folder would make it.
                folders.extend(
                    f for f in target.missing if f not in folders and f not in made_by_undo
                )
        inverses = [_new_folder(f, engine.label(f)) for f in folders] + inverses
        paths = [p for c in inverses for p in (c.path, c.destination) if p]
        async with engine._locks.hold(paths):
            state = await self._load(paths)
            for change in inverses:
                await self._expect_state(state, change)
            return await self._commit(
                inverses, 1, f"undo {record.id}", request.dry_run, [], undo_of=record.id
            )

    # Issue tools -------------------------------------------------------------

    async def issue_read(self, request: IssueReadRequest) -> Issue:
        repo = await self._repo_path(request.repo_path)
        return await self.engine.issues.issue_read(repo, request.number)

    async def issue_list(self, request: IssueListRequest) -> IssueList:
        repo = await self._repo_path(request.repo_path)
        return await self.engine.issues.issue_list(repo, request.state, request.limit)

    async def issue_create(self, request: IssueCreateRequest) -> CreatedIssue:
        repo = await self._repo_path(request.repo_path)
        return await self.engine.issues.issue_create(repo, request.title, request.body)

    async def issue_comment(self, request: IssueCommentRequest) -> CreatedComment:
        repo = await self._repo_path(request.repo_path)
        return await self.engine.issues.issue_comment(repo, request.number, request.body)

    async def issue_reconcile(self, request: IssueReconcileRequest) -> ReconcileReport:
        repo = await self._repo_path(request.repo_path)
        return await self.engine.issues.issue_reconcile(repo)

    async def _repo_path(self, raw: str | None) -> str | None:
        # The repository folder is sandboxed like any other path.
        if raw is None:
            return None
        return (await self._resolve(raw, field="repo_path")).path

    # The mutation path -------------------------------------------------------

    async def _mutate(
        self, tool: str, ops: Sequence[BatchOp], dry_run: bool, status_hash: str | None
    ) -> MutationResult:
        self.engine.check_tool(tool)
        steps = [
            await self._prepare(op, index if tool == "batch" else None)
            for index, op in enumerate(ops)
        ]
        if status_hash is not None:
            await self._check_status(status_hash)
        paths = [p for step in steps for p in step.paths]
        async with self.engine._locks.hold(paths):
            state = await self._load(paths)
            warnings = await self._check(steps, state)
            planner = Planner(dict(state), self.engine.label)
            for step in steps:
                for folder in step.new_folders:
                    planner.mkdir(folder)
                step.plan(planner)
            summary = _summary(tool, planner.changes, self.engine.label)
            return await self._commit(planner.changes, len(ops), summary, dry_run, warnings)

    async def _commit(
        self,
        changes: list[Change],
        count: int,
        summary: str,
        dry_run: bool,
        warnings: list[str],
        *,
        undo_of: int | None = None,
    ) -> MutationResult:
        files = [_file_change(change) for change in changes]
        if dry_run or not changes:
            return MutationResult(
                transaction=None,
                files=files,
                diff=_diff_of(changes),
                dry_run=dry_run,
                warnings=warnings,
                undo_of=undo_of,
            )
        diffs: list[str] = []
        self.budget.reserve(count)
        charged = False
        try:
            tx = await self.engine.applier.run(
                self.id,
                changes,
                summary=summary,
                budget_charge=count,
                undo_of=undo_of,
                meanwhile=lambda: diffs.append(_diff_of(changes)),
            )
            charged = True
        except LedgerError as exc:
            charged = exc.details.get("transaction") is not None
            raise
        finally:
            self.budget.release(count, charged=charged)
        for change in changes:
            self._remember(change)
        return MutationResult(
            transaction=tx, files=files, diff=diffs[0], warnings=warnings, undo_of=undo_of
        )

    def _remember(self, change: Change) -> None:
        if change.op == "move":
            self.last_read.pop(change.path, None)
            if change.destination and change.after_hash:
                self.last_read[change.destination] = change.after_hash
        elif change.after_hash:
            self.last_read[change.path] = change.after_hash
        else:
            self.last_read.pop(change.path, None)

    async def _prepare(self, op: BatchOp, index: int | None) -> _Step:
        """Resolve an operation's paths and bind its plan; raises what resolution raises.

        Existence is the planner's to judge, against the batch's virtual state, so
        an operation may act on what an earlier one of the same batch created.
        """
        prefix = f"operations[{index}]." if index is not None else ""
        match op:
            case WriteOp():
                target = await self._resolve(op.path, must_exist=False, field=prefix + "path")
                data = decode_content(op.content, op.encoding, path=target.path)
                self._check_size(target.path, len(data))
                text = op.encoding == "utf-8"
                return _Step(
                    paths=[target.path, *target.missing],
                    checks=[(target.path, self._expected(op.expected_hash, prefix))],
                    plan=lambda p: p.write(target.path, data, text=text),
                    new_folders=list(target.missing),
                )
            case EditOp():
                target = await self._resolve(op.path, must_exist=False, field=prefix + "path")
                edits = [(e.old_text, e.new_text) for e in op.edits]
                return _Step(
                    paths=[target.path],
                    checks=[(target.path, self._expected(op.expected_hash, prefix))],
                    plan=lambda p: p.edit(target.path, edits, allow_rewrite=op.allow_rewrite),
                )
            case MoveOp():
                source = await self._resolve(
                    op.source, must_exist=False, field=prefix + "source", allow_root=False
                )
                dest = await self._resolve(
                    op.destination, must_exist=False, field=prefix + "destination", allow_root=False
                )
                return _Step(
                    paths=[source.path, dest.path, *dest.missing],
                    checks=[(source.path, self._expected(op.expected_hash, prefix))],
                    plan=lambda p: p.move(source.path, dest.path),
                    new_folders=list(dest.missing),
                )
            case DeleteOp():
                target = await self._resolve(
                    op.path, must_exist=False, field=prefix + "path", allow_root=False
                )
                return _Step(
                    paths=[target.path],
                    checks=[(target.path, self._expected(op.expected_hash, prefix))],
                    plan=lambda p: p.delete(target.path),
                )
            case MkdirOp():
                target = await self._resolve(op.path, must_exist=False, field=prefix + "path")
                return _Step(
                    paths=[*target.missing, target.path],
                    checks=[],
                    plan=lambda p: None,
                    new_folders=[*target.missing, target.path],
                )
            case PatchOp():
                return await self._prepare_patch(op, prefix)
        raise LedgerError(Code.VALIDATION, "Unknown operation.")  # pragma: no cover

    async def _prepare_patch(self, op: PatchOp, prefix: str) -> _Step:
        file_patches = patch.parse_patch(op.patch)
        expected = dict(op.expected_hashes or {})
        for value in expected.values():
            check_hash_format(value, prefix + "expected_hashes")
        targets: list[tuple[patch.FilePatch, Resolved | None, Resolved | None]] = []
        paths: list[str] = []
        checks: list[tuple[str, str | None]] = []
        folders: list[str] = []
        for fp in file_patches:
            old = await self._patch_target(fp.old_path, True, prefix, must_exist=False)
            new = await self._patch_target(
                fp.new_path, fp.old_path != fp.new_path, prefix, must_exist=False
            )
            targets.append((fp, old, new))
            for target in (old, new):
                if target is not None:
                    paths.append(target.path)
                    folders.extend(m for m in target.missing if m not in folders)
            if old is not None:
                given = expected.pop(fp.old_path or "", None) or expected.pop(old.path, None)
                checks.append((old.path, given))
        if expected:
            raise LedgerError(
                Code.VALIDATION,
                f"expected_hashes names paths the patch does not touch: {sorted(expected)}",
                details={"field": prefix + "expected_hashes", "unknown": sorted(expected)},
            )

        def plan(planner: Planner) -> None:
            for fp, old, new in targets:
                _plan_file_patch(planner, fp, old, new)

        return _Step(paths=paths + folders, checks=checks, plan=plan, new_folders=folders)

    async def _patch_target(
        self, relative: str | None, needed: bool, prefix: str, *, must_exist: bool = True
    ) -> Resolved | None:
        if relative is None or not needed:
            return None
        return await self._resolve(relative, must_exist=must_exist, field=prefix + "patch")

    def _expected(self, value: str | None, prefix: str) -> str | None:
        if value is not None:
            check_hash_format(value, prefix + "expected_hash")
        return value

    def _check_size(self, path: str, size: int) -> None:
        limit = self.engine.config.max_file_size
        if size > limit:
            raise too_large(TooLarge(path, size, limit))

    async def _resolve(
        self,
        raw: object,
        *,
        must_exist: bool = True,
        field: str = "path",
        allow_root: bool = True,
    ) -> Resolved:
        # Inline, not in a worker thread: resolving is a few cached metadata calls
        # (~40 us), a thread hop costs ~270 us. No checkpoint either: every tool
        # awaits the journal, a worker thread or a lock right after resolving.
        return self.engine.workspace.resolve(
            raw, must_exist=must_exist, field=field, allow_root=allow_root
        )

    async def _load(self, paths: Sequence[str]) -> dict[str, Entry]:
        limit = self.engine.config.max_file_size
        unique = list(dict.fromkeys(paths))

        vet = self.engine.workspace.vet

        def load_all(cap: int) -> dict[str, Entry]:
            return {path: load_entry(path, cap, vet) for path in unique}

        try:
            try:
                # Small files load inline: a thread hop (~270 us) costs more than
                # reading and hashing a few KiB. A bigger one goes to a worker.
                return load_all(min(limit, INLINE_MAX))
            except TooLarge as exc:
                if exc.size > limit:
                    raise
            return await anyio.to_thread.run_sync(load_all, limit)
        except TooLarge as exc:
            raise too_large(exc) from exc
        except OSError as exc:
            raise _read_error(exc) from exc

    async def _check(self, steps: Sequence[_Step], state: dict[str, Entry]) -> list[str]:
        warnings: list[str] = []
        engine = self.engine
        for step in steps:
            for path, expected in step.checks:
                entry = state.get(path, ABSENT)
                label = engine.label(path)
                mismatch, warning = precondition(
                    label,
                    entry,
                    expected,
                    engine.config.auto_occ,
                    last_read=self.last_read.get(path),
                )
                if mismatch:
                    raise await conflict_error(engine.journal, label, path, expected, entry)
                if warning:
                    warnings.append(warning)
        return warnings

    async def _expect_state(self, state: dict[str, Entry], change: Change) -> None:
        """Undo's precondition: each path holds what the undone transaction left."""
        entry = state.get(change.path, ABSENT)
        if change.op == "move":
            ok = entry.exists and entry.hash == change.before_hash
            assert change.destination is not None
            if ok and state.get(change.destination, ABSENT).exists:
                ok = False
        elif change.op == "rmdir":
            # A folder the undone transaction created is removed only if nothing
            # else was put in it since; otherwise it changed: OCC_MISMATCH.
            ok = entry.is_dir and _emptied(state, change.path)
        elif change.op == "mkdir":
            ok = not entry.exists
        else:
            ok = entry.hash == change.before_hash and not entry.is_dir
        if not ok:
            raise await conflict_error(
                self.engine.journal, change.label, change.path, change.before_hash, entry
            )
        if change.op == "move":
            assert change.destination is not None
            state[change.destination] = entry
            state[change.path] = ABSENT
        elif change.op == "mkdir":
            state[change.path] = Entry(is_dir=True)
        elif change.op == "rmdir" or change.after is None:
            state[change.path] = ABSENT
        else:
            state[change.path] = Entry(data=change.after, hash=change.after_hash)

    async def _check_status(self, expected: str) -> None:
        root = self.engine.workspace.roots[0]
        status = await git.git_status(root, ceiling=root)
        if status.status_hash != expected:
            raise LedgerError(
                Code.STALE_GIT,
                "The repository changed since git_status returned that status_hash.",
                path=status.repo_root,
                details={"expected_status_hash": expected, "status_hash": status.status_hash},
            )


def _emptied(state: dict[str, Entry], folder: str) -> bool:
    """Whether `folder` holds nothing once the changes planned so far are made."""
    try:
        fd = open_dir(folder)
    except OSError:
        return False
    try:
        names = os.listdir(fd)
    finally:
        os.close(fd)
    present = Entry(is_dir=True)
    return not any(state.get(os.path.join(folder, name), present).exists for name in names)


def _plan_file_patch(
    planner: Planner, fp: patch.FilePatch, old: Resolved | None, new: Resolved | None
) -> None:
    source = old.path if old is not None else None
    target = new.path if new is not None else source
    assert target is not None
    if source is not None and target != source:
        planner.move(source, target)
    # A creation is checked against what the target holds, so it never clobbers a file.
    original = planner.state.get(target, ABSENT).data
    if planner.state.get(target, ABSENT).is_dir:
        raise LedgerError(Code.VALIDATION, f"{target} is a folder.", path=target)
    if not fp.hunks and original is not None and fp.new_path is not None:
        applied_content: bytes | None = original  # a pure rename or mode change
    else:
        try:
            applied_content = patch.apply_hunks(fp, original).content
        except LedgerError as exc:
            exc.envelope.error.path = target
            raise
    mode = _patch_mode(fp.new_mode)
    if applied_content is None:
        planner.delete(target, op="patch")
    elif applied_content != original or (mode is not None and mode != _mode_of(planner, target)):
        planner.replace(target, applied_content, "patch", mode=mode)


def _new_folder(path: str, label: str) -> Change:
    return Change(op="mkdir", path=path, label=label, kind="dir", after_mode=NEW_DIR_MODE)


def _patch_mode(mode: str | None) -> int | None:
    """Permission bits of a git file mode ("100755" -> 0o755)."""
    if mode is None or len(mode) < 3:
        return None
    return int(mode[-3:], 8)


def _mode_of(planner: Planner, path: str) -> int | None:
    return planner.state.get(path, ABSENT).mode


def _guard_os(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as exc:
            raise _read_error(exc) from exc

    return run


def _read_error(exc: OSError) -> LedgerError:
    """Map an OSError met before anything changed (one boundary: `oserrors`)."""
    return os_error(exc)


def _diff_of(changes: Sequence[Change]) -> str:
    return "".join(_diff(change) for change in changes)


def _diff(change: Change) -> str:
    if change.op == "move":
        return f"rename from {change.label}\nrename to {change.destination_label}\n"
    if change.kind == "dir":
        return ""
    return unified_diff(change.label, change.before, change.after)


def _file_change(change: Change) -> FileChange:
    if change.op == "move":
        return FileChange(
            path=change.path,
            previous_hash=change.before_hash,
            content_hash=change.after_hash,
            op="move",
            destination=change.destination,
        )
    return FileChange(
        path=change.path,
        previous_hash=change.before_hash,
        content_hash=change.after_hash,
        op=change.op,
    )


def _summary(tool: str, changes: Sequence[Change], label: Callable[[str], str]) -> str:
    names = sorted({label(c.path) for c in changes})
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{tool} {shown}".strip()


def _history_entry(record: Any) -> HistoryEntry:
    return HistoryEntry(
        transaction=record.id,
        session=record.session,
        state=record.state,
        outcome=record.outcome,
        created_at=record.created_at,
        finished_at=record.finished_at,
        undo_of=record.undo_of,
        summary=record.summary,
        mutations=[
            HistoryMutation(
                op=m.op,
                path=m.path,
                destination=m.destination,
                before_hash=m.before_hash,
                after_hash=m.after_hash,
            )
            for m in record.mutations
        ],
    )
