"""Stale changes merged (on_stale: merge) through sessions of a real engine.

One session reads a file; another changes it; the first sends its change with the
hash it read. Refused by default; with merge, both changes are kept when they do
not meet, and nothing is written when they do.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import Code, Engine, LedgerError, MutationResult, Session
from ledgerfs.engine.stale import KEEP_READ_BYTES
from ledgerfs.journal import content_hash

pytestmark = pytest.mark.anyio

LINES = [f"line {i}\n" for i in range(12)]
BASE = "".join(LINES)


def replaced(text: str, index: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[index] = new
    return "".join(lines)


#: Line 9 changed by the other session; line 1 by the caller.
THEIRS = replaced(BASE, 9, "nine, changed elsewhere\n")
OURS = replaced(BASE, 1, "one, changed here\n")
BOTH = replaced(THEIRS, 1, "one, changed here\n")


@pytest.fixture
def engine_config(workspace: Path) -> dict[str, Any]:
    return {"roots": [str(workspace)], "durability": "normal", "auto_occ": "off"}


@pytest.fixture
async def two(engine: Engine) -> AsyncIterator[tuple[Session, Session]]:
    yield await engine.session(), await engine.session()


def patch_of(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )


def stale_call(tool: str, path: str, base_hash: str, **extra: Any) -> dict[str, Any]:
    """The caller's change of `path` (line 1, as in OURS), sent as `tool` with a stale hash."""
    edit = {"old_text": "line 1\n", "new_text": "one, changed here\n"}
    match tool:
        case "write_file":
            return {"path": path, "content": OURS, "expected_hash": base_hash, **extra}
        case "edit_file":
            return {"path": path, "edits": [edit], "expected_hash": base_hash, **extra}
        case "apply_patch":
            patch = patch_of(path, BASE, OURS)
            return {"patch": patch, "expected_hashes": {path: base_hash}, **extra}
        case "batch":
            op = {"op": "edit", "path": path, "edits": [edit], "expected_hash": base_hash}
            return {"operations": [op], **extra}
        case "batch op":
            op = {"op": "edit", "path": path, "edits": [edit], "expected_hash": base_hash, **extra}
            return {"operations": [op]}
    raise AssertionError(tool)


TOOLS = ["write_file", "edit_file", "apply_patch", "batch", "batch op"]


async def read_then_changed_elsewhere(
    workspace: Path, reader: Session, other: Session, name: str = "f.txt"
) -> str:
    """`reader` reads BASE; `other` changes line 9. Returns the hash `reader` read."""
    (workspace / name).write_text(BASE)
    read = await reader.call("read_file", {"path": name})
    await other.call(
        "edit_file",
        {
            "path": name,
            "edits": [{"old_text": "line 9\n", "new_text": "nine, changed elsewhere\n"}],
        },
    )
    return str(read.content_hash)


async def transactions(engine: Engine) -> int:
    return len(await engine.journal.history(limit=1000))


@pytest.mark.parametrize("tool", TOOLS)
async def test_a_stale_change_elsewhere_merges_and_says_so(
    workspace: Path, engine: Engine, two: tuple[Session, Session], tool: str
) -> None:
    reader, other = two
    base = await read_then_changed_elsewhere(workspace, reader, other)
    current = content_hash(THEIRS.encode())
    tool_name = "batch" if tool == "batch op" else tool
    result: MutationResult = await reader.call(
        tool_name, stale_call(tool, "f.txt", base, on_stale="merge")
    )
    assert (workspace / "f.txt").read_text() == BOTH
    [merged] = result.merged
    assert (merged.path, merged.base_hash, merged.current_hash) == (
        str(workspace / "f.txt"),
        base,
        current,
    )
    [written] = result.files
    assert (written.previous_hash, written.content_hash) == (current, content_hash(BOTH.encode()))
    # The diff is what was written: the caller's line, not the other session's.
    assert "-line 1\n+one, changed here\n" in result.diff
    assert "nine" not in "".join(ln for ln in result.diff.splitlines() if ln[:1] in "+-")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("on_stale", [None, "refuse"])
