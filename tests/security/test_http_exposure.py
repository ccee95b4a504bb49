"""HTTP exposure: who can reach `ledgerfs serve --http`, and with which session.

A real server process on loopback, driven by raw httpx requests (what an
attacker sends) and by the SDK's own Streamable HTTP client (what a user runs):

- a bind other than 127.0.0.1, ::1 or localhost does not start without a token,
  nor with one that is too short or exposed, and says why without a traceback;
- with a token, a request without it or with a wrong one is 401, on any route;
- a Host or Origin that does not name this server is refused, on every bind;
- an `mcp-session-id` the server did not issue (or that has ended) is 404 on
  every route, so no made-up id buys a mutation budget, and sessionless calls
  share one budget;
- a session's state is freed when it ends (the hub's own count, in-process).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.server._support import REPO, envelope, free_port, ok, serve_args, server_env

TOKEN = "k7Qm2xV9pL4sR8tW1yZ3bN6cD0fG5hJ-uE_aS"  # 37 characters
START_TIMEOUT = 20.0
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "attacker", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn, in the in-process test


# -- a real server process ---------------------------------------------------------


class Served:
    """A running `ledgerfs serve --http` process and how to reach it."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str, port: int, log: Any) -> None:
        self.proc = proc
        self.host = host
        self.port = port
        self._log = log

    @property
    def url(self) -> str:
        return f"http://{self.name}:{self.port}/mcp"

    @property
    def name(self) -> str:
        """The host as a URL or a Host header spells it."""
        return f"[{self.host}]" if ":" in self.host else self.host

    def stderr(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")


def _bindable(host: str) -> bool:
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
    except OSError:
        return False
    return True


@contextmanager
def served(
    root: Path, host: str, *args: str | Path, env: dict[str, str] | None = None
) -> Iterator[Served]:
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, *serve_args(root, *args, "--http", f"{host}:{port}")],
            env={**server_env(), **(env or {})},
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        server = Served(proc, host, port, log)
        try:
            _wait_started(server)
            yield server
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait_started(server: Served) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while server.proc.poll() is None:
        try:
            with socket.create_connection((server.host, server.port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError("the HTTP server did not start") from None
            time.sleep(0.05)
    raise AssertionError(f"the server exited: {server.stderr()}")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = (tmp_path / "ws").resolve()
    path.mkdir()
    (path / "notes.txt").write_text("hello\n")
    return path


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def _files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_file())


# -- raw requests ------------------------------------------------------------------


def _modern_call(name: str, arguments: dict[str, Any], ident: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": META},
    }


def _modern_headers(name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {"accept": ACCEPT, "mcp-protocol-version": MODERN}
    headers["mcp-method"] = "tools/call" if name else "tools/list"
    if name:
        headers["mcp-name"] = name
    return {**headers, **extra}


_MODERN_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"},
    },
}

#: One request per route the transport has: the sessionless protocol and the handshake.
ROUTES = {
    "sessionless": (_MODERN_LIST, _modern_headers()),
    "handshake": (_INITIALIZE, {"accept": ACCEPT}),
}


def _post(server: Served, route: str, **headers: str) -> httpx.Response:
    body, base = ROUTES[route]
    return httpx.post(server.url, json=body, headers={**base, **headers}, timeout=20)


# -- 1. a bind off the local addresses needs a token ---------------------------------


