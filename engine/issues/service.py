"""IssueService: the issue tools, provider-neutral, with idempotent writes.

Write protocol (issue_create, issue_comment), per idempotency key:

1. The key is blake3 of (provider, repo, kind, number, title, body); the
   marker `<!-- ledgerfs:w=<16 hex> -->` derived from it is appended to the
   posted body, so the write can be found on the provider later.
2. A previous write with the same key that is `done`: its result is returned,
   nothing is posted. One that is `pending` or `unknown`: the provider is
   searched for the marker; if found, that item is returned (and the journal
   record marked done); nothing is posted twice.
3. Otherwise the write is recorded durably as `pending`, then posted; success
   marks it `done` with the result. A failure that may have reached the
   provider (in transit, timeout, 5xx) marks it `unknown`; a failure that
   certainly did not (auth, 4xx, not found, rate limit) marks it `failed`.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, TypeVar

import anyio
import msgspec

from ...journal import IssueWrite
from ..errors import Code, LedgerError
from ._backend import Backend, Posted
from ._common import embed_marker, make_marker, may_be_applied, write_key
from .github import GhRunner, GitHubBackend
from .gitlab import GitLabBackend
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
    ListState,
    ReconcileItem,
    ReconcileReport,
    RepoRef,
)
from .remotes import RemotePolicy, list_remotes, pick_repo

__all__ = ["DEFAULT_OUTPUT_CAP", "IssueJournal", "IssueService"]

DEFAULT_OUTPUT_CAP = 4 * 1024 * 1024

# Journal states of an issue write, as this module uses them.
PENDING = "pending"
DONE = "done"
UNKNOWN = "unknown"
FAILED = "failed"

_KIND_ISSUE = "issue"
_KIND_COMMENT = "comment"


class IssueJournal(Protocol):
    """The part of `journal.Journal` the issue tools use."""

    async def record_issue_write(
        self, *, key: str, provider: str, repo: str, kind: str, payload: str, marker: str
    ) -> int: ...

    async def finish_issue_write(self, id: int, *, state: str, result: str | None) -> None: ...

    async def issue_writes(
        self, *, state: str | None = None, key: str | None = None
    ) -> list[IssueWrite]: ...


class _Payload(msgspec.Struct, frozen=True, kw_only=True):
    """What the journal keeps of a write's arguments, to find it again."""

    number: int | None
    title: str | None
    body: str


_T = TypeVar("_T")
# The results a write returns; both carry `reused`.
_R = TypeVar("_R", bound=CreatedIssue | CreatedComment)


def _created(
    result_type: type[_R],
    ref: RepoRef,
    number: int | None,
    posted: Posted,
    marker: str,
    *,
    reused: bool = False,
) -> _R:
    """What a write returns for the item it posted (or found): the repository, the
    item's url and the write's marker, with the item's number for an issue, and for
    a comment the issue's `number` and the comment's id."""
    own: dict[str, Any] = (
        {"issue_number": number, "comment_id": posted.comment_id}
        if result_type is CreatedComment
        else {"number": posted.number}
    )
    return result_type(
        provider=ref.provider,
        repo=ref.full_name,
        url=posted.url,
        marker=marker,
        reused=reused,
        **own,
    )


def _is_comment(kind: str, payload: _Payload) -> bool:
    """Whether a write is a comment (on the issue `payload.number`), not an issue."""
    return kind == _KIND_COMMENT and payload.number is not None


def _validated(kind: type[_T], **fields: Any) -> _T:
    """The request struct for `fields`; VALIDATION names the field by path."""
    try:
        return msgspec.convert(fields, kind)
    except msgspec.ValidationError as exc:
        raise LedgerError(Code.VALIDATION, str(exc), details={"error": str(exc)}) from exc


def _repo_ref(provider: str, repo: str) -> RepoRef:
    """The RepoRef a journal record names (`repo` is `host/path`).

    >>> _repo_ref("gitlab", "gitlab.com/g/s/p").path
    'g/s/p'
    """
    host, _, path = repo.partition("/")
    if provider not in ("github", "gitlab") or not path:
        raise ValueError(f"not a recorded repository: {provider} {repo}")
    return RepoRef(provider="github" if provider == "github" else "gitlab", host=host, path=path)


