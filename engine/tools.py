"""The tool registry: every tool of the surface, declared once.

Each `Tool` names its request and result types (whose fields carry the parameter
descriptions and constraints), its annotations and its handler. The MCP server's
tool list and schemas, the configuration's tool names, `--tools`, `--readonly`
and docs/tools.md all derive from `REGISTRY`; a new tool is one declaration here
plus its handler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from . import handlers as h
from .errors import Code, LedgerError
from .git import GitStatus
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
from .requests import (
    ApplyPatch,
    Batch,
    CheckpointRequest,
    CopyFile,
    CopyOp,
    CreateDirectory,
    DeleteFile,
    DeleteOp,
    DirectoryTree,
    EditFile,
    EditNotebook,
    EditOp,
    GetFileInfo,
    GitStatusRequest,
    HistoryRequest,
    ListAllowedDirectories,
    ListDirectory,
    MkdirOp,
    MoveFile,
    MoveOp,
    NotebookOp,
    Operation,
    PatchOp,
    ReadFile,
    ReadMediaFile,
    ReadMultipleFiles,
    Rewind,
    SearchFiles,
    Undo,
    WriteFile,
    WriteOp,
)
from .results import (
    AllowedDirectories,
    CheckpointResult,
    DirectoryListing,
    FileContent,
    FileInfo,
    HistoryResult,
    MediaInfo,
    MultipleFiles,
    MutationResult,
    RewindResult,
    SearchResult,
    TreeResult,
)
from .schemas import input_schema, listed_schema, object_schema, output_schema

__all__ = [
    "ISSUE_TOOLS",
    "REGISTRY",
    "TOOLS",
    "Annotations",
    "Tool",
    "find_tool",
    "object_schema",
    "served_tools",
]


class Annotations(msgspec.Struct, frozen=True, kw_only=True):
    """The behaviour hints a client sees (MCP tool annotations).

    `destructive` is only meaningful for a tool that is not read-only.
    """

    read_only: bool
    idempotent: bool
    open_world: bool = False
    destructive: bool | None = None


READ = Annotations(read_only=True, idempotent=True)
REMOTE_READ = Annotations(read_only=True, idempotent=True, open_world=True)
REMOTE_WRITE = Annotations(read_only=False, destructive=False, idempotent=True, open_world=True)


def _changes(*, destructive: bool, idempotent: bool) -> Annotations:
    return Annotations(read_only=False, destructive=destructive, idempotent=idempotent)


@dataclass(frozen=True)
class Tool:
    """One tool: what a client sees of it and the handler that runs it."""

    name: str
    title: str
    description: str
    request: type[msgspec.Struct]
    result: type[msgspec.Struct]
    annotations: Annotations
    handler: h.Handler
    #: An issue tool (it reads or writes a GitHub or GitLab repository): served only
    #: when the operator enables them (`--issue-tools`, `Config.issue_tools`).
    issue: bool = False
    #: What the tool listing says of it, where `description` (docs/tools.md) says more:
    #: every conversation carries the listing.
    brief: str = ""

    @property
    def mutating(self) -> bool:
        """Whether the tool changes anything (files or a remote): READONLY refuses it."""
        return not self.annotations.read_only

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments, every property described."""
        return input_schema(self.request)

    def output_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's result."""
        return output_schema(self.result)

    def listed_description(self) -> str:
        """The description the tool listing shows: its brief, else its description."""
        return self.brief or self.description

    def listed_schema(self) -> dict[str, Any]:
        """The schema of its arguments as the tool listing shows it (`listed_schema`)."""
        return listed_schema(self.request)


def _mutation(
    name: str,
    title: str,
    description: str,
    request: type[msgspec.Struct],
    op: type[Operation],
    *,
    destructive: bool,
    idempotent: bool,
    brief: str = "",
) -> Tool:
    """A one-operation file tool: its request is that operation plus the options."""
    return Tool(
        name,
        title,
        description,
        request,
        MutationResult,
        _changes(destructive=destructive, idempotent=idempotent),
        h.single_operation(name, op),
        brief=brief,
    )


