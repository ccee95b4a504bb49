"""`ledgerfs serve` that cannot start tells an MCP client why, not just "Connection closed"."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from ledgerfs.engine import Code, LedgerError
from ledgerfs.engine.failedstart import refuse_stdio
from tests.server._support import stdio_params


def leaves(group: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(group, BaseExceptionGroup):
        return [leaf for inner in group.exceptions for leaf in leaves(inner)]
    return [group]


async def refusal(*args: str | Path) -> MCPError:
    with pytest.raises(BaseException) as caught:
        async with Client(stdio_params(*args)):
            pass
    [error] = [e for e in leaves(caught.value) if isinstance(e, MCPError)]
    return error


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "code"),
    [(["missing"], "NOT_FOUND"), ([], "ROOTS_EMPTY"), (["ROOT", "--tools", "nope"], "VALIDATION")],
    ids=["missing-root", "no-root", "bad-flag"],
)
async def test_a_server_that_cannot_start_answers_the_handshake_with_its_envelope(
    tmp_path: Path, args: list[str], code: str
) -> None:
    spelled = [str(tmp_path / a) if a in {"missing", "ROOT"} else a for a in args]
    if "ROOT" in args:
        (tmp_path / "ROOT").mkdir()
    error = await refusal(*spelled)
    assert error.message.startswith(f"ledgerfs could not start: {code}: ")
    data: Any = error.error.data
    assert data["error"]["code"] == code
    assert data["error"]["recovery"] == "fix_arguments"
    assert "list_directory" not in error.message
    assert not (tmp_path / "missing").exists()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server is a subprocess; one client loop is enough


def test_refusal_answers_requests_only_and_stops_at_the_handshake() -> None:
    lines = [
        "not json\n",
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}\n',
        '{"jsonrpc": "2.0", "id": "probe", "method": "server/discover", "params": {}}\n',
        '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}\n',
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n',
    ]
    stdin, stdout = io.StringIO("".join(lines)), io.StringIO()
    refuse_stdio(LedgerError(Code.ROOTS_EMPTY), stdin, stdout)
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a["id"] for a in answers] == ["probe", 1]
    for answer in answers:
        assert answer["error"]["data"]["error"]["code"] == "ROOTS_EMPTY"
        assert answer["error"]["code"] == -32603
    assert stdin.readline() == lines[-1]  # nothing read past the handshake
