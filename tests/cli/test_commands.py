"""Every `ledgerfs` journal command against a real journal, run as a subprocess.

The workspace's journal is made through the engine; the commands find it from the
workspace's folders (as git finds a repository), or fail clearly and create nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sqlite3
from pathlib import Path

import anyio
import pytest

from ledgerfs.engine import Engine

from ._support import ledgerfs, tree

ANSI = "\x1b["
COLOUR = ("\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[36m")  # red, green, yellow, cyan


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def workspace(tmp_path: Path) -> Path:
    """A root with a journal of three transactions: write a.txt, edit it, write sub/b.txt."""
    root = (tmp_path / "ws").resolve()
    (root / "sub").mkdir(parents=True)
    async with Engine.open({"roots": [str(root)]}) as engine:
        session = await engine.session("writer")
        await session.call("write_file", {"path": "a.txt", "content": "one\ntwo\n"})
        await session.call(
            "edit_file", {"path": "a.txt", "edits": [{"old_text": "two", "new_text": "deux"}]}
        )
        await session.call("write_file", {"path": "sub/b.txt", "content": "bee\n"})
    return root


def entries(done: str) -> list[dict[str, object]]:
    parsed: list[dict[str, object]] = json.loads(done)["entries"]
    return parsed


# -- finding the journal -------------------------------------------------------------


@pytest.mark.anyio
async def test_commands_find_the_journal_by_walking_up(workspace: Path) -> None:
    cwd = workspace / "sub"  # every other test runs at the root itself
    log = ledgerfs("log", "--json", cwd=cwd, check=True)
    assert [e["transaction"] for e in entries(log.stdout)] == [3, 2, 1]
    show = ledgerfs("show", "2", "--json", cwd=cwd, check=True)
    assert json.loads(show.stdout)["diff"].startswith("--- a/a.txt\n+++ b/a.txt\n")
    verify = ledgerfs("verify", "--json", cwd=cwd, check=True)
    assert json.loads(verify.stdout)["files_checked"] == 2


NO_JOURNAL_CASES = [
    *((command, "walk") for command in (["show", "1"], ["verify"], ["recover"])),
    *((command, how) for command in (["log"], ["undo", "1"], ["gc", "--keep-last", "1", "--yes"])
      for how in ("walk", "root", "journal")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "how"), NO_JOURNAL_CASES, ids=lambda c: c if isinstance(c, str) else c[0]
)
def test_no_journal_is_a_clear_error_and_creates_nothing(
    tmp_path: Path, command: list[str], how: str
) -> None:
    folder = tmp_path / "empty" / "deeper"
    folder.mkdir(parents=True)
    options = {
        "walk": [],
        "root": ["--root", str(folder)],
        "journal": ["--journal", str(tmp_path / "nowhere" / "j.db")],
    }[how]
    before = tree(tmp_path)
    done = ledgerfs(*command, *options, cwd=folder)
    assert done.returncode == 1, done.stdout
    assert "error: NOT_FOUND" in done.stderr
    assert done.stdout == ""
    assert tree(tmp_path) == before  # no journal, no .ledgerfs/, no parent folders


def test_no_journal_as_json_is_the_envelope(tmp_path: Path) -> None:
    done = ledgerfs("log", "--json", cwd=tmp_path)
    body = json.loads(done.stderr)["error"]
    assert (done.returncode, body["code"], body["recovery"]) == (1, "NOT_FOUND", "fix_arguments")
    assert body["path"] == str(tmp_path)
    assert "`ledgerfs serve`" in body["suggestion"] and "--journal" in body["suggestion"]
    assert done.stdout == "" and tree(tmp_path) == set()


@pytest.mark.anyio
async def test_inspection_leaves_the_journal_folder_as_it_was(workspace: Path) -> None:
    state = workspace / ".ledgerfs"
    before = {p for p in tree(state) if not p.startswith("journal.db-")}
    for command in (["log"], ["show", "1"], ["verify"], ["gc", "--keep-last", "1", "--dry-run"]):
        ledgerfs(*command, cwd=workspace / "sub", check=True)
    assert {p for p in tree(state) if not p.startswith("journal.db-")} == before


@pytest.mark.anyio
async def test_journal_option_finds_the_root_beside_it(workspace: Path, tmp_path: Path) -> None:
    journal = workspace / ".ledgerfs" / "journal.db"
    done = ledgerfs("show", "3", "--journal", journal, cwd=tmp_path, check=True)
    assert "+++ b/sub/b.txt" in done.stdout  # labels relative to the workspace's root


# -- log --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_log_links_a_transaction_and_its_undo(workspace: Path) -> None:
    undo = ledgerfs("undo", "2", cwd=workspace, check=True)
    assert undo.stdout.startswith("undid transaction 2 as transaction 4\n")
    assert "-deux\n+two\n" in undo.stdout
    assert (workspace / "a.txt").read_text() == "one\ntwo\n"
    text = ledgerfs("log", cwd=workspace, check=True).stdout.splitlines()
    assert text[0].split() == [
        "TX", "WHEN", "STATE", "UNDONE", "BY", "UNDOES", "FILES", "SESSION", "SUMMARY"
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in text[1:]}
    assert rows["4"][4:6] == ["2", "1"]  # undoes 2, one file
    assert rows["2"][4:6] == ["4", "1"]  # undone by 4
    found = {e["transaction"]: e for e in entries(ledgerfs("log", "--json", cwd=workspace).stdout)}
    assert (found[2]["undone_by"], found[2]["undo_of"]) == (4, None)
    assert (found[4]["undone_by"], found[4]["undo_of"]) == (None, 2)
    assert found[4]["session"] == "cli"


@pytest.mark.anyio
async def test_log_filters_by_path_from_the_current_folder(workspace: Path) -> None:
    in_sub = ledgerfs("log", "b.txt", "--json", cwd=workspace / "sub", check=True)
    assert [e["transaction"] for e in entries(in_sub.stdout)] == [3]
    at_root = ledgerfs("log", "a.txt", "--json", cwd=workspace, check=True)
    assert [e["transaction"] for e in entries(at_root.stdout)] == [2, 1]
    outside = ledgerfs("log", "/etc/passwd", cwd=workspace)
    assert outside.returncode == 1 and "NOT_ALLOWED" in outside.stderr
    assert "list_allowed_directories" not in outside.stderr


@pytest.mark.anyio
async def test_log_filters_by_session_and_limit(workspace: Path) -> None:
    ledgerfs("undo", "3", cwd=workspace, check=True)
    cli = ledgerfs("log", "--session", "cli", "--json", cwd=workspace, check=True)
    assert [e["transaction"] for e in entries(cli.stdout)] == [4]
    writer = ledgerfs("log", "--session", "writer", "-n", "2", "--json", cwd=workspace, check=True)
    assert [e["transaction"] for e in entries(writer.stdout)] == [3, 2]


@pytest.mark.anyio
async def test_log_filters_by_time(workspace: Path) -> None:
    days = {1: datetime.datetime(2020, 1, 1, 12), 2: datetime.datetime(2020, 1, 2, 12)}
    with sqlite3.connect(workspace / ".ledgerfs" / "journal.db") as db:
        for tx, when in days.items():
            db.execute(
                "UPDATE transactions SET created_at = ? WHERE id = ?", (when.timestamp(), tx)
            )

    def ids(*options: str) -> list[object]:
        done = ledgerfs("log", *options, "--json", cwd=workspace, check=True)
        return [e["transaction"] for e in entries(done.stdout)]

    assert ids("--since", "2020-01-02", "--until", "2020-01-03") == [2]
    assert ids("--until", "2020-01-02T00:00") == [1]
    assert ids("--since", "1d") == [3]  # made by the fixture, moments ago
    bad = ledgerfs("log", "--since", "last tuesday", "--json", cwd=workspace)
    assert bad.returncode == 2  # a usage error, as click reports it
    assert json.loads(bad.stderr)["error"]["code"] == "VALIDATION"


# -- show, colour -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_show_prints_a_header_then_the_diff(workspace: Path) -> None:
    text = ledgerfs("show", "2", cwd=workspace, check=True).stdout
    header, _, diff = text.partition("\n\n")
    fields = {line[:12].strip(): line[12:].strip() for line in header.splitlines()}
    assert fields["transaction"] == "2  committed"
    assert fields["session"] == "writer"
    assert fields["summary"] == "edit_file a.txt"
    assert fields["time"].startswith(str(datetime.date.today().year))
    assert diff == "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+deux\n"
    assert ANSI not in text  # piped: no colour
    shown = json.loads(ledgerfs("show", "2", "--json", cwd=workspace, check=True).stdout)
    assert set(shown) == {"transaction", "diff"}
    assert shown["transaction"]["transaction"] == 2
    assert shown["transaction"]["undone_by"] is None


@pytest.mark.anyio
@pytest.mark.parametrize("command", [("log", "--json"), ("show", "4", "--json")])
async def test_json_names_a_file_that_is_not_utf8_in_the_escaped_form(
    workspace: Path, command: tuple[str, ...]
) -> None:
    async with Engine.open({"roots": [str(workspace)]}) as engine:
        session = await engine.session("writer")
        await session.call("write_file", {"path": '"caf\\xe9.txt"', "content": "x\n"})
    assert os.fsencode("caf\udce9.txt") in os.listdir(os.fsencode(workspace))
    done = ledgerfs(*command, cwd=workspace, check=True)
    found = json.loads(done.stdout)
    newest = found["entries"][0] if command[0] == "log" else found["transaction"]
    assert newest["transaction"] == 4
    assert newest["mutations"][0]["path"] == f'{workspace}/"caf\\xe9.txt"'


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("env", "coloured"),
    [({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False), ({}, False)],
    ids=["terminal", "no-color", "piped"],
)
async def test_colour_only_on_a_terminal_without_no_color(
    workspace: Path, env: dict[str, str], coloured: bool
) -> None:
    show = ledgerfs("show", "2", cwd=workspace, env=env, check=True).stdout
    log = ledgerfs("log", cwd=workspace, env=env, check=True).stdout
    for out in (show, log):
        assert any(code in out for code in COLOUR) is coloured, out
    # A diff's meaning never depends on colour: the +/- lines are whole either way.
    assert re.search(r"^(\x1b\[[0-9;]*m)*\+deux(\x1b\[0m)?$", show, re.MULTILINE)


# -- errors ----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("command", ["show", "undo"])
async def test_an_unknown_transaction_points_at_ledgerfs_log(workspace: Path, command: str) -> None:
    text = ledgerfs(command, "99", cwd=workspace)
    assert text.returncode == 1
    assert "error: NOT_FOUND: There is no transaction 99." in text.stderr
    assert "suggestion: list the transactions with `ledgerfs log`" in text.stderr
    as_json = json.loads(ledgerfs(command, "99", "--json", cwd=workspace).stderr)["error"]
    assert as_json["suggestion"] == "list the transactions with `ledgerfs log`"
    assert (as_json["retryable"], as_json["recovery"]) == (False, "fix_arguments")


# -- verify, gc, recover, undo ------------------------------------------------------------


@pytest.mark.anyio
async def test_verify_reports_files_changed_outside_ledgerfs(workspace: Path) -> None:
    clean = ledgerfs("verify", cwd=workspace, check=True).stdout
    assert "journal: ok" in clean and "2 checked, 0 changed outside ledgerfs" in clean
    (workspace / "sub" / "b.txt").write_text("edited by hand\n")
    drift = ledgerfs("verify", cwd=workspace)
    assert drift.returncode == 2
    assert f"{workspace}/sub/b.txt: changed outside ledgerfs" in drift.stdout
    report = json.loads(ledgerfs("verify", "--json", cwd=workspace).stdout)
    assert report["ok"] is False and report["journal_ok"] is True
    assert [d["path"] for d in report["drifted"]] == [str(workspace / "sub" / "b.txt")]


@pytest.mark.anyio
@pytest.mark.parametrize(("marks", "state"), [("held", "pending"), ("written", "committed")])
async def test_verify_beside_a_live_server_reports_none_of_its_recent_edits(
    workspace: Path, marks: str, state: str
) -> None:
    """A live engine's newest edits read pending to other processes until their
    commit marks are written (milliseconds later; held here), and committed, not
    checkpointed, after; verify must take them for drift in neither case."""
    config = {"roots": [str(workspace)], "checkpoint_interval": 3600}
    async with Engine.open(config) as engine:
        journal = engine.journal
        write_marks = journal.write_marks_nowait
        journal.write_marks_nowait = lambda **_: None  # type: ignore[method-assign]
        session = await engine.session("writer")
        await session.call(
            "edit_file", {"path": "a.txt", "edits": [{"old_text": "deux", "new_text": "zwei"}]}
        )
        if marks == "written":
            write_marks()
            await journal.checkpoint(0)  # a writer round trip: the queued marks went first
        (workspace / "sub" / "b.txt").write_text("edited by hand\n")
        done = await anyio.to_thread.run_sync(lambda: ledgerfs("verify", "--json", cwd=workspace))
        states = {
            e["transaction"]: e["state"]
            for e in entries(ledgerfs("log", "--json", cwd=workspace, check=True).stdout)
        }
    assert states[4] == state  # as another process sees it
    report = json.loads(done.stdout)
    assert [d["path"] for d in report["drifted"]] == [str(workspace / "sub" / "b.txt")]


@pytest.mark.anyio
async def test_gc_previews_then_drops_only_with_consent(workspace: Path) -> None:
    def remaining() -> list[object]:
        done = ledgerfs("log", "--json", cwd=workspace, check=True)
        return [e["transaction"] for e in entries(done.stdout)]

    dry = ledgerfs("gc", "--keep-last", "1", "--dry-run", cwd=workspace, check=True)
    assert "gc would drop 2 transactions" in dry.stdout
    assert "write_file a.txt" in dry.stdout and "edit_file a.txt" in dry.stdout
    preview = json.loads(
        ledgerfs("gc", "--keep-last", "1", "--dry-run", "--json", cwd=workspace).stdout
    )
    assert preview["dry_run"] is True
    assert [e["transaction"] for e in preview["entries"]] == [1, 2]
    assert remaining() == [3, 2, 1]

    refused = ledgerfs("gc", "--keep-last", "1", cwd=workspace)  # stdin is not a terminal
    assert refused.returncode == 1
    assert "no terminal to confirm on" in refused.stderr and "--yes" in refused.stderr
    assert remaining() == [3, 2, 1]

    dropped = json.loads(
        ledgerfs("gc", "--keep-last", "1", "--yes", "--json", cwd=workspace, check=True).stdout
    )
    assert dropped.pop("bytes_returned") >= 0  # two small images may free no whole page
    assert dropped == {"dry_run": False, "transactions_dropped": 2, "blobs_dropped": 2,
                       "bytes_freed": len("one\ntwo\n") + len("one\ndeux\n")}  # fmt: skip
    assert remaining() == [3]
    gone = ledgerfs("show", "1", cwd=workspace)
    assert gone.returncode == 1 and "There is no transaction 1." in gone.stderr


@pytest.mark.anyio
async def test_gc_without_a_policy_drops_nothing(workspace: Path) -> None:
    done = ledgerfs("gc", "--yes", cwd=workspace, check=True)
    assert "nothing to drop: give --keep-days or --keep-last" in done.stdout


@pytest.mark.anyio
async def test_recover_and_undo_json_shapes(workspace: Path) -> None:
    recovered = ledgerfs("recover", "--json", cwd=workspace / "sub", check=True)
    assert json.loads(recovered.stdout) == {"recovered": [], "journal_loss": None}
    text = ledgerfs("recover", cwd=workspace, check=True).stdout
    assert text == "nothing to recover: every transaction had finished\n"
    undone = json.loads(ledgerfs("undo", "3", "--json", cwd=workspace, check=True).stdout)
    assert undone["transaction"] == 4 and undone["undo_of"] == 3
    assert [f["path"] for f in undone["files"]] == [str(workspace / "sub" / "b.txt")]
    assert not (workspace / "sub" / "b.txt").exists()


@pytest.mark.anyio
async def test_undo_of_a_file_changed_since_says_so_in_shell_terms(workspace: Path) -> None:
    (workspace / "a.txt").write_text("changed by hand\n")
    done = ledgerfs("undo", "2", cwd=workspace)
    assert done.returncode == 1 and "OCC_MISMATCH" in done.stderr
    assert "ledgerfs log PATH" in done.stderr
    assert (workspace / "a.txt").read_text() == "changed by hand\n"
    assert os.path.exists(workspace / ".ledgerfs" / "journal.db")
