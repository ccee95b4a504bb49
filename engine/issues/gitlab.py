"""GitLab through its REST API v4, with httpx.

Every httpx failure and every unwanted status is translated in one place,
`_gl_error`, entered through `_translated`, most specific first. The token
travels only in the PRIVATE-TOKEN header and is redacted from anything
copied into an envelope.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from ..errors import Code, LedgerError
from ._backend import Posted
from ._common import MAY_BE_APPLIED, marker_token, redact
from .models import Issue, IssueState, ListState, RepoRef

__all__ = ["GitLabBackend"]

_DETAIL_CAP = 2000
_PAGE = 100
# How many pages of notes a marker lookup reads before it gives up.
_MAX_NOTE_PAGES = 20


class _BadBody(Exception):
    """GitLab answered 2xx with a body this adapter cannot read."""


def _newest_first(page: int, per_page: int) -> dict[str, str | int]:
    """The query of page `page` of a GitLab list, newest first."""
    return {"per_page": per_page, "page": page, "order_by": "created_at", "sort": "desc"}


class _GlAuthor(msgspec.Struct, kw_only=True):
    username: str | None = None


class _GlIssue(msgspec.Struct, kw_only=True):
    iid: int
    title: str = ""
    state: str = "opened"
    description: str | None = None
    web_url: str = ""
    author: _GlAuthor | None = None
    labels: list[str] = []
    created_at: str = ""


class _GlNote(msgspec.Struct, kw_only=True):
    id: int
    body: str | None = None


_LIST_STATE = {"open": "opened", "closed": "closed", "all": "all"}

# Codes whose request certainly did not change anything on GitLab.
_NOT_APPLIED_STATUS = range(400, 500)

_IN_TRANSIT_SUGGESTION = (
    "the write may already be applied: check the issue (issue_read / issue_list) or call "
    "issue_reconcile before writing again; do not retry automatically"
)


def _status_code(status: int) -> Code:
    """The code for an unwanted HTTP status.

    >>> _status_code(429)
    <Code.GH_RATE_LIMIT: 'GH_RATE_LIMIT'>
    """
    if status == 401:
        return Code.GL_AUTH_REQUIRED
    if status == 403:
        return Code.GL_FORBIDDEN
    if status == 404:
        return Code.GL_NOT_FOUND
    if status == 429:
        # The spec's one rate-limit code covers "GitHub or GitLab".
        return Code.GH_RATE_LIMIT
    return Code.GL_NETWORK


def _gl_error(exc: Exception, *, read: bool, repo: str, token: str | None) -> LedgerError:
    """The one translation of httpx failures and statuses, most specific first."""
    details: dict[str, Any] = {"repo": repo}
    applied_maybe = True
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        code = _status_code(status)
        details["status"] = status
        details["method"] = exc.request.method
        details["response"] = redact(exc.response.text, token)[:_DETAIL_CAP]
        applied_maybe = status not in _NOT_APPLIED_STATUS
    elif isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        # No connection, so the request was never sent.
        code = Code.GL_NETWORK
        details["reason"] = f"{type(exc).__name__}: {redact(str(exc), token)}"
        applied_maybe = False
    elif isinstance(exc, httpx.TimeoutException):
        code = Code.GL_NETWORK
        details["reason"] = f"timeout ({type(exc).__name__})"
    elif isinstance(exc, httpx.TransportError):
        # RemoteProtocolError (dropped without an answer), ReadError, WriteError.
        code = Code.GL_NETWORK
        details["reason"] = f"{type(exc).__name__}: {redact(str(exc), token)}"
    else:
        code = Code.GL_NETWORK
        details["reason"] = f"{type(exc).__name__}: {redact(str(exc), token)[:_DETAIL_CAP]}"
    message: str | None = None
    suggestion: str | None = None
    if not read and applied_maybe:
        details[MAY_BE_APPLIED] = True
        message = "The GitLab write failed in transit and may already be applied."
        suggestion = _IN_TRANSIT_SUGGESTION
    return LedgerError(code, message, details=details, suggestion=suggestion, read=read)


@contextlib.contextmanager
def _translated(*, read: bool, repo: str, token: str | None) -> Iterator[None]:
    """The adapter's boundary: below it httpx, above it LedgerError only."""
    try:
        yield
    except (httpx.HTTPError, _BadBody) as exc:
        raise _gl_error(exc, read=read, repo=repo, token=token) from exc


def _to_issue(raw: _GlIssue) -> Issue:
    state: IssueState = "closed" if raw.state == "closed" else "open"
    return Issue(
        number=raw.iid,
        title=raw.title,
        state=state,
        body=raw.description or "",
        url=raw.web_url,
        author=raw.author.username if raw.author else None,
        labels=list(raw.labels),
        created_at=raw.created_at,
    )


