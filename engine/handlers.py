"""What each tool does with a session: the handlers the registry names.

A read runs its blocking work in one worker-thread hop; a mutation turns its
request into operations for the one mutation pipeline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import msgspec

from . import bounds, git, pipeline, rewind, search, tree
from .encodings import codec_name
from .errors import Code, LedgerError
from .history import entry_of, reading_journal, transaction_diff
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
    ReconcileReport,
)
from .nonutf8 import reply_json
from .notebooks import cells_page, is_notebook
from .progress import report_from_thread
from .reads import (
    LineWindow,
    file_info,
    guard_os,
    list_directory,
    read_content,
    read_file_kept,
    read_media,
)
from .requests import (
    Batch,
    CheckpointRequest,
    DirectoryTree,
    GetFileInfo,
    GitStatusRequest,
    HistoryRequest,
    ListDirectory,
    Operation,
    ReadFile,
    ReadMediaFile,
    ReadMultipleFiles,
    Rewind,
    SearchFiles,
    Undo,
)
from .results import (
    AllowedDirectories,
    CheckpointResult,
    DirectoryListing,
    FileContent,
    FileInfo,
    FileOutcome,
    HistoryEntry,
    HistoryResult,
    MediaFile,
    MultipleFiles,
    MutationResult,
    RewindResult,
    SearchResult,
    SessionInfo,
    TreeResult,
)

if TYPE_CHECKING:
    from ..journal import CheckpointRecord, SessionRecord
    from .core import Session
    from .fileops import Vet
    from .paths import Resolved

__all__ = ["Handler", "single_operation"]

#: A tool's handler: the session and the decoded request in, the typed result out.
Handler = Callable[["Session", Any], Awaitable[msgspec.Struct]]

Read = TypeVar("Read")


# Reads ---------------------------------------------------------------------


async def list_allowed_directories(session: Session, request: object) -> AllowedDirectories:
    return AllowedDirectories(directories=list(session.engine.workspace.roots))


async def read_file_handler(session: Session, request: ReadFile) -> FileContent:
    if request.format == "cells":
        return await _read_cells(session, request)
    target = await session.resolve(request.path)
    result, data = await anyio.to_thread.run_sync(
        guard_os(read_file_kept),
        target,
        _window(request),
        session.engine.config.max_file_size,
        session.engine.workspace.vet,
        session.engine.line_indexes,
        None if request.encoding is None else codec_name(request.encoding),
    )
    session.last_read[target.path] = result.content_hash
    if result.encoding != "base64":
        # The version this read returned, for merging a stale change onto (engine/stale.py).
        if data is not None:
            session.kept.keep(result.content_hash, data)
        elif not session.kept.touch(result.content_hash) and session.kept.would_keep(result.size):
            await _keep_whole(session, target, result.content_hash)
    return result


async def _keep_whole(session: Session, target: Resolved, digest: str) -> None:
    """Keep the version `digest` names when a page came from its line index and
    the session holds it no longer: read whole, kept only if it is still that one."""
    data, now = await anyio.to_thread.run_sync(
        guard_os(read_content),
        target,
        session.engine.config.max_file_size,
        session.engine.workspace.vet,
    )
    if now == digest:
        session.kept.keep(digest, data)


async def _read_cells(session: Session, request: ReadFile) -> FileContent:
    """read_file with `format: "cells"`: a page of a notebook's cells."""
    target = await session.resolve(request.path)
    label = session.engine.label(target.path)
    if not is_notebook(target.path):
        raise LedgerError(
            Code.VALIDATION,
            f'{label} is not a notebook (.ipynb); format: "cells" reads notebooks only.',
            path=target.path,
            details={"field": "format", "reason": "not_a_notebook"},
        )
    window = _window(request)

    def page() -> FileContent:
        data, digest = read_content(target, session.engine.config.max_file_size, vet)
        return cells_page(target.path, label, data, digest, window.bounds)

    vet = session.engine.workspace.vet
    result = await anyio.to_thread.run_sync(guard_os(page))
    session.last_read[target.path] = result.content_hash
    return result


