"""GitLab against a local HTTP server: real sockets, real httpx, real journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.issues import IssueService
from ledgerfs.journal import Journal

from .conftest import GitLab, MakeRepo

pytestmark = pytest.mark.anyio

TOKEN = "glpat-" + "SeCrEt0123456789abcd"
PROJECT_PATH = "/api/v4/projects/group%2Fsub%2Fproj"


@pytest.fixture
def repo(make_repo: MakeRepo) -> Path:
    return make_repo(("origin", "git@gitlab.example.test:group/sub/proj.git"))


@pytest.fixture
def service(journal: Journal, repo: Path, gitlab: GitLab) -> IssueService:
    return IssueService(
        journal,
        default_repo_path=str(repo),
        gitlab_hosts=["gitlab.com", "gitlab.example.test"],
        gitlab_token=TOKEN,
        gitlab_api_urls={"gitlab.example.test": gitlab.url},
        timeout=5,
    )


def envelope(info: pytest.ExceptionInfo[LedgerError]) -> dict[str, Any]:
    text = info.value.envelope.to_json()
    assert TOKEN not in text
    result: dict[str, Any] = json.loads(text)["error"]
    return result


# ------------------------------------------------------------------ 200s


async def test_read(service: IssueService, gitlab: GitLab) -> None:
    gitlab.state.add_issue("Crash", "It crashes.")
    issue = await service.issue_read(None, 1)
    assert (issue.number, issue.title, issue.state, issue.body) == (
        1,
        "Crash",
        "open",
        "It crashes.",
    )
    assert issue.author == "alice" and issue.labels == ["bug"]
    request = gitlab.state.requests[0]
    # The project id arrives URL-encoded; the token only in PRIVATE-TOKEN.
    assert request["path"] == f"{PROJECT_PATH}/issues/1"
    assert request["headers"]["PRIVATE-TOKEN"] == TOKEN


async def test_list(service: IssueService, gitlab: GitLab) -> None:
    gitlab.state.add_issue("one")
    gitlab.state.add_issue("two", state="closed")
    gitlab.state.add_issue("three")
    listed = await service.issue_list(None, state="open", limit=10)
    assert [i.title for i in listed.issues] == ["three", "one"]
    assert gitlab.state.requests[0]["query"]["state"] == "opened"
    closed = await service.issue_list(None, state="closed")
    assert [i.state for i in closed.issues] == ["closed"]


async def test_create_and_comment(service: IssueService, gitlab: GitLab, journal: Journal) -> None:
    created = await service.issue_create(None, "Crash", "Steps")
    assert created.number == 1 and created.provider == "gitlab"
    assert gitlab.state.issues[1]["description"] == f"Steps\n\n{created.marker}"
    comment = await service.issue_comment(None, 1, "Fixed.")
    assert comment.url == f"{gitlab.state.issues[1]['web_url']}#note_{comment.comment_id}"
    assert gitlab.state.notes[1][0]["body"] == f"Fixed.\n\n{comment.marker}"
    assert [w.state for w in await journal.issue_writes()] == ["done", "done"]


# ------------------------------------------------------------------ statuses


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (401, Code.GL_AUTH_REQUIRED, False),
        (403, Code.GL_FORBIDDEN, False),
        (404, Code.GL_NOT_FOUND, False),
        (429, Code.GH_RATE_LIMIT, True),
        (500, Code.GL_NETWORK, True),
        (503, Code.GL_NETWORK, True),
    ],
)
async def test_read_statuses(
    service: IssueService, gitlab: GitLab, status: int, code: Code, retryable: bool
) -> None:
    gitlab.state.add_issue("x")
    gitlab.state.fault("GET", "/issues/1", status)
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    body = envelope(info)
    assert info.value.code is code and body["retryable"] is retryable
    assert body["details"]["status"] == status


async def test_missing_issue_is_not_found(service: IssueService) -> None:
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 99)
    assert info.value.code is Code.GL_NOT_FOUND


@pytest.mark.parametrize(
    ("status", "code", "state"),
    [
        (401, Code.GL_AUTH_REQUIRED, "failed"),
        (429, Code.GH_RATE_LIMIT, "failed"),
        (503, Code.GL_NETWORK, "unknown"),
    ],
)
async def test_write_statuses(
    service: IssueService, gitlab: GitLab, journal: Journal, status: int, code: Code, state: str
) -> None:
    gitlab.state.fault("POST", "/issues", status)
    with pytest.raises(LedgerError) as info:
        await service.issue_create(None, "T", "B")
    body = envelope(info)
    assert info.value.code is code and body["retryable"] is False
    assert body["details"].get("may_be_applied", False) is (state == "unknown")
    [write] = await journal.issue_writes()
    assert write.state == state


# ------------------------------------------------------------------ dropped connections


async def test_read_dropped_before_answer_is_retryable(
    service: IssueService, gitlab: GitLab
) -> None:
    gitlab.state.add_issue("x")
    gitlab.state.fault("GET", "/issues/1", "drop")
    with pytest.raises(LedgerError) as info:
        await service.issue_read(None, 1)
    assert info.value.code is Code.GL_NETWORK and envelope(info)["retryable"] is True


async def test_connection_refused(journal: Journal, repo: Path) -> None:
    service = IssueService(
        journal,
        default_repo_path=str(repo),
        gitlab_hosts=["gitlab.example.test"],
        gitlab_api_urls={"gitlab.example.test": "http://127.0.0.1:9"},
        timeout=5,
    )
    with pytest.raises(LedgerError) as info:
        await service.issue_create(None, "T", "B")
    body = envelope(info)
    # Never connected, so nothing was sent: not "may be applied".
    assert info.value.code is Code.GL_NETWORK and body["retryable"] is False
    assert "may_be_applied" not in body["details"]
    [write] = await journal.issue_writes()
    assert write.state == "failed"


async def drop_after_create(service: IssueService, gitlab: GitLab, journal: Journal) -> None:
    gitlab.state.fault("POST", "/issues", "apply_then_drop")
    with pytest.raises(LedgerError) as info:
        await service.issue_create(None, "Crash", "Steps")
    body = envelope(info)
    assert info.value.code is Code.GL_NETWORK and body["retryable"] is False
    assert body["details"]["may_be_applied"] is True
    assert "may already be applied" in body["message"]
    assert "check the issue" in body["suggestion"] and "issue_reconcile" in body["suggestion"]
    [write] = await journal.issue_writes()
    assert write.state == "unknown"
    assert len(gitlab.state.issues) == 1


async def test_dropped_after_create_then_reconcile(
    service: IssueService, gitlab: GitLab, journal: Journal
) -> None:
    await drop_after_create(service, gitlab, journal)
    report = await service.issue_reconcile()
    assert (report.found, report.not_found, report.errors) == (1, 0, 0)
    assert report.items[0].url == gitlab.state.issues[1]["web_url"]
    [write] = await journal.issue_writes()
    assert write.state == "done"
    again = await service.issue_create(None, "Crash", "Steps")
    assert again.reused and again.number == 1
    assert len(gitlab.state.issues) == 1


async def test_dropped_after_create_then_identical_retry(
    service: IssueService, gitlab: GitLab, journal: Journal
) -> None:
    await drop_after_create(service, gitlab, journal)
    again = await service.issue_create(None, "Crash", "Steps")
    assert again.reused and again.number == 1
    assert len(gitlab.state.issues) == 1
    assert [w.state for w in await journal.issue_writes()] == ["done"]
    searches = [r for r in gitlab.state.requests if r["query"].get("search")]
    assert searches and searches[0]["query"]["search"] == again.marker[16:32]


async def test_dropped_after_comment_then_reconcile(
    service: IssueService, gitlab: GitLab, journal: Journal
) -> None:
    gitlab.state.add_issue("x")
    gitlab.state.fault("POST", "/issues/1/notes", "apply_then_drop")
    with pytest.raises(LedgerError) as info:
        await service.issue_comment(None, 1, "Fixed.")
    assert envelope(info)["details"]["may_be_applied"] is True
    report = await service.issue_reconcile(str(service._default_repo_path))
    assert report.found == 1 and report.items[0].kind == "comment"
    again = await service.issue_comment(None, 1, "Fixed.")
    assert again.reused and len(gitlab.state.notes[1]) == 1


async def test_reconcile_reports_not_found(
    service: IssueService, gitlab: GitLab, journal: Journal
) -> None:
    # Dropped before the server applied anything: reconcile finds nothing,
    # and the identical retry then posts exactly once.
    gitlab.state.fault("POST", "/issues", "drop")
    with pytest.raises(LedgerError):
        await service.issue_create(None, "T", "B")
    report = await service.issue_reconcile()
    assert (report.found, report.not_found) == (0, 1)
    created = await service.issue_create(None, "T", "B")
    assert not created.reused and len(gitlab.state.issues) == 1
    states = sorted(w.state for w in await journal.issue_writes())
    assert states == ["done", "failed"]
