"""Every request gets exactly one reply, and every failure is an envelope with the code that fits.

Tables of hostile arguments (lone surrogates, huge integers, names that are not
UTF-8, paths through a file) go through the engine and the real stdio server;
then hypothesis sends random tools with hostile arguments over stdio and checks
that each request is answered once, in time, never with "Internal server error",
and that the server's stderr never shows a traceback. A second fuzz sends
arbitrary lines (JSON-RPC messages of every shape, batches, any JSON value, any
bytes) and checks that each line gets exactly the replies JSON-RPC owes it: one
for every request that carries an id, none for a notification or a response.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import TOOLS, Code, Engine, LedgerError
from ledgerfs.engine import errors as engine_errors
from ledgerfs.journal import errno_name

from ._support import Server, error, ok

HUGE = [2**63, 10**30, -(2**64)]

# (tool, arguments, field the VALIDATION envelope names)
BAD_ARGUMENTS = [
    ("write_file", {"path": "a\ud800.txt", "content": "x"}, "path"),
    ("write_file", {"path": "a.txt", "content": "x\udfff"}, "content"),
    (
        "edit_file",
        {"path": "a.txt", "edits": [{"old_text": "\udc80", "new_text": "y"}]},
        "edits[0].old_text",
    ),
    ("read_file", {"path": "a.txt", "\ud800": 1}, "a key"),
    (
        "batch",
        {"operations": [{"op": "write", "path": "b\udcff", "content": ""}]},
        "operations[0].path",
    ),
    *[("history", {"transaction": n}, None) for n in HUGE],
    *[("undo", {"transaction": n}, None) for n in HUGE],
    ("read_file", {"path": "a.txt", "offset": 10**30}, None),
    ("read_file", {"path": "a.txt", "limit": 2**64}, None),
    ("issue_read", {"number": 2**63}, None),
]

# Paths through a file: one errno (ENOTDIR), one code (NOT_FOUND), whatever the tool.
THROUGH_A_FILE = [
    ("read_file", {"path": "a.txt/x"}),
    ("get_file_info", {"path": "a.txt/x"}),
    ("list_directory", {"path": "a.txt/x"}),
    ("write_file", {"path": "a.txt/x/y", "content": "z"}),
    ("delete_file", {"path": "a.txt/x"}),
    ("move_file", {"source": "a.txt/x", "destination": "b.txt"}),
    ("create_directory", {"path": "a.txt/d"}),
]

BAD_NAME = b"caf\xe9 \xff.txt"  # Latin-1 bytes: not UTF-8
ESCAPED = '"caf\\xe9 \\xff.txt"'


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    (folder / os.fsdecode(BAD_NAME)).write_bytes(b"one\ntwo\n")
    return folder


def test_server_answers_bad_arguments_with_validation(root: Path, tmp_path: Path) -> None:
    with Server(root, "--journal", tmp_path / "j.db", "--issue-tools") as server:
        for tool, arguments, field in BAD_ARGUMENTS:
            body = error(server.call(tool, arguments), "VALIDATION")
            if field is not None:
                assert body["details"]["field"] == field, body
        for tool, arguments in THROUGH_A_FILE:
            body = error(server.call(tool, arguments), "NOT_FOUND")
    assert (root / "a.txt").read_text() == "alpha\n"
    assert sorted(p.name for p in root.iterdir()) == sorted(["a.txt", os.fsdecode(BAD_NAME)])


@pytest.mark.anyio
async def test_engine_answers_bad_arguments_with_validation(root: Path, tmp_path: Path) -> None:
    config = {"roots": [str(root)], "journal": str(tmp_path / "j.db"), "issue_tools": True}
    async with Engine.open(config) as engine:
        session = await engine.session()
        for tool, arguments, field in BAD_ARGUMENTS:
            with pytest.raises(LedgerError) as caught:
                await session.call(tool, arguments)
            assert caught.value.code is Code.VALIDATION, (tool, caught.value)
            if field is not None:
                assert caught.value.details["field"] == field
        for tool, arguments in THROUGH_A_FILE:
            with pytest.raises(LedgerError) as caught:
                await session.call(tool, arguments)
            assert caught.value.code is Code.NOT_FOUND, (tool, caught.value)
    assert (root / "a.txt").read_text() == "alpha\n"


def test_names_that_are_not_utf8_are_escaped_and_can_be_passed_back(
    root: Path, tmp_path: Path
) -> None:
    git_env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    from .test_git_exec import git

    git(root, "init", "-q")
    git(root, "add", ".")
    with Server(root, "--journal", tmp_path / "j.db", env=git_env) as server:
        listing = ok(server.call("list_directory", {"path": "."}))
        assert sorted(e["name"] for e in listing["entries"]) == sorted([".git", "a.txt", ESCAPED])
        status = ok(server.call("git_status", {}))
        assert ESCAPED in [f["path"] for f in status["files"]]
        read = ok(server.call("read_file", {"path": ESCAPED}))
        assert (read["content"], read["path"]) == ("one\ntwo\n", f"{root}/{ESCAPED}")
        patch = f"--- a/{ESCAPED}\n+++ b/{ESCAPED}\n@@ -1 +1 @@\n-nope\n+x\n"
        failed = error(server.call("apply_patch", {"patch": patch}), "PATCH_FAILED")
        assert failed["path"] == f"{root}/{ESCAPED}"
        written = ok(
            server.call(
                "edit_file",
                {
                    "path": ESCAPED,
                    "edits": [{"old_text": "two", "new_text": "2"}],
                    "expected_hash": read["content_hash"],
                },
            )
        )
        history = ok(server.call("history", {"path": ESCAPED}))
        assert history["entries"][0]["transaction"] == written["transaction"]
        assert history["entries"][0]["mutations"][0]["path"] == f"{root}/{ESCAPED}"
        ok(server.call("move_file", {"source": ESCAPED, "destination": "plain.txt"}))
        ok(server.call("undo", {"transaction": written["transaction"] + 1}))
    assert (root / os.fsdecode(BAD_NAME)).read_bytes() == b"one\n2\n"


RAW_LINES = [
    # (line, expected reply: "validation" envelope, or a JSON-RPC error code)
    (
        '{"jsonrpc":"2.0","id":"L1","method":"tools/call",'
        '"params":{"name":"read_file","arguments":{"path":"\\ud800"}}}',
        "validation",
    ),
    ('{"jsonrpc":"2.0","id":"L2","method":"tools/list","params":{"cursor":"\\udc00"}}', -32602),
    ('{"jsonrpc":"2.0","id":"L3","method":"tools/call","params":{"name":"\\ud800"}}', "validation"),
    ("{not json at all", -32700),
]


def test_lines_the_sdk_cannot_parse_get_one_reply(root: Path, tmp_path: Path) -> None:
    with Server(root, "--journal", tmp_path / "j.db") as server:
        for line, expected in RAW_LINES:
            server.send_raw(line)
            reply = server.read_message()
            if expected == "validation":
                error(reply["result"], "VALIDATION")
            else:
                assert reply["error"]["code"] == expected, reply
        # The connection still works.
        assert ok(server.call("read_file", {"path": "a.txt"}))["content"] == "alpha\n"


def test_one_errno_name() -> None:
    assert engine_errors.errno_name is errno_name
    assert errno_name(NotADirectoryError(20, "x")) == "ENOTDIR"
    assert errno_name(OSError("no errno")) == "OSError"


# ---------------------------------------------------------------- fuzzing

HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "\ud800",
            "a\udcff/b",
            "\x00",
            "a.txt",
            "../../../etc/passwd",
            "/etc/shadow",
            ".git/config",
            ".ledgerfs/journal.db",
            "\u202etxt.exe",
            "\uff0e\uff0e/x",
            '"\\xff"',
            "x" * 5000,
            "a/" * 300,
            "*** Begin Patch",
            "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-alpha\n+beta\n",
        ]
    ),
)
SCALARS = st.one_of(
    HOSTILE_TEXT,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(HOSTILE_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)
ARGUMENT_NAMES = [
    "path", "content", "encoding", "edits", "old_text", "new_text", "patch", "source",
    "destination", "operations", "op", "transaction", "limit", "offset", "expected_hash",
    "expected_hashes", "expected_status_hash", "dry_run", "allow_rewrite", "number",
    "repo_path", "state", "title", "body",
]  # fmt: skip
ARGUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(ARGUMENT_NAMES) | HOSTILE_TEXT, JUNK, max_size=5),
    JUNK,
)
# Issue tools reach out to GitHub or GitLab: not what this boundary test is about.
LOCAL_TOOLS = [name for name in TOOLS if not name.startswith("issue_")]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("fuzz")
    root = base / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    server = Server(root, "--journal", base / "j.db")
    yield server
    stderr = server.close()
    assert "Traceback" not in stderr, stderr


def check_answer(server: Server, tool: Any, arguments: Any) -> None:
    reply = server.request("tools/call", {"name": tool, "arguments": arguments})
    text = json.dumps(reply, ensure_ascii=True)
    assert "Internal server error" not in text, reply
    if "error" in reply:
        # The SDK refuses params it cannot type (arguments not an object...).
        assert reply["error"]["code"] in (-32602, -32600), reply
        return
    result = reply["result"]
    if result.get("isError"):
        body = error(result)
        assert body["code"] in Code.__members__, body
        assert "unexpectedly" not in body["message"], body
    else:
        ok(result)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tool=st.sampled_from(LOCAL_TOOLS) | HOSTILE_TEXT, arguments=ARGUMENTS)
def test_fuzz_every_request_gets_one_reply(fuzzed: Server, tool: Any, arguments: Any) -> None:
    check_answer(fuzzed, tool, arguments)


@pytest.mark.soak
@settings(
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tool=st.sampled_from(LOCAL_TOOLS) | HOSTILE_TEXT, arguments=ARGUMENTS)
def test_fuzz_soak(fuzzed: Server, tool: Any, arguments: Any) -> None:
    check_answer(fuzzed, tool, arguments)


# ---------------------------------------------------------------- fuzzing whole lines

IDS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8),
    st.sampled_from([1.5, 1.0, True, False, None, "\ud800", [1], {"a": 1}]),
)
METHODS = st.one_of(
    st.sampled_from(["ping", "tools/list", "tools/call", "no/such", "notifications/initialized"]),
    HOSTILE_TEXT,
    st.sampled_from([1, None, ["ping"]]),
)
PARAMS = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(LOCAL_TOOLS), "arguments": ARGUMENTS}),
    JUNK,
)
MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | st.sampled_from(["1.0", 2, None]),
        "id": IDS,
        "method": METHODS,
        "params": PARAMS,
    },
)
RESPONSES = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "id": IDS}, optional={"result": JUNK, "error": JUNK}
)
VALUES = st.one_of(MESSAGES, RESPONSES, st.lists(MESSAGES | JUNK, max_size=4), JUNK)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """One line of any kind: a JSON value (escaped or as raw text), or any bytes."""
    kind = draw(st.sampled_from(["json", "raw-text", "bytes", "spliced"]))
    if kind == "bytes":
        return draw(st.binary(max_size=80)).replace(b"\n", b"")
    value = draw(VALUES)
    if kind == "json":
        return json.dumps(value).encode()
    # Lone surrogates as raw text: bytes that are not UTF-8.
    line = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == "spliced":  # a stray byte anywhere
        at = draw(st.integers(min_value=0, max_value=len(line)))
        line = line[:at] + draw(st.binary(min_size=1, max_size=2)) + line[at:]
    return line.replace(b"\n", b"")


def _no_constant(name: str) -> None:
    raise ValueError(name)


def owed_replies(line: bytes) -> list[Any]:
    """The ids of the replies JSON-RPC 2.0 (as MCP uses it) owes `line`; None for a null id."""
    if not line.strip():
        return []
    try:
        text, not_utf8 = line.decode(), False
    except UnicodeDecodeError:
        text, not_utf8 = line.decode("utf-8", "surrogateescape"), True
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return [None]
    if isinstance(value, list):  # a batch: refused whole, each request by its id
        owed = [usable_id(v.get("id")) for v in value if isinstance(v, dict) and is_request(v)]
        return [ident for ident in owed if ident is not None] or [None]
    if not isinstance(value, dict):
        return [None]
    if not is_request(value):
        return []  # a response is never answered
    if "id" in value:
        return [usable_id(value["id"])]
    notification = (
        value.get("jsonrpc") == "2.0"
        and isinstance(value.get("method"), str)
        and isinstance(value.get("params"), dict | list | None)
    )
    return [] if notification and not not_utf8 else [None]


def is_request(value: dict[str, Any]) -> bool:
    return "method" in value or not ({"result", "error"} & set(value))


def usable_id(ident: Any) -> Any:
    if isinstance(ident, int) and not isinstance(ident, bool):
        return ident
    if (
        isinstance(ident, str)
        and ident.encode("utf-8", "surrogatepass").decode("utf-8", "replace") == ident
    ):
        return ident
    return None


def check_line(server: Server, line: bytes) -> None:
    owed = owed_replies(line)
    replies = server.replies_to(line, len(owed))
    assert sorted(map(repr, (r.get("id") for r in replies))) == sorted(map(repr, owed)), replies
    for reply in replies:
        assert "Internal server error" not in json.dumps(reply), reply


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(line=lines())
def test_fuzz_every_line_gets_the_replies_it_is_owed(fuzzed: Server, line: bytes) -> None:
    check_line(fuzzed, line)


@pytest.mark.soak
@settings(
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(line=lines())
def test_fuzz_lines_soak(fuzzed: Server, line: bytes) -> None:
    check_line(fuzzed, line)
