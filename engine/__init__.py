"""ledgerfs engine: the transactional core and its adapters.

Embed it with `Engine.open(config)`; every failure is a `LedgerError` whose
`envelope.to_json()` is what a tool server returns.
"""

# The folder is importable from a checkout's root as `engine`, a second name that would
# load every module twice: a second LedgerError, a second registry. One name only.
if __name__ != "ledgerfs.engine":
    raise ImportError(
        f"ledgerfs's engine/ folder is the package ledgerfs.engine, not {__name__!r}: "
        "install ledgerfs (pip install -e .) and import ledgerfs.engine"
    )


from .config import Config
from .core import Engine, Session, load_config
from .discovery import Located, locate
from .errors import RULES, Code, Envelope, ErrorBody, LedgerError, Rule
from .fileops import FileOps
from .git import GitFileStatus, GitStatus
from .inspection import Inspection, Log, LogEntry, LogFilter, SessionList, TransactionView
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
from .nonutf8 import escape_text, reject_surrogates, reply_json
from .progress import Reporter, reporting
from .requests import (
    ApplyPatch,
    Batch,
    CheckpointRequest,
    CreateDirectory,
    DeleteFile,
    DirectoryTree,
    Edit,
    EditFile,
    GetFileInfo,
    GitStatusRequest,
    HistoryRequest,
    ListAllowedDirectories,
    ListDirectory,
    MoveFile,
    ReadFile,
    ReadMediaFile,
    ReadMultipleFiles,
    Rewind,
    SearchFiles,
    Undo,
    WriteFile,
)
from .results import (
    AllowedDirectories,
    CheckpointResult,
    DirectoryListing,
    DirEntry,
    FileChange,
    FileContent,
    FileInfo,
    FileOutcome,
    HistoryEntry,
    HistoryResult,
    LooseMatch,
    MediaFile,
    MediaInfo,
    MultipleFiles,
    MutationResult,
    RecoveryOutcome,
    RewindResult,
    SearchMatch,
    SearchResult,
    SessionInfo,
    Skipped,
    TreeNode,
    TreeResult,
)
from .tools import ISSUE_TOOLS, REGISTRY, TOOLS, Annotations, Tool, served_tools

__all__ = [
    "ISSUE_TOOLS",
    "REGISTRY",
    "RULES",
    "TOOLS",
    "AllowedDirectories",
    "Annotations",
    "ApplyPatch",
    "Batch",
    "CheckpointRequest",
    "CheckpointResult",
    "Code",
    "Config",
    "CreateDirectory",
    "CreatedComment",
    "CreatedIssue",
    "DeleteFile",
    "DirEntry",
    "DirectoryListing",
    "DirectoryTree",
    "Edit",
    "EditFile",
    "Engine",
    "Envelope",
    "ErrorBody",
    "FileChange",
    "FileContent",
    "FileInfo",
    "FileOps",
    "FileOutcome",
    "GetFileInfo",
    "GitFileStatus",
    "GitStatus",
    "GitStatusRequest",
    "HistoryEntry",
    "HistoryRequest",
    "HistoryResult",
    "Inspection",
    "Issue",
    "IssueCommentRequest",
    "IssueCreateRequest",
    "IssueList",
    "IssueListRequest",
    "IssueReadRequest",
    "IssueReconcileRequest",
    "LedgerError",
    "ListAllowedDirectories",
    "ListDirectory",
    "Located",
    "Log",
    "LogEntry",
    "LogFilter",
    "LooseMatch",
    "MediaFile",
    "MediaInfo",
    "MoveFile",
    "MultipleFiles",
    "MutationResult",
    "ReadFile",
    "ReadMediaFile",
    "ReadMultipleFiles",
    "ReconcileReport",
    "RecoveryOutcome",
    "Reporter",
    "Rewind",
    "RewindResult",
    "Rule",
    "SearchFiles",
    "SearchMatch",
    "SearchResult",
    "Session",
    "SessionInfo",
    "SessionList",
    "Skipped",
    "Tool",
    "TransactionView",
    "TreeNode",
    "TreeResult",
    "Undo",
    "WriteFile",
    "escape_text",
    "load_config",
    "locate",
    "reject_surrogates",
    "reply_json",
    "reporting",
    "served_tools",
]
