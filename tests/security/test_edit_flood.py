"""Edits are capped, and the heaviest edit the caps allow holds no other call.

Through the real stdio server: a call over MAX_EDITS is refused by the schema,
one whose searches would pass MAX_EDIT_SEARCH or whose texts pass max_file_size
is refused naming `edits` before any search (before its file is even read), and
nothing changes; at the caps the edits apply in order (each old_text once in the
text the edits before it left). While the heaviest allowed edit runs (its file
scanned on the worst text for a search), other calls are answered, each within a
timeout that only a freeze would pass and, compared in the same run, in a small
part of the edit's time.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine.bounds import MAX_FILE_SIZE
from ledgerfs.engine.planning import MAX_EDIT_SEARCH, MAX_EDITS

from ._support import Server, error, ok

#: An unrelated call's reply takes milliseconds; this only catches a freeze.
UNRELATED_TIMEOUT = 20.0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _marker(i: int) -> str:
    # Thirty a's first: every line of the file's body starts a near match.
    return f"{'a' * 30}X{i:06d}\n"


def _hostile_file(path: Path, size: int, markers: int) -> None:
    """`size` bytes of a-lines (a slow text to search for an a-run) ending in markers."""
    tail = "".join(_marker(i) for i in range(markers))
    body = ("a" * 1023 + "\n") * ((size - len(tail)) // 1024)
    path.write_text(body + tail)


def _edits(count: int) -> list[dict[str, str]]:
    return [{"old_text": _marker(i), "new_text": f"Y{i:06d}\n"} for i in range(count)]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A file of MAX_EDITS + 1 distinct lines."""
    path = tmp_path / "small.txt"
    path.write_text("".join(f"line {i}\n" for i in range(MAX_EDITS + 1)))
    return path


def _line_edits(count: int) -> list[dict[str, str]]:
    return [{"old_text": f"line {i}\n", "new_text": f"LINE {i}\n"} for i in range(count)]


@pytest.mark.parametrize("tool", ["edit_file", "batch"])
def test_edits_at_the_cap_apply_and_one_more_is_refused(small: Path, tool: str) -> None:
    def call(server: Server, edits: list[dict[str, str]]) -> dict[str, Any]:
        arguments: dict[str, Any] = {"path": "small.txt", "edits": edits, "allow_rewrite": True}
        if tool == "batch":
            arguments = {"operations": [{"op": "edit", **arguments}]}
        return server.call(tool, arguments)

    before = _digest(small)
    with Server(small.parent) as server:
        body = error(call(server, _line_edits(MAX_EDITS + 1)), "VALIDATION")
        assert "edits" in body["message"] and str(MAX_EDITS) in body["message"], body
        assert _digest(small) == before
        ok(call(server, _line_edits(MAX_EDITS)))
    lines = small.read_text().splitlines()
    assert lines[:MAX_EDITS] == [f"LINE {i}" for i in range(MAX_EDITS)]
    assert lines[MAX_EDITS] == f"line {MAX_EDITS}"


@pytest.mark.parametrize(
    ("edits", "reason", "field"),
    [
        # The last of a thousand edits matches twice where the others left it: refused.
        ([*_line_edits(MAX_EDITS - 1), {"old_text": "LINE 1", "new_text": "x"}], None, None),
        # An edit of a text an earlier edit replaced finds it nowhere.
        ([*_line_edits(3), {"old_text": "line 2\n", "new_text": "y\n"}], None, "edits[3].old_text"),
        (
            [{"old_text": "line 1000\n", "new_text": "last\n"}, {"old_text": "", "new_text": "z"}],
            None,
            "edits[1].old_text",
        ),
        ([{"old_text": "absent", "new_text": "z"}], None, "edits[0].old_text"),
    ],
    ids=["ambiguous-last-of-the-cap", "replaced-before", "empty", "absent"],
)
def test_a_bad_edit_at_the_cap_is_refused_as_before(
    small: Path, edits: list[dict[str, str]], reason: str | None, field: str | None
) -> None:
    before = _digest(small)
    with Server(small.parent) as server:
        result = server.call(
            "edit_file", {"path": "small.txt", "edits": edits, "allow_rewrite": True}
        )
        body = error(result, "VALIDATION")
    if reason is not None:
        assert body["details"]["reason"] == reason
    if field is not None:
        assert body["details"]["field"] == field
    if reason is None and field is None:
        # "LINE 1" is in "LINE 1\n", "LINE 10\n", ...: every match is counted.
        assert body["details"]["field"] == f"edits[{MAX_EDITS - 1}].old_text"
        assert body["details"]["matches"] == 1 + 10 + 100
        assert body["details"]["lines"][:3] == [2, 11, 12]
    assert _digest(small) == before


