"""Tool results in their wire form, built without the SDK's result models.

On the handshake protocols a plain tools/call skips the SDK's validation and
re-dump of its result: what `success`, `failure` and `media` build must be
exactly what the SDK's serializer makes of the same `CallToolResult`, for every
protocol version that path serves. Which calls take that path is a table too.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ledgerfs.engine import AllowedDirectories, Code, LedgerError, MediaFile, reply_json
from ledgerfs.engine.results import MediaInfo
from ledgerfs.engine.server import _plain_call, failure, media, success

MISSING = LedgerError(Code.NOT_FOUND, "No such file.", path="/w/a.txt")
WIRE = {
    "success": success(AllowedDirectories(directories=["/w", "/w/caf\udce9"])),
    "failure": failure(MISSING),
    "image": media(
        MediaFile(
            info=MediaInfo(
                path="/w/p.png",
                mime_type="image/png",
                kind="image",
                size=3,
                content_hash="blake3:00",
            ),
            data="AAAA",
        )
    ),
    "audio": media(
        MediaFile(
            info=MediaInfo(
                path="/w/s.wav",
                mime_type="audio/wav",
                kind="audio",
                size=3,
                content_hash="blake3:00",
            ),
            data="AAAA",
        )
    ),
}


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
@pytest.mark.parametrize("shape", list(WIRE))
def test_the_wire_form_is_what_the_sdk_makes_of_the_result(shape: str, version: str) -> None:
    wire = WIRE[shape]
    model = types.CallToolResult.model_validate(wire, by_name=False)
    dumped = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert methods.serialize_server_result("tools/call", version, dumped) == wire


@pytest.mark.parametrize(
    ("shape", "text", "is_error"),
    [
        ("success", '{"directories":["/w","/w/\\"caf\\\\xe9\\""]}', False),
        ("failure", reply_json(MISSING.envelope), True),
    ],
)
def test_a_text_result_is_its_json_twice(shape: str, text: str, is_error: bool) -> None:
    wire = WIRE[shape]
    assert wire["isError"] is is_error
    assert wire["content"] == [{"type": "text", "text": text}]
    assert wire["structuredContent"] == json.loads(text)


@pytest.mark.parametrize(
    ("params", "direct"),
    [
        ({"name": "read_file", "arguments": {"path": "a"}}, True),
        ({"name": "read_file"}, True),
        ({"name": "read_file", "arguments": None}, True),
        ({"name": "read_file", "arguments": {}, "_meta": {"progressToken": 7}}, True),
        ({"name": "read_file", "_meta": {"progressToken": "t"}}, True),
        ({"name": "read_file", "_meta": {"progressToken": True}}, False),
        ({"name": "read_file", "_meta": {"progressToken": 1.5}}, False),
        ({"name": "read_file", "_meta": {"other": 1}}, False),
        ({"name": "read_file", "_meta": []}, False),
        ({"name": "read_file", "task": {}}, False),
        ({"name": 3, "arguments": {}}, False),
        ({"arguments": {}}, False),
        ({"name": "read_file", "arguments": []}, False),
        ({"name": "read_file", "arguments": "x"}, False),
        (None, False),
        ([], False),
    ],
)
def test_which_calls_go_straight_to_the_tool(params: Any, direct: bool) -> None:
    assert _plain_call(params) is direct
    if direct:
        # Whatever goes straight to the tool is a call the protocol's model accepts.
        types.CallToolRequestParams.model_validate(params, by_name=False)