def _window(request: ReadFile) -> LineWindow:
    given = [
        name
        for name, value in (
            ("offset", request.offset),
            ("limit", request.limit),
            ("head", request.head),
            ("tail", request.tail),
        )
        if value is not None
    ]
    if len(given) > 1 and not set(given) <= {"offset", "limit"}:
        raise LedgerError(
            Code.VALIDATION,
            f"read_file takes offset/limit, head or tail, not {' and '.join(given)}.",
            details={"field": given[-1], "reason": "conflicting_arguments"},
        )
    return LineWindow(
        offset=request.offset, limit=request.limit, head=request.head, tail=request.tail
    )


async def read_multiple_files(session: Session, request: ReadMultipleFiles) -> MultipleFiles:
    """Each file read as read_file reads it; a failure is that file's envelope body."""
    outcomes: list[FileOutcome] = []
    for path in request.paths:
        try:
            content = await read_file_handler(session, ReadFile(path=path))
        except LedgerError as exc:
            outcomes.append(FileOutcome(path=path, error=exc.envelope.error))
        else:
            outcomes.append(FileOutcome(path=path, file=content))
    return MultipleFiles(files=outcomes)


async def read_media_file(session: Session, request: ReadMediaFile) -> MediaFile:
    return await _read_bounded(session, request.path, read_media)


async def list_directory_handler(session: Session, request: ListDirectory) -> DirectoryListing:
    target = await session.resolve(request.path)
    return await anyio.to_thread.run_sync(guard_os(list_directory), target, request.sort_by)


async def directory_tree(session: Session, request: DirectoryTree) -> TreeResult:
    target = await session.resolve(request.path)
    return await anyio.to_thread.run_sync(
        guard_os(tree.directory_tree), session.engine.workspace, target, request
    )


async def search_files(session: Session, request: SearchFiles) -> SearchResult:
    target = await session.resolve(request.path)
    return await anyio.to_thread.run_sync(
        guard_os(search.search_files),
        session.engine.workspace,
        target,
        request,
        session.engine.config.max_file_size,
        _searched,
        session.engine.searchers,
    )


def _searched(files: int) -> None:
    report_from_thread(files, None, f"{files} files searched")


async def get_file_info(session: Session, request: GetFileInfo) -> FileInfo:
    return await _read_bounded(session, request.path, file_info)


async def _read_bounded(
    session: Session, path: str, read: Callable[[Resolved, int, Vet], Read]
) -> Read:
    """`read` of the file at `path` in a worker thread, bounded by max_file_size
    and vetted as the workspace vets what it reads."""
    target = await session.resolve(path)
    return await anyio.to_thread.run_sync(
        guard_os(read), target, session.engine.config.max_file_size, session.engine.workspace.vet
    )


async def git_status(session: Session, request: GitStatusRequest) -> git.GitStatus:
    target = await session.resolve(request.path or session.engine.workspace.roots[0])
    return await git.git_status(target.path, ceiling=target.root)


async def history(session: Session, request: HistoryRequest) -> HistoryResult:
    if request.sessions:
        return await _sessions(session, request)
    path = None
    if request.path is not None:
        path = (await session.resolve(request.path, must_exist=False)).path
    if request.diff and request.transaction is None:
        raise LedgerError(
            Code.VALIDATION,
            "diff: true needs the transaction whose diff to return.",
            details={"field": "transaction", "reason": "diff_needs_transaction"},
        )
    if request.mutations_offset and request.transaction is None:
        raise LedgerError(
            Code.VALIDATION,
            "mutations_offset needs the transaction whose mutations to list.",
            details={"field": "transaction", "reason": "mutations_offset_needs_transaction"},
        )
    after = None
    if request.checkpoint is not None:
        after = (await find_checkpoint(session, request.checkpoint)).transaction or 0
    if request.session is not None:
        await find_session(session, request.session)
    records, entries, more = await _history_page(session, request, path, after)
    if request.diff:
        for index, record in enumerate(records):
            whole = await transaction_diff(session.engine.journal, record, session.engine.label)
            shown, following = bounds.page(whole, request.diff_offset, bounds.HISTORY_DIFF_PAGE)
            entries[index] = msgspec.structs.replace(
                entries[index], diff=shown, diff_next_offset=following
            )
    following = entries[-1].transaction if more and entries else None
    return HistoryResult(entries=entries, truncated=following is not None, next_before=following)