def _refusal(root: Path, host: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run a serve that must refuse to start: exit 1, a clear message, no traceback."""
    port = free_port()
    try:
        done = subprocess.run(
            [sys.executable, *serve_args(root, *args, "--http", f"{host}:{port}")],
            env={**server_env(), **(env or {})},
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=START_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"serve --http {host} started where it must refuse") from None
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert done.stdout == b""
    return stderr


# Wildcards, other loopback addresses, a mapped loopback, a LAN and a public address.
NO_TOKEN_BINDS = ["0.0.0.0", "::", "127.0.0.2", "127.1.2.3", "::ffff:127.0.0.1", "192.0.2.7"]


@pytest.mark.parametrize("host", NO_TOKEN_BINDS)
def test_a_bind_off_the_local_addresses_refuses_to_start_without_a_token(
    root: Path, host: str
) -> None:
    stderr = _refusal(root, host)
    assert "VALIDATION" in stderr
    assert "needs a bearer token" in stderr
    assert "--http-token-file" in stderr
    assert "LEDGERFS_HTTP_TOKEN" in stderr


SHORT = "s3cr3t-but-short-0123456789abcd"  # 31 characters


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("short in the variable", "needs at least 32"),
        ("short in the file", "needs at least 32"),
        ("empty file", "needs at least 32"),
        ("file others can read", "chmod 600"),
        ("missing file", "Cannot read the HTTP token file"),
        ("spaces inside", "visible ASCII"),
        ("not ASCII", "visible ASCII"),
    ],
)
def test_a_bad_token_refuses_to_start(root: Path, tmp_path: Path, case: str, reason: str) -> None:
    path = tmp_path / "token"
    content = {
        "short in the file": SHORT,
        "empty file": "\n",
        "file others can read": TOKEN,
        "spaces inside": TOKEN[:20] + " " + TOKEN[20:],
        "not ASCII": TOKEN + "é",
    }.get(case)
    if content is not None:
        path.write_text(content)
        path.chmod(0o644 if case == "file others can read" else 0o600)
    if case == "short in the variable":
        stderr = _refusal(root, "0.0.0.0", env={"LEDGERFS_HTTP_TOKEN": SHORT})
    else:
        stderr = _refusal(root, "0.0.0.0", "--http-token-file", str(path))
    assert reason in stderr, stderr
    # Whatever was given is never echoed.
    assert SHORT not in stderr
    assert TOKEN[:20] not in stderr


def test_a_refusal_is_the_envelope_with_json(root: Path) -> None:
    import json

    stderr = _refusal(root, "0.0.0.0", "--json", env={"LEDGERFS_HTTP_TOKEN": SHORT})
    body = json.loads(stderr)["error"]
    assert body["code"] == "VALIDATION"
    assert body["details"]["reason"] == "token_too_short"
    assert body["details"]["minimum"] == 32
    assert SHORT not in stderr


# -- 2. with a token, every request carries it -------------------------------------


WRONG_AUTHORIZATIONS = {
    "none": None,
    "empty": "",
    "scheme only": "Bearer",
    "another token": "Bearer " + "x" * len(TOKEN),
    "a prefix": "Bearer " + TOKEN[:-1],
    "an extension": "Bearer " + TOKEN + "x",
    "another scheme": "Basic " + TOKEN,
    "no scheme": TOKEN,
    "upper case": "Bearer " + TOKEN.upper(),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("how", ["file", "variable"])
def test_a_token_is_required_on_every_request(
    root: Path, token_file: Path, route: str, how: str
) -> None:
    # 127.0.0.2 needs a token; 127.0.0.1 takes one when it is given.
    host = "127.0.0.2" if _bindable("127.0.0.2") else "127.0.0.1"
    args, env = (
        (["--http-token-file", str(token_file)], None)
        if how == "file"
        else ([], {"LEDGERFS_HTTP_TOKEN": TOKEN})
    )
    with served(root, host, *args, env=env) as server:
        for label, value in WRONG_AUTHORIZATIONS.items():
            headers = {} if value is None else {"authorization": value}
            reply = _post(server, route, **headers)
            assert reply.status_code == 401, (label, reply.status_code, reply.text)
            assert reply.headers["www-authenticate"].startswith("Bearer "), label
            assert TOKEN not in reply.text
        for scheme in ("Bearer", "bearer", "BEARER"):
            reply = _post(server, route, authorization=f"{scheme} {TOKEN}")
            assert reply.status_code == 200, (scheme, reply.text)
            assert TOKEN not in reply.text
            assert all(TOKEN not in v for v in reply.headers.values())
        # Other paths, and other methods, are behind the token too.
        for method, path in [("GET", "/"), ("GET", "/mcp"), ("DELETE", "/mcp"), ("GET", "/x")]:
            reply = httpx.request(method, f"http://{host}:{server.port}{path}", timeout=20)
            assert reply.status_code == 401, (method, path)
        server.proc.terminate()
        server.proc.wait(10)
        assert TOKEN not in server.stderr()


@pytest.mark.anyio
async def test_the_sdk_client_works_with_the_token_and_fails_without(
    root: Path, token_file: Path
) -> None:
    with served(root, "127.0.0.1", "--http-token-file", token_file) as server:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            for mode in ("legacy", MODERN):
                async with Client(
                    streamable_http_client(server.url, http_client=http), mode=mode
                ) as c:
                    assert ok(await c.call_tool("read_file", {"path": "notes.txt"}))["content"]
        statuses: list[int] = []

        async def record(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        async with httpx2.AsyncClient(event_hooks={"response": [record]}) as http:
            with pytest.raises((MCPError, ExceptionGroup)), anyio.fail_after(20):
                async with Client(streamable_http_client(server.url, http_client=http)) as c:
                    await c.call_tool("read_file", {"path": "notes.txt"})
        assert statuses
        assert set(statuses) == {401}


# -- 3. Host and Origin name this server -------------------------------------------


def _hostile_hosts(host: str, port: int) -> list[str]:
    return [
        "evil.example",
        f"evil.example:{port}",
        f"{host}.evil.example:{port}",
        f"{host}:{port + 1}",  # the same address, another port
        f"localhost:{port + 1}",
        f"{host}",  # no port
        f"{host}:{port}.evil.example",
        f"{host}:{port}@evil.example",
        f"127.0.0.3:{port}",
        "",
    ]


def _hostile_origins(host: str, port: int) -> list[str]:
    return [
        "http://evil.example",
        f"http://evil.example:{port}",
        "http://localhost:3000",  # a page served by another local program
        f"http://{host}:{port + 1}",
        f"http://{host}.evil.example:{port}",
        f"http://{host}:{port}.evil.example",
        "null",  # a sandboxed frame or a file:// page
        f"file://{host}:{port}",
        f"ws://{host}:{port}",
    ]


def _refused_headers(server: Served, route: str, auth: dict[str, str]) -> list[str]:
    """Every hostile Host and Origin value that the server did not refuse."""
    let_through = []
    for value in _hostile_hosts(server.name, server.port):
        reply = _post(server, route, host=value, **auth)
        if reply.status_code != 421:
            let_through.append(f"Host {value!r}: {reply.status_code}")
    for value in _hostile_origins(server.name, server.port):
        reply = _post(server, route, origin=value, **auth)
        if reply.status_code != 403:
            let_through.append(f"Origin {value!r}: {reply.status_code}")
    return let_through


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_host_and_origin_are_checked_on_loopback(root: Path, host: str, route: str) -> None:
    if not _bindable(host):
        pytest.skip(f"{host} is not bindable here")
    with served(root, host) as server:  # the local binds need no token
        assert _refused_headers(server, route, {}) == []
        port = server.port
        for name in (server.name, "127.0.0.1", "localhost", "[::1]"):
            assert _post(server, route, host=f"{name}:{port}").status_code == 200, name
            origin = f"http://{name}:{port}"
            assert _post(server, route, origin=origin).status_code == 200, origin


@pytest.mark.parametrize("route", list(ROUTES))
def test_host_and_origin_are_checked_on_any_bind(root: Path, token_file: Path, route: str) -> None:
    if not _bindable("127.0.0.2"):
        pytest.skip("127.0.0.2 is not bindable here")
    auth = {"authorization": f"Bearer {TOKEN}"}
    with served(
        root,
        "127.0.0.2",
        "--http-token-file",
        token_file,
        "--http-allow-host",
        "box.example",
    ) as server:
        assert _refused_headers(server, route, auth) == []
        port = server.port
        for host in [f"127.0.0.2:{port}", f"box.example:{port}"]:
            assert _post(server, route, host=host, **auth).status_code == 200, host
        assert _post(server, route, origin=f"https://box.example:{port}", **auth).status_code == 200
        # localhost names do not reach 127.0.0.2: they are not its names.
        assert _post(server, route, host=f"localhost:{port}", **auth).status_code == 421


# -- 4. only issued session ids; sessionless calls share one budget ----------------


async def _last_deleted(url: str) -> str:
    deleted: list[str] = []

    async def watch(request: httpx2.Request) -> None:
        if request.method == "DELETE":
            deleted.append(request.headers["mcp-session-id"])

    async with (
        httpx2.AsyncClient(event_hooks={"request": [watch]}) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as c,
    ):
        await c.list_tools()
    [session_id] = deleted
    return session_id


async def _issued_session(url: str) -> tuple[str, httpx2.AsyncClient, Any]:
    """A live session's id (the SDK client that holds it stays open)."""
    seen: list[str] = []

    async def watch(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            seen.append(response.headers["mcp-session-id"])

    http = httpx2.AsyncClient(event_hooks={"response": [watch]})
    client = Client(streamable_http_client(url, http_client=http), mode="legacy")
    await client.__aenter__()
    return seen[0], http, client


@pytest.mark.anyio
async def test_a_made_up_session_id_is_404_and_buys_no_budget(root: Path) -> None:
    with served(root, "127.0.0.1", "--mutation-budget", "1") as server:
        live, http, holder = await _issued_session(server.url)
        try:
            ended = await _last_deleted(server.url)
            made_up = [
                uuid.uuid4().hex,
                "0",
                "x" * 4000,
                ended,  # issued once, ended by DELETE
                live.upper(),  # a live id, respelled
                live + "0",
                "../" + live,
            ]
            n = 0
            for session_id in made_up:
                for route in ("sessionless", "handshake"):
                    n += 1
                    name = f"made-up-{n}.txt"
                    body = _modern_call("write_file", {"path": name, "content": "x"}, n)
                    if route == "sessionless":
                        headers = _modern_headers("write_file", **{"mcp-session-id": session_id})
                    else:
                        del body["params"]["_meta"]
                        headers = {"accept": ACCEPT, "mcp-session-id": session_id}
                    reply = httpx.post(server.url, json=body, headers=headers, timeout=20)
                    assert reply.status_code == 404, (session_id[:40], route, reply.text[:200])
                    assert not (root / name).exists()
            # The sessionless protocol shares one budget: one write, then BUDGET_EXCEEDED,
            # whichever client (SDK or raw) sends it.
            async with create_mcp_http_client() as plain:
                async with Client(streamable_http_client(server.url, http_client=plain)) as one:
                    ok(await one.call_tool("write_file", {"path": "shared-1.txt", "content": "1"}))
                async with Client(streamable_http_client(server.url, http_client=plain)) as two:
                    envelope(
                        await two.call_tool("write_file", {"path": "shared-2.txt", "content": "2"}),
                        "BUDGET_EXCEEDED",
                    )
            reply = httpx.post(
                server.url,
                json=_modern_call("write_file", {"path": "shared-3.txt", "content": "3"}),
                headers=_modern_headers("write_file"),
                timeout=20,
            )
            assert reply.status_code == 200
            assert '\\"BUDGET_EXCEEDED\\"' in reply.text
            # The issued session keeps its own budget of one.
            ok(await holder.call_tool("write_file", {"path": "live-1.txt", "content": "1"}))
            envelope(
                await holder.call_tool("write_file", {"path": "live-2.txt", "content": "2"}),
                "BUDGET_EXCEEDED",
            )
        finally:
            await holder.__aexit__(None, None, None)
            await http.aclose()
    assert _files(root) == ["live-1.txt", "notes.txt", "shared-1.txt"]


# -- 5. a session's state is freed when it ends ------------------------------------


SESSIONS = 200
WORKERS = 4


@pytest.mark.anyio
async def test_ended_sessions_are_freed(root: Path) -> None:
    """200 sessions opened, used and closed leave nothing behind in the hub.

    In-process (the real app and uvicorn on a loopback port) so the hub's own
    count can be read; the subprocess tests above check the wire behaviour.
    """
    from ledgerfs.engine.exposure import BearerToken, plan_exposure
    from ledgerfs.engine.server import open_hub, serve_http

    port = free_port()
    exposure = plan_exposure("127.0.0.1", port, BearerToken(TOKEN))
    url = f"http://127.0.0.1:{port}/mcp"
    async with (
        open_hub({"roots": [str(root)], "mutation_budget": 1}) as hub,
        anyio.create_task_group() as group,
    ):
        ready = anyio.Event()
        group.start_soon(lambda: serve_http(hub, exposure, on_ready=lambda _: ready.set()))
        await ready.wait()
        await _wait_accepting(port)
        peak = 0
        headers = {"Authorization": f"Bearer {TOKEN}"}

        async def open_use_close(worker: int) -> None:
            nonlocal peak
            async with create_mcp_http_client(headers=headers) as http:
                for i in range(worker, SESSIONS, WORKERS):
                    transport = streamable_http_client(url, http_client=http)
                    async with Client(transport, mode="legacy") as c:
                        path = f"s{i}.txt"
                        ok(await c.call_tool("write_file", {"path": path, "content": "x"}))
                        peak = max(peak, hub.statistics().clients)

        async with anyio.create_task_group() as workers:
            for worker in range(WORKERS):
                workers.start_soon(open_use_close, worker)
        # The last DELETE's cleanup runs in the session's own task: wait for it.
        with anyio.fail_after(20):
            while hub.statistics().clients:
                await anyio.sleep(0.05)
        stats = hub.statistics()
        group.cancel_scope.cancel()
    # Each worker's open session, and its last one while that one's cleanup runs.
    assert 1 <= peak <= 2 * WORKERS
    assert stats.clients == 0
    assert stats.engine_sessions == 0
    assert len(list(root.glob("s*.txt"))) == SESSIONS


async def _wait_accepting(port: int) -> None:
    with anyio.fail_after(START_TIMEOUT):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
            else:
                await stream.aclose()
                return


def test_the_token_variable_is_not_passed_on(tmp_path: Path) -> None:
    """Programs the server starts (git, gh) do not inherit LEDGERFS_HTTP_TOKEN."""
    from ledgerfs.engine.exposure import read_token

    environ = {"LEDGERFS_HTTP_TOKEN": TOKEN, "PATH": os.defpath}
    token = read_token(None, environ)
    assert token is not None and token.admits(f"Bearer {TOKEN}")
    assert environ == {"PATH": os.defpath}
    assert TOKEN not in repr(token) and TOKEN not in str(token)
