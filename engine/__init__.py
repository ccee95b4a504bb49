"""ledgerfs engine: the transactional core and its adapters.

Embed it with `Engine.open(config)`; every failure is a `LedgerError` whose
`envelope.to_json()` is what a tool server returns.
"""

from .config import Config, load_config
from .core import Engine, Session
from .errors import RULES, Code, Envelope, ErrorBody, LedgerError, Rule
from .fileops import FileOps
from .git import GitFileStatus, GitStatus
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
from .names import escape_text, reject_surrogates, reply_json
from .requests import (
    ApplyPatch,
    Batch,
    CreateDirectory,
    DeleteFile,
    Edit,
    EditFile,
    GetFileInfo,
    GitStatusRequest,
    HistoryRequest,
    ListAllowedDirectories,
    ListDirectory,
    MoveFile,
    ReadFile,
    Undo,
    WriteFile,
)
from .results import (
    AllowedDirectories,
    DirectoryListing,
    DirEntry,
    FileChange,
    FileContent,
    FileInfo,
    HistoryEntry,
    HistoryResult,
    MutationResult,
    RecoveryOutcome,
)
from .tools import REGISTRY, TOOLS, Annotations, Tool, served_tools

__all__ = [
    "REGISTRY",
    "RULES",
    "TOOLS",
    "AllowedDirectories",
    "Annotations",
    "ApplyPatch",
    "Batch",
    "Code",
    "Config",
    "CreateDirectory",
    "CreatedComment",
    "CreatedIssue",
    "DeleteFile",
    "DirEntry",
    "DirectoryListing",
    "Edit",
    "EditFile",
    "Engine",
    "Envelope",
    "ErrorBody",
    "FileChange",
    "FileContent",
    "FileInfo",
    "FileOps",
    "GetFileInfo",
    "GitFileStatus",
    "GitStatus",
    "GitStatusRequest",
    "HistoryEntry",
    "HistoryRequest",
    "HistoryResult",
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
    "MoveFile",
    "MutationResult",
    "ReadFile",
    "ReconcileReport",
    "RecoveryOutcome",
    "Rule",
    "Session",
    "Tool",
    "Undo",
    "WriteFile",
    "escape_text",
    "load_config",
    "reject_surrogates",
    "reply_json",
    "served_tools",
]