async def test_a_stale_change_is_refused_unless_merge_is_asked(
    workspace: Path,
    engine: Engine,
    two: tuple[Session, Session],
    tool: str,
    on_stale: str | None,
) -> None:
    reader, other = two
    base = await read_then_changed_elsewhere(workspace, reader, other)
    before = await transactions(engine)
    extra = {} if on_stale is None else {"on_stale": on_stale}
    with pytest.raises(LedgerError) as caught:
        await reader.call(
            "batch" if tool == "batch op" else tool, stale_call(tool, "f.txt", base, **extra)
        )
    body = caught.value.envelope.error
    assert body.code is Code.OCC_MISMATCH
    assert (body.expected_hash, body.details) == (base, {})
    assert (workspace / "f.txt").read_text() == THEIRS
    assert await transactions(engine) == before


@pytest.fixture
def merging_config(workspace: Path) -> dict[str, Any]:
    return {
        "roots": [str(workspace)],
        "durability": "normal",
        "auto_occ": "off",
        "on_stale": "merge",
    }


@pytest.mark.parametrize(("given", "merges"), [(None, True), ("merge", True), ("refuse", False)])
async def test_the_server_default_applies_where_the_call_gives_none(
    workspace: Path, merging_config: dict[str, Any], given: str | None, merges: bool
) -> None:
    async with Engine.open(merging_config) as engine:
        reader, other = await engine.session(), await engine.session()
        base = await read_then_changed_elsewhere(workspace, reader, other)
        extra = {} if given is None else {"on_stale": given}
        call = reader.call("edit_file", stale_call("edit_file", "f.txt", base, **extra))
        if merges:
            await call
            assert (workspace / "f.txt").read_text() == BOTH
        else:
            with pytest.raises(LedgerError, match="OCC_MISMATCH"):
                await call
            assert (workspace / "f.txt").read_text() == THEIRS


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("delete_file", {"path": "f.txt"}), ("move_file", {"source": "f.txt", "destination": "g"})],
)
async def test_a_stale_move_or_delete_is_refused_whatever_the_server_default(
    workspace: Path, merging_config: dict[str, Any], tool: str, arguments: dict[str, Any]
) -> None:
    async with Engine.open(merging_config) as engine:
        reader, other = await engine.session(), await engine.session()
        base = await read_then_changed_elsewhere(workspace, reader, other)
        with pytest.raises(LedgerError) as caught:
            await reader.call(tool, {**arguments, "expected_hash": base})
        body = caught.value.envelope.error
        assert (body.code, body.details) == (Code.OCC_MISMATCH, {})
        assert (workspace / "f.txt").read_text() == THEIRS


@pytest.mark.parametrize("tool", TOOLS)
async def test_changes_that_meet_are_refused_with_each_conflict(
    workspace: Path, engine: Engine, two: tuple[Session, Session], tool: str
) -> None:
    reader, other = two
    (workspace / "f.txt").write_text(BASE)
    base = str((await reader.call("read_file", {"path": "f.txt"})).content_hash)
    # The other session inserts two lines at the top and changes line 1 too.
    theirs = "new a\nnew b\n" + replaced(BASE, 1, "one, theirs\n")
    await other.call("write_file", {"path": "f.txt", "content": theirs})
    before = await transactions(engine)
    tool_name = "batch" if tool == "batch op" else tool
    with pytest.raises(LedgerError) as caught:
        await reader.call(tool_name, stale_call(tool, "f.txt", base, on_stale="merge"))
    body = caught.value.envelope.error
    assert body.code is Code.OCC_MISMATCH and body.retryable
    assert body.recovery == "read_and_rebase"
    assert body.details["merge"] == "conflicts"
    [conflict] = body.details["conflicts"]
    # line/end_line are lines of the file as it is now (two lines were put above).
    assert conflict == {
        "line": 4,
        "end_line": 4,
        "base_line": 2,
        "base_end_line": 2,
        "base": "line 1\n",
        "yours": "one, changed here\n",
        "current": "one, theirs\n",
    }
    assert theirs.splitlines(keepends=True)[conflict["line"] - 1] == conflict["current"]
    assert (workspace / "f.txt").read_text() == theirs
    assert await transactions(engine) == before


