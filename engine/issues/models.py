"""Typed requests and results of the issue tools.

Requests forbid unknown fields so a misspelt argument is a VALIDATION error
rather than a silently ignored one; results are frozen so a caller cannot
mutate what the journal recorded.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = [
    "CreatedComment",
    "CreatedIssue",
    "Issue",
    "IssueCommentRequest",
    "IssueCreateRequest",
    "IssueList",
    "IssueListRequest",
    "IssueReadRequest",
    "IssueReconcileRequest",
    "IssueState",
    "ListState",
    "Provider",
    "ReconcileItem",
    "ReconcileOutcome",
    "ReconcileReport",
    "RepoRef",
]

Provider = Literal["github", "gitlab"]
IssueState = Literal["open", "closed"]
ListState = Literal["open", "closed", "all"]
ReconcileOutcome = Literal["found", "not_found", "error"]

IssueNumber = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
Limit = Annotated[int, msgspec.Meta(ge=1, le=1000)]
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
Body = Annotated[str, msgspec.Meta(max_length=1_000_000)]
RepoPath = Annotated[
    str | None,
    msgspec.Meta(
        description="A folder inside the repository whose remote names the project "
        "(default: the first allowed directory)."
    ),
]


class IssueReadRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of `issue_read`."""

    repo_path: RepoPath = None
    number: Annotated[IssueNumber, msgspec.Meta(description="The issue's number.")]


class IssueListRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of `issue_list`."""

    repo_path: RepoPath = None
    state: Annotated[ListState, msgspec.Meta(description="Which issues to list.")] = "open"
    limit: Annotated[Limit, msgspec.Meta(description="At most this many issues.")] = 30


class IssueCreateRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of `issue_create`."""

    repo_path: RepoPath = None
    title: Annotated[Title, msgspec.Meta(description="The issue's title.")]
    body: Annotated[Body, msgspec.Meta(description="The issue's text (Markdown).")]


class IssueCommentRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of `issue_comment`."""

    repo_path: RepoPath = None
    number: Annotated[IssueNumber, msgspec.Meta(description="The issue's number.")]
    body: Annotated[
        str,
        msgspec.Meta(min_length=1, max_length=1_000_000, description="The comment (Markdown)."),
    ]


class IssueReconcileRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of `issue_reconcile`."""

    repo_path: RepoPath = None


class RepoRef(msgspec.Struct, frozen=True, kw_only=True):
    """One repository on one provider, as resolved from a git remote.

    `path` is `owner/repo` on GitHub and `group/sub/project` on GitLab.
    """

    provider: Provider
    host: str
    path: str

    @property
    def full_name(self) -> str:
        """`host/path`, the form the journal records.

        >>> RepoRef(provider="github", host="github.com", path="o/r").full_name
        'github.com/o/r'
        """
        return f"{self.host}/{self.path}"


class Issue(msgspec.Struct, frozen=True, kw_only=True):
    """One issue, the same shape for both providers."""

    number: int
    title: str
    state: IssueState
    body: str
    url: str
    author: str | None
    labels: list[str]
    created_at: str


class IssueList(msgspec.Struct, frozen=True, kw_only=True):
    """Issues of one repository, newest first as the provider returns them."""

    provider: Provider
    repo: str
    state: ListState
    issues: list[Issue]


class _Written(msgspec.Struct, frozen=True, kw_only=True):
    """What every issue write returns after the fields that name its item.

    `reused` is true when nothing new was posted because an identical earlier
    write was found, in the journal or by its marker on the provider. These
    fields are keyword-only and the item's own are not, so msgspec puts them
    last: a result reads provider, repo, the item's numbers, then these.
    """

    url: str
    marker: str
    reused: bool = False


class CreatedIssue(_Written, frozen=True):
    """The issue an `issue_create` made (or found already made)."""

    provider: Provider
    repo: str
    number: int


class CreatedComment(_Written, frozen=True):
    """The comment an `issue_comment` made (or found already made)."""

    provider: Provider
    repo: str
    issue_number: int
    comment_id: int | None


class ReconcileItem(msgspec.Struct, frozen=True, kw_only=True):
    """What `issue_reconcile` learnt about one unfinished write."""

    write_id: int
    key: str
    provider: str
    repo: str
    kind: str
    marker: str
    previous_state: str
    outcome: ReconcileOutcome
    url: str | None = None
    error: str | None = None


class ReconcileReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every pending or unknown write and whether the provider has it."""

    items: list[ReconcileItem]
    found: int
    not_found: int
    errors: int
