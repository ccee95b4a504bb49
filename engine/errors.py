"""The error envelope: every code of the contract, its rules, and the one exception type.

The table in this module is the only place where a code's `retryable` and
`recovery` are decided. Raise sites name a code and describe what happened;
they never choose how a client should react.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import msgspec

# The one errno naming helper lives in the journal (the lower layer); re-exported.
from ..journal import errno_name

__all__ = [
    "RULES",
    "Code",
    "Envelope",
    "ErrorBody",
    "LedgerError",
    "Recovery",
    "Rule",
    "errno_name",
    "not_a_folder",
]


class Code(enum.StrEnum):
    """Every error code of the envelope contract."""

    NOT_ALLOWED = "NOT_ALLOWED"
    NOT_FOUND = "NOT_FOUND"
    ROOTS_EMPTY = "ROOTS_EMPTY"
    SECRET_DENIED = "SECRET_DENIED"
    FILE_POLICY_DENIED = "FILE_POLICY_DENIED"
    READONLY = "READONLY"
    VALIDATION = "VALIDATION"
    REWRITE_BLOCKED = "REWRITE_BLOCKED"
    OCC_MISMATCH = "OCC_MISMATCH"
    HASH_REQUIRED = "HASH_REQUIRED"
    PATCH_FAILED = "PATCH_FAILED"
    BEGIN_PATCH = "BEGIN_PATCH"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    STALE_GIT = "STALE_GIT"
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    ROLLBACK_COMPLETE = "ROLLBACK_COMPLETE"
    ROLLBACK_PARTIAL = "ROLLBACK_PARTIAL"
    ROLLBACK_FAILED = "ROLLBACK_FAILED"
    GH_CLI_MISSING = "GH_CLI_MISSING"
    GH_AUTH_REQUIRED = "GH_AUTH_REQUIRED"
    GH_FORBIDDEN = "GH_FORBIDDEN"
    GH_NOT_FOUND = "GH_NOT_FOUND"
    GH_RATE_LIMIT = "GH_RATE_LIMIT"
    GH_NETWORK = "GH_NETWORK"
    GH_AMBIGUOUS = "GH_AMBIGUOUS"
    GH_REPO_UNRESOLVED = "GH_REPO_UNRESOLVED"
    GH_OUTPUT_LIMIT = "GH_OUTPUT_LIMIT"
    GH_NOT_ISSUE = "GH_NOT_ISSUE"
    GH_HOST_DENIED = "GH_HOST_DENIED"
    GH_FAILED = "GH_FAILED"
    GL_AUTH_REQUIRED = "GL_AUTH_REQUIRED"
    GL_NOT_FOUND = "GL_NOT_FOUND"
    GL_FORBIDDEN = "GL_FORBIDDEN"
    GL_NETWORK = "GL_NETWORK"
    GL_AMBIGUOUS = "GL_AMBIGUOUS"
    GL_REPO_UNRESOLVED = "GL_REPO_UNRESOLVED"


Recovery = Literal["read_and_rebase", "check_already_applied", "fix_arguments"]


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """How a client should react to one code.

    `retryable_read` differs from `retryable` only for the issue-tool codes whose
    retry rule depends on whether the failed call read or wrote.
    """

    retryable: bool
    recovery: Recovery
    message: str
    suggestion: str
    retryable_read: bool | None = None


def _rule(
    message: str,
    suggestion: str,
    *,
    recovery: Recovery = "fix_arguments",
    retryable: bool = False,
    retryable_read: bool | None = None,
) -> Rule:
    return Rule(
        retryable=retryable,
        recovery=recovery,
        message=message,
        suggestion=suggestion,
        retryable_read=retryable_read,
    )


_REBASE: Recovery = "read_and_rebase"
_CHECK: Recovery = "check_already_applied"

RULES: dict[Code, Rule] = {
    Code.NOT_ALLOWED: _rule(
        "Path is outside the allowed directories.",
        "call list_allowed_directories and use a path inside one of them",
    ),
    Code.NOT_FOUND: _rule(
        "Path does not exist.",
        "check the path with list_directory, or create it first",
    ),
    Code.ROOTS_EMPTY: _rule(
        "No allowed directories are configured.",
        "start the server with at least one root folder",
    ),
    Code.SECRET_DENIED: _rule(
        "Path names a secret file, and secret files are not allowed.",
        "leave secret files alone, or restart with --allow-secrets if access is intended",
    ),
    Code.FILE_POLICY_DENIED: _rule(
        "The file policy does not allow this call on this path.",
        "choose a regular file outside .ledgerfs/ and .git/",
    ),
    Code.READONLY: _rule(
        "The server is read-only; mutating calls are refused.",
        "use read tools only, or restart without --readonly",
    ),
    Code.VALIDATION: _rule(
        "An argument is missing, unknown or has the wrong type or value.",
        "fix the argument named in details and call again",
    ),
    Code.REWRITE_BLOCKED: _rule(
        "The edit would replace most of the file.",
        "use write_file for a whole rewrite, or pass allow_rewrite=true",
    ),
    Code.OCC_MISMATCH: _rule(
        "The file changed since it was read: expected_hash does not match.",
        "read the file again, rebase the change on its current content, and resend it",
        recovery=_REBASE,
        retryable=True,
    ),
    Code.HASH_REQUIRED: _rule(
        "This change to an existing file needs expected_hash.",
        "read the file, then resend the change with its content_hash as expected_hash",
        recovery=_REBASE,
        retryable=True,
    ),
    Code.PATCH_FAILED: _rule(
        "The unified diff does not apply to the current file.",
        "read the file and regenerate the hunk; do not send the same patch again",
        recovery=_REBASE,
    ),
    Code.BEGIN_PATCH: _rule(
        "The patch is a '*** Begin Patch' text, not a unified diff.",
        "send a unified diff (as `git diff` or `diff -u` print it), or use edit_file",
    ),
    Code.BUDGET_EXCEEDED: _rule(
        "The session's mutation budget is used up.",
        "stop mutating; ask the user to raise --mutation-budget or start a new session",
    ),
    Code.STALE_GIT: _rule(
        "The repository's status changed: expected_status_hash does not match.",
        "call git_status again, review what changed, and resend with the new status_hash",
        recovery=_REBASE,
        retryable=True,
    ),
    Code.TOOL_UNAVAILABLE: _rule(
        "This tool is not available in this process.",
        "use another tool, or change the server's configuration",
    ),
    Code.ROLLBACK_COMPLETE: _rule(
        "The change failed while applying and was rolled back completely.",
        "read the files to confirm they are unchanged, then fix the cause in details",
        recovery=_CHECK,
    ),
    Code.ROLLBACK_PARTIAL: _rule(
        "The change failed while applying and could only partly be rolled back.",
        "read the files listed in details; some still hold the failed change",
        recovery=_CHECK,
    ),
    Code.ROLLBACK_FAILED: _rule(
        "The change failed while applying and could not be rolled back.",
        "read every file of the change before doing anything else; see details",
        recovery=_CHECK,
    ),
    Code.GH_CLI_MISSING: _rule(
        "The GitHub CLI `gh` is not installed.",
        "install gh and put it on PATH",
    ),
    Code.GH_AUTH_REQUIRED: _rule(
        "The GitHub CLI is not authenticated.",
        "run `gh auth login` (or set GH_TOKEN) and call again",
    ),
    Code.GH_FORBIDDEN: _rule(
        "GitHub denied the call.",
        "check the token's permissions on this repository",
    ),
    Code.GH_NOT_FOUND: _rule(
        "The GitHub repository or issue does not exist.",
        "check the repository and issue number with issue_list",
    ),
    Code.GH_RATE_LIMIT: _rule(
        "GitHub's rate limit was reached.",
        "wait for the rate limit to reset before calling again",
        retryable_read=True,
    ),
    Code.GH_NETWORK: _rule(
        "GitHub could not be reached.",
        "check the network; a read may be retried, a write must be checked first",
        retryable_read=True,
    ),
    Code.GH_AMBIGUOUS: _rule(
        "More than one GitHub repository matches the workspace's remotes.",
        "pass repo_path naming one repository; candidates are in details",
    ),
    Code.GH_REPO_UNRESOLVED: _rule(
        "No GitHub repository could be resolved from the git remotes.",
        "add a GitHub remote, or pass repo_path to a repository that has one",
    ),
    Code.GH_OUTPUT_LIMIT: _rule(
        "The output of `gh` exceeded the size limit.",
        "ask for less, for example a smaller limit",
    ),
    Code.GH_NOT_ISSUE: _rule(
        "The number names a pull request, not an issue.",
        "use an issue number",
    ),
    Code.GH_HOST_DENIED: _rule(
        "The remote's host is not in --git-remote-allow.",
        "use a remote on an allowed host, or add the host to --git-remote-allow",
    ),
    Code.GH_FAILED: _rule(
        "The GitHub CLI failed.",
        "read gh's message in details and fix the cause",
    ),
    Code.GL_AUTH_REQUIRED: _rule(
        "GitLab rejected the credentials.",
        "set GITLAB_TOKEN (or the configured token) to a valid token",
    ),
    Code.GL_NOT_FOUND: _rule(
        "The GitLab project or issue does not exist.",
        "check the project and issue number with issue_list",
    ),
    Code.GL_FORBIDDEN: _rule(
        "GitLab denied the call.",
        "check the token's permissions on this project",
    ),
    Code.GL_NETWORK: _rule(
        "GitLab could not be reached or failed (network error or 5xx).",
        "a read may be retried; a write may already be applied: check the issue first",
        retryable_read=True,
    ),
    Code.GL_AMBIGUOUS: _rule(
        "More than one GitLab project matches the workspace's remotes.",
        "pass repo_path naming one project; candidates are in details",
    ),
    Code.GL_REPO_UNRESOLVED: _rule(
        "No GitLab project could be resolved from the git remotes.",
        "add a GitLab remote, or pass repo_path to a repository that has one",
    ),
}


class ErrorBody(msgspec.Struct, kw_only=True):
    """The object under `"error"`; the OCC fields appear only on OCC_MISMATCH."""

    code: Code
    message: str
    path: str | None
    details: dict[str, Any]
    suggestion: str
    retryable: bool
    recovery: Recovery
    expected_hash: str | msgspec.UnsetType | None = msgspec.UNSET
    current_hash: str | msgspec.UnsetType | None = msgspec.UNSET
    conflict: Any | msgspec.UnsetType = msgspec.UNSET


class Envelope(msgspec.Struct, kw_only=True):
    """`{"error": {...}}`, exactly as the contract shows it."""

    error: ErrorBody

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    def to_builtins(self) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.to_builtins(self)
        return result


class LedgerError(Exception):
    """The one exception ledgerfs raises; it carries the envelope an adapter returns.

    >>> err = LedgerError(Code.NOT_FOUND, path="/w/missing.txt")
    >>> err.envelope.error.recovery
    'fix_arguments'
    """

    def __init__(
        self,
        code: Code,
        message: str | None = None,
        *,
        path: str | None = None,
        details: dict[str, Any] | None = None,
        suggestion: str | None = None,
        read: bool = False,
        expected_hash: str | msgspec.UnsetType | None = msgspec.UNSET,
        current_hash: str | msgspec.UnsetType | None = msgspec.UNSET,
        conflict: Any = msgspec.UNSET,
    ) -> None:
        rule = RULES[code]
        retryable = rule.retryable
        if read and rule.retryable_read is not None:
            retryable = rule.retryable_read
        body = ErrorBody(
            code=code,
            message=message or rule.message,
            path=path,
            details=details if details is not None else {},
            suggestion=suggestion or rule.suggestion,
            retryable=retryable,
            recovery=rule.recovery,
        )
        if code is Code.OCC_MISMATCH:
            body.expected_hash = None if expected_hash is msgspec.UNSET else expected_hash
            body.current_hash = None if current_hash is msgspec.UNSET else current_hash
            body.conflict = None if conflict is msgspec.UNSET else conflict
        self.envelope = Envelope(error=body)
        super().__init__(f"{code}: {body.message}")

    @property
    def code(self) -> Code:
        return self.envelope.error.code

    @property
    def details(self) -> dict[str, Any]:
        return self.envelope.error.details


def not_a_folder(path: str, shown: str | None = None, **details: Any) -> LedgerError:
    """VALIDATION: `path` names a file (or a link) where a folder is needed.

    VALIDATION, not NOT_FOUND: something is there, so the argument is wrong; creating
    what NOT_FOUND says is missing would fail on it. `shown` is how the message names
    the path (default: `path`); `details` adds to the reason.

    >>> not_a_folder("/w/a.txt", "a.txt").envelope.error.message
    'a.txt is not a folder.'
    """
    return LedgerError(
        Code.VALIDATION,
        f"{shown or path} is not a folder.",
        path=path,
        details={"reason": "not_a_folder", **details},
    )
