"""Every shape of JSON-RPC line gets exactly the reply JSON-RPC 2.0 (as MCP uses it) owes.

Raw lines go to a real `ledgerfs serve` over pipes; for each, the test reads every
reply the server writes before it answers a ping sent after the line, and checks
there is exactly the one expected (or none, for a notification or a response), with
its id and code. Wrongly shaped requests never run: a write they carry leaves no file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._support import Server, error, ok

NULL = None
VALIDATION = "VALIDATION"
RESULT = "result"


def line(**members: Any) -> bytes:
    return json.dumps(members).encode()


def request(ident: Any, method: Any = "ping", **rest: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, **rest}


def write(name: str) -> dict[str, Any]:
    return {"name": "write_file", "arguments": {"path": name, "content": "x"}}


# (case, line, the replies: (id, JSON-RPC error code, VALIDATION or RESULT), in order)
SHAPES: list[tuple[str, bytes, list[tuple[Any, Any]]]] = [
    # Batches: MCP has none; each request in it with a usable id is answered.
    (
        "batch-of-requests",
        json.dumps(
            [request("b1", "tools/call", params=write("w-batch.txt")), request("b2")]
        ).encode(),
        [("b1", -32600), ("b2", -32600)],
    ),
    ("batch-empty", b"[]", [(NULL, -32600)]),
    ("batch-of-junk", b"[1, 2, 3]", [(NULL, -32600)]),
    (
        "batch-of-notifications",
        json.dumps([{"jsonrpc": "2.0", "method": "notifications/initialized"}]).encode(),
        [(NULL, -32600)],
    ),
    (
        "batch-mixed",
        json.dumps([1, request(7), {"jsonrpc": "2.0", "id": 1.5, "method": "ping"}]).encode(),
        [(7, -32600)],
    ),
    # Ids that are neither a string nor an integer: null id.
    *[
        (
            f"id-{name}",
            line(**request(ident, "tools/call", params=write(f"w-{name}.txt"))),
            [(NULL, -32600)],
        )
        for name, ident in [
            ("float", 1.5),
            ("integral-float", 1.0),
            ("true", True),
            ("false", False),
            ("object", {"a": 1}),
            ("array", [1]),
            ("null", None),
        ]
    ],
    (
        "id-lone-surrogate",
        b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}',
        [(NULL, -32600)],
    ),
    # Wrong jsonrpc, method or params: the id echoed.
    (
        "jsonrpc-1.0",
        line(**{**request(11, "tools/call", params=write("w-v1.txt")), "jsonrpc": "1.0"}),
        [(11, -32600)],
    ),
    ("jsonrpc-number", line(**{**request(12), "jsonrpc": 2}), [(12, -32600)]),
    ("jsonrpc-missing", line(id=13, method="ping"), [(13, -32600)]),
    ("method-number", line(**request(14, 42)), [(14, -32600)]),
    ("method-missing", line(jsonrpc="2.0", id=15), [(15, -32600)]),
    ("method-null", line(**request(16, None)), [(16, -32600)]),
    ("params-list", line(**request(17, "tools/call", params=["write_file", {}])), [(17, -32602)]),
    ("params-string", line(**request(18, "tools/list", params="all")), [(18, -32600)]),
    ("params-number", line(**request(19, params=3)), [(19, -32600)]),
    ("params-true", line(**request(20, params=True)), [(20, -32600)]),
    # Lines that are no object.
    ("bare-string", b'"tools/list"', [(NULL, -32600)]),
    ("bare-number", b"42", [(NULL, -32600)]),
    ("bare-true", b"true", [(NULL, -32600)]),
    ("bare-null", b"null", [(NULL, -32600)]),
    ("empty-object", b"{}", [(NULL, -32600)]),
    # Invalid notifications are answered (JSON-RPC's own example), valid ones never.
    ("notification-method-number", line(jsonrpc="2.0", method=1, params="bar"), [(NULL, -32600)]),
    ("notification-no-jsonrpc", line(method="notifications/initialized"), [(NULL, -32600)]),
    ("notification-params-string", line(jsonrpc="2.0", method="x", params="y"), [(NULL, -32600)]),
    ("notification-unknown", line(jsonrpc="2.0", method="notifications/nothing"), []),
    ("notification-params-list", line(jsonrpc="2.0", method="notifications/x", params=[1]), []),
    (
        "notification-lone-surrogate",
        b'{"jsonrpc": "2.0", "method": "x", "params": {"a": "\\udc80"}}',
        [],
    ),
    # Responses are never answered.
    ("response", line(jsonrpc="2.0", id=99, result={}), []),
    ("error-response", line(jsonrpc="2.0", id=None, error={"code": 1, "message": "x"}), []),
    ("response-bad-id", line(jsonrpc="2.0", id=1.5, result=3), []),
    # Not JSON.
    ("not-json", b"{not json", [(NULL, -32700)]),
    ("nan", b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', [(NULL, -32700)]),
    ("cut-short", b'{"jsonrpc": "2.0", "id": 30, "method": "ping"', [(NULL, -32700)]),
    ("too-deep", b"[" * 100_000, [(NULL, -32700)]),
    ("blank", b"  \t ", []),
    # Methods: the SDK's -32601, and one whose name is not UTF-8 text.
    ("method-unknown", line(**request("u1", "no/such")), [("u1", -32601)]),
    (
        "method-lone-surrogate",
        b'{"jsonrpc": "2.0", "id": "u2", "method": "x\\ud800"}',
        [("u2", -32601)],
    ),
    # Text that is not UTF-8 in params.
    (
        "params-lone-surrogate",
        b'{"jsonrpc": "2.0", "id": "s1", "method": "tools/list", "params": {"cursor": "\\udc00"}}',
        [("s1", -32602)],
    ),
    (
        "tools-call-lone-surrogate",
        b'{"jsonrpc": "2.0", "id": "s2", "method": "tools/call", "params": '
        b'{"name": "write_file", "arguments": {"path": "w-\\ud800.txt", "content": ""}}}',
        [("s2", VALIDATION)],
    ),
    # Valid requests, for contrast: answered with a result.
    ("string-id", line(**request("plain")), [("plain", RESULT)]),
    ("huge-integer-id", line(**request(2**70)), [(2**70, RESULT)]),
    ("params-null", line(**request(21, params=None)), [(21, RESULT)]),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    base = tmp_path_factory.mktemp("shapes")
    root = base / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    server = Server(root, "--journal", base / "j.db")
    yield server, root
    stderr = server.close()
    assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize(
    ("sent", "expected"), [case[1:] for case in SHAPES], ids=[case[0] for case in SHAPES]
)
def test_each_shape_gets_exactly_its_reply(
    served: tuple[Server, Path], sent: bytes, expected: list[tuple[Any, Any]]
) -> None:
    server, root = served
    replies = server.replies_to(sent, len(expected))
    assert [reply.get("id") for reply in replies] == [ident for ident, _ in expected], replies
    for reply, (_, kind) in zip(replies, expected, strict=True):
        assert reply["jsonrpc"] == "2.0"
        if kind == RESULT:
            assert reply["result"] == {}, reply
        elif kind == VALIDATION:
            error(reply["result"], "VALIDATION")
        else:
            assert set(reply) == {"jsonrpc", "id", "error"}, reply
            assert reply["error"]["code"] == kind, reply
    # Nothing a refused line carried ran; the server still serves a normal call.
    assert sorted(p.name for p in root.iterdir()) == ["a.txt"]
    assert ok(server.call("read_file", {"path": "a.txt"}))["content"] == "alpha\n"


def test_every_request_in_a_batch_is_answered_by_its_id(served: tuple[Server, Path]) -> None:
    server, _ = served
    idents: list[Any] = [f"r{n}" for n in range(50)] + list(range(50))
    replies = server.replies_to(json.dumps([request(i) for i in idents]).encode(), len(idents))
    assert [reply["id"] for reply in replies] == idents
    assert {reply["error"]["code"] for reply in replies} == {-32600}
