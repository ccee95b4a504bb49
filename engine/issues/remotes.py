"""Which repository, on which provider, a workspace's git remotes name.

Parsing is pure (`parse_remote_url`, `pick_repo`); only `list_remotes` runs
`git`. The rules, in order:

1. Every remote URL (fetch and push) is parsed into (host, path); URLs that are
   not ssh, scp-like or http(s) (local paths, `file://`) are ignored.
2. A host in `github_hosts` is GitHub, one in `gitlab_hosts` is GitLab; any
   other host is ignored as not matching. GitHub paths must be `owner/repo`;
   GitLab paths may nest groups (`group/sub/project`).
3. Remotes on hosts outside `git_remote_allow` are set aside. If matching
   remotes exist but all are set aside: GH_HOST_DENIED (for GitLab hosts too,
   the spec has one code for the allowlist).
4. No matching remote at all: GH_REPO_UNRESOLVED, or GL_REPO_UNRESOLVED when
   only GitLab hosts are configured (`github_hosts` empty).
5. Matching remotes naming more than one repository (compared without case,
   since both providers treat paths case-insensitively): GH_AMBIGUOUS, or
   GL_AMBIGUOUS when every candidate is on GitLab; candidates in details.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import msgspec

from ..errors import Code, LedgerError
from ..git import git_output
from .models import Provider, RepoRef

__all__ = [
    "Remote",
    "RemotePolicy",
    "list_remotes",
    "parse_remote_lines",
    "parse_remote_url",
    "pick_repo",
]

_URL_SCHEMES = frozenset({"ssh", "git+ssh", "ssh+git", "https", "http", "git"})


class Remote(msgspec.Struct, frozen=True, kw_only=True):
    """One line of `git remote -v`: a remote's name and URL."""

    name: str
    url: str


class RemotePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Which hosts mean which provider, and which hosts are allowed at all."""

    github_hosts: tuple[str, ...] = ("github.com",)
    gitlab_hosts: tuple[str, ...] = ("gitlab.com",)
    allow: tuple[str, ...] | None = None

    def provider_of(self, host: str) -> Provider | None:
        """The provider a host belongs to, or None when it is neither."""
        host = host.lower()
        if host in (h.lower() for h in self.github_hosts):
            return "github"
        if host in (h.lower() for h in self.gitlab_hosts):
            return "gitlab"
        return None

    def allows(self, host: str) -> bool:
        """Whether `--git-remote-allow` admits the host (None admits every host)."""
        return self.allow is None or host.lower() in (h.lower() for h in self.allow)

    @property
    def unresolved_code(self) -> Code:
        """GL_REPO_UNRESOLVED only when GitLab is the only provider configured."""
        if not self.github_hosts and self.gitlab_hosts:
            return Code.GL_REPO_UNRESOLVED
        return Code.GH_REPO_UNRESOLVED


def parse_remote_url(url: str) -> tuple[str, str] | None:
    """(host, path) of a git remote URL, or None for local and unknown forms.

    >>> parse_remote_url("git@github.com:octo/hello.git")
    ('github.com', 'octo/hello')
    >>> parse_remote_url("ssh://git@gitlab.example.com:2222/group/sub/proj")
    ('gitlab.example.com', 'group/sub/proj')
    >>> parse_remote_url("https://user@github.com/octo/hello/")
    ('github.com', 'octo/hello')
    >>> parse_remote_url("/srv/git/hello.git") is None
    True
    """
    url = url.strip()
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme.lower() not in _URL_SCHEMES or not parts.hostname:
            return None
        host, path = parts.hostname, parts.path
    else:
        # scp-like `[user@]host:path`; a colon after a slash is a local path.
        head, sep, path = url.partition(":")
        if not sep or "/" in head or not head:
            return None
        host = head.rpartition("@")[2]
    path = path.strip("/")
    path = path.removesuffix(".git").rstrip("/")
    if not host or path.count("/") < 1 or "" in path.split("/"):
        return None
    return host.lower(), path


def _candidate(url: str, policy: RemotePolicy) -> RepoRef | None:
    parsed = parse_remote_url(url)
    if parsed is None:
        return None
    host, path = parsed
    provider = policy.provider_of(host)
    if provider is None:
        return None
    if provider == "github" and path.count("/") != 1:
        return None
    return RepoRef(provider=provider, host=host, path=path)


def pick_repo(remotes: list[Remote], policy: RemotePolicy, *, repo_path: str) -> RepoRef:
    """The one repository the remotes name, under the module's rules.

    Raises GH_REPO_UNRESOLVED / GL_REPO_UNRESOLVED (no matching remote),
    GH_HOST_DENIED (every matching remote is on a host outside the allowlist),
    GH_AMBIGUOUS / GL_AMBIGUOUS (several different repositories).
    """
    matched: dict[tuple[str, str, str], RepoRef] = {}
    names: dict[tuple[str, str, str], list[str]] = {}
    denied: dict[str, list[str]] = {}
    # `origin` first: when several remotes name one repository, its spelling wins.
    for remote in sorted(remotes, key=lambda r: r.name != "origin"):
        ref = _candidate(remote.url, policy)
        if ref is None:
            continue
        if not policy.allows(ref.host):
            denied.setdefault(ref.host, []).append(remote.name)
            continue
        ident = (ref.provider, ref.host, ref.path.lower())
        matched.setdefault(ident, ref)
        if remote.name not in names.setdefault(ident, []):
            names[ident].append(remote.name)
    if not matched and denied:
        raise LedgerError(
            Code.GH_HOST_DENIED,
            path=repo_path,
            details={"hosts": sorted(denied), "allowed": list(policy.allow or ())},
        )
    if not matched:
        raise LedgerError(
            policy.unresolved_code,
            path=repo_path,
            details={
                "reason": "no remote on a GitHub or GitLab host",
                "remotes": sorted({f"{r.name} {r.url}" for r in remotes}),
                "github_hosts": list(policy.github_hosts),
                "gitlab_hosts": list(policy.gitlab_hosts),
            },
        )
    if len(matched) > 1:
        refs = list(matched.values())
        code = (
            Code.GL_AMBIGUOUS
            if all(ref.provider == "gitlab" for ref in refs)
            else Code.GH_AMBIGUOUS
        )
        raise LedgerError(
            code,
            path=repo_path,
            details={
                "candidates": [
                    {
                        "provider": ref.provider,
                        "repo": ref.full_name,
                        "remotes": names[ident],
                    }
                    for ident, ref in matched.items()
                ]
            },
        )
    return next(iter(matched.values()))


def parse_remote_lines(text: str) -> list[Remote]:
    """Remotes from `git remote -v` output, fetch and push lines alike.

    >>> parse_remote_lines("origin\\tgit@github.com:o/r.git (fetch)\\n")
    [Remote(name='origin', url='git@github.com:o/r.git')]
    """
    remotes: list[Remote] = []
    for line in text.splitlines():
        name, _, rest = line.partition("\t")
        url = rest.rsplit(" (", 1)[0].strip()
        if name and url:
            remotes.append(Remote(name=name, url=url))
    return remotes


async def list_remotes(repo_path: str, *, policy: RemotePolicy, timeout: float) -> list[Remote]:
    """The remotes of the repository at `repo_path`, from `git remote -v`.

    Raises the policy's unresolved code (GH_REPO_UNRESOLVED unless only GitLab
    is configured) when the folder is missing, is not a git repository, git is
    not installed, or git does not answer within `timeout`.
    """
    code = policy.unresolved_code
    if not os.path.isdir(repo_path):
        raise LedgerError(code, path=repo_path, details={"reason": "repo_path is not a folder"})
    # git runs as git_status runs it: on a repository ledgerfs found, its config
    # vetted, nothing in it able to run a program or prompt.
    try:
        stdout = await git_output(repo_path, ["remote", "-v"], timeout=timeout)
    except LedgerError as exc:
        reason = {
            "not_a_repository": "not a git repository",
            "git not found": "git is not installed",
            "timeout": f"git did not answer within {timeout}s",
        }.get(str(exc.details.get("reason")), str(exc.details.get("reason") or "git failed"))
        details = {"reason": reason}
        if "stderr" in exc.details:
            details["stderr"] = exc.details["stderr"]
        raise LedgerError(code, path=repo_path, details=details) from exc
    return parse_remote_lines(stdout.decode("utf-8", "replace"))
