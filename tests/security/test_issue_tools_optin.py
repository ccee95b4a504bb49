"""The issue tools are off until the operator enables them (`--issue-tools`).

They post to GitHub or GitLab with the user's credentials, so a server started
without the flag neither lists them nor runs them: through the official MCP client
over stdio, every issue tool is missing from `tools/list` and a call to it is
TOOL_UNAVAILABLE naming the flag (before, all five were listed and ran). With the
flag they are listed; naming one in `--tools` without the flag refuses to start
(VALIDATION), and the engine's config behaves the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from ledgerfs.engine import ISSUE_TOOLS, Code, Engine, LedgerError
from tests.server._support import REPO, envelope, serve_args, server_env, stdio_params

#: A call of each issue tool with arguments it accepts.
CALLS: dict[str, dict[str, Any]] = {
    "issue_read": {"number": 1},
    "issue_list": {"state": "open", "limit": 5},
    "issue_create": {"title": "t", "body": "b"},
    "issue_comment": {"number": 1, "body": "b"},
    "issue_reconcile": {},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    return folder.resolve()


def test_the_table_covers_every_issue_tool() -> None:
    assert set(CALLS) == set(ISSUE_TOOLS)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "flags",
    [[], ["--readonly"], ["--tools", "read_file,write_file"], ["--allow-secrets"]],
    ids=["default", "readonly", "tools", "other flags"],
)
async def test_off_by_default_neither_listed_nor_run(root: Path, flags: list[str]) -> None:
    async with Client(stdio_params(root, *flags)) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed.isdisjoint(ISSUE_TOOLS), listed
        for tool, arguments in CALLS.items():
            body = envelope(await client.call_tool(tool, arguments), "TOOL_UNAVAILABLE")
            assert body["details"] == {"tool": tool, "reason": "issue_tools_off"}, body
            assert "--issue-tools" in body["suggestion"], body
            assert body["retryable"] is False and body["recovery"] == "fix_arguments"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--issue-tools"], set(ISSUE_TOOLS)),
        (["--issue-tools", "--readonly"], {"issue_read", "issue_list"}),
        (["--issue-tools", "--tools", "read_file,issue_read"], {"issue_read"}),
        (["--issue-tools", "--tools", "read_file"], set()),
    ],
)
async def test_listed_when_enabled(root: Path, flags: list[str], expected: set[str]) -> None:
    async with Client(stdio_params(root, *flags)) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert listed & set(ISSUE_TOOLS) == expected
        # Enabled, a call reaches the tool: no remote here, so a provider code (or,
        # for reconcile, a result), never the opt-in refusal.
        for tool in expected:
            result = await client.call_tool(tool, CALLS[tool])
            if result.is_error:
                assert isinstance(result.structured_content, dict)
                assert result.structured_content["error"]["details"].get("reason") != (
                    "issue_tools_off"
                )


def test_naming_an_issue_tool_in_tools_without_the_flag_refuses_to_start(root: Path) -> None:
    done = subprocess.run(
        [sys.executable, *serve_args(root, "--tools", "read_file,issue_create", "--json")],
        env=server_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done
    body = json.loads(done.stderr)["error"]
    assert body["code"] == "VALIDATION"
    assert body["details"]["tools"] == ["issue_create"] and "--issue-tools" in body["suggestion"]


@pytest.mark.anyio
async def test_the_embedding_config_defaults_to_off(root: Path, tmp_path: Path) -> None:
    config = {"roots": [str(root)], "journal": str(tmp_path / "j.db")}
    async with Engine.open(config) as engine:
        session = await engine.session()
        for tool, arguments in CALLS.items():
            with pytest.raises(LedgerError) as caught:
                await session.call(tool, arguments)
            assert caught.value.code is Code.TOOL_UNAVAILABLE
    with pytest.raises(LedgerError) as refused:
        async with Engine.open({**config, "tools": ["issue_read"]}):
            pass
    assert refused.value.code is Code.VALIDATION