class IssueService:
    """The issue tools over GitHub (`gh`) and GitLab (REST), with journaled writes.

    Reads raise the provider's codes with `retryable` as the table gives it for
    reads; writes raise them with `retryable: false`, and a write that may have
    been applied carries `details.may_be_applied = true`.
    """

    def __init__(
        self,
        journal: IssueJournal,
        *,
        default_repo_path: str,
        git_remote_allow: list[str] | None = None,
        github_hosts: list[str] | None = None,
        gitlab_hosts: list[str] | None = None,
        gitlab_token: str | None = None,
        gh_executable: str = "gh",
        timeout: float = 30.0,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        gitlab_scheme: str = "https",
        gitlab_api_urls: dict[str, str] | None = None,
    ) -> None:
        self._journal = journal
        self._default_repo_path = default_repo_path
        self._timeout = timeout
        self._policy = RemotePolicy(
            github_hosts=tuple(["github.com"] if github_hosts is None else github_hosts),
            gitlab_hosts=tuple(["gitlab.com"] if gitlab_hosts is None else gitlab_hosts),
            allow=None if git_remote_allow is None else tuple(git_remote_allow),
        )
        self._github = GitHubBackend(
            GhRunner(gh_executable, timeout=timeout, output_cap=output_cap)
        )
        self._gitlab = GitLabBackend(
            token=gitlab_token if gitlab_token is not None else os.environ.get("GITLAB_TOKEN"),
            scheme=gitlab_scheme,
            api_urls=dict(gitlab_api_urls or {}),
            timeout=timeout,
        )
        self._locks: dict[str, anyio.Lock] = {}

    # -- resolution ----------------------------------------------------------

    async def resolve(self, repo_path: str | None) -> RepoRef:
        """The repository `repo_path` (default: the first root) names.

        Raises GH_REPO_UNRESOLVED / GL_REPO_UNRESOLVED, GH_AMBIGUOUS /
        GL_AMBIGUOUS, GH_HOST_DENIED (see engine.issues.remotes).
        """
        path = repo_path or self._default_repo_path
        remotes = await list_remotes(path, policy=self._policy, timeout=self._timeout)
        return pick_repo(remotes, self._policy, repo_path=path)

    def _backend(self, ref: RepoRef) -> Backend:
        return self._github if ref.provider == "github" else self._gitlab

    # -- reads ---------------------------------------------------------------

    async def issue_read(self, repo_path: str | None, number: int) -> Issue:
        """One issue by number.

        Raises VALIDATION, the resolution codes, and the provider's codes:
        GH_CLI_MISSING, GH_AUTH_REQUIRED, GH_FORBIDDEN, GH_NOT_FOUND,
        GH_RATE_LIMIT, GH_NETWORK, GH_OUTPUT_LIMIT, GH_NOT_ISSUE (a pull
        request), GH_FAILED; GL_AUTH_REQUIRED, GL_FORBIDDEN, GL_NOT_FOUND,
        GL_NETWORK, GH_RATE_LIMIT (GitLab 429).
        """
        request = _validated(IssueReadRequest, repo_path=repo_path, number=number)
        ref = await self.resolve(request.repo_path)
        return await self._backend(ref).read(ref, request.number)

    async def issue_list(
        self, repo_path: str | None = None, state: ListState = "open", limit: int = 30
    ) -> IssueList:
        """Issues of the repository in `state` (open, closed, all), at most `limit`.

        Raises as issue_read (except GH_NOT_ISSUE).
        """
        request = _validated(IssueListRequest, repo_path=repo_path, state=state, limit=limit)
        ref = await self.resolve(request.repo_path)
        issues = await self._backend(ref).list(ref, request.state, request.limit)
        return IssueList(
            provider=ref.provider, repo=ref.full_name, state=request.state, issues=issues
        )

    # -- writes --------------------------------------------------------------

    async def issue_create(self, repo_path: str | None, title: str, body: str) -> CreatedIssue:
        """Open an issue, at most once per identical (repository, title, body).

        Raises VALIDATION, the resolution codes and the provider's codes with
        retryable false; a failure in transit has `details.may_be_applied` and
        leaves the journal record `unknown` (see issue_reconcile).
        """
        request = _validated(IssueCreateRequest, repo_path=repo_path, title=title, body=body)
        ref = await self.resolve(request.repo_path)
        payload = _Payload(number=None, title=request.title, body=request.body)
        return await self._write(ref, _KIND_ISSUE, payload, CreatedIssue)

    async def issue_comment(self, repo_path: str | None, number: int, body: str) -> CreatedComment:
        """Comment on issue `number`, at most once per identical (repository, number, body).

        Raises as issue_create, plus GH_NOT_ISSUE when the number is a pull
        request and GH_NOT_FOUND / GL_NOT_FOUND when the issue does not exist.
        """
        request = _validated(IssueCommentRequest, repo_path=repo_path, number=number, body=body)
        ref = await self.resolve(request.repo_path)
        payload = _Payload(number=request.number, title=None, body=request.body)
        return await self._write(ref, _KIND_COMMENT, payload, CreatedComment)

    async def _write(
        self,
        ref: RepoRef,
        kind: str,
        payload: _Payload,
        result_type: type[_R],
    ) -> _R:
        """The write protocol of the module docstring, under the key's lock."""
        key = write_key(
            provider=ref.provider,
            repo=ref.full_name,
            kind=kind,
            number=payload.number,
            title=payload.title,
            body=payload.body,
        )
        marker = make_marker(key)

        async with self._lock(key):
            previous = await self._journal.issue_writes(key=key)
            for write in previous:
                if write.state == DONE and write.result is not None:
                    earlier = msgspec.json.decode(write.result, type=result_type)
                    return msgspec.structs.replace(earlier, reused=True)
            unsettled = [w for w in previous if w.state in (PENDING, UNKNOWN)]
            if unsettled:
                # An earlier attempt may have landed: look before posting again.
                found = await self._find(ref, kind, payload, marker, read=False)
                if found is not None:
                    result = _created(result_type, ref, payload.number, found, marker, reused=True)
                    encoded = msgspec.json.encode(msgspec.structs.replace(result, reused=False))
                    for write in unsettled:
                        await self._journal.finish_issue_write(
                            write.id, state=DONE, result=encoded.decode()
                        )
                    return result
            write_id = await self._journal.record_issue_write(
                key=key,
                provider=ref.provider,
                repo=ref.full_name,
                kind=kind,
                payload=msgspec.json.encode(payload).decode(),
                marker=marker,
            )
            try:
                posted = await self._post(ref, kind, payload, marker)
            except LedgerError as exc:
                state = UNKNOWN if may_be_applied(exc) else FAILED
                with anyio.CancelScope(shield=True):
                    await self._journal.finish_issue_write(
                        write_id, state=state, result=exc.envelope.to_json()
                    )
                raise
            result = _created(result_type, ref, payload.number, posted, marker)
            with anyio.CancelScope(shield=True):
                await self._journal.finish_issue_write(
                    write_id, state=DONE, result=msgspec.json.encode(result).decode()
                )
                # The earlier attempts were searched for and are not there.
                for write in unsettled:
                    await self._journal.finish_issue_write(
                        write.id, state=FAILED, result=write.result
                    )
            return result

    # -- reconcile -----------------------------------------------------------

    async def issue_reconcile(self, repo_path: str | None = None) -> ReconcileReport:
        """Resolve every pending or unknown write by searching for its marker.

        With `repo_path`, only writes to the repository it names. A write found
        on the provider becomes `done` with the found item as its result; one
        not found stays `unknown` and is reported `not_found` (post it again, or
        leave it); a lookup that fails is reported `error` with its code.
        Raises VALIDATION and, with `repo_path`, the resolution codes.
        """
        request = _validated(IssueReconcileRequest, repo_path=repo_path)
        only: RepoRef | None = None
        if request.repo_path is not None:
            only = await self.resolve(request.repo_path)
        writes = [
            *await self._journal.issue_writes(state=PENDING),
            *await self._journal.issue_writes(state=UNKNOWN),
        ]
        items: list[ReconcileItem] = []
        for write in sorted(writes, key=lambda w: int(w.id)):
            if only is not None and (write.provider, write.repo) != (only.provider, only.full_name):
                continue
            item = await self._reconcile_one(write)
            if item is not None:
                items.append(item)
        return ReconcileReport(
            items=items,
            found=sum(1 for i in items if i.outcome == "found"),
            not_found=sum(1 for i in items if i.outcome == "not_found"),
            errors=sum(1 for i in items if i.outcome == "error"),
        )

    async def _reconcile_one(self, write: IssueWrite) -> ReconcileItem | None:
        """Look one write up on its provider; None when it settled meanwhile."""
        async with self._lock(write.key):
            current = [
                w for w in await self._journal.issue_writes(key=write.key) if w.id == write.id
            ]
            if not current or current[0].state not in (PENDING, UNKNOWN):
                return None
            base: dict[str, Any] = {
                "write_id": write.id,
                "key": write.key,
                "provider": write.provider,
                "repo": write.repo,
                "kind": write.kind,
                "marker": write.marker,
                "previous_state": current[0].state,
            }
            try:
                found, result = await self._find_recorded(write)
            except LedgerError as exc:
                return ReconcileItem(**base, outcome="error", error=exc.envelope.to_json())
            if found is None:
                if current[0].state == PENDING:
                    # A pending write whose process died: its fate is unknown.
                    await self._journal.finish_issue_write(write.id, state=UNKNOWN, result=None)
                return ReconcileItem(**base, outcome="not_found")
            await self._journal.finish_issue_write(write.id, state=DONE, result=result)
            return ReconcileItem(**base, outcome="found", url=found.url)

    async def _find_recorded(self, write: IssueWrite) -> tuple[Posted | None, str]:
        """The provider's item carrying the write's marker, and its result JSON."""
        try:
            ref = _repo_ref(write.provider, write.repo)
            payload = msgspec.json.decode(write.payload, type=_Payload)
        except (ValueError, msgspec.DecodeError) as exc:
            raise LedgerError(
                Code.VALIDATION, "The journal record is not readable.", details={"error": str(exc)}
            ) from exc
        if not self._policy.allows(ref.host):
            raise LedgerError(Code.GH_HOST_DENIED, details={"hosts": [ref.host]})
        found = await self._find(ref, write.kind, payload, write.marker, read=True)
        if found is None:
            return None, ""
        result_type = CreatedComment if _is_comment(write.kind, payload) else CreatedIssue
        result = _created(result_type, ref, payload.number, found, write.marker)
        return found, msgspec.json.encode(result).decode()

    async def _post(self, ref: RepoRef, kind: str, payload: _Payload, marker: str) -> Posted:
        """Post the issue or comment `payload` describes, `marker` appended to its body."""
        backend = self._backend(ref)
        body = embed_marker(payload.body, marker)
        if _is_comment(kind, payload) and payload.number is not None:
            return await backend.comment(ref, payload.number, body)
        # An issue's payload always holds its title (issue_create sets it).
        return await backend.create(ref, payload.title or "", body)

    async def _find(
        self, ref: RepoRef, kind: str, payload: _Payload, marker: str, *, read: bool
    ) -> Posted | None:
        """The provider's issue or comment that carries `marker`, if there is one."""
        backend = self._backend(ref)
        if _is_comment(kind, payload) and payload.number is not None:
            return await backend.find_comment(ref, payload.number, marker, read=read)
        return await backend.find_issue(ref, marker, read=read)

    def _lock(self, key: str) -> anyio.Lock:
        # One lock per key: two identical writes in this process never both post.
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        return lock
