"""GitHub through a stand-in `gh`: the real adapter code path, scripted answers.

Where each replayed stderr / exit shape comes from:

- [exit-codes] gh manual, `gh help exit-codes` (https://cli.github.com/manual/gh_help_exit-codes):
  exit 4 means "authentication required"; cli/cli internal/ghcmd/cmd.go defines
  `exitAuth exitCode = 4`.
- [auth-text] the signed-out sentence "To get started with GitHub CLI, please run:  gh auth
  login" / "Alternatively, populate the GH_TOKEN environment variable ..." as gh prints it
  when no credentials exist (quoted in gh-using projects' tests, e.g. the one in the
  gh 2.x fixtures found via `find_string`, and in cli/cli's own auth check).
- [http-error] cli/cli api/client.go, `HTTPError.Error()`: "HTTP %d: %s (%s)" — status,
  GitHub's message, request URL.
- [rate-limit] https://github.com/cli/cli/issues/6429: "HTTP 403: API rate limit exceeded
  for user ID 4328569. (https://api.github.com/...)"; secondary limit:
  https://github.com/cli/cli/issues/10240 ("You have exceeded a secondary rate limit").
- [not-found] https://github.com/cli/cli/issues/157 ("Could not resolve to an Issue with the
  number of 1.") and https://github.com/bobmatnyc/trusty-tools/issues/7786 ("GraphQL: Could
  not resolve to an Issue with the number of 7782"); cli/cli
  pkg/cmd/issue/shared/lookup.go queries `issueOrPullRequest(number:)`.
- [pr-as-issue] https://github.com/bobmatnyc/trusty-tools/issues/8171: `gh issue view N` on a
  pull request returns the PR, and only its `url` (/pull/N) tells them apart (lookup.go
  above explains why).
- [network] cli/cli internal/ghcmd/cmd.go `printError`: "error connecting to %s" +
  "check your internet connection or https://githubstatus.com" for DNS errors (seen in
  https://github.com/cli/cli/issues/13147); Go's raw dial error
  "dial tcp: lookup api.github.com: no such host" as in
  https://github.com/hypriot/rpi-drone/issues/5.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.issues import IssueService
from ledgerfs.engine.issues._common import MARKER_RE
from ledgerfs.journal import Journal

from .conftest import FakeGh, MakeRepo

pytestmark = pytest.mark.anyio

REPO_URL = "git@github.com:octo/hello.git"

AUTH_STDERR = (  # [auth-text], exit 4 per [exit-codes]
    "To get started with GitHub CLI, please run:  gh auth login\n"
    "Alternatively, populate the GH_TOKEN environment variable with a GitHub API "
    "authentication token.\n"
)
FORBIDDEN_STDERR = (  # [http-error] with a 403 that is not a rate limit
    "HTTP 403: Must have admin rights to Repository. "
    "(https://api.github.com/repos/octo/hello/issues)\n"
)
NOT_FOUND_STDERR = (  # [not-found]
    "GraphQL: Could not resolve to an issue or pull request with the number of 999. "
    "(repository.issue)\n"
)
REPO_NOT_FOUND_STDERR = (  # [not-found], repository form
    "GraphQL: Could not resolve to a Repository with the name 'octo/hello'. (repository)\n"
)
RATE_STDERR = (  # [rate-limit]
    "HTTP 403: API rate limit exceeded for user ID 4328569. "
    "(https://api.github.com/repos/octo/hello/issues?per_page=30)\n"
)
SECONDARY_RATE_STDERR = (  # [rate-limit]
    "HTTP 403: You have exceeded a secondary rate limit. (https://api.github.com/graphql)\n"
)
NETWORK_STDERR = (  # [network], gh's own wording
    "error connecting to api.github.com\ncheck your internet connection or https://githubstatus.com\n"
)
DIAL_STDERR = (  # [network], Go's dial error text
    'Post "https://api.github.com/graphql": dial tcp: lookup api.github.com: no such host\n'
)
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
GLPAT = "glpat-" + "abcDEF123456ghiJKL78"
FAILED_STDERR = (  # [http-error] shape with a 5xx, plus tokens a debug log could leak
    f"HTTP 502: Server Error (https://api.github.com/graphql)\n"
    f"> Authorization: token {GHP}\n> Authorization: Bearer {PAT}\nretry with {GLPAT}\n"
)


def issue_json(number: int = 7, url: str | None = None, **over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "number": number,
        "title": "Crash on save",
        "state": "OPEN",
        "body": "It crashes.",
        "url": url or f"https://github.com/octo/hello/issues/{number}",
        "author": {"login": "octocat", "id": "U_1", "is_bot": False, "name": "Mona"},
        "labels": [{"id": "L_1", "name": "bug", "description": "", "color": "d73a4a"}],
        "createdAt": "2024-05-01T10:00:00Z",
    }
    data.update(over)
    return data


@pytest.fixture
def repo(make_repo: MakeRepo) -> Path:
    return make_repo(("origin", REPO_URL))


@pytest.fixture
def service(journal: Journal, fake_gh: FakeGh, repo: Path) -> IssueService:
    return IssueService(
        journal, default_repo_path=str(repo), gh_executable=fake_gh.executable, timeout=10
    )


def envelope(exc: pytest.ExceptionInfo[LedgerError]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(exc.value.envelope.to_json())["error"]
    return result


# ------------------------------------------------------------------ success paths


async def test_read_sends_view_and_maps_fields(service: IssueService, fake_gh: FakeGh) -> None:
    fake_gh.rule(["issue", "view", "7"], stdout=issue_json())
    issue = await service.issue_read(None, 7)
    assert issue.number == 7 and issue.state == "open" and issue.author == "octocat"
    assert issue.labels == ["bug"] and issue.created_at == "2024-05-01T10:00:00Z"
    assert fake_gh.calls()[0]["argv"] == [
        "issue", "view", "7", "--repo", "octo/hello",
        "--json", "number,title,state,body,url,author,labels,createdAt",
    ]  # fmt: skip


async def test_list_sends_state_and_limit(service: IssueService, fake_gh: FakeGh) -> None:
    fake_gh.rule(["issue", "list"], stdout=[issue_json(1), issue_json(2, state="CLOSED")])
    listed = await service.issue_list(None, state="all", limit=2)
    assert [i.number for i in listed.issues] == [1, 2]
    assert listed.issues[1].state == "closed" and listed.repo == "github.com/octo/hello"
    argv = fake_gh.calls()[0]["argv"]
    assert argv[argv.index("--state") + 1] == "all" and argv[argv.index("--limit") + 1] == "2"


async def test_enterprise_host_goes_in_repo_argument(
    journal: Journal, fake_gh: FakeGh, make_repo: MakeRepo
) -> None:
    repo = make_repo(("origin", "https://ghe.corp.example/team/tool.git"))
    service = IssueService(
        journal,
        default_repo_path=str(repo),
        github_hosts=["github.com", "ghe.corp.example"],
        gh_executable=fake_gh.executable,
    )
    fake_gh.rule(
        ["issue", "view"], stdout=issue_json(url="https://ghe.corp.example/team/tool/issues/7")
    )
    await service.issue_read(None, 7)
    assert "ghe.corp.example/team/tool" in fake_gh.calls()[0]["argv"]


async def test_create_sends_body_on_stdin_with_marker(
    service: IssueService, fake_gh: FakeGh, journal: Journal
) -> None:
    fake_gh.rule(["issue", "create"], stdout="https://github.com/octo/hello/issues/42\n")
    created = await service.issue_create(None, "Crash on save", "Steps:\n1. save")
    assert created.number == 42 and created.url.endswith("/issues/42") and not created.reused
    call = fake_gh.calls()[0]
    assert call["argv"][call["argv"].index("--title") + 1] == "Crash on save"
    assert call["argv"][-2:] == ["--body-file", "-"]
    assert call["stdin"].startswith("Steps:\n1. save\n\n") and created.marker in call["stdin"]
    assert MARKER_RE.fullmatch(created.marker)
    [write] = await journal.issue_writes()
    assert write.state == "done" and write.marker == created.marker and write.kind == "issue"


async def test_identical_create_is_answered_from_the_journal(
    service: IssueService, fake_gh: FakeGh
) -> None:
    fake_gh.rule(["issue", "create"], stdout="https://github.com/octo/hello/issues/42\n")
    first = await service.issue_create(None, "T", "B")
    second = await service.issue_create(None, "T", "B")
    assert second.reused and second.url == first.url
    assert len(fake_gh.calls()) == 1


async def test_comment_checks_it_is_an_issue_then_posts(
    service: IssueService, fake_gh: FakeGh
) -> None:
    fake_gh.rule(["issue", "view", "7"], stdout=issue_json())
    fake_gh.rule(
        ["issue", "comment", "7"],
        stdout="https://github.com/octo/hello/issues/7#issuecomment-1234\n",
    )
    comment = await service.issue_comment(None, 7, "Fixed in main.")
    assert comment.comment_id == 1234 and comment.issue_number == 7
    calls = fake_gh.calls()
    assert [c["argv"][:2] for c in calls] == [["issue", "view"], ["issue", "comment"]]
    assert calls[1]["stdin"].startswith("Fixed in main.") and comment.marker in calls[1]["stdin"]


# ------------------------------------------------------------------ one test per GH_ code


async def test_gh_cli_missing(journal: Journal, repo: Path, tmp_path: Path) -> None:
    service = IssueService(
        journal, default_repo_path=str(repo), gh_executable=str(tmp_path / "absent" / "gh")
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GH_CLI_MISSING


async def test_gh_auth_required(service: IssueService, fake_gh: FakeGh) -> None:
    fake_gh.rule(["issue", "view"], stderr=AUTH_STDERR, exit=4)  # [auth-text] [exit-codes]
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GH_AUTH_REQUIRED
    assert envelope(info)["details"]["exit_code"] == 4


async def test_gh_forbidden(service: IssueService, fake_gh: FakeGh) -> None:
    fake_gh.rule(["issue", "list"], stderr=FORBIDDEN_STDERR, exit=1)  # [http-error]
    with pytest.raises(LedgerError) as info:
        await service.issue_list(None)
    assert info.value.code is Code.GH_FORBIDDEN
    assert envelope(info)["retryable"] is False


@pytest.mark.parametrize("stderr", [NOT_FOUND_STDERR, REPO_NOT_FOUND_STDERR])
async def test_gh_not_found(service: IssueService, fake_gh: FakeGh, stderr: str) -> None:
    fake_gh.rule(["issue", "view"], stderr=stderr, exit=1)  # [not-found]
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 999)
    assert info.value.code is Code.GH_NOT_FOUND


@pytest.mark.parametrize("stderr", [RATE_STDERR, SECONDARY_RATE_STDERR])
async def test_gh_rate_limit_read_is_retryable(
    service: IssueService, fake_gh: FakeGh, stderr: str
) -> None:
    fake_gh.rule(["issue", "list"], stderr=stderr, exit=1)  # [rate-limit]
    with pytest.raises(LedgerError) as info:
        await service.issue_list(None)
    assert info.value.code is Code.GH_RATE_LIMIT and envelope(info)["retryable"] is True


async def test_gh_rate_limit_write_is_not_retryable(
    service: IssueService, fake_gh: FakeGh, journal: Journal
) -> None:
    fake_gh.rule(["issue", "create"], stderr=RATE_STDERR, exit=1)  # [rate-limit]
    with pytest.raises(LedgerError) as info:
        await service.issue_create(None, "T", "B")
    assert info.value.code is Code.GH_RATE_LIMIT and envelope(info)["retryable"] is False
    # Refused before anything was created: recorded as failed, not unknown.
    [write] = await journal.issue_writes()
    assert write.state == "failed"


@pytest.mark.parametrize("stderr", [NETWORK_STDERR, DIAL_STDERR])
async def test_gh_network_read_is_retryable(
    service: IssueService, fake_gh: FakeGh, stderr: str
) -> None:
    fake_gh.rule(["issue", "view"], stderr=stderr, exit=1)  # [network]
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GH_NETWORK and envelope(info)["retryable"] is True


async def test_gh_network_write_may_be_applied(
    service: IssueService, fake_gh: FakeGh, journal: Journal
) -> None:
    fake_gh.rule(["issue", "create"], stderr=NETWORK_STDERR, exit=1)  # [network]
    with pytest.raises(LedgerError) as info:
        await service.issue_create(None, "T", "B")
    body = envelope(info)
    assert info.value.code is Code.GH_NETWORK and body["retryable"] is False
    assert body["details"]["may_be_applied"] is True
    assert "issue_reconcile" in body["suggestion"] and "may already be applied" in body["message"]
    [write] = await journal.issue_writes()
    assert write.state == "unknown"


async def test_gh_timeout_is_network(journal: Journal, repo: Path, fake_gh: FakeGh) -> None:
    service = IssueService(
        journal, default_repo_path=str(repo), gh_executable=fake_gh.executable, timeout=0.5
    )
    fake_gh.rule(["issue", "view"], stdout=issue_json(), sleep=5)
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GH_NETWORK and envelope(info)["details"]["reason"] == "timeout"
    assert envelope(info)["retryable"] is True


async def test_gh_ambiguous(journal: Journal, fake_gh: FakeGh, make_repo: MakeRepo) -> None:
    repo = make_repo(("origin", "git@github.com:me/hello.git"), ("upstream", REPO_URL))
    service = IssueService(journal, default_repo_path=str(repo), gh_executable=fake_gh.executable)
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GH_AMBIGUOUS
    repos = {c["repo"] for c in envelope(info)["details"]["candidates"]}
    assert repos == {"github.com/me/hello", "github.com/octo/hello"}
    assert fake_gh.calls() == []


async def test_gh_repo_unresolved(journal: Journal, fake_gh: FakeGh, make_repo: MakeRepo) -> None:
    service = IssueService(
        journal, default_repo_path=str(make_repo()), gh_executable=fake_gh.executable
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_list(None)
    assert info.value.code is Code.GH_REPO_UNRESOLVED


async def test_gh_output_limit_never_parses_partial_output(
    journal: Journal, repo: Path, fake_gh: FakeGh
) -> None:
    service = IssueService(
        journal, default_repo_path=str(repo), gh_executable=fake_gh.executable, output_cap=4096
    )
    # Valid JSON start, then far more than the cap.
    fake_gh.rule(["issue", "list"], stdout='[{"number": 1, ', stdout_bytes=200_000)
    with pytest.raises(LedgerError) as info:
        await service.issue_list(None)
    assert info.value.code is Code.GH_OUTPUT_LIMIT
    assert envelope(info)["details"]["output_cap"] == 4096


async def test_gh_not_issue(service: IssueService, fake_gh: FakeGh) -> None:
    # [pr-as-issue]: gh answers with the pull request; its URL gives it away.
    fake_gh.rule(
        ["issue", "view", "5"], stdout=issue_json(5, url="https://github.com/octo/hello/pull/5")
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 5)
    assert info.value.code is Code.GH_NOT_ISSUE


async def test_gh_not_issue_on_comment_posts_nothing(
    service: IssueService, fake_gh: FakeGh
) -> None:
    fake_gh.rule(
        ["issue", "view", "5"], stdout=issue_json(5, url="https://github.com/octo/hello/pull/5")
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_comment(None, 5, "hello")
    assert info.value.code is Code.GH_NOT_ISSUE
    assert [c["argv"][1] for c in fake_gh.calls()] == ["view"]


async def test_gh_host_denied(journal: Journal, repo: Path, fake_gh: FakeGh) -> None:
    service = IssueService(
        journal,
        default_repo_path=str(repo),
        git_remote_allow=["gitlab.com"],
        gh_executable=fake_gh.executable,
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_create(None, "T", "B")
    assert info.value.code is Code.GH_HOST_DENIED
    assert fake_gh.calls() == [] and await journal.issue_writes() == []


async def test_gh_failed_redacts_tokens(service: IssueService, fake_gh: FakeGh) -> None:
    fake_gh.rule(["issue", "view"], stderr=FAILED_STDERR, exit=1)  # [http-error] 5xx
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GH_FAILED
    text = info.value.envelope.to_json()
    for secret in (GHP, PAT, GLPAT, "Bearer"):
        assert secret not in text
    assert "HTTP 502: Server Error" in envelope(info)["details"]["stderr"]
    assert "[REDACTED]" in envelope(info)["details"]["stderr"]


# ------------------------------------------------------------------ idempotency on GitHub


def posted_marker(fake_gh: FakeGh) -> str:
    match = MARKER_RE.search(fake_gh.calls()[-1]["stdin"])
    assert match is not None
    return match.group(0)


async def test_retry_after_unknown_create_finds_it_by_marker(
    service: IssueService, fake_gh: FakeGh, journal: Journal
) -> None:
    fake_gh.rule(["issue", "create"], stderr="i/o timeout\n", exit=1, max_uses=1)  # [network]
    with pytest.raises(LedgerError):
        await service.issue_create(None, "T", "B")
    marker = posted_marker(fake_gh)
    fake_gh.rule(
        ["issue", "list"],
        contains=["in:body"],
        stdout=[
            {
                "number": 43,
                "url": "https://github.com/octo/hello/issues/43",
                "body": f"B\n\n{marker}",
            }
        ],
    )
    again = await service.issue_create(None, "T", "B")
    assert again.reused and again.number == 43
    assert [c["argv"][:2] for c in fake_gh.calls()].count(["issue", "create"]) == 1
    assert {w.state for w in await journal.issue_writes()} == {"done"}


async def test_reconcile_finds_unknown_issue_in_recent_list(
    service: IssueService, fake_gh: FakeGh, journal: Journal
) -> None:
    fake_gh.rule(["issue", "create"], stderr=NETWORK_STDERR, exit=1)
    with pytest.raises(LedgerError):
        await service.issue_create(None, "T", "B")
    # Search's index has not caught up; the newest-issues scan (via gh api --jq) has it.
    fake_gh.rule(["issue", "list"], stdout=[])
    fake_gh.rule(
        ["api"],
        contains=["repos/octo/hello/issues?"],
        stdout='{"number":44,"html_url":"https://github.com/octo/hello/issues/44"}\n',
    )
    report = await service.issue_reconcile()
    assert (report.found, report.not_found, report.errors) == (1, 0, 0)
    assert report.items[0].url == "https://github.com/octo/hello/issues/44"
    [write] = await journal.issue_writes()
    assert write.state == "done"
    stored = msgspec.json.decode(write.result or "")
    assert stored["number"] == 44


async def test_reconcile_comment_not_found(
    service: IssueService, fake_gh: FakeGh, journal: Journal
) -> None:
    fake_gh.rule(["issue", "view"], stdout=issue_json())
    fake_gh.rule(
        ["issue", "comment"],
        stderr="HTTP 502: Bad Gateway (https://api.github.com/graphql)\n",
        exit=1,
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_comment(None, 7, "hello")
    assert info.value.code is Code.GH_FAILED and envelope(info)["details"]["may_be_applied"]
    fake_gh.rule(["api"], contains=["issues/7/comments"], stdout="")
    report = await service.issue_reconcile()
    assert report.not_found == 1 and report.items[0].kind == "comment"
    api = next(c["argv"] for c in fake_gh.calls() if c["argv"][0] == "api")
    assert "--paginate" in api and any(report.items[0].marker in a for a in api)
    [write] = await journal.issue_writes()
    assert write.state == "unknown"