def _decode(response: httpx.Response, kind: Any) -> Any:
    try:
        return msgspec.json.decode(response.content, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _BadBody(f"unexpected body from GitLab: {exc}") from exc


class GitLabBackend:
    """Issue calls on GitLab, each one or a few REST requests."""

    def __init__(
        self,
        *,
        token: str | None,
        scheme: str,
        api_urls: dict[str, str],
        timeout: float,
    ) -> None:
        self._token = token
        self._scheme = scheme
        self._api_urls = {host.lower(): url.rstrip("/") for host, url in api_urls.items()}
        self._timeout = timeout

    def _project_url(self, ref: RepoRef) -> str:
        base = self._api_urls.get(ref.host) or f"{self._scheme}://{ref.host}"
        # The project id may be its URL-encoded path, slashes included.
        return f"{base}/api/v4/projects/{quote(ref.path, safe='')}"

    def _client(self) -> httpx.AsyncClient:
        headers = {"Accept": "application/json"}
        if self._token:
            headers["PRIVATE-TOKEN"] = self._token
        return httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(self._timeout), follow_redirects=False
        )

    async def _call(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str | int] | None = None,
        json: dict[str, str] | None = None,
    ) -> httpx.Response:
        async with self._client() as client:
            response = await client.request(method, url, params=params, json=json)
            response.raise_for_status()
            return response

    def _translated(self, ref: RepoRef, *, read: bool) -> contextlib.AbstractContextManager[None]:
        return _translated(read=read, repo=ref.full_name, token=self._token)

    async def _get_issue(self, ref: RepoRef, number: int, *, read: bool) -> _GlIssue:
        with self._translated(ref, read=read):
            response = await self._call("GET", f"{self._project_url(ref)}/issues/{number}")
            raw: _GlIssue = _decode(response, _GlIssue)
        return raw

    async def read(self, ref: RepoRef, number: int) -> Issue:
        """One issue. Raises GL_AUTH_REQUIRED, GL_FORBIDDEN, GL_NOT_FOUND, GL_NETWORK,
        GH_RATE_LIMIT (all retryable per the table for a read)."""
        return _to_issue(await self._get_issue(ref, number, read=True))

    async def list(self, ref: RepoRef, state: ListState, limit: int) -> list[Issue]:
        """Issues in `state`, newest first, at most `limit`. Raises as `read`."""
        issues: list[Issue] = []
        page = 1
        with self._translated(ref, read=True):
            per_page = min(_PAGE, limit)
            while len(issues) < limit:
                params = {"state": _LIST_STATE[state], **_newest_first(page, per_page)}
                response = await self._call(
                    "GET", f"{self._project_url(ref)}/issues", params=params
                )
                raws: list[_GlIssue] = _decode(response, list[_GlIssue])
                issues.extend(_to_issue(raw) for raw in raws)
                if len(raws) < per_page:
                    break
                page += 1
        return issues[:limit]

    async def create(self, ref: RepoRef, title: str, body: str) -> Posted:
        """Open an issue. Raises as `read`, with retryable false; an in-transit
        failure carries `may_be_applied` in details."""
        with self._translated(ref, read=False):
            response = await self._call(
                "POST",
                f"{self._project_url(ref)}/issues",
                json={"title": title, "description": body},
            )
            raw: _GlIssue = _decode(response, _GlIssue)
        return Posted(number=raw.iid, url=raw.web_url)

    async def comment(self, ref: RepoRef, number: int, body: str) -> Posted:
        """Add a note to an issue. Raises as `create`."""
        issue = await self._get_issue(ref, number, read=False)
        with self._translated(ref, read=False):
            response = await self._call(
                "POST", f"{self._project_url(ref)}/issues/{number}/notes", json={"body": body}
            )
            note: _GlNote = _decode(response, _GlNote)
        return Posted(number=number, url=f"{issue.web_url}#note_{note.id}", comment_id=note.id)

    async def find_issue(self, ref: RepoRef, marker: str, *, read: bool) -> Posted | None:
        """The issue whose description holds `marker`, or None.

        GitLab's search first, then the 100 newest issues (search may not match
        a token inside an HTML comment on every GitLab version).
        """
        searches: list[dict[str, str | int]] = [
            {
                "search": marker_token(marker),
                "in": "description",
                "state": "all",
                "per_page": _PAGE,
            },
            {"state": "all", "order_by": "created_at", "sort": "desc", "per_page": _PAGE},
        ]
        with self._translated(ref, read=read):
            for params in searches:
                response = await self._call(
                    "GET", f"{self._project_url(ref)}/issues", params=params
                )
                raws: list[_GlIssue] = _decode(response, list[_GlIssue])
                for raw in raws:
                    if marker in (raw.description or ""):
                        return Posted(number=raw.iid, url=raw.web_url)
        return None

    async def find_comment(
        self, ref: RepoRef, number: int, marker: str, *, read: bool
    ) -> Posted | None:
        """The note on issue `number` whose body holds `marker`, or None."""
        issue = await self._get_issue(ref, number, read=read)
        with self._translated(ref, read=read):
            for page in range(1, _MAX_NOTE_PAGES + 1):
                response = await self._call(
                    "GET",
                    f"{self._project_url(ref)}/issues/{number}/notes",
                    params=_newest_first(page, _PAGE),
                )
                notes: list[_GlNote] = _decode(response, list[_GlNote])
                for note in notes:
                    if marker in (note.body or ""):
                        url = f"{issue.web_url}#note_{note.id}"
                        return Posted(number=number, url=url, comment_id=note.id)
                if len(notes) < _PAGE:
                    break
        return None
