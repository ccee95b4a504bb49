"""Model test of rewind: random interleavings of sessions and a person, then a rewind.

Hypothesis draws a program: three sessions of one engine (A, B, C) and a person
editing files behind the engine's back take turns at writes, edits of lines (the
same lines or others), moves of files and folders, deletes (recursive ones too),
new folders and binary writes. Then A's session is rewound, or everything after
a point (A's transactions, or every session's). The pure model (`_rewind_model`)
says what each file must hold, or which files conflict. Checked: the disk equals
the model's tree, or the rewind is OCC_MISMATCH naming exactly the model's
conflicting files and nothing changed (with on_conflict "skip", the model's
tree with those files left as they are); then undoing the rewind gives back the
tree from before it, byte for byte.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerfs.engine import Engine, LedgerError, Session

from . import _rewind_model as model
from ._rewind_model import DIR, FS, LINES, Tx, inside, parents, text_file, with_line
from .conftest import snapshot

SESSIONS = ("A", "B", "C")
ACTORS = (*SESSIONS, "person")
FILES = ["a.txt", "b.txt", "d/c.txt", "d/e.txt", "f/g.txt", "f/h/i.txt", "k/n.txt"]
FOLDERS = ["d", "f", "f/h", "k", "x", "f/y"]
BINARY = "bin.dat"


@dataclass
class Step:
    """One turn: who acts, the tool (or the person's edit), its arguments and changes."""

    actor: str
    tool: str
    arguments: dict[str, Any]
    after: FS
    changes: list[model.Change] = field(default_factory=list)


def free(fs: FS, path: str) -> bool:
    """A path nothing holds, whose folders are folders or missing."""
    return path not in fs and all(fs.get(p, DIR) == DIR for p in parents(path))


@st.composite
def steps(draw: st.DrawFn, fs: FS, actor: str, counter: list[int]) -> Step | None:
    def token() -> str:
        counter[0] += 1
        return f"{actor}{counter[0]}"

    texts = sorted(p for p, v in fs.items() if isinstance(v, bytes) and model.is_text(v))
    files = sorted(p for p, v in fs.items() if v != DIR)
    folders = sorted(p for p, v in fs.items() if v == DIR)
    kinds = ["write", "edit", "edit", "edit"]
    if actor != "person":
        kinds += ["move", "delete", "mkdir", "move_folder", "delete_folder", "binary"]
    kind = draw(st.sampled_from(kinds), label=f"{actor} does")
    after = dict(fs)
    if kind == "write" or (kind == "edit" and not texts):
        path = draw(st.sampled_from(sorted(set(FILES) | set(texts))), label="path")
        if not (free(fs, path) or path in texts):
            return None
        data = text_file([token() for _ in range(LINES)])
        if actor == "person":
            after.update((folder, DIR) for folder in parents(path))
            after[path] = data
            return Step(actor, "person", {"path": path, "data": data}, after)
        changes = model.write(fs, path, data)
        return Step(actor, "write_file", {"path": path, "content": data.decode()}, after, changes)
    if kind == "edit":
        path = draw(st.sampled_from(texts), label="edited")
        # Few lines, so sessions often meet on one line or on lines next to each other.
        number = draw(st.sampled_from([2, 3, 4, 7]), label="line")
        old = fs[path]
        assert isinstance(old, bytes)
        new = with_line(old, number, token())
        if actor == "person":
            after[path] = new
            return Step(actor, "person", {"path": path, "data": new}, after)
        old_line, new_line = (model.lines_of(d)[number - 1].decode() for d in (old, new))
        arguments = {"path": path, "edits": [{"old_text": old_line, "new_text": new_line}]}
        return Step(actor, "edit_file", arguments, after, [model.Put(path, old, new)])
    if kind == "binary":
        data = bytes([0, len(fs) % 256, counter[0] % 256])
        token()
        if not (free(fs, BINARY) or fs[BINARY] != DIR):
            return None
        changes = model.write(fs, BINARY, data)
        arguments = {"path": BINARY, "content": _b64(data), "encoding": "base64"}
        return Step(actor, "write_file", arguments, after, changes)
    if kind == "move" and files:
        source = draw(st.sampled_from(files), label="moved")
        destination = draw(st.sampled_from([*FILES, "m.txt", "k/z.txt"]), label="to")
        if not free(fs, destination):
            return None
        changes = model.move(fs, source, destination)
        arguments = {"source": source, "destination": destination}
        return Step(actor, "move_file", arguments, after, changes)
    if kind == "delete" and files:
        path = draw(st.sampled_from(files), label="deleted")
        return Step(actor, "delete_file", {"path": path}, after, model.delete(fs, path))
    if kind == "mkdir":
        path = draw(st.sampled_from(FOLDERS), label="folder")
        if not free(fs, path):
            return None
        return Step(actor, "create_directory", {"path": path}, after, model.mkdir(fs, path))
    if kind == "move_folder" and folders:
        source = draw(st.sampled_from(folders), label="moved folder")
        destination = draw(st.sampled_from(FOLDERS), label="folder to")
        if not free(fs, destination) or inside(destination, source):
            return None
        changes = model.move(fs, source, destination)
        arguments = {"source": source, "destination": destination}
        return Step(actor, "move_file", arguments, after, changes)
    if kind == "delete_folder" and folders:
        path = draw(st.sampled_from(folders), label="deleted folder")
        changes = model.delete(fs, path)
        return Step(actor, "delete_file", {"path": path, "recursive": True}, after, changes)
    return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@st.composite
def programs(draw: st.DrawFn) -> tuple[FS, list[Step]]:
    start: FS = {"d": DIR, "f": DIR}
    start["a.txt"] = text_file([f"s{i}" for i in range(LINES)])
    start["d/c.txt"] = text_file([f"t{i}" for i in range(LINES)])
    fs = dict(start)
    program: list[Step] = []
    counter = [0]
    for _ in range(draw(st.integers(2, 14), label="turns")):
        actor = draw(st.sampled_from(ACTORS), label="actor")
        step = draw(steps(fs, actor, counter))
        if step is None:
            continue
        for change in step.changes:
            model.apply(step.after, change)
        program.append(step)
        fs = step.after
    return start, program


def write_tree(root: Path, fs: FS) -> None:
    for rel, value in sorted(fs.items()):
        path = root / rel
        if value == DIR:
            path.mkdir(parents=True, exist_ok=True)
        else:
            assert isinstance(value, bytes)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(value)


def tree_of(fs: FS) -> dict[str, bytes | None]:
    return {p: (None if v == DIR else v) for p, v in sorted(fs.items())}  # type: ignore[misc]


async def run(root: Path, start: FS, program: list[Step], scope: dict[str, Any]) -> None:
    write_tree(root, start)
    config = {"roots": [str(root)], "auto_occ": "off", "durability": "normal"}
    async with Engine.open(config) as engine:
        sessions: dict[str, Session] = {name: await engine.session(name) for name in SESSIONS}
        made: list[Tx] = []
        at = scope.get("point", 0) % max(len(program), 1)
        point, checkpoint = 0, None
        for index, step in enumerate(program):
            if index == at:
                point = made[-1].id if made else 0
                taken = await sessions["A"].call("checkpoint", {"label": "turn"})
                assert taken.transaction == (point or None)
                checkpoint = taken.checkpoint
            if step.tool == "person":
                (root / step.arguments["path"]).parent.mkdir(parents=True, exist_ok=True)
                (root / step.arguments["path"]).write_bytes(step.arguments["data"])
            else:
                result = await sessions[step.actor].call(step.tool, step.arguments)
                assert (result.transaction is None) == (not step.changes), step
                if result.transaction is not None:
                    made.append(Tx(result.transaction, step.actor, step.changes))
            assert snapshot(root) == tree_of(step.after), step
        fs = program[-1].after if program else start
        arguments: dict[str, Any] = {"session": "A"}
        rewound = [tx for tx in made if tx.session == "A"]
        if "point" in scope:
            everyone = scope["sessions"] == "all"
            rewound = [tx for tx in made if tx.id > point and (everyone or tx.session == "A")]
            arguments = {scope["by"]: checkpoint, "sessions": scope["sessions"]}
            if scope["by"] == "after_transaction":
                arguments["after_transaction"] = point
        arguments["on_conflict"] = scope["on_conflict"]
        expected, conflicts = model.rewind(fs, rewound)
        before = snapshot(root)
        try:
            result = await sessions["A"].call("rewind", arguments)
        except LedgerError as exc:
            error = exc.envelope.error
            assert str(error.code) == "OCC_MISMATCH", error
            assert scope["on_conflict"] == "refuse" and conflicts, error
            named = {c["label"] for c in error.details["conflicts"]}
            assert named == conflicts, (named, conflicts)
            assert snapshot(root) == before
            return
        assert not conflicts or scope["on_conflict"] == "skip", conflicts
        assert {os.path.relpath(s.path, root) for s in result.skipped} == conflicts
        assert snapshot(root) == tree_of(expected)
        if result.transaction is not None:
            await sessions["B"].call("undo", {"transaction": result.transaction})
        assert snapshot(root) == before


SCOPES = st.one_of(
    st.fixed_dictionaries({}),
    st.fixed_dictionaries(
        {
            "point": st.integers(0, 20),
            "sessions": st.sampled_from(["mine", "all"]),
            "by": st.sampled_from(["checkpoint", "after_transaction"]),
        }
    ),
).flatmap(
    lambda scope: st.fixed_dictionaries({"on_conflict": st.sampled_from(["refuse", "skip"])}).map(
        lambda extra: {**scope, **extra}
    )
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(program=programs(), scope=SCOPES)
def test_rewind_matches_the_model(program: tuple[FS, list[Step]], scope: dict[str, Any]) -> None:
    start, steps_ = program
    root = Path(os.path.realpath(tempfile.mkdtemp(prefix="ledgerfs-rewind-")))
    try:
        anyio.run(run, root, start, steps_, scope)
    finally:
        shutil.rmtree(root, ignore_errors=True)
