"""Bytes on stdin that are no UTF-8, and lines over the cap, are refused: nothing reaches a disk.

Raw lines go to a real `ledgerfs serve` over pipes. A tools/call whose JSON is fine
but whose text holds bytes that are not UTF-8 gets the VALIDATION envelope naming
the field; any other such line `-32700` (with its id when the id is usable). A line
over the cap (6 x `--max-file-size` + 1 MiB) gets one refusal without being held
in memory. Each time: nothing on disk, no transaction in the journal, no U+FFFD
anywhere, and the server still serves.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine.stdio import line_cap

from ._support import Server, error, ok

MAX_FILE_SIZE = 4096
CAP = line_cap(MAX_FILE_SIZE)
REPLACEMENT = "\ufffd".encode()


def call(ident: Any, tool: bytes, arguments: bytes) -> bytes:
    """A tools/call line whose tool name and arguments are given as raw JSON bytes."""
    head = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call"}).encode()[:-1]
    return head + b', "params": {"name": "' + tool + b'", "arguments": ' + arguments + b"}}"


# (case, line, the reply: (id, VALIDATION and the field it names, or a JSON-RPC code))
NOT_UTF8: list[tuple[str, bytes, tuple[Any, Any]]] = [
    (
        "path",
        call(1, b"write_file", b'{"path": "caf\xe9.txt", "content": "x"}'),
        (1, ("VALIDATION", "path")),
    ),
    (
        "content",
        call(2, b"write_file", b'{"path": "c.txt", "content": "a\xffb"}'),
        (2, ("VALIDATION", "content")),
    ),
    (
        "encoded-surrogate",
        call(3, b"write_file", b'{"path": "s\xed\xa0\x80.txt", "content": ""}'),
        (3, ("VALIDATION", "path")),
    ),
    (
        "cut-character",
        call(4, b"write_file", b'{"path": "d.txt", "content": "\xe2\x82"}'),
        (4, ("VALIDATION", "content")),
    ),
    (
        "edit",
        call(
            5,
            b"edit_file",
            b'{"path": "a.txt", "edits": [{"old_text": "alpha", "new_text": "\xe9"}]}',
        ),
        (5, ("VALIDATION", "edits[0].new_text")),
    ),
    (
        "batch-path",
        call(6, b"batch", b'{"operations": [{"op": "write", "path": "\xff", "content": ""}]}'),
        (6, ("VALIDATION", "operations[0].path")),
    ),
    (
        "argument-key",
        call(7, b"write_file", b'{"path": "k.txt", "content": "", "\xfe": 1}'),
        (7, ("VALIDATION", "a key")),
    ),
    (
        "tool-name",
        call(8, b"write_fil\xe9", b'{"path": "n.txt", "content": ""}'),
        (8, ("VALIDATION", "name")),
    ),
    (
        "method-name",
        b'{"jsonrpc": "2.0", "id": "m", "method": "tools/c\xe1ll", "params": '
        b'{"name": "write_file", "arguments": {"path": "m.txt", "content": ""}}}',
        ("m", -32700),
    ),
    (
        "params-meta",
        b'{"jsonrpc": "2.0", "id": "meta", "method": "tools/call", "params": '
        b'{"name": "write_file", "arguments": {"path": "meta.txt", "content": ""}, '
        b'"_meta": {"x": "\xff"}}}',
        ("meta", -32700),
    ),
    (
        "id",
        b'{"jsonrpc": "2.0", "id": "\xff", "method": "tools/call", "params": '
        b'{"name": "write_file", "arguments": {"path": "i.txt", "content": ""}}}',
        (None, -32700),
    ),
    ("not-json", b"\xff\xfe{", (None, -32700)),
    ("notification", b'{"jsonrpc": "2.0", "method": "notifications/\xff"}', (None, -32700)),
    (
        "batch",
        b'[{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"x": "\xff"}}]',
        (9, -32700),
    ),
]


def over_the_cap(head: bytes, tail: bytes) -> bytes:
    return head + b"x" * (CAP + 1) + tail


# Lines over the cap: the id and method come from either end where they are plain.
TOO_LONG: list[tuple[str, bytes, tuple[Any, Any]]] = [
    (
        "tools-call-id-first",
        over_the_cap(
            b'{"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": '
            b'{"name": "write_file", "arguments": {"path": "big1.txt", "content": "',
            b'"}}}',
        ),
        (21, ("VALIDATION", "the request line")),
    ),
    (
        "tools-call-id-last",
        over_the_cap(
            b'{"method": "tools/call", "params": {"name": "write_file", '
            b'"arguments": {"path": "big2.txt", "content": "',
            b'"}}, "jsonrpc": "2.0", "id": "t22"}',
        ),
        ("t22", ("VALIDATION", "the request line")),
    ),
    (
        "other-method",
        over_the_cap(b'{"jsonrpc": "2.0", "id": 23, "method": "ping", "params": {"x": "', b'"}}'),
        (23, -32600),
    ),
    ("junk", over_the_cap(b"", b""), (None, -32600)),
    ("not-utf8", over_the_cap(b"\xff", b"\xfe"), (None, -32600)),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path, Path]]:
    base = tmp_path_factory.mktemp("bytes")
    root = base / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    journal = base / "journal"
    journal.mkdir()
    args = ("--journal", journal / "j.db", "--max-file-size", str(MAX_FILE_SIZE))
    server = Server(root, *args)
    yield server, root, journal
    stderr = server.close()
    assert "Traceback" not in stderr, stderr


def assert_nothing_changed(server: Server, root: Path, journal: Path) -> None:
    assert sorted(p.name for p in root.iterdir()) == ["a.txt"]
    assert (root / "a.txt").read_bytes() == b"alpha\n"
    assert ok(server.call("history", {}))["entries"] == []
    for path in [*root.rglob("*"), *journal.rglob("*")]:
        assert REPLACEMENT not in bytes(path), path
        if path.is_file():
            assert REPLACEMENT not in path.read_bytes(), path


def assert_reply(reply: dict[str, Any], ident: Any, kind: Any) -> None:
    assert reply["id"] == ident, reply
    if isinstance(kind, tuple):
        code, field = kind
        body = error(reply["result"], code)
        assert body["details"]["field"] == field, body
    else:
        assert reply["error"]["code"] == kind, reply


@pytest.mark.parametrize(
    ("sent", "expected"),
    [case[1:] for case in NOT_UTF8 + TOO_LONG],
    ids=[case[0] for case in NOT_UTF8 + TOO_LONG],
)
def test_each_line_gets_its_one_refusal_and_changes_nothing(
    served: tuple[Server, Path, Path], sent: bytes, expected: tuple[Any, Any]
) -> None:
    server, root, journal = served
    [reply] = server.replies_to(sent, 1)
    assert_reply(reply, *expected)
    assert_nothing_changed(server, root, journal)


def peak_memory(server: Server) -> int:
    """The server process's peak resident set, in bytes (Linux)."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    [line] = [row for row in status.splitlines() if row.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_line_far_over_the_cap_is_not_held_in_memory(
    served: tuple[Server, Path, Path],
) -> None:
    server, root, journal = served
    before = peak_memory(server)
    huge = b'{"jsonrpc": "2.0", "id": 31, "method": "ping", "params": {"x": "' + b"y" * (64 << 20)
    [reply] = server.replies_to(huge + b'"}}', 1)
    assert_reply(reply, 31, -32600)
    # The reader holds at most the cap (about 1 MiB here) and a read, not 64 MiB.
    assert peak_memory(server) - before < 16 << 20
    assert_nothing_changed(server, root, journal)


def test_the_largest_legitimate_request_fits_under_the_cap(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    # Every byte a control character: JSON escapes each in six (\u0001).
    content = "\x01" * MAX_FILE_SIZE
    args = ("--journal", tmp_path / "j.db", "--max-file-size", str(MAX_FILE_SIZE))
    with Server(root, *args) as server:
        line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "write_file",
                    "arguments": {"path": "big.bin", "content": content},
                },
            }
        ).encode()
        assert len(line) > 6 * MAX_FILE_SIZE
        [reply] = server.replies_to(line, 1)
        ok(reply["result"])
    assert (root / "big.bin").read_bytes() == content.encode()
