"""Issue tools: read, list, create and comment on GitHub or GitLab issues.

The provider and repository come from the git remotes of a workspace folder;
GitHub is driven through the `gh` CLI, GitLab through its REST API. Writes are
journaled and idempotent (see `engine.issues.service`).
"""

from .models import (
    CreatedComment,
    CreatedIssue,
    Issue,
    IssueCommentRequest,
    IssueCreateRequest,
    IssueList,
    IssueListRequest,
    IssueReadRequest,
    IssueReconcileRequest,
    ReconcileItem,
    ReconcileReport,
    RepoRef,
)
from .remotes import parse_remote_url
from .service import IssueJournal, IssueService

__all__ = [
    "CreatedComment",
    "CreatedIssue",
    "Issue",
    "IssueCommentRequest",
    "IssueCreateRequest",
    "IssueJournal",
    "IssueList",
    "IssueListRequest",
    "IssueReadRequest",
    "IssueReconcileRequest",
    "IssueService",
    "ReconcileItem",
    "ReconcileReport",
    "RepoRef",
    "parse_remote_url",
]
