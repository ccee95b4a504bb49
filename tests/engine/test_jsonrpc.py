"""How a line is judged, in-process: the message for the SDK, or the refusals it is owed.

The same rules run through a real server in tests/security/test_jsonrpc_shapes.py;
here the cases the server cannot show cheaply: what reaches the SDK, and the ids an
oversized line's ends give up (or must not).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest

from ledgerfs.engine.jsonrpc import Refusal, classify, refuse_oversized


def refusals(line: bytes) -> list[tuple[Any, int, str]]:
    judged = classify(line)
    assert isinstance(judged, list), judged
    return [(r.id, r.code, r.fault) for r in judged]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', types.JSONRPCRequest),
        (b'{"jsonrpc": "2.0", "id": "a", "method": "x", "params": null}', types.JSONRPCRequest),
        (b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', types.JSONRPCNotification),
        (b'{"jsonrpc": "2.0", "id": 1, "result": {}}', types.JSONRPCResponse),
        (
            b'{"jsonrpc": "2.0", "id": null, "error": {"code": 1, "message": "x"}}',
            types.JSONRPCError,
        ),
        # Nested deeper than the SDK's parser goes: the second parser takes it.
        (
            b'{"jsonrpc": "2.0", "id": 2, "method": "x", "params": {"a": '
            + b"[" * 300
            + b"]" * 300
            + b"}}",
            types.JSONRPCRequest,
        ),
    ],
)
def test_a_valid_message_reaches_the_sdk(line: bytes, kind: type) -> None:
    assert type(classify(line)) is kind


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', [(None, -32600, "shape")]),
        (b'{"jsonrpc": "2.0", "id": 3, "method": 1}', [(3, -32600, "shape")]),
        (b'{"jsonrpc": "2.0", "id": 3, "method": "x", "params": [1]}', [(3, -32602, "shape")]),
        (
            b'{"jsonrpc": "2.0", "id": 3, "method": "x", "params": {"a": "\\udc80"}}',
            [(3, -32602, "not_utf8")],
        ),
        (
            b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"a": "\xff"}}',
            [(3, -32700, "not_utf8")],
        ),
        (
            b'{"jsonrpc": "2.0", "id": 3, "method": "x", "params": {"a": "\xff"}}',
            [(3, -32700, "shape")],
        ),
        (b'{"jsonrpc": "2.0", "method": "x", "params": {"a": "\xff"}}', [(None, -32700, "shape")]),
        (b'{"jsonrpc": "2.0", "method": "x", "params": {"a": "\\udc80"}}', []),
        (b'{"jsonrpc": "2.0", "id": 0, "result": []}', []),
        (
            b'[{"id": 1, "method": "a"}, {"id": 2, "result": {}}, {"id": "z"}]',
            [(1, -32600, "shape"), ("z", -32600, "shape")],
        ),
        (b"[]", [(None, -32600, "shape")]),
        (b"\r", []),
        (b"Infinity", [(None, -32700, "shape")]),
        (b'{"id": 1e400}', [(None, -32600, "shape")]),
    ],
)
def test_a_refused_line_gets_its_refusals(
    line: bytes, expected: list[tuple[Any, int, str]]
) -> None:
    assert refusals(line) == expected


def test_a_tools_call_refused_for_its_text_carries_its_params() -> None:
    [refusal] = classify(
        b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", '
        b'"params": {"name": "write_file", "arguments": {"path": "caf\xe9"}}}'
    )
    assert isinstance(refusal, Refusal)
    assert refusal.method == "tools/call"
    assert refusal.params == {"name": "write_file", "arguments": {"path": "caf\udce9"}}


CONTENT = "x" * 50


@pytest.mark.parametrize(
    ("message", "ident", "method"),
    [
        (
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"c": CONTENT}},
            7,
            "tools/call",
        ),
        (
            {"method": "tools/call", "params": {"c": CONTENT}, "jsonrpc": "2.0", "id": "q"},
            "q",
            "tools/call",
        ),
        ({"id": -3, "jsonrpc": "2.0", "params": {"c": CONTENT}, "method": "ping"}, -3, "ping"),
        # Quotes and backslashes at the end of the content do not end it early.
        ({"method": "m", "params": {"c": CONTENT + '\\", "id": 9}'}, "id": "r"}, "r", "m"),
        ({"method": "m", "params": {"c": CONTENT + "\\"}, "id": 's\\"t'}, 's\\"t', "m"),
        # An id inside params is no id of the request.
        ({"jsonrpc": "2.0", "method": "m", "params": {"c": CONTENT, "id": 5}}, None, "m"),
        ({"jsonrpc": "2.0", "method": "m", "params": {"id": 5, "c": CONTENT}}, None, "m"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m", "params": {"c": CONTENT}}, None, "m"),
    ],
)
def test_an_oversized_lines_id_and_method_come_from_its_plain_ends(
    message: dict[str, Any], ident: Any, method: str
) -> None:
    line = json.dumps(message, separators=(",", ":")).encode()
    head, tail = line[:60], line[-60:]
    refusal = refuse_oversized(head, tail, len(line), 10)
    assert (refusal.id, refusal.method, refusal.code, refusal.fault) == (
        ident,
        method,
        -32600,
        "too_long",
    )