def test_edits_that_would_search_past_the_cap_are_refused_before_searching(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.txt"
    _hostile_file(path, MAX_FILE_SIZE, 64)
    size = path.stat().st_size
    most = MAX_EDIT_SEARCH // size
    before = _digest(path)
    with Server(tmp_path) as server:
        for dry_run in (True, False):
            arguments = {"path": "big.txt", "edits": _edits(most + 1), "dry_run": dry_run}
            body = error(server.call("edit_file", arguments), "VALIDATION")
            details = body["details"]
            assert (details["field"], details["reason"]) == ("edits", "edit_search_too_large")
            assert (details["edits"], details["max_edits"]) == (most + 1, most)
            # Spread over a batch, the edits share the call's search.
            half = (most + 1) // 2 + 1
            ops = [
                {"op": "edit", "path": "big.txt", "edits": _edits(64)[:half]},
                {"op": "edit", "path": "big.txt", "edits": _edits(64)[half : 2 * half]},
            ]
            body = error(server.call("batch", {"operations": ops, "dry_run": dry_run}))
            assert body["details"]["reason"] == "edit_search_too_large", body
    assert _digest(path) == before


def _bytes_read(pid: int) -> int:
    """What the process has read through read(2) and its kin so far (rchar)."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["rchar"])


@pytest.mark.parametrize("tool", ["edit_file", "batch"])
def test_edits_over_the_search_cap_are_refused_without_reading_the_file(
    tmp_path: Path, tool: str
) -> None:
    """A refusal costs a stat: the server reads none of the file it refuses to search."""
    path = tmp_path / "big.txt"
    _hostile_file(path, MAX_FILE_SIZE, 64)
    edits = _edits(MAX_EDIT_SEARCH // path.stat().st_size + 1)
    arguments: dict[str, Any] = {"path": "big.txt", "edits": edits}
    if tool == "batch":
        arguments = {"operations": [{"op": "edit", **arguments}]}
    with Server(tmp_path) as server:
        ok(server.call("list_allowed_directories", {}))
        before = _bytes_read(server.proc.pid)
        for _ in range(3):
            body = error(server.call(tool, arguments), "VALIDATION")
            assert body["details"]["reason"] == "edit_search_too_large", body
        read = _bytes_read(server.proc.pid) - before
    # Three requests' lines and the journal's pages, against three reads of the file.
    assert read < path.stat().st_size // 4, read


def test_an_edit_after_a_write_of_the_same_file_is_judged_on_what_the_write_made(
    tmp_path: Path,
) -> None:
    """The check before loading takes the file on disk; a file the call itself
    changes first is judged by the planner on what it will hold."""
    path = tmp_path / "big.txt"
    _hostile_file(path, MAX_FILE_SIZE, 64)
    before = _digest(path)
    edits = _edits(MAX_EDIT_SEARCH // path.stat().st_size + 1)
    small = "".join(_marker(i) for i in range(len(edits)))
    ops = [
        {"op": "write", "path": "big.txt", "content": small},
        {"op": "edit", "path": "big.txt", "edits": edits, "allow_rewrite": True},
    ]
    with Server(tmp_path) as server:
        ok(server.call("batch", {"operations": ops, "dry_run": True}))
    assert _digest(path) == before


def test_edit_texts_over_the_file_size_cap_are_refused(small: Path) -> None:
    half = MAX_FILE_SIZE // 2 + 1
    edits = [{"old_text": "x" * half, "new_text": "y" * half}]
    before = _digest(small)
    with Server(small.parent) as server:
        body = error(server.call("edit_file", {"path": "small.txt", "edits": edits}), "VALIDATION")
    assert (body["details"]["field"], body["details"]["reason"]) == ("edits", "edits_too_large")
    assert _digest(small) == before


def test_the_heaviest_allowed_edit_holds_no_other_call(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    # The file as big as a file may be, and as many edits as its size allows.
    count = 20
    _hostile_file(path, MAX_FILE_SIZE, count)
    assert (count + 1) * path.stat().st_size > MAX_EDIT_SEARCH >= count * path.stat().st_size
    waits: list[float] = []
    with Server(tmp_path) as server:
        arguments = {"path": "big.txt", "edits": _edits(count), "dry_run": True}
        started = time.monotonic()
        heavy = _send(server, "edit_file", arguments)
        done = False
        while not done:
            # One unrelated call at a time, until the edit's reply has come.
            sent = time.monotonic()
            unrelated = _send(server, "list_allowed_directories", {})
            while (reply := server.read_message(UNRELATED_TIMEOUT)).get("id") != unrelated:
                assert reply.get("id") == heavy, reply
                ok(reply["result"])
                took = time.monotonic() - started
                done = True
            waits.append(time.monotonic() - sent)
    # Compared in one run: a server that held the others while it searched makes
    # one of them wait about as long as the search itself.
    assert max(waits) < took / 4, (max(waits), took, len(waits))


def _send(server: Server, tool: str, arguments: dict[str, Any]) -> int:
    """Send a tools/call without waiting for its reply; return its id."""
    server._next += 1
    line = {
        "jsonrpc": "2.0",
        "id": server._next,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    server.send_raw(json.dumps(line))
    return server._next