# Transactions read from the journal at a time: a page stops at MAX_HISTORY
# characters long before `limit` when they are big, and only what it shows is read.
# The first read is small (a page of big transactions holds one or two), the
# next ones double.
_HISTORY_FIRST, _HISTORY_CHUNK = 2, 64


# What `sessions: true` lists: these arguments of history do not go with it.
_NOT_WITH_SESSIONS = ("path", "transaction", "before", "checkpoint", "diff", "mutations_offset")


async def _sessions(session: Session, request: HistoryRequest) -> HistoryResult:
    """The sessions the journal recorded (of this process and earlier ones), newest first."""
    for name in _NOT_WITH_SESSIONS:
        if getattr(request, name) not in (None, False, 0):
            raise LedgerError(
                Code.VALIDATION,
                f"sessions: true lists sessions; it takes session and limit, not {name}.",
                details={"field": name, "reason": "not_with_sessions"},
            )
    if request.session is not None:
        found = [await find_session(session, request.session)]
        return HistoryResult(entries=[], sessions=[SessionInfo.of(r) for r in found])
    with reading_journal():
        records = await session.engine.journal.sessions(limit=request.limit + 1)
    listed = [SessionInfo.of(r) for r in records[: request.limit]]
    return HistoryResult(entries=[], sessions=listed, truncated=len(records) > request.limit)


async def find_session(session: Session, wanted: str) -> SessionRecord:
    """The journal's record of session `wanted`; raises NOT_FOUND for one it never saw."""
    with reading_journal():
        record = await session.engine.journal.session_record(wanted)
    if record is None:
        raise LedgerError(
            Code.NOT_FOUND,
            f"There is no session {wanted!r} in the journal.",
            details={"session": wanted},
            suggestion="list the sessions with history and sessions: true",
        )
    return record


async def find_checkpoint(session: Session, wanted: int) -> CheckpointRecord:
    """Checkpoint `wanted`; raises NOT_FOUND when the journal holds no such checkpoint."""
    with reading_journal():
        record = await session.engine.journal.checkpoint_record(wanted)
    if record is None:
        raise LedgerError(
            Code.NOT_FOUND,
            f"There is no checkpoint {wanted}.",
            details={"checkpoint": wanted},
            suggestion="pass the checkpoint id a checkpoint call returned",
        )
    return record


async def checkpoint(session: Session, request: CheckpointRequest) -> CheckpointResult:
    """Record a checkpoint of the session at the newest transaction in effect."""
    with reading_journal():
        record = await session.engine.journal.record_checkpoint(
            session=session.id, label=request.label
        )
    return CheckpointResult(
        checkpoint=record.id,
        label=record.label,
        session=record.session,
        transaction=record.transaction,
    )


