"""Argument validation, the public surface, and the pure helpers' doctests."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import engine.issues
from engine.errors import Code, LedgerError
from engine.issues import IssueService
from engine.issues._common import redact
from journal import Journal

from .conftest import FakeGh, MakeRepo

MODULES = [
    "engine.issues._common",
    "engine.issues.github",
    "engine.issues.gitlab",
    "engine.issues.models",
    "engine.issues.remotes",
    "engine.issues.service",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0


def test_all_is_complete() -> None:
    public = {n for n in vars(engine.issues) if not n.startswith("_")} - {
        "models", "remotes", "service", "github", "gitlab",
    }  # fmt: skip
    assert public == set(engine.issues.__all__)


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
