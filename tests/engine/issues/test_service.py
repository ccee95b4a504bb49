"""Argument validation and the public surface."""

from __future__ import annotations

from pathlib import Path

import pytest

import ledgerfs.engine.issues
from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.issues import IssueService
from ledgerfs.engine.issues._common import redact
from ledgerfs.journal import Journal

from .conftest import FakeGh, MakeRepo


def test_all_is_complete() -> None:
    public = {n for n in vars(ledgerfs.engine.issues) if not n.startswith("_")} - {
        "models", "remotes", "service", "github", "gitlab",
    }  # fmt: skip
    assert public == set(ledgerfs.engine.issues.__all__)


def test_redact_the_configured_secret() -> None:
    assert redact("token s3cr3t leaked", "s3cr3t") == "token [REDACTED] leaked"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.issue_read(None, 0), "$.number"),
        (lambda s: s.issue_list(None, state="merged"), "$.state"),
        (lambda s: s.issue_list(None, limit=0), "$.limit"),
        (lambda s: s.issue_create(None, "", "body"), "$.title"),
        (lambda s: s.issue_comment(None, 1, ""), "$.body"),
    ],
)
async def test_validation(
    journal: Journal, fake_gh: FakeGh, make_repo: MakeRepo, call: object, field: str
) -> None:
    repo: Path = make_repo(("origin", "git@github.com:octo/hello.git"))
    service = IssueService(journal, default_repo_path=str(repo), gh_executable=fake_gh.executable)
    with pytest.raises(LedgerError) as info:
        await call(service)  # type: ignore[operator]
    assert info.value.code is Code.VALIDATION and field in info.value.envelope.error.message
    assert fake_gh.calls() == [] and await journal.issue_writes() == []