REGISTRY: tuple[Tool, ...] = (
    Tool(
        "list_allowed_directories",
        "Allowed folders",
        "List the folders this server may read and change; every path must be inside one.",
        ListAllowedDirectories,
        AllowedDirectories,
        READ,
        h.list_allowed_directories,
        brief="The folders you may use; a relative path is in the first.",
    ),
    Tool(
        "read_file",
        "Read a file",
        "Read a file (lines offset..offset+limit, the first head or the last tail lines; "
        "at most 2000 lines or 256 KiB unless asked); returns content and content_hash to "
        "pass as expected_hash when changing it.",
        ReadFile,
        FileContent,
        READ,
        h.read_file_handler,
        brief="Read a file a page at a time; content_hash guards a later change.",
    ),
    Tool(
        "list_directory",
        "List a folder",
        "List a folder's entries with their type and size, sorted by name or size, with "
        "the number of files and folders and the total size.",
        ListDirectory,
        DirectoryListing,
        READ,
        h.list_directory_handler,
        brief="A folder's entries.",
    ),
    Tool(
        "read_multiple_files",
        "Read several files",
        "Read several files at once; each comes back as read_file returns it, or as the "
        "error envelope body of its own failure.",
        ReadMultipleFiles,
        MultipleFiles,
        READ,
        h.read_multiple_files,
        brief="Read several files.",
    ),
    Tool(
        "read_media_file",
        "Read media",
        "Read an image or audio file as an MCP image or audio content block with its "
        "MIME type (at most 10 MiB).",
        ReadMediaFile,
        MediaInfo,  # structuredContent; the bytes go in an image or audio block
        READ,
        h.read_media_file,
        brief="An image or audio file.",
    ),
    Tool(
        "search_files",
        "Search files",
        "Find files under a folder by name (glob) and, with content, the lines that match "
        "a text or regular expression; .gitignore is respected and secrets never shown.",
        SearchFiles,
        SearchResult,
        READ,
        h.search_files,
        brief="Find files by name, or lines by text or regex.",
    ),
    Tool(
        "directory_tree",
        "Folder tree",
        "The files and folders under a folder as a JSON tree, 10 levels deep unless "
        "max_depth says (at most 25), without what .gitignore or exclude leave out.",
        DirectoryTree,
        TreeResult,
        READ,
        h.directory_tree,
        brief="A folder's tree.",
    ),
    Tool(
        "get_file_info",
        "File info",
        "Get a file's or folder's type, size, times, permissions and content_hash.",
        GetFileInfo,
        FileInfo,
        READ,
        h.get_file_info,
        brief="Type, size, times, mode and content_hash.",
    ),
    Tool(
        "git_status",
        "Git status",
        "Show the git status of the repository holding path; pass its status_hash as "
        "expected_status_hash to refuse changes if the repository moved on.",
        GitStatusRequest,
        GitStatus,
        READ,
        h.git_status,
        brief="Git status; status_hash is expected_status_hash.",
    ),
    Tool(
        "history",
        "History",
        "List journaled transactions, newest first, optionally for one path, transaction, "
        "session or after a checkpoint, a bounded page at a time (pass next_before as "
        "before for older ones); with sessions: true, the sessions.",
        HistoryRequest,
        HistoryResult,
        READ,
        h.history,
        brief="Past changes, newest first; one in detail; sessions.",
    ),
    _mutation(
        "write_file",
        "Write a file",
        "Create or overwrite a whole file atomically; pass expected_hash when it already "
        "exists. Returns the transaction id, hashes and a diff.",
        WriteFile,
        WriteOp,
        destructive=True,
        idempotent=True,
        brief="Create or replace a file.",
    ),
    _mutation(
        "edit_file",
        "Edit a file",
        "Replace old_text with new_text in a file, edit after edit: each old_text is "
        "matched against the text the edits before it produced and must match once "
        "(replace_all: every occurrence). An old_text found nowhere is refused with the "
        'closest places as candidates, whose text can be copied back; match: "loose" '
        "edits the one place that differs only in whitespace, indentation, line endings "
        "or quotes. For whole rewrites use write_file.",
        EditFile,
        EditOp,
        destructive=True,
        idempotent=False,
        brief="Replace exact text in a file.",
    ),
    _mutation(
        "edit_notebook",
        "Edit notebook",
        "Replace, insert or delete .ipynb cells; edited code cells lose outputs.",
        EditNotebook,
        NotebookOp,
        destructive=True,
        idempotent=False,
        brief="Edit .ipynb cells; a code cell edited loses its outputs.",
    ),
    _mutation(
        "apply_patch",
        "Apply a patch",
        "Apply a unified diff (git diff / diff -u format, one or many files; links and "
        "`git diff --binary` hunks too) as one transaction; not a '*** Begin Patch' text. "
        "A diff that is not UTF-8 goes in patch_base64 instead of patch.",
        ApplyPatch,
        PatchOp,
        destructive=True,
        idempotent=False,
        brief="Apply a unified diff, atomically.",
    ),
    _mutation(
        "move_file",
        "Move or rename",
        "Move or rename a file or folder; the destination must not exist.",
        MoveFile,
        MoveOp,
        destructive=True,
        idempotent=False,
    ),
    _mutation(
        "copy_file",
        "Copy",
        "Copy a file or folder (links as links).",
        CopyFile,
        CopyOp,
        destructive=False,
        idempotent=False,
    ),
    _mutation(
        "delete_file",
        "Delete",
        "Delete a file, or a folder (with recursive: true, everything in it); undoable with undo.",
        DeleteFile,
        DeleteOp,
        destructive=True,
        idempotent=False,
        brief="Delete a file or folder.",
    ),
    _mutation(
        "create_directory",
        "Create a folder",
        "Create a folder and any missing parents.",
        CreateDirectory,
        MkdirOp,
        destructive=False,
        idempotent=True,
    ),
    Tool(
        "batch",
        "Batch",
        "Apply several write/edit/patch/move/delete/mkdir operations all-or-nothing as "
        "one transaction.",
        Batch,
        MutationResult,
        _changes(destructive=True, idempotent=False),
        h.batch,
        brief="Several changes, all or nothing.",
    ),
    Tool(
        "undo",
        "Undo",
        "Undo a committed transaction (id from a mutation result or history) as a new "
        "transaction; refused if its files changed since.",
        Undo,
        MutationResult,
        _changes(destructive=True, idempotent=False),
        h.undo,
        brief="Undo a transaction.",
    ),
    Tool(
        "checkpoint",
        "Checkpoint",
        "Name this point of the journal (say, at the start of a turn) to list or rewind "
        "what comes after it; changes no file and charges no budget.",
        CheckpointRequest,
        CheckpointResult,
        # It records a point in the journal and changes no file: served read-only too.
        Annotations(read_only=True, idempotent=False),
        h.checkpoint,
        brief="Mark a point to rewind to.",
    ),
    Tool(
        "rewind",
        "Rewind",
        "Revert, as one new transaction, everything a session did (session), or what came "
        "after a checkpoint or transaction (only this session's unless sessions: all); "
        "later changes by others to the same files are kept (a three-way merge), "
        "overlapping ones are conflicts. Undo its transaction to put it all back.",
        Rewind,
        RewindResult,
        _changes(destructive=True, idempotent=False),
        h.rewind_handler,
        brief="Undo what followed a point, or a session's work, keeping others'.",
    ),
    Tool(
        "issue_read",
        "Read an issue",
        "Read one issue of the workspace's GitHub or GitLab repository.",
        IssueReadRequest,
        Issue,
        REMOTE_READ,
        h.issue_read,
        issue=True,
    ),
    Tool(
        "issue_list",
        "List issues",
        "List issues (open, closed or all) of the workspace's GitHub or GitLab repository.",
        IssueListRequest,
        IssueList,
        REMOTE_READ,
        h.issue_list,
        issue=True,
    ),
    Tool(
        "issue_create",
        "Open an issue",
        "Open an issue on the workspace's GitHub or GitLab repository (a repeated call "
        "returns the same issue).",
        IssueCreateRequest,
        CreatedIssue,
        REMOTE_WRITE,
        h.issue_create,
        issue=True,
    ),
    Tool(
        "issue_comment",
        "Comment on an issue",
        "Comment on an issue of the workspace's GitHub or GitLab repository (a repeated "
        "call returns the same comment).",
        IssueCommentRequest,
        CreatedComment,
        REMOTE_WRITE,
        h.issue_comment,
        issue=True,
    ),
    Tool(
        "issue_reconcile",
        "Reconcile issue writes",
        "Settle issue writes whose outcome is unknown (the process died or the network "
        "failed mid-call) by looking for them on the provider.",
        IssueReconcileRequest,
        ReconcileReport,
        REMOTE_WRITE,
        h.issue_reconcile,
        issue=True,
    ),
)

