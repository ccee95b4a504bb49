"""Provider and repository from real `git remote -v` output (a real `git init`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgerfs.engine.errors import Code, LedgerError
from ledgerfs.engine.issues.models import RepoRef
from ledgerfs.engine.issues.remotes import RemotePolicy, list_remotes, parse_remote_url, pick_repo

from .conftest import MakeRepo

pytestmark = pytest.mark.anyio

POLICY = RemotePolicy(
    github_hosts=("github.com", "ghe.corp.example"),
    gitlab_hosts=("gitlab.com", "gitlab.example.test"),
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("git@github.com:octo/hello.git", ("github.com", "octo/hello")),
        ("git@github.com:octo/hello", ("github.com", "octo/hello")),
        ("ssh://git@github.com/octo/hello.git", ("github.com", "octo/hello")),
        ("ssh://git@ghe.corp.example:2222/octo/hello", ("ghe.corp.example", "octo/hello")),
        ("https://github.com/octo/hello.git", ("github.com", "octo/hello")),
        ("https://github.com/octo/hello", ("github.com", "octo/hello")),
        ("https://token-user@github.com/octo/hello.git/", ("github.com", "octo/hello")),
        ("https://GitHub.com/Octo/Hello", ("github.com", "Octo/Hello")),
        ("git@gitlab.com:group/sub/proj.git", ("gitlab.com", "group/sub/proj")),
        ("https://gitlab.com/a/b/c/d", ("gitlab.com", "a/b/c/d")),
        ("/srv/git/hello.git", None),
        ("file:///srv/git/hello.git", None),
        ("../relative/repo", None),
        ("https://github.com/only-owner", None),
    ],
)
def test_parse_remote_url(url: str, expected: tuple[str, str] | None) -> None:
    assert parse_remote_url(url) == expected


CASES: list[tuple[str, list[tuple[str, str]], dict[str, str], RepoRef | Code]] = [
    (
        "github ssh",
        [("origin", "git@github.com:octo/hello.git")],
        {},
        RepoRef(provider="github", host="github.com", path="octo/hello"),
    ),
    (
        "github https with user",
        [("origin", "https://me@github.com/octo/hello")],
        {},
        RepoRef(provider="github", host="github.com", path="octo/hello"),
    ),
    (
        "enterprise host",
        [("origin", "ssh://git@ghe.corp.example:2222/team/tool.git")],
        {},
        RepoRef(provider="github", host="ghe.corp.example", path="team/tool"),
    ),
    (
        "gitlab nested groups",
        [("origin", "git@gitlab.example.test:group/sub/proj.git")],
        {},
        RepoRef(provider="gitlab", host="gitlab.example.test", path="group/sub/proj"),
    ),
    (
        "same repo under two remotes and two URL forms",
        [
            ("origin", "git@github.com:octo/hello.git"),
            ("mirror", "https://github.com/Octo/Hello"),
        ],
        {},
        RepoRef(provider="github", host="github.com", path="octo/hello"),
    ),
    (
        "fetch and push URLs of one repo",
        [("origin", "https://github.com/octo/hello.git")],
        {"origin": "git@github.com:octo/hello.git"},
        RepoRef(provider="github", host="github.com", path="octo/hello"),
    ),
    (
        "unknown hosts are ignored",
        [("origin", "git@github.com:octo/hello.git"), ("other", "git@bitbucket.org:x/y.git")],
        {},
        RepoRef(provider="github", host="github.com", path="octo/hello"),
    ),
    (
        "two github repos",
        [("origin", "git@github.com:me/hello.git"), ("upstream", "git@github.com:octo/hello.git")],
        {},
        Code.GH_AMBIGUOUS,
    ),
    (
        "push URL names another repo",
        [("origin", "git@github.com:octo/hello.git")],
        {"origin": "git@github.com:me/fork.git"},
        Code.GH_AMBIGUOUS,
    ),
    (
        "github and gitlab",
        [("origin", "git@github.com:octo/hello.git"), ("gl", "git@gitlab.com:octo/hello.git")],
        {},
        Code.GH_AMBIGUOUS,
    ),
    (
        "two gitlab projects",
        [("a", "git@gitlab.com:g/one.git"), ("b", "git@gitlab.com:g/sub/two.git")],
        {},
        Code.GL_AMBIGUOUS,
    ),
    ("no remote", [], {}, Code.GH_REPO_UNRESOLVED),
    ("only foreign hosts", [("origin", "git@bitbucket.org:x/y.git")], {}, Code.GH_REPO_UNRESOLVED),
]


@pytest.mark.parametrize(("name", "remotes", "push", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_resolution_table(
    make_repo: MakeRepo,
    name: str,
    remotes: list[tuple[str, str]],
    push: dict[str, str],
    expected: RepoRef | Code,
) -> None:
    repo = make_repo(*remotes, push=push)
    found = await list_remotes(str(repo), policy=POLICY, timeout=10)
    if isinstance(expected, RepoRef):
        assert pick_repo(found, POLICY, repo_path=str(repo)) == expected
        return
    with pytest.raises(LedgerError) as info:
        pick_repo(found, POLICY, repo_path=str(repo))
    assert info.value.code is expected
    assert info.value.envelope.error.retryable is False
    if expected in (Code.GH_AMBIGUOUS, Code.GL_AMBIGUOUS):
        assert len(info.value.details["candidates"]) == 2


async def test_host_denied(make_repo: MakeRepo) -> None:
    repo = make_repo(("origin", "git@gitlab.example.test:group/proj.git"))
    policy = RemotePolicy(
        github_hosts=POLICY.github_hosts, gitlab_hosts=POLICY.gitlab_hosts, allow=("github.com",)
    )
    found = await list_remotes(str(repo), policy=policy, timeout=10)
    with pytest.raises(LedgerError) as info:
        pick_repo(found, policy, repo_path=str(repo))
    assert info.value.code is Code.GH_HOST_DENIED
    assert info.value.details["hosts"] == ["gitlab.example.test"]


async def test_denied_remote_is_set_aside_when_an_allowed_one_matches(make_repo: MakeRepo) -> None:
    repo = make_repo(
        ("origin", "git@github.com:octo/hello.git"),
        ("internal", "git@ghe.corp.example:octo/hello.git"),
    )
    policy = RemotePolicy(
        github_hosts=POLICY.github_hosts, gitlab_hosts=POLICY.gitlab_hosts, allow=("github.com",)
    )
    found = await list_remotes(str(repo), policy=policy, timeout=10)
    assert pick_repo(found, policy, repo_path=str(repo)).host == "github.com"


async def test_only_gitlab_configured_gives_gl_unresolved(make_repo: MakeRepo) -> None:
    repo = make_repo()
    policy = RemotePolicy(github_hosts=(), gitlab_hosts=("gitlab.com",))
    with pytest.raises(LedgerError) as info:
        pick_repo(await list_remotes(str(repo), policy=policy, timeout=10), policy, repo_path="r")
    assert info.value.code is Code.GL_REPO_UNRESOLVED


async def test_not_a_git_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(LedgerError) as info:
        await list_remotes(str(plain), policy=POLICY, timeout=10)
    assert info.value.code is Code.GH_REPO_UNRESOLVED
    assert info.value.details["reason"] == "not a git repository"


async def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as info:
        await list_remotes(str(tmp_path / "nope"), policy=POLICY, timeout=10)
    assert info.value.code is Code.GH_REPO_UNRESOLVED
