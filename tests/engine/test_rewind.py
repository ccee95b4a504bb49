"""The rewind tool on a real engine: what goes back, what is kept, what conflicts.

Two sessions of one engine ("agent" and "other") and edits made behind the
engine's back (a person) share one workspace; each case rewinds the agent's
session and checks the disk, the result, the journal, and that undoing the
rewind gives back the tree it started from.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerfs.engine import Engine, LedgerError, Session

from .conftest import snapshot, temp_files

pytestmark = pytest.mark.anyio

LINES = "".join(f"line {i}\n" for i in range(1, 11))


def replaced(text: str, number: int, new: str) -> str:
    """`text` with line `number` (1-based) replaced by `new`."""
    lines = text.splitlines(keepends=True)
    lines[number - 1] = new + "\n"
    return "".join(lines)


class World:
    """The workspace, the two sessions, and a person's editor."""

    def __init__(self, root: Path, agent: Session, other: Session) -> None:
        self.root = root
        self.agent = agent
        self.other = other

    async def by(self, session: Session, tool: str, **arguments: Any) -> Any:
        return await session.call(tool, arguments)

    def person_writes(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def text(self, rel: str) -> str | None:
        path = self.root / rel
        return path.read_text() if path.is_file() else None


@pytest.fixture
async def world(engine: Engine, workspace: Path) -> World:
    return World(workspace, await engine.session("agent"), await engine.session("other"))


async def rewind_agent(world: World, **options: Any) -> Any:
    return await world.agent.call("rewind", {"session": "agent", **options})


async def edit(world: World, session: Session, rel: str, old: str, new: str) -> None:
    await session.call("edit_file", {"path": rel, "edits": [{"old_text": old, "new_text": new}]})


Scenario = Callable[[World], Awaitable[None]]


async def other_edits_distinct_line(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    await edit(w, w.other, "f.txt", "line 8\n", "other 8\n")


async def person_edits_distinct_line(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    w.person_writes("f.txt", replaced(replaced(LINES, 2, "agent 2"), 9, "person 9"))


async def agent_edits_twice_around_other(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    await edit(w, w.other, "f.txt", "line 6\n", "other 6\n")
    await edit(w, w.agent, "f.txt", "agent 2\n", "agent 2 again\n")
    await edit(w, w.agent, "f.txt", "line 10\n", "agent 10\n")


async def agent_creates_moves_deletes(w: World) -> None:
    await w.by(w.other, "write_file", path="keep/a.txt", content="a\n")
    await w.by(w.other, "write_file", path="gone.txt", content="gone\n")
    await w.by(w.agent, "write_file", path="new/made.txt", content="made\n")
    await w.by(w.agent, "move_file", source="keep/a.txt", destination="moved/a.txt")
    await w.by(w.agent, "delete_file", path="gone.txt")
    await w.by(w.agent, "create_directory", path="empty/inner")


async def agent_folder_move_and_recursive_delete(w: World) -> None:
    await w.by(w.other, "write_file", path="d/x.txt", content="x\n")
    await w.by(w.other, "write_file", path="d/sub/y.txt", content="y\n")
    await w.by(w.other, "write_file", path="t/z.txt", content="z\n")
    await w.by(w.agent, "move_file", source="d", destination="e")
    await w.by(w.agent, "delete_file", path="t", recursive=True)
    await w.by(w.other, "write_file", path="e/new.txt", content="other's\n")


async def agent_batch_and_patch(w: World) -> None:
    await w.by(w.other, "write_file", path="p.txt", content=LINES)
    await w.by(
        w.agent,
        "batch",
        operations=[
            {"op": "edit", "path": "p.txt", "edits": [{"old_text": "line 1\n", "new_text": ""}]},
            {"op": "write", "path": "q.txt", "content": "q\n"},
        ],
    )
    patch = "--- a/p.txt\n+++ b/p.txt\n@@ -4,3 +4,3 @@\n line 5\n-line 6\n+patched 6\n line 7\n"
    await w.by(w.agent, "apply_patch", patch=patch)
    await edit(w, w.other, "p.txt", "line 10\n", "other 10\n")


async def binary_unchanged_since(w: World) -> None:
    await w.by(w.other, "write_file", path="b.bin", content="AAEC", encoding="base64")
    await w.by(w.agent, "write_file", path="b.bin", content="AwQF", encoding="base64")


async def agent_undoes_own_then_writes(w: World) -> None:
    first = await w.by(w.agent, "write_file", path="u.txt", content="one\n")
    await w.by(w.agent, "undo", transaction=first.transaction)
    await w.by(w.agent, "write_file", path="u.txt", content="two\n")


async def link_made(w: World) -> None:
    await w.by(w.other, "write_file", path="target.txt", content="t\n")
    patch = (
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n"
        "@@ -0,0 +1 @@\n+target.txt\n\\ No newline at end of file\n"
    )
    await w.by(w.agent, "apply_patch", patch=patch)


#: (scenario, what the tree holds after rewinding the agent's session)
KEPT = [
    (other_edits_distinct_line, {"f.txt": replaced(LINES, 8, "other 8")}),
    (person_edits_distinct_line, {"f.txt": replaced(LINES, 9, "person 9")}),
    (agent_edits_twice_around_other, {"f.txt": replaced(LINES, 6, "other 6")}),
    (
        agent_creates_moves_deletes,
        {"keep/a.txt": "a\n", "gone.txt": "gone\n", "new/made.txt": None, "moved/a.txt": None},
    ),
    (
        agent_folder_move_and_recursive_delete,
        {"d/x.txt": "x\n", "d/sub/y.txt": "y\n", "d/new.txt": "other's\n", "t/z.txt": "z\n"},
    ),
    (agent_batch_and_patch, {"p.txt": replaced(LINES, 10, "other 10"), "q.txt": None}),
    (agent_undoes_own_then_writes, {"u.txt": None}),
    (link_made, {"target.txt": "t\n", "l": None}),
]


@pytest.mark.parametrize(("scenario", "expected"), KEPT, ids=[s.__name__ for s, _ in KEPT])
async def test_rewind_reverts_the_session_and_keeps_the_rest(
    world: World, scenario: Scenario, expected: dict[str, str | None]
) -> None:
    await scenario(world)
    before = snapshot(world.root)
    result = await rewind_agent(world)
    for rel, text in expected.items():
        assert world.text(rel) == text, rel
        if text is None:
            assert not os.path.lexists(world.root / rel), rel
    assert result.transaction is not None and result.skipped == []
    assert temp_files(world.root) == []
    # The rewind is one transaction, recorded as the calling session's.
    record = await world.agent.engine.journal.transaction(result.transaction)
    assert record is not None and record.session == "agent"
    # Undoing it puts back exactly the tree it started from.
    await world.agent.call("undo", {"transaction": result.transaction})
    assert snapshot(world.root) == before


async def test_folders_the_agent_made_go_unless_someone_uses_them(world: World) -> None:
    await world.by(world.agent, "create_directory", path="made/inner")
    await world.by(world.agent, "create_directory", path="shared")
    await world.by(world.other, "write_file", path="shared/theirs.txt", content="t\n")
    await rewind_agent(world)
    assert not (world.root / "made").exists()
    assert world.text("shared/theirs.txt") == "t\n"


async def test_binary_file_goes_back_while_it_holds_the_after_image(world: World) -> None:
    await binary_unchanged_since(world)
    await rewind_agent(world)
    assert (world.root / "b.bin").read_bytes() == b"\x00\x01\x02"


#: (scenario, file that conflicts, who changed it)
Conflicting = Callable[[World], Awaitable[None]]


async def other_edits_same_line(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    await edit(w, w.other, "f.txt", "agent 2\n", "other over agent 2\n")


async def other_edits_adjacent_line(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    await edit(w, w.other, "f.txt", "line 3\n", "other 3\n")


async def person_edits_same_line(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    w.person_writes("f.txt", replaced(LINES, 2, "person 2"))


async def agent_made_other_changed(w: World) -> None:
    await w.by(w.agent, "write_file", path="f.txt", content="agent's\n")
    await w.by(w.other, "write_file", path="f.txt", content="other's\n")


async def binary_changed_since(w: World) -> None:
    await binary_unchanged_since(w)
    await w.by(w.other, "write_file", path="b.bin", content="BwgJ", encoding="base64")


async def other_made_file_where_agent_deleted(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content="old\n")
    await w.by(w.agent, "delete_file", path="f.txt")
    await w.by(w.other, "write_file", path="f.txt", content="new\n")


async def other_moved_file_agent_edited(w: World) -> None:
    await w.by(w.other, "write_file", path="f.txt", content=LINES)
    await edit(w, w.agent, "f.txt", "line 2\n", "agent 2\n")
    await w.by(w.other, "move_file", source="f.txt", destination="g.txt")


CONFLICTS = [
    (other_edits_same_line, "f.txt", "other", True),
    (other_edits_adjacent_line, "f.txt", "other", True),
    (person_edits_same_line, "f.txt", "outside", True),
    (agent_made_other_changed, "f.txt", "other", False),
    (binary_changed_since, "b.bin", "other", False),
    (other_made_file_where_agent_deleted, "f.txt", "other", False),
    (other_moved_file_agent_edited, "f.txt", "other", False),
]


@pytest.mark.parametrize(
    ("scenario", "rel", "by", "hunks"), CONFLICTS, ids=[c[0].__name__ for c in CONFLICTS]
)
async def test_a_conflict_refuses_the_rewind_and_changes_nothing(
    world: World, scenario: Conflicting, rel: str, by: str, hunks: bool
) -> None:
    await world.by(world.agent, "write_file", path="untouched-by-others.txt", content="mine\n")
    await scenario(world)
    before = snapshot(world.root)
    last = (await world.agent.engine.journal.history(limit=1))[0].id
    with pytest.raises(LedgerError) as raised:
        await rewind_agent(world)
    error = raised.value.envelope.error
    assert str(error.code) == "OCC_MISMATCH" and error.retryable
    [conflict] = error.details["conflicts"]
    assert (conflict["label"], conflict["by"]) == (rel, by)
    assert conflict["path"] == str(world.root / rel)
    assert bool(conflict["hunks"]) is hunks
    assert snapshot(world.root) == before
    assert (await world.agent.engine.journal.history(limit=1))[0].id == last


async def test_overlapping_hunks_are_named(world: World) -> None:
    await other_edits_same_line(world)
    with pytest.raises(LedgerError) as raised:
        await rewind_agent(world)
    [hunk] = raised.value.envelope.error.details["conflicts"][0]["hunks"]
    assert hunk == {
        "start": 2,
        "end": 2,
        "rewound": "agent 2\n",
        "restored": "line 2\n",
        "now": "other over agent 2\n",
    }


@pytest.mark.parametrize(("scenario", "rel", "by", "hunks"), CONFLICTS[:4])
async def test_skip_leaves_the_conflicting_file_and_rewinds_the_rest(
    world: World, scenario: Conflicting, rel: str, by: str, hunks: bool
) -> None:
    await world.by(world.agent, "write_file", path="mine.txt", content="mine\n")
    await scenario(world)
    held = world.text(rel)
    result = await rewind_agent(world, on_conflict="skip")
    assert world.text("mine.txt") is None
    assert world.text(rel) == held
    [skipped] = result.skipped
    assert (skipped.path, skipped.by) == (str(world.root / rel), by)


async def test_dry_run_previews_and_changes_nothing(world: World) -> None:
    await other_edits_distinct_line(world)
    before = snapshot(world.root)
    result = await rewind_agent(world, dry_run=True)
    assert result.dry_run and result.transaction is None
    assert "-agent 2\n+line 2\n" in result.diff
    assert snapshot(world.root) == before


async def test_rewind_of_mine_by_default_and_all_sessions(world: World) -> None:
    await world.by(world.other, "write_file", path="o.txt", content="o\n")
    start = (await world.by(world.agent, "write_file", path="a.txt", content="a\n")).transaction
    await world.by(world.other, "write_file", path="o2.txt", content="o2\n")
    await world.by(world.agent, "write_file", path="a2.txt", content="a2\n")
    result = await world.agent.call("rewind", {"after_transaction": start})
    texts = (world.text("a.txt"), world.text("a2.txt"), world.text("o2.txt"))
    assert texts == ("a\n", None, "o2\n")
    await world.agent.call("undo", {"transaction": result.transaction})
    await world.agent.call("rewind", {"after_transaction": start, "sessions": "all"})
    texts = (world.text("a.txt"), world.text("a2.txt"), world.text("o2.txt"))
    assert texts == ("a\n", None, None)
    assert world.text("o.txt") == "o\n"


async def test_paths_limit_the_rewind(world: World) -> None:
    await world.by(world.agent, "write_file", path="dir/a.txt", content="a\n")
    await world.by(world.agent, "write_file", path="b.txt", content="b\n")
    result = await rewind_agent(world, paths=["dir"])
    assert (world.text("dir/a.txt"), world.text("b.txt")) == (None, "b\n")
    assert len(result.rewound) == 1


async def test_undo_of_the_rewind_makes_the_session_again(world: World) -> None:
    await agent_edits_twice_around_other(world)
    made = world.text("f.txt")
    result = await rewind_agent(world)
    assert result.rewound_total == 3
    undone = await world.agent.call("undo", {"transaction": result.transaction})
    assert undone.undo_of == result.transaction
    assert world.text("f.txt") == made


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"session": "agent", "after_transaction": 1},
        {"session": "agent", "sessions": "some"},
        {"session": "agent", "on_conflict": "merge"},
        {"session": "agent", "paths": []},
        {"session": "agent", "paths": ["../outside"]},
        {"after_transaction": -1},
    ],
)
async def test_bad_arguments_change_nothing(world: World, arguments: dict[str, Any]) -> None:
    await world.by(world.agent, "write_file", path="a.txt", content="a\n")
    with pytest.raises(LedgerError) as raised:
        await world.agent.call("rewind", arguments)
    assert str(raised.value.code) in ("VALIDATION", "NOT_ALLOWED")
    assert world.text("a.txt") == "a\n"


async def test_nothing_to_rewind_is_no_transaction(world: World) -> None:
    result = await world.agent.call("rewind", {"session": "nobody"})
    assert result.transaction is None and result.rewound == [] and result.files == []


async def test_the_budget_is_charged_per_file(workspace: Path) -> None:
    config = {"roots": [str(workspace)], "auto_occ": "off", "mutation_budget": 4}
    async with Engine.open(config) as engine:
        agent = await engine.session("agent")
        for name in ("a", "b", "c"):
            await agent.call("write_file", {"path": f"{name}.txt", "content": name})
        with pytest.raises(LedgerError) as raised:
            await agent.call("rewind", {"session": "agent"})
        assert str(raised.value.code) == "BUDGET_EXCEEDED"
        assert raised.value.details["requested"] == 3
        assert sorted(os.listdir(workspace)) == [".ledgerfs", "a.txt", "b.txt", "c.txt"]


async def test_readonly_refuses_rewind(workspace: Path) -> None:
    async with Engine.open({"roots": [str(workspace)], "readonly": True}) as engine:
        session = await engine.session("agent")
        with pytest.raises(LedgerError) as raised:
            await session.call("rewind", {"session": "agent"})
        assert str(raised.value.code) == "READONLY"


async def test_rewind_to_a_checkpoint_of_mine_and_of_all(world: World) -> None:
    await world.by(world.agent, "write_file", path="a.txt", content="a\n")
    taken = await world.agent.call("checkpoint", {"label": "turn 2"})
    await world.by(world.agent, "write_file", path="a.txt", content="a2\n")
    await world.by(world.other, "write_file", path="o.txt", content="o\n")
    result = await world.agent.call("rewind", {"checkpoint": taken.checkpoint})
    assert (world.text("a.txt"), world.text("o.txt")) == ("a\n", "o\n")
    assert result.rewound_total == 1
    await world.other.call("rewind", {"checkpoint": taken.checkpoint, "sessions": "all"})
    # The agent's rewind came after the checkpoint too: it is reverted along with a2.
    assert (world.text("a.txt"), world.text("o.txt")) == ("a\n", None)


async def test_an_unknown_checkpoint_is_not_found(world: World) -> None:
    with pytest.raises(LedgerError) as raised:
        await world.agent.call("rewind", {"checkpoint": 99})
    assert str(raised.value.code) == "NOT_FOUND"


async def test_a_mode_goes_back_unless_someone_changed_it_since(world: World) -> None:
    await world.by(world.other, "write_file", path="run.sh", content="echo\n")
    await world.by(world.other, "write_file", path="keep.sh", content="echo\n")
    patch = (
        "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
        "diff --git a/keep.sh b/keep.sh\nold mode 100644\nnew mode 100755\n"
    )
    await world.by(world.agent, "apply_patch", patch=patch)
    os.chmod(world.root / "keep.sh", 0o700)  # a person's chmod since
    await rewind_agent(world)
    assert (world.root / "run.sh").stat().st_mode & 0o777 == 0o644
    assert (world.root / "keep.sh").stat().st_mode & 0o777 == 0o700


async def test_secrets_stay_refused(workspace: Path) -> None:
    config = {"roots": [str(workspace)], "auto_occ": "off", "allow_secrets": True}
    async with Engine.open(config) as engine:
        agent = await engine.session("agent")
        await agent.call("write_file", {"path": ".env", "content": "KEY=1\n"})
    async with Engine.open({**config, "allow_secrets": False}) as engine:
        agent = await engine.session("agent")
        with pytest.raises(LedgerError) as raised:
            await agent.call("rewind", {"session": "agent"})
        assert str(raised.value.code) == "SECRET_DENIED"
    assert (workspace / ".env").read_text() == "KEY=1\n"


async def test_many_conflicts_are_listed_up_to_the_bound(world: World) -> None:
    writes = [{"op": "write", "path": f"f{n:02}.txt", "content": "agent\n"} for n in range(60)]
    await world.by(world.agent, "batch", operations=writes)
    for n in range(60):
        world.person_writes(f"f{n:02}.txt", "person\n")
    with pytest.raises(LedgerError) as raised:
        await rewind_agent(world)
    details = raised.value.envelope.error.details
    assert (len(details["conflicts"]), details["conflicts_total"]) == (50, 60)
    assert {c["by"] for c in details["conflicts"]} == {"outside"}
    skipped = await rewind_agent(world, on_conflict="skip")
    assert (len(skipped.skipped), skipped.skipped_total, skipped.transaction) == (60, 60, None)


async def test_a_session_of_an_earlier_process_is_rewound_by_its_id(workspace: Path) -> None:
    config = {"roots": [str(workspace)], "auto_occ": "off"}
    async with Engine.open(config) as engine:
        earlier = await engine.session()
        await earlier.call("write_file", {"path": "a.txt", "content": "a\n"})
    async with Engine.open(config) as engine:
        now = await engine.session()
        result = await now.call("rewind", {"session": earlier.id})
        assert result.rewound_total == 1 and not (workspace / "a.txt").exists()