#: Every tool's name, in the order of the surface; `Config.tools` may narrow it.
TOOLS: tuple[str, ...] = tuple(tool.name for tool in REGISTRY)
#: The issue tools' names: off unless `Config.issue_tools`.
ISSUE_TOOLS: tuple[str, ...] = tuple(tool.name for tool in REGISTRY if tool.issue)

_BY_NAME = {tool.name: tool for tool in REGISTRY}


def find_tool(name: str) -> Tool:
    """The tool called `name`; raises TOOL_UNAVAILABLE when there is none.

    >>> find_tool("read_file").mutating
    False
    """
    tool = _BY_NAME.get(name)
    if tool is None:
        raise LedgerError(
            Code.TOOL_UNAVAILABLE, f"There is no tool named {name!r}.", details={"tool": name}
        )
    return tool


def served_tools(
    enabled: Sequence[str] | None, readonly: bool, *, issue_tools: bool = False
) -> list[Tool]:
    """The tools a client can call: those `enabled` names (None: all), without the
    mutating ones when `readonly`, and without the issue tools unless `issue_tools`.

    >>> [t.name for t in served_tools(["read_file", "write_file"], readonly=True)]
    ['read_file']
    >>> "issue_read" in [t.name for t in served_tools(None, readonly=False)]
    False
    """
    return [
        tool
        for tool in REGISTRY
        if (enabled is None or tool.name in enabled)
        and not (readonly and tool.mutating)
        and (issue_tools or not tool.issue)
    ]
