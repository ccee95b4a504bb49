"""GitHub through the `gh` CLI, run as a subprocess.

Every gh failure is translated to an envelope code in one place,
`_gh_error`, entered through `_translated`. What gh prints is classified
by its own words (see tests/engine/issues/test_github.py for where each
shape comes from), most specific first.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import msgspec

from ..errors import Code, LedgerError, errno_name
from ._backend import Posted
from ._common import MAY_BE_APPLIED, marker_token, redact
from .models import Issue, IssueState, ListState, RepoRef

__all__ = ["GhRunner", "GitHubBackend"]

_VIEW_FIELDS = "number,title,state,body,url,author,labels,createdAt"
_STDERR_CAP = 64 * 1024
_DETAIL_CAP = 4000

_ISSUE_URL_RE = re.compile(r"/issues/(\d+)(?:#issuecomment-(\d+))?$")


class _GhExit(Exception):
    """gh exited non-zero."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(f"gh exited {returncode}")
        self.returncode = returncode
        self.stderr = stderr


class _OutputCapped(Exception):
    """gh printed more than the output cap; nothing of it is parsed."""


class _NotAnIssue(Exception):
    """gh answered with a pull request where an issue was asked for."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class _BadOutput(Exception):
    """gh succeeded but printed something this adapter cannot read."""


class _GhAuthor(msgspec.Struct, kw_only=True):
    login: str | None = None


class _GhLabel(msgspec.Struct, kw_only=True):
    name: str


class _GhIssue(msgspec.Struct, kw_only=True, rename={"created_at": "createdAt"}):
    number: int
    title: str = ""
    state: str = "OPEN"
    body: str | None = None
    url: str = ""
    author: _GhAuthor | None = None
    labels: list[_GhLabel] = []
    created_at: str = ""


class _GhFound(msgspec.Struct, kw_only=True):
    number: int | None = None
    id: int | None = None
    html_url: str | None = None
    url: str | None = None
    body: str | None = None


# Matched against gh's stderr, lower-cased. Order below is the precedence.
_AUTH = (
    "gh auth login",
    "not logged into any",
    "authentication required",
    "http 401",
    "bad credentials",
    "requires authentication",
)
_RATE = ("rate limit exceeded", "secondary rate limit", "http 429")
_NOT_ISSUE = ("is a pull request",)
_NOT_FOUND = (
    "http 404",
    "could not resolve to an issue",
    "could not resolve to a repository",
    "not found",
)
_FORBIDDEN = ("http 403", "resource not accessible", "must have admin rights")
_NETWORK = (
    "dial tcp",
    "could not connect",
    "connection refused",
    "no such host",
    "i/o timeout",
    "tls handshake timeout",
    "error connecting to",
    "connection reset",
    "network is unreachable",
)


def _classify_stderr(returncode: int, stderr: str) -> Code:
    """The code for one failed gh run, from its exit status and stderr.

    >>> _classify_stderr(4, "")
    <Code.GH_AUTH_REQUIRED: 'GH_AUTH_REQUIRED'>
    >>> _classify_stderr(1, "HTTP 403: API rate limit exceeded for user ID 1.")
    <Code.GH_RATE_LIMIT: 'GH_RATE_LIMIT'>
    """
    text = stderr.lower()
    # gh's exit status 4 means "authentication required" (gh help exit-codes).
    if returncode == 4 or any(s in text for s in _AUTH):
        return Code.GH_AUTH_REQUIRED
    # Rate limits arrive as HTTP 403 too, so they must be told apart first.
    if any(s in text for s in _RATE):
        return Code.GH_RATE_LIMIT
    if any(s in text for s in _NETWORK):
        return Code.GH_NETWORK
    if any(s in text for s in _NOT_ISSUE):
        return Code.GH_NOT_ISSUE
    if any(s in text for s in _NOT_FOUND):
        return Code.GH_NOT_FOUND
    if any(s in text for s in _FORBIDDEN):
        return Code.GH_FORBIDDEN
    return Code.GH_FAILED


# Codes after which a write certainly did not reach GitHub.
_NOT_SENT = frozenset(
    {
        Code.GH_CLI_MISSING,
        Code.GH_AUTH_REQUIRED,
        Code.GH_FORBIDDEN,
        Code.GH_NOT_FOUND,
        Code.GH_RATE_LIMIT,
        Code.GH_NOT_ISSUE,
    }
)

_IN_TRANSIT_SUGGESTION = (
    "the write may already be applied: check the issue (issue_read / issue_list) or call "
    "issue_reconcile before writing again; do not retry automatically"
)


def _gh_error(exc: Exception, *, read: bool, repo: str, command: str) -> LedgerError:
    """The one translation of gh failures into envelope codes, most specific first."""
    details: dict[str, Any] = {"repo": repo, "command": command}
    message: str | None = None
    code: Code
    if isinstance(exc, FileNotFoundError | PermissionError):
        code = Code.GH_CLI_MISSING
        details["reason"] = errno_name(exc)
    elif isinstance(exc, TimeoutError):
        code = Code.GH_NETWORK
        details["reason"] = "timeout"
    elif isinstance(exc, _OutputCapped):
        code = Code.GH_OUTPUT_LIMIT
        details["output_cap"] = exc.args[0]
    elif isinstance(exc, _NotAnIssue):
        code = Code.GH_NOT_ISSUE
        details["url"] = exc.url
    elif isinstance(exc, _GhExit):
        code = _classify_stderr(exc.returncode, exc.stderr)
        details["exit_code"] = exc.returncode
        details["stderr"] = redact(exc.stderr.strip())[:_DETAIL_CAP]
    elif isinstance(exc, _BadOutput):
        code = Code.GH_FAILED
        details["reason"] = redact(str(exc))[:_DETAIL_CAP]
    else:
        code = Code.GH_FAILED
        details["reason"] = f"{type(exc).__name__}: {redact(str(exc))[:_DETAIL_CAP]}"
        if isinstance(exc, OSError):
            details["errno"] = errno_name(exc)
    suggestion: str | None = None
    if not read and code not in _NOT_SENT:
        details[MAY_BE_APPLIED] = True
        message = "The GitHub write failed in transit and may already be applied."
        suggestion = _IN_TRANSIT_SUGGESTION
    return LedgerError(code, message, details=details, suggestion=suggestion, read=read)


@contextlib.contextmanager
def _translated(*, read: bool, repo: str, command: str) -> Iterator[None]:
    """The adapter's boundary: below it gh's failures, above it LedgerError only."""
    try:
        yield
    except (OSError, TimeoutError, _GhExit, _OutputCapped, _NotAnIssue, _BadOutput) as exc:
        raise _gh_error(exc, read=read, repo=repo, command=command) from exc


class GhRunner:
    """Runs `gh` with a timeout and a cap on what it may print."""

    def __init__(self, executable: str, *, timeout: float, output_cap: int) -> None:
        self.executable = executable
        self.timeout = timeout
        self.output_cap = output_cap

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Why: gh must never prompt, page, colour or check for updates when
        # its output is parsed by a program.
        env.update(
            {
                "GH_PROMPT_DISABLED": "1",
                "GH_PAGER": "cat",
                "NO_COLOR": "1",
                "GH_NO_UPDATE_NOTIFIER": "1",
                "GH_SPINNER_DISABLED": "1",
            }
        )
        return env

    async def run(self, args: list[str], *, stdin: bytes | None = None) -> bytes:
        """gh's stdout for `args`.

        Raises FileNotFoundError (gh missing), TimeoutError, _OutputCapped or
        _GhExit; `_translated` turns them into envelope codes.
        """
        process = await anyio.open_process(
            [self.executable, *args],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env(),
        )
        stdout = bytearray()
        stderr = bytearray()
        capped = False
        try:
            with anyio.fail_after(self.timeout):
                async with anyio.create_task_group() as tg:

                    async def feed() -> None:
                        assert process.stdin is not None
                        # gh may exit without reading its stdin; that is its
                        # answer to give, not a failure of ours.
                        with contextlib.suppress(anyio.BrokenResourceError, OSError):
                            await process.stdin.send(stdin or b"")
                        with contextlib.suppress(anyio.BrokenResourceError, OSError):
                            await process.stdin.aclose()

                    async def read_stdout() -> None:
                        nonlocal capped
                        assert process.stdout is not None
                        async for chunk in process.stdout:
                            if len(stdout) + len(chunk) > self.output_cap:
                                # Never parse a partial answer: stop gh here.
                                capped = True
                                tg.cancel_scope.cancel()
                                return
                            stdout.extend(chunk)

                    async def read_stderr() -> None:
                        assert process.stderr is not None
                        async for chunk in process.stderr:
                            room = _STDERR_CAP - len(stderr)
                            if room > 0:
                                stderr.extend(chunk[:room])

                    if stdin is not None:
                        tg.start_soon(feed)
                    tg.start_soon(read_stdout)
                    tg.start_soon(read_stderr)
                if capped:
                    raise _OutputCapped(self.output_cap)
                returncode = await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                await process.aclose()
        if returncode != 0:
            raise _GhExit(returncode, stderr.decode("utf-8", "replace"))
        return bytes(stdout)


def _repo_arg(ref: RepoRef) -> str:
    """`--repo` value: `OWNER/REPO` on github.com, `HOST/OWNER/REPO` elsewhere.

    >>> _repo_arg(RepoRef(provider="github", host="ghe.corp", path="o/r"))
    'ghe.corp/o/r'
    """
    return ref.path if ref.host == "github.com" else f"{ref.host}/{ref.path}"


def _to_issue(raw: _GhIssue) -> Issue:
    state: IssueState = "closed" if raw.state.upper() == "CLOSED" else "open"
    return Issue(
        number=raw.number,
        title=raw.title,
        state=state,
        body=raw.body or "",
        url=raw.url,
        author=raw.author.login if raw.author else None,
        labels=[label.name for label in raw.labels],
        created_at=raw.created_at,
    )


def _decode(data: bytes, kind: Any) -> Any:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise _BadOutput(f"unexpected JSON from gh: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise _BadOutput(f"gh did not print JSON: {exc}") from exc


def _decode_lines(data: bytes) -> list[_GhFound]:
    """JSON objects, one a line, as `gh api --jq` prints them."""
    found: list[_GhFound] = [_decode(line, _GhFound) for line in data.splitlines() if line.strip()]
    return found


def _posted_from_url(stdout: bytes) -> Posted:
    """The issue (and comment) gh printed the URL of, its last line."""
    lines = [line.strip() for line in stdout.decode("utf-8", "replace").splitlines()]
    url = next((line for line in reversed(lines) if line), "")
    match = _ISSUE_URL_RE.search(url)
    if match is None:
        raise _BadOutput(f"gh did not print an issue URL: {url[:200]!r}")
    comment = match.group(2)
    return Posted(number=int(match.group(1)), url=url, comment_id=int(comment) if comment else None)


class GitHubBackend:
    """Issue calls on GitHub, each a `gh` run."""

    def __init__(self, runner: GhRunner) -> None:
        self.runner = runner

    async def _view(self, ref: RepoRef, number: int, *, read: bool) -> Issue:
        args = ["issue", "view", str(number), "--repo", _repo_arg(ref), "--json", _VIEW_FIELDS]
        with _translated(read=read, repo=ref.full_name, command="issue view"):
            raw: _GhIssue = _decode(await self.runner.run(args), _GhIssue)
            # gh resolves the number as "issue or pull request"; only the URL
            # tells them apart.
            if "/pull/" in raw.url:
                raise _NotAnIssue(raw.url)
        return _to_issue(raw)

    async def read(self, ref: RepoRef, number: int) -> Issue:
        """One issue. Raises any GH_ code; GH_NOT_ISSUE for a pull request."""
        return await self._view(ref, number, read=True)

    async def list(self, ref: RepoRef, state: ListState, limit: int) -> list[Issue]:
        """Issues in `state`, at most `limit`. Raises any GH_ code."""
        args = [
            "issue", "list", "--repo", _repo_arg(ref), "--state", state,
            "--limit", str(limit), "--json", _VIEW_FIELDS,
        ]  # fmt: skip
        with _translated(read=True, repo=ref.full_name, command="issue list"):
            raws: list[_GhIssue] = _decode(await self.runner.run(args), list[_GhIssue])
        return [_to_issue(raw) for raw in raws]

    async def create(self, ref: RepoRef, title: str, body: str) -> Posted:
        """Open an issue; the body goes through stdin. Raises any GH_ code (write)."""
        args = [
            "issue", "create", "--repo", _repo_arg(ref), "--title", title, "--body-file", "-",
        ]  # fmt: skip
        with _translated(read=False, repo=ref.full_name, command="issue create"):
            return _posted_from_url(await self.runner.run(args, stdin=body.encode()))

    async def comment(self, ref: RepoRef, number: int, body: str) -> Posted:
        """Comment on an issue (never a pull request). Raises any GH_ code (write)."""
        # gh would comment on a pull request just as well; check first.
        await self._view(ref, number, read=False)
        args = ["issue", "comment", str(number), "--repo", _repo_arg(ref), "--body-file", "-"]
        with _translated(read=False, repo=ref.full_name, command="issue comment"):
            posted = _posted_from_url(await self.runner.run(args, stdin=body.encode()))
        return posted

    async def find_issue(self, ref: RepoRef, marker: str, *, read: bool) -> Posted | None:
        """The issue whose body holds `marker`, or None. Raises any GH_ code.

        Search first (finds old issues), then the 100 newest issues (search's
        index can lag behind a just-created issue).
        """
        token = marker_token(marker)
        search = [
            "issue", "list", "--repo", _repo_arg(ref), "--state", "all",
            "--search", f"{token} in:body", "--limit", "20", "--json", "number,url,body",
        ]  # fmt: skip
        jq = (
            '.[] | select(.pull_request == null) | select((.body // "") | contains("'
            + marker
            + '")) | {number, html_url}'
        )
        recent = [
            "api", "--hostname", ref.host,
            f"repos/{ref.path}/issues?state=all&sort=created&direction=desc&per_page=100",
            "--jq", jq,
        ]  # fmt: skip
        with _translated(read=read, repo=ref.full_name, command="issue list --search"):
            hits: list[_GhFound] = _decode(await self.runner.run(search), list[_GhFound])
            for item in hits:
                if item.number is not None and marker in (item.body or ""):
                    return Posted(number=item.number, url=item.url or "")
            for item in _decode_lines(await self.runner.run(recent)):
                if item.number is not None:
                    return Posted(number=item.number, url=item.html_url or "")
        return None

    async def find_comment(
        self, ref: RepoRef, number: int, marker: str, *, read: bool
    ) -> Posted | None:
        """The comment on issue `number` whose body holds `marker`, or None."""
        jq = '.[] | select((.body // "") | contains("' + marker + '")) | {id, html_url}'
        args = [
            "api", "--hostname", ref.host, "--paginate",
            f"repos/{ref.path}/issues/{number}/comments?per_page=100", "--jq", jq,
        ]  # fmt: skip
        with _translated(read=read, repo=ref.full_name, command="api comments"):
            for item in _decode_lines(await self.runner.run(args)):
                if item.html_url:
                    return Posted(number=number, url=item.html_url, comment_id=item.id)
        return None
