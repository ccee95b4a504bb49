"""docs/hosts.md's snippets start a working server: each is run as its host would
run it (the two placeholder paths replaced) and answers through the SDK's client."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from ._support import REPO, free_port, ok, server_env, stop, wait_until_accepting

GUIDE = REPO / "docs" / "hosts.md"
COMMAND = "/path/to/ledgerfs/.venv/bin/ledgerfs"
PROJECT = "/path/to/project"
#: The `ledgerfs` command of the install the tests run (a host is given its absolute path).
LEDGERFS = str(Path(sys.executable).with_name("ledgerfs"))

pytestmark = pytest.mark.anyio


def blocks(language: str) -> list[str]:
    """The guide's fenced code blocks in `language`, in order."""
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def stdio_servers() -> list[tuple[str, dict[str, Any]]]:
    """(how the host names its file's key, the server's entry) of each stdio snippet."""
    found: list[tuple[str, dict[str, Any]]] = []
    for text in blocks("json"):
        config = json.loads(text)
        for key in ("mcpServers", "servers"):
            entry = config.get(key, {}).get("ledgerfs")
            if entry is not None and entry.get("type", "stdio") == "stdio":
                found.append((key, entry))
    return found


def commands(prefix: str) -> list[list[str]]:
    """The shell lines of the guide that start with `prefix`, as argument lists."""
    return [
        shlex.split(line)
        for text in blocks("sh")
        for line in text.splitlines()
        if line.startswith(prefix)
    ]


def placed(args: list[str], root: Path) -> list[str]:
    return [LEDGERFS if a == COMMAND else str(root) if a == PROJECT else a for a in args]


def test_the_guide_covers_each_host() -> None:
    keys = [key for key, _ in stdio_servers()]
    assert keys.count("mcpServers") >= 2 and keys.count("servers") >= 1  # Desktop, Cursor; VS Code
    assert commands("claude mcp add ledgerfs --")
    for place in ("Library/Application Support/Claude", "%APPDATA%", ".cursor/mcp.json"):
        assert place in GUIDE.read_text()


async def answers(client: Client, root: Path) -> None:
    names = [t.name for t in (await client.list_tools()).tools]
    assert "read_file" in names and "edit_file" in names
    assert ok(await client.call_tool("read_file", {"path": "hello.txt"}))["content"] == "hi\n"


def project(tmp_path: Path) -> Path:
    root = (tmp_path / "project").resolve()
    root.mkdir()
    (root / "hello.txt").write_text("hi\n")
    return root


@pytest.mark.parametrize("index", range(len(stdio_servers())))
async def test_a_json_snippet_starts_the_server(tmp_path: Path, index: int) -> None:
    _, entry = stdio_servers()[index]
    root = project(tmp_path)
    [command, *args] = placed([entry["command"], *entry["args"]], root)
    # A host passes little of its environment and its own working folder.
    params = StdioServerParameters(command=command, args=args, env=server_env(), cwd="/")
    async with Client(params) as client:
        await answers(client, root)


async def test_the_claude_code_command_starts_the_server(tmp_path: Path) -> None:
    [line] = commands("claude mcp add ledgerfs --")
    root = project(tmp_path)
    command, *args = placed(line[line.index("--") + 1 :], root)
    params = StdioServerParameters(command=command, args=args, env=server_env(), cwd="/")
    async with Client(params) as client:
        await answers(client, root)


async def test_the_http_snippets_reach_the_server(tmp_path: Path) -> None:
    [line] = commands(COMMAND + " serve")
    [url] = [
        entry["url"]
        for text in blocks("json")
        for entry in json.loads(text).get("servers", {}).values()
        if entry.get("type") == "http"
    ]
    root = project(tmp_path)
    port = str(free_port())
    argv = [a.replace(":8765", ":" + port) for a in placed(line, root)]
    proc = subprocess.Popen(
        argv, env=server_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_until_accepting(proc, int(port))
        async with Client(url.replace(":8765", ":" + port)) as client:
            await answers(client, root)
    finally:
        stop(proc)