async def _history_page(
    session: Session, request: HistoryRequest, path: str | None, after: int | None
) -> tuple[list[Any], list[HistoryEntry], bool]:
    """The transactions of one history page, newest first, their entries, and
    whether older ones match."""
    page: list[Any] = []
    entries: list[HistoryEntry] = []
    size = 0
    before = request.before
    chunk = _HISTORY_FIRST
    while True:
        wanted = min(request.limit - len(page), chunk)
        chunk = min(2 * chunk, _HISTORY_CHUNK)
        with reading_journal():
            records = await session.engine.journal.history(
                path=path,
                tx=request.transaction,
                session=request.session,
                limit=wanted + 1,
                before=before,
                after=after,
            )
        # Shaped in a worker thread: a transaction of thousands of files is
        # milliseconds of Python that other sessions' calls need not wait for.
        shaped = await anyio.to_thread.run_sync(_sized_entries, records[:wanted], request)
        for record, (entry, length) in zip(records, shaped, strict=False):
            size += length
            if page and size > bounds.MAX_HISTORY:
                return page, entries, True
            page.append(record)
            entries.append(entry)
        if len(records) <= wanted:
            return page, entries, False
        if len(page) == request.limit:
            return page, entries, True
        before = page[-1].id


def _sized_entries(records: list[Any], request: HistoryRequest) -> list[tuple[HistoryEntry, int]]:
    """Each record's entry and the length of its JSON."""
    entries: list[HistoryEntry] = [
        entry_of(record, offset=request.mutations_offset) for record in records
    ]
    return [(entry, len(reply_json(entry))) for entry in entries]


# Mutations -------------------------------------------------------------------


def single_operation(tool: str, op: type[Operation]) -> Handler:
    """The handler of a one-operation tool: its request's fields that `op` has
    become that operation, run as a one-operation transaction."""
    fields = op.__struct_fields__

    def run(session: Session, request: Any) -> Awaitable[MutationResult]:
        # The gatherer's coroutine itself, not one awaiting it: a layer less
        # for every step of the call.
        operation = op(**{name: getattr(request, name) for name in fields})
        status_hash = getattr(request, "expected_status_hash", None)
        dry_run = getattr(request, "dry_run", False)
        return session.engine.gatherer.mutate(session, tool, [operation], dry_run, status_hash)

    return run


async def batch(session: Session, request: Batch) -> MutationResult:
    operations = list(request.operations)
    if request.on_stale is not None:
        # The batch's on_stale is each operation's that gives none of its own.
        operations = [
            msgspec.structs.replace(op, on_stale=request.on_stale)
            if getattr(op, "on_stale", request.on_stale) is None
            else op
            for op in operations
        ]
    return await session.engine.gatherer.mutate(
        session, "batch", operations, request.dry_run, request.expected_status_hash
    )


async def undo(session: Session, request: Undo) -> MutationResult:
    return await pipeline.undo(session, request.transaction, request.dry_run)


async def rewind_handler(session: Session, request: Rewind) -> RewindResult:
    rewind.check_scope(request)
    point = None
    if request.checkpoint is not None:
        point = await find_checkpoint(session, request.checkpoint)
    return await rewind.rewind(session, request, point)


# Issue tools -------------------------------------------------------------------


async def _repo_path(session: Session, raw: str | None) -> str | None:
    # The repository folder is sandboxed like any other path.
    if raw is None:
        return None
    return (await session.resolve(raw, field="repo_path")).path


async def issue_read(session: Session, request: IssueReadRequest) -> Issue:
    repo = await _repo_path(session, request.repo_path)
    return await session.engine.issues.issue_read(repo, request.number)


async def issue_list(session: Session, request: IssueListRequest) -> IssueList:
    repo = await _repo_path(session, request.repo_path)
    return await session.engine.issues.issue_list(repo, request.state, request.limit)


async def issue_create(session: Session, request: IssueCreateRequest) -> CreatedIssue:
    repo = await _repo_path(session, request.repo_path)
    return await session.engine.issues.issue_create(repo, request.title, request.body)


async def issue_comment(session: Session, request: IssueCommentRequest) -> CreatedComment:
    repo = await _repo_path(session, request.repo_path)
    return await session.engine.issues.issue_comment(repo, request.number, request.body)


async def issue_reconcile(session: Session, request: IssueReconcileRequest) -> ReconcileReport:
    repo = await _repo_path(session, request.repo_path)
    return await session.engine.issues.issue_reconcile(repo)
