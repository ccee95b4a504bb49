"""Fixtures for the issue tools: a real journal, real git repositories, a
stand-in `gh` executable and a local GitLab-like HTTP server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from ledgerfs.journal import Journal

# ---------------------------------------------------------------- journal


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    j = await Journal.open(tmp_path / "journal.db", durability="normal")
    try:
        yield j
    finally:
        await j.aclose()


# ---------------------------------------------------------------- git


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


MakeRepo = Callable[..., Path]


@pytest.fixture
def make_repo(tmp_path: Path) -> MakeRepo:
    """`make_repo(("origin", url), ..., push={"origin": url})`: a real repository."""
    counter = iter(range(1000))

    def make(*remotes: tuple[str, str], push: dict[str, str] | None = None) -> Path:
        path = tmp_path / f"repo{next(counter)}"
        _git("init", "-q", str(path))
        for name, url in remotes:
            _git("-C", str(path), "remote", "add", name, url)
        for name, url in (push or {}).items():
            _git("-C", str(path), "remote", "set-url", "--push", name, url)
        return path

    return make


# ---------------------------------------------------------------- fake gh

_FAKE_GH = '''#!{python}
"""Stand-in for `gh`: answers by the rules of a JSON scenario and records every call."""
import json, sys, time
SCENARIO = {scenario!r}
with open(SCENARIO) as f:
    scenario = json.load(f)
argv = sys.argv[1:]
stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
with open(scenario["log"], "a") as f:
    f.write(json.dumps({{"argv": argv, "stdin": stdin}}) + "\\n")
try:
    with open(SCENARIO + ".uses") as f:
        uses = json.load(f)
except FileNotFoundError:
    uses = {{}}
for index, rule in enumerate(scenario["rules"]):
    if argv[: len(rule["args"])] != rule["args"]:
        continue
    if not all(any(c in a for a in argv) for c in rule.get("contains", [])):
        continue
    used = uses.get(str(index), 0)
    if "max_uses" in rule and used >= rule["max_uses"]:
        continue
    uses[str(index)] = used + 1
    with open(SCENARIO + ".uses", "w") as f:
        json.dump(uses, f)
    time.sleep(rule.get("sleep", 0))
    sys.stdout.write(rule.get("stdout", ""))
    if rule.get("stdout_bytes"):
        sys.stdout.write("x" * rule["stdout_bytes"])
    sys.stderr.write(rule.get("stderr", ""))
    sys.exit(rule.get("exit", 0))
sys.stderr.write("fake gh: no rule for " + json.dumps(argv) + "\\n")
sys.exit(99)
'''


@dataclass
class FakeGh:
    """A `gh` the tests script: `rule(...)` adds an answer, `calls()` lists what gh got."""

    dir: Path
    rules: list[dict[str, Any]] = field(default_factory=list)

    @property
    def executable(self) -> str:
        return str(self.dir / "gh")

    @property
    def scenario(self) -> Path:
        return self.dir / "scenario.json"

    def rule(
        self,
        args: list[str],
        *,
        stdout: str | Any = "",
        stderr: str = "",
        exit: int = 0,
        **extra: Any,
    ) -> None:
        if not isinstance(stdout, str):
            stdout = json.dumps(stdout)
        self.rules.append({"args": args, "stdout": stdout, "stderr": stderr, "exit": exit, **extra})
        self._save()

    def _save(self) -> None:
        data = {"rules": self.rules, "log": str(self.dir / "calls.jsonl")}
        self.scenario.write_text(json.dumps(data))

    def calls(self) -> list[dict[str, Any]]:
        log = self.dir / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def fake_gh(tmp_path: Path) -> FakeGh:
    folder = tmp_path / "bin"
    folder.mkdir()
    gh = FakeGh(folder)
    gh._save()
    script = folder / "gh"
    script.write_text(_FAKE_GH.format(python=sys.executable, scenario=str(gh.scenario)))
    script.chmod(0o755)
    return gh


# ---------------------------------------------------------------- fake GitLab


@dataclass
class GitLabState:
    """What the local GitLab holds and how it should misbehave."""

    project: str = "group/sub/proj"
    host: str = "gitlab.example.test"
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    # (method, path suffix) -> list of actions consumed in order:
    # {"status": n} answer with n; "drop" close without answer; "apply_then_drop".
    faults: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_issue(self, title: str, description: str = "", state: str = "opened") -> dict[str, Any]:
        iid = len(self.issues) + 1
        issue = {
            "iid": iid,
            "title": title,
            "state": state,
            "description": description,
            "web_url": f"https://{self.host}/{self.project}/-/issues/{iid}",
            "author": {"username": "alice"},
            "labels": ["bug"],
            "created_at": f"2024-01-0{min(iid, 9)}T00:00:00Z",
        }
        self.issues[iid] = issue
        return issue

    def fault(self, method: str, suffix: str, action: str | int, times: int = 1) -> None:
        self.faults.append({"method": method, "suffix": suffix, "action": action, "times": times})


class _Handler(BaseHTTPRequestHandler):
    server: _GitLabServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        # Close the socket without a byte of answer.
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _handle(self, method: str) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        split = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        with state.lock:
            state.requests.append(
                {"method": method, "path": split.path, "query": query, "body": body,
                 "headers": dict(self.headers)}
            )  # fmt: skip
            action = None
            for fault in state.faults:
                if (
                    fault["method"] == method
                    and split.path.endswith(fault["suffix"])
                    and fault["times"]
                ):
                    fault["times"] -= 1
                    action = fault["action"]
                    break
        if action == "drop":
            return self._drop()
        if isinstance(action, int):
            return self._answer(action, {"message": f"{action} fault"})
        prefix = "/api/v4/projects/"
        if not split.path.startswith(prefix):
            return self._answer(404, {"message": "404 Not Found"})
        project_id, _, rest = split.path[len(prefix) :].partition("/")
        # The project id must arrive URL-encoded, slashes included.
        if "/" in project_id or unquote(project_id) != state.project:
            return self._answer(404, {"message": "404 Project Not Found"})
        parts = rest.split("/")
        with state.lock:
            status, answer = self._route(method, parts, query, body)
        if action == "apply_then_drop":
            return self._drop()
        self._answer(status, answer)

    def _route(
        self, method: str, parts: list[str], query: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        state = self.server.state
        if parts == ["issues"] and method == "GET":
            wanted = query.get("state", "all")
            issues = [
                i for i in sorted(state.issues.values(), key=lambda i: -i["iid"])
                if wanted == "all" or i["state"] == wanted
            ]  # fmt: skip
            if "search" in query:
                issues = [i for i in issues if query["search"] in (i["description"] or "")]
            per_page = int(query.get("per_page", 20))
            page = int(query.get("page", 1))
            return 200, issues[(page - 1) * per_page : page * per_page]
        if parts == ["issues"] and method == "POST":
            return 201, state.add_issue(body["title"], body.get("description", ""))
        if len(parts) >= 2 and parts[0] == "issues" and parts[1].isdigit():
            iid = int(parts[1])
            if iid not in state.issues:
                return 404, {"message": "404 Not found"}
            if len(parts) == 2 and method == "GET":
                return 200, state.issues[iid]
            if parts[2:] == ["notes"] and method == "POST":
                notes = state.notes.setdefault(iid, [])
                note = {
                    "id": 1000 + sum(len(n) for n in state.notes.values()),
                    "body": body["body"],
                }
                notes.append(note)
                return 201, note
            if parts[2:] == ["notes"] and method == "GET":
                notes = list(reversed(state.notes.get(iid, [])))
                per_page = int(query.get("per_page", 20))
                page = int(query.get("page", 1))
                return 200, notes[(page - 1) * per_page : page * per_page]
        return 404, {"message": "404 Not Found"}


class _GitLabServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: GitLabState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


@dataclass
class GitLab:
    state: GitLabState
    url: str


@pytest.fixture
def gitlab() -> Iterator[GitLab]:
    state = GitLabState()
    server = _GitLabServer(state)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield GitLab(state=state, url=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