async def test_a_version_never_seen_is_refused_as_before(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    reader, _ = two
    (workspace / "f.txt").write_text(THEIRS)
    unseen = content_hash(BASE.encode())  # never read, never recorded
    with pytest.raises(LedgerError) as caught:
        await reader.call("edit_file", stale_call("edit_file", "f.txt", unseen, on_stale="merge"))
    body = caught.value.envelope.error
    assert body.code is Code.OCC_MISMATCH
    assert body.details == {"on_stale": "merge", "merge": "unknown_version"}
    assert (workspace / "f.txt").read_text() == THEIRS


async def test_reads_are_kept_per_session(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    """A version no mutation recorded (the file changed outside ledgerfs) merges from
    the bytes a session's read returned, for that session alone."""
    reader, other = two
    (workspace / "f.txt").write_text(BASE)
    base = (await reader.call("read_file", {"path": "f.txt"})).content_hash
    (workspace / "f.txt").write_text(THEIRS)  # not through ledgerfs: no journal image
    assert await engine.journal.blob(base) is None
    with pytest.raises(LedgerError) as caught:
        await other.call("edit_file", stale_call("edit_file", "f.txt", base, on_stale="merge"))
    assert caught.value.envelope.error.details["merge"] == "unknown_version"
    await reader.call("edit_file", stale_call("edit_file", "f.txt", base, on_stale="merge"))
    assert (workspace / "f.txt").read_text() == BOTH


async def test_kept_reads_are_bounded_newest_first(workspace: Path, engine: Engine) -> None:
    """A session keeps its latest reads up to KEEP_READ_BYTES: an older read's version,
    changed outside ledgerfs since, can no longer be merged; the newest still can."""
    session = await engine.session()
    size = KEEP_READ_BYTES // 4 + 1  # four of these do not fit
    hashes = []
    for index in range(5):
        text = BASE + f"# padding {index}\n" + "#" * size + "\n"
        (workspace / f"big{index}.txt").write_text(text)
        read = await session.call("read_multiple_files", {"paths": [f"big{index}.txt"]})
        hashes.append(read.files[0].file.content_hash)
        (workspace / f"big{index}.txt").write_text(text.replace("line 9\n", "nine\n"))
    for index, expected in ((0, "unknown_version"), (4, None)):
        call = stale_call("edit_file", f"big{index}.txt", hashes[index], on_stale="merge")
        if expected is None:
            result = await session.call("edit_file", call)
            assert [m.base_hash for m in result.merged] == [hashes[index]]
            continue
        with pytest.raises(LedgerError) as caught:
            await session.call("edit_file", call)
        assert caught.value.envelope.error.details["merge"] == expected


async def test_a_version_the_journal_recorded_merges_for_any_session(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    writer, other = two
    written = await writer.call("write_file", {"path": "f.txt", "content": BASE})
    base = written.files[0].content_hash
    await other.call("write_file", {"path": "f.txt", "content": THEIRS, "expected_hash": base})
    fresh = await engine.session()  # read nothing: the journal holds the version
    result = await fresh.call(
        "write_file", stale_call("write_file", "f.txt", base, on_stale="merge")
    )
    assert [m.base_hash for m in result.merged] == [base]
    assert (workspace / "f.txt").read_text() == BOTH


@pytest.mark.parametrize(
    ("base", "current", "status"),
    [
        (b"a\x00\nb\nc\nd\n", b"a\x00\nb\nc\nD\n", "binary"),
        (b"a\nb\nc\nd\n", b"a\x00\nb\nc\nD\n", "binary"),
        (b"a\nb\nc\nd\n", None, "not_mergeable"),
    ],
    ids=["binary base", "binary now", "deleted since"],
)
async def test_what_cannot_merge_is_refused_with_the_reason(
    workspace: Path,
    engine: Engine,
    two: tuple[Session, Session],
    base: bytes,
    current: bytes | None,
    status: str,
) -> None:
    writer, other = two
    target = workspace / "f.bin"
    created = await writer.call(
        "write_file", {"path": "f.bin", "content": _b64(base), "encoding": "base64"}
    )
    if current is None:
        await other.call("delete_file", {"path": "f.bin"})
    else:
        await other.call(
            "write_file", {"path": "f.bin", "content": _b64(current), "encoding": "base64"}
        )
    mine = base.replace(b"a", b"A")
    with pytest.raises(LedgerError) as caught:
        await writer.call(
            "write_file",
            {
                "path": "f.bin",
                "content": _b64(mine),
                "encoding": "base64",
                "expected_hash": created.files[0].content_hash,
                "on_stale": "merge",
            },
        )
    body = caught.value.envelope.error
    assert body.code is Code.OCC_MISMATCH
    assert body.details["merge"] == status
    assert (target.read_bytes() if target.exists() else None) == current


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


async def test_a_change_that_does_not_apply_to_its_own_version_is_refused(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    reader, other = two
    base = await read_then_changed_elsewhere(workspace, reader, other)
    edit = {"old_text": "not in the file\n", "new_text": "x\n"}
    with pytest.raises(LedgerError) as caught:
        await reader.call(
            "edit_file",
            {"path": "f.txt", "edits": [edit], "expected_hash": base, "on_stale": "merge"},
        )
    body = caught.value.envelope.error
    assert body.code is Code.OCC_MISMATCH
    assert body.details["merge"] == "does_not_apply"
    assert body.details["cause"]["code"] == "VALIDATION"
    assert (workspace / "f.txt").read_text() == THEIRS


async def test_the_rewrite_guard_judges_what_is_written(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    """An edit of 4 lines of 20 is small; merged onto the 5 lines the file holds now,
    it replaces most of it: REWRITE_BLOCKED, unless allow_rewrite."""
    reader, other = two
    long = [f"{i:02d} " + "x" * 200 + "\n" for i in range(20)]
    (workspace / "g.txt").write_text("".join(long))
    base = (await reader.call("read_file", {"path": "g.txt"})).content_hash
    await other.call("write_file", {"path": "g.txt", "content": "".join(long[:5])})
    edits = [{"old_text": "".join(long[:4]), "new_text": "short\n"}]
    call = {"path": "g.txt", "edits": edits, "expected_hash": base, "on_stale": "merge"}
    with pytest.raises(LedgerError) as caught:
        await reader.call("edit_file", call)
    assert caught.value.code is Code.REWRITE_BLOCKED
    assert (workspace / "g.txt").read_text() == "".join(long[:5])
    await reader.call("edit_file", {**call, "allow_rewrite": True})
    assert (workspace / "g.txt").read_text() == "short\n" + long[4]


async def test_a_dry_run_shows_the_merge_and_writes_nothing(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    reader, other = two
    base = await read_then_changed_elsewhere(workspace, reader, other)
    result = await reader.call(
        "edit_file", stale_call("edit_file", "f.txt", base, on_stale="merge", dry_run=True)
    )
    assert result.dry_run and result.transaction is None
    assert [m.base_hash for m in result.merged] == [base]
    assert "+one, changed here" in result.diff
    assert (workspace / "f.txt").read_text() == THEIRS


async def test_the_budget_charges_a_merged_change_as_any(workspace: Path) -> None:
    config = {"roots": [str(workspace)], "durability": "normal", "mutation_budget": 2}
    async with Engine.open(config) as engine:
        reader, other = await engine.session(), await engine.session()
        base = await read_then_changed_elsewhere(workspace, reader, other)
        await reader.call("edit_file", stale_call("edit_file", "f.txt", base, on_stale="merge"))
        await reader.call("write_file", {"path": "n1.txt", "content": "1"})
        with pytest.raises(LedgerError, match="BUDGET_EXCEEDED"):
            await reader.call("write_file", {"path": "n2.txt", "content": "2"})


async def test_a_batch_merges_one_file_and_writes_another_in_one_transaction(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    reader, other = two
    base = await read_then_changed_elsewhere(workspace, reader, other)
    call = stale_call("batch", "f.txt", base, on_stale="merge")
    call["operations"].append({"op": "write", "path": "new.txt", "content": "new\n"})
    result = await reader.call("batch", call)
    assert (workspace / "f.txt").read_text() == BOTH
    assert (workspace / "new.txt").read_text() == "new\n"
    assert len(result.files) == 2 and len(result.merged) == 1
    undone = await reader.call("undo", {"transaction": result.transaction})
    assert (workspace / "f.txt").read_text() == THEIRS and not (workspace / "new.txt").exists()
    assert undone.undo_of == result.transaction


async def test_a_patch_of_two_files_merges_the_stale_one(
    workspace: Path, engine: Engine, two: tuple[Session, Session]
) -> None:
    reader, other = two
    base = await read_then_changed_elsewhere(workspace, reader, other)
    (workspace / "h.txt").write_text(BASE)
    h_hash = (await reader.call("read_file", {"path": "h.txt"})).content_hash
    patch = patch_of("f.txt", BASE, OURS) + patch_of("h.txt", BASE, replaced(BASE, 5, "five\n"))
    result = await reader.call(
        "apply_patch",
        {"patch": patch, "expected_hashes": {"f.txt": base, "h.txt": h_hash}, "on_stale": "merge"},
    )
    assert (workspace / "f.txt").read_text() == BOTH
    assert (workspace / "h.txt").read_text() == replaced(BASE, 5, "five\n")
    assert [m.path for m in result.merged] == [str(workspace / "f.txt")]


async def test_concurrent_stale_changes_of_other_lines_all_land(
    workspace: Path, engine: Engine
) -> None:
    """Sessions that read one version and send changes of other lines at once (one
    cohort, or one after another on the file's lock) each merge onto the last."""
    (workspace / "f.txt").write_text(BASE)
    sessions = [await engine.session() for _ in range(4)]
    hashes = [(await s.call("read_file", {"path": "f.txt"})).content_hash for s in sessions]

    async def change(index: int) -> None:
        edit = {"old_text": f"line {3 * index}\n", "new_text": f"changed by {index}\n"}
        await sessions[index].call(
            "edit_file",
            {"path": "f.txt", "edits": [edit], "expected_hash": hashes[index], "on_stale": "merge"},
        )

    async with anyio.create_task_group() as group:
        for index in range(4):
            group.start_soon(change, index)
    expected = BASE
    for index in range(4):
        expected = replaced(expected, 3 * index, f"changed by {index}\n")
    assert (workspace / "f.txt").read_text() == expected


# The invariant, for random files and random concurrent changes -----------------------

Side = list[tuple[int, int, list[str]]]


@st.composite
def concurrent_changes(draw: st.DrawFn, *, meeting: bool) -> tuple[list[str], Side, Side]:
    """A base of distinct lines and two sides' changes to it, as (start, end, new lines).

    Apart (`meeting` False): the spans of both sides are separated by at least one
    unchanged line, so they merge. Meeting: one span of each side overlaps or
    touches the other's, each putting lines of its own there, so they conflict.
    """
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    size = draw(st.integers(1 if meeting else 0, 24))
    base = [f"L{i:03d}{ending}" for i in range(size)]
    spans: list[tuple[int, int]] = []
    at = 0
    while at <= size and draw(st.booleans()):
        start = draw(st.integers(at, min(size, at + 4)))
        end = draw(st.integers(start, min(size, start + 3)))
        spans.append((start, end))
        at = end + 1
    sides: tuple[Side, Side] = ([], [])
    for number, (start, end) in enumerate(spans):
        side = draw(st.integers(0, 1))
        count = draw(st.integers(0 if end > start else 1, 2))
        sides[side].append((start, end, [f"new {side}.{number}.{k}{ending}" for k in range(count)]))
    if meeting:
        # One more pair of spans that meet, where neither side changed anything yet.
        free = [i for i in range(size + 1) if all(not (s - 1 <= i <= e) for s, e in spans)]
        if not free:
            return base, [(0, size, [f"ours{ending}"])], [(0, size, [f"theirs{ending}"])]
        where = draw(st.sampled_from(free))
        ours_end = draw(st.integers(where, min(size, where + 2)))
        theirs_start = draw(st.integers(where, ours_end))
        theirs_end = draw(st.integers(theirs_start, min(size, theirs_start + 2)))
        spans_ok = [c for c in sides[0] if c[1] < where - 1 or c[0] > max(ours_end, theirs_end) + 1]
        theirs_ok = [
            c for c in sides[1] if c[1] < where - 1 or c[0] > max(ours_end, theirs_end) + 1
        ]
        ours_side = [*spans_ok, (where, ours_end, [f"ours {where}{ending}"])]
        theirs_side = [*theirs_ok, (theirs_start, theirs_end, [f"theirs {where}{ending}"])]
        return base, sorted(ours_side), sorted(theirs_side)
    return base, sides[0], sides[1]


def applied_lines(base: list[str], *sides: Side) -> str:
    lines = list(base)
    for start, end, new in sorted((c for side in sides for c in side), reverse=True):
        lines[start:end] = new
    return "".join(lines)


def call_for(tool: str, name: str, base: list[str], side: Side, expected: str) -> dict[str, Any]:
    """`side`'s change of `name` as `tool` would send it, with `expected` as its hash
    (as write_file when edit_file cannot say it)."""
    before, after = "".join(base), applied_lines(base, side)
    edits = edits_for(base, side) if tool == "edit_file" else None
    if edits:
        return {"path": name, "edits": edits, "expected_hash": expected}
    if tool == "apply_patch" and before != after:
        return {"patch": patch_of(name, before, after), "expected_hashes": {name: expected}}
    return {"path": name, "content": after, "expected_hash": expected}


def tool_of(call: dict[str, Any]) -> str:
    return "edit_file" if "edits" in call else "apply_patch" if "patch" in call else "write_file"


def edits_for(base: list[str], side: Side) -> list[dict[str, str]] | None:
    """`side`'s change as edits of whole lines, each old_text one unique run of lines
    (an insertion anchored on the unchanged line after it, or before it at the end);
    None when two would need the same line."""
    edits = []
    used: set[int] = set()
    for start, end, new in side:
        if end > start:
            span, text = range(start, end), new
        elif end < len(base):
            span, text = range(end, end + 1), [*new, base[end]]
        elif start > 0:
            span, text = range(start - 1, start), [base[start - 1], *new]
        else:
            return None
        if used.intersection(span):
            return None
        used.update(span)
        old = "".join(base[i] for i in span)
        edits.append({"old_text": old, "new_text": "".join(text)})
    return edits or None


@contextmanager
def engine_in_portal(tmp_path: Path, backend: str) -> Iterator[tuple[BlockingPortal, Engine, Path]]:
    """An engine over a fresh root, opened in a portal: hypothesis drives it from this thread."""
    root = tmp_path / "ws"
    root.mkdir()
    config = {"roots": [str(root)], "durability": "normal", "auto_occ": "off"}
    with (
        start_blocking_portal(backend) as portal,
        portal.wrap_async_context_manager(Engine.open(config)) as engine,
    ):
        yield portal, engine, root


def last_transaction(portal: BlockingPortal, engine: Engine, path: Path) -> int | None:
    found = portal.call(engine.journal.last_change, str(path))
    return None if found is None else found[0].id


PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_merging_apart_changes_gives_both_in_either_order(tmp_path: Path, backend: str) -> None:
    names = iter(range(10**6))
    with engine_in_portal(tmp_path, backend) as (portal, engine, root):
        one, two = portal.call(engine.session), portal.call(engine.session)

        @PROPERTY
        @given(case=concurrent_changes(meeting=False), tool=st.sampled_from(TOOLS[:3]))
        def run(case: tuple[list[str], Side, Side], tool: str) -> None:
            base, ours, theirs = case
            both = applied_lines(base, ours, theirs).encode()
            for first, second in ((two, one), (one, two)):
                # `first` changes the file; `second` then sends its change with the
                # hash of the version both started from, asking to merge.
                name = f"f{next(names)}.txt"
                (root / name).write_bytes("".join(base).encode())
                read = portal.call(second.call, "read_file", {"path": name})
                mine, other = (ours, theirs) if second is one else (theirs, ours)
                elsewhere = {"path": name, "content": applied_lines(base, other)}
                portal.call(first.call, "write_file", elsewhere)
                call = call_for(tool, name, base, mine, read.content_hash)
                portal.call(second.call, tool_of(call), {**call, "on_stale": "merge"})
                assert (root / name).read_bytes() == both

        run()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_changes_that_meet_are_always_refused_and_write_nothing(
    tmp_path: Path, backend: str
) -> None:
    names = iter(range(10**6))
    with engine_in_portal(tmp_path, backend) as (portal, engine, root):
        one, two = portal.call(engine.session), portal.call(engine.session)

        @PROPERTY
        @given(case=concurrent_changes(meeting=True), tool=st.sampled_from(TOOLS[:3]))
        def run(case: tuple[list[str], Side, Side], tool: str) -> None:
            base, ours, theirs = case
            name = f"f{next(names)}.txt"
            (root / name).write_bytes("".join(base).encode())
            read = portal.call(one.call, "read_file", {"path": name})
            elsewhere = {"path": name, "content": applied_lines(base, theirs)}
            portal.call(two.call, "write_file", elsewhere)
            now = (root / name).read_bytes()
            last = last_transaction(portal, engine, root / name)
            call = call_for(tool, name, base, ours, read.content_hash)
            with pytest.raises(LedgerError) as caught:
                portal.call(one.call, tool_of(call), {**call, "on_stale": "merge"})
            body = caught.value.envelope.error
            assert body.code is Code.OCC_MISMATCH
            if body.details["merge"] == "does_not_apply":
                # An edit of every line is refused on its own version already (the
                # rewrite guard), before the two sides are compared.
                assert body.details["cause"]["code"] == "REWRITE_BLOCKED"
                assert ours == [(0, len(base), ours[0][2])]
            else:
                assert body.details["merge"] == "conflicts" and body.details["conflicts"]
            assert (root / name).read_bytes() == now
            assert last_transaction(portal, engine, root / name) == last

        run()
