"""The server's log: every unexpected failure under an incident id, nothing secret.

An unexpected failure (an exception no boundary maps to a code) answers
TOOL_UNAVAILABLE; its envelope's `details.incident` names the log entry that holds
the traceback, and the suggestion names the incident and the log. Before, the
envelope said "report this to the server's operator" and nothing was logged.

Through the real stdio server: a journal row damaged on disk (its mutations no
longer decode, as a disk fault or another program could leave it) makes `history`
and `undo` raise what no boundary maps (before, the client got VALIDATION
"Invalid arguments" for arguments that were fine). The log file then holds the
start entry, each incident id with a traceback, and the stop entry, and never the
files' contents, the arguments' values or the HTTP token in the environment.
In-process, through the public embedding API (an `Engine` given its own
`FileOps`), an exception whose message carries a file's bytes and a token is
logged with neither.
"""

from __future__ import annotations

import errno
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine, FileOps
from ledgerfs.engine.core import unexpected_failure

from ._support import Server, error, ok

CONTENT = "the-file-content-7f3a"
TOKEN = "tok-31c9-never-logged"
ARGUMENT = "an-argument-value-55d1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def damage_mutations(journal: Path) -> None:
    """Overwrite every transaction's mutations with bytes that decode to the wrong shape."""
    db = sqlite3.connect(journal)
    try:
        db.execute("UPDATE transactions SET mutations = x'81a16101'")  # msgpack {"a": 1}
        db.commit()
    finally:
        db.close()


@pytest.fixture
def damaged(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """A root whose journal has one committed write of CONTENT, then a damaged row."""
    root = (tmp_path / "root").resolve()
    root.mkdir()
    journal = tmp_path / "j.db"
    with Server(root, "--journal", journal) as server:
        written = ok(server.call("write_file", {"path": "a.txt", "content": CONTENT + "\n"}))
    damage_mutations(journal)
    yield root, journal, int(written["transaction"])


def test_an_unexpected_failure_is_logged_under_the_incident_the_envelope_names(
    damaged: tuple[Path, Path, int], tmp_path: Path
) -> None:
    root, journal, tx = damaged
    log = tmp_path / "logs" / "ledgerfs.log"
    log.parent.mkdir()
    env = {"LEDGERFS_HTTP_TOKEN": TOKEN}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("history", {"path": "a.txt"}),
        ("history", {"transaction": tx}),
        ("undo", {"transaction": tx}),
        ("history", {"path": f"{ARGUMENT}/../a.txt"}),
    ]
    incidents: list[str] = []
    server = Server(root, "--journal", journal, "--log-file", log, env=env)
    try:
        for tool, arguments in calls:
            body = error(server.call(tool, arguments), "TOOL_UNAVAILABLE")
            incident = body["details"]["incident"]
            assert len(incident) == 8 and int(incident, 16) >= 0, body
            assert incident in body["suggestion"] and "log" in body["suggestion"], body
            incidents.append(incident)
        # The server lives on: a read still answers.
        assert ok(server.call("read_file", {"path": "a.txt"}))["content"] == CONTENT + "\n"
    finally:
        stderr = server.close()
    assert len(set(incidents)) == len(calls)
    text = log.read_text(encoding="utf-8")
    assert "Traceback" not in stderr, stderr  # the log went to the file, not stderr
    # Start, each incident with its traceback, stop.
    assert "serving roots=" in text and "transport=stdio" in text and "durability=full" in text
    assert str(journal) in text and "stopped serving" in text
    entries = text.split("\n20")  # every entry starts with its date
    for incident, (tool, _) in zip(incidents, calls, strict=True):
        [entry] = [e for e in entries if f"incident {incident}:" in e]
        assert f"tool {tool} failed unexpectedly" in entry, entry
        assert "Traceback (most recent call last):" in entry and 'File "' in entry, entry
    for secret in (CONTENT, TOKEN, ARGUMENT):
        assert secret not in text, secret
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_the_log_goes_to_stderr_by_default_and_keeps_its_level(
    damaged: tuple[Path, Path, int],
) -> None:
    root, journal, tx = damaged
    quiet = Server(root, "--journal", journal, "--log-level", "warning")
    try:
        body = error(quiet.call("history", {"transaction": tx}), "TOOL_UNAVAILABLE")
    finally:
        stderr = quiet.close()
    # An error is above warning: logged, with its traceback; start (info) is not.
    assert f"incident {body['details']['incident']}" in stderr
    assert "Traceback (most recent call last):" in stderr and CONTENT not in stderr
    assert "serving roots=" not in stderr
    # The default level (info) keeps the start and stop entries.
    assert "serving roots=" in Server(root, "--journal", journal).close()


class Exploding(FileOps):
    """The real file steps, but a write raises what no boundary maps, its message
    carrying the bytes being written (as a careless exception could)."""

    def write(self, fd: int, data: bytes) -> None:
        raise RuntimeError(f"could not write {data!r} with {TOKEN}")


@pytest.mark.anyio
async def test_an_embedded_engine_logs_no_message_of_the_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    config = {"roots": [str(root)], "journal": str(tmp_path / "j.db")}
    caplog.set_level(logging.INFO, logger="ledgerfs")
    async with Engine.open(config, fileops=Exploding()) as engine:
        session = await engine.session()
        with pytest.raises(RuntimeError) as raised:
            await session.call("write_file", {"path": "big.txt", "content": CONTENT * 4096})
    envelope = unexpected_failure(raised.value, "write_file").envelope.error
    incident = envelope.details["incident"]
    [record] = [r for r in caplog.records if incident in r.getMessage()]
    logged = record.getMessage()
    assert record.levelno == logging.ERROR and record.name == "ledgerfs.engine.incidents"
    assert "tool write_file failed unexpectedly: RuntimeError" in logged
    assert "Traceback (most recent call last):" in logged and "in write" in logged
    assert CONTENT not in logged and TOKEN not in logged
    assert record.exc_info is None  # a handler of the embedder's cannot print the message
    # The embedding API configured nothing: no handler of its own on any logger.
    assert not logging.getLogger("ledgerfs").handlers


def test_an_unknown_tool_name_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ledgerfs")
    failure = unexpected_failure(OSError(errno.EIO, "I/O error", ARGUMENT), ARGUMENT)
    [record] = caplog.records
    assert "a tool call failed unexpectedly: OSError (EIO)" in record.getMessage()
    assert ARGUMENT not in record.getMessage()
    assert failure.envelope.error.code == "TOOL_UNAVAILABLE"
    json.loads(failure.envelope.to_json())
