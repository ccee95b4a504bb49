"""Model-based test of the transactional core: random op sequences against a model.

A hypothesis state machine drives a real Engine (durability "normal", auto_occ
"off") on a temp folder through a blocking portal kept open across steps, and a
pure model (`_model.py`) predicts every outcome: the files after each successful
mutation, the code of each failure (which must change nothing), undo's OCC
verdict from the model's own history, and what a crash may leave (all of one
transaction or none of it). After every step: disk equals the model byte for byte,
no temp files are left, history lists one in-effect entry per successful
mutation in order (with undo_of), every result's hashes are the model's, and
`verify` reports nothing but the paths changed behind the engine's back.

Batches also move a folder and write into it where it went (OCC judged against
the file moved there); undo picks any transaction in effect, undos included
(an undo of an undo makes the change again), and one undone already is refused.

Crashes: the engine's FileOps raise `Crash` (not an OSError, so nothing catches
it) before the k-th change of a transaction reaches the disk; the engine is then
closed without marking anything, a temp file such a dead writer would leave is
planted, and a new engine recovers the journal on open.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ledgerfs.engine import Engine
from ledgerfs.engine.errors import LedgerError
from ledgerfs.engine.fileops import FileOps, temp_name
from ledgerfs.engine.maintenance import verify
from ledgerfs.engine.results import MutationResult

from ._model import (
    DIR,
    FS,
    NOT_FOUND,
    OCC_MISMATCH,
    VALIDATION,
    Change,
    Fail,
    Tx,
    Value,
    folders_undo_makes,
    hash_of,
    is_text,
    split_lines,
    undo_target,
    unified,
)

FILES = ["a.txt", "b.txt", "c.bin", "d/e.txt", "d/f.txt", "g/h/i.txt", "k/l.txt", "m/n.txt"]
FOLDERS = ["d", "g", "g/h", "k", "m"]
# Where a batch moves a folder to (then writes into it).
MOVED_FOLDERS = ["z", "k/z"]
TOOL = {
    "write": "write_file",
    "edit": "edit_file",
    "patch": "apply_patch",
    "move": "move_file",
    "delete": "delete_file",
    "mkdir": "create_directory",
}
NO_HASH = "blake3:" + "0" * 64

LINE = st.sampled_from(["alpha", "beta", "gamma", "x = 1", "é", "", "  pad", "alpha beta"])
EOL = st.sampled_from(["\n", "\n", "\r\n"])


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Text with LF, CRLF or mixed line ends, with or without a final newline."""
    lines = draw(st.lists(LINE, max_size=7))
    if draw(st.booleans()):
        eol = draw(EOL)
        ends = [eol] * len(lines)
    else:
        ends = [draw(EOL) for _ in lines]
    text = "".join(line + end for line, end in zip(lines, ends, strict=True))
    if lines and draw(st.booleans()):
        text = text[: -len(ends[-1])]
    return text


class Crash(Exception):
    """The process 'dies' here: raised past every handler of the apply step."""


class CrashingOps(FileOps):
    """FileOps that raise Crash at the n-th state-changing primitive when armed."""

    def __init__(self) -> None:
        self.countdown: int | None = None

    def _tick(self) -> None:
        if self.countdown is None:
            return
        if self.countdown == 0:
            self.countdown = None
            raise Crash
        self.countdown -= 1

    def rename(self, src_dir: int, src: str, dst_dir: int, dst: str) -> None:
        self._tick()
        super().rename(src_dir, src, dst_dir, dst)

    def swap_in(self, dir_fd: int, tmp: str, name: str) -> bool:
        self._tick()
        return super().swap_in(dir_fd, tmp, name)

    def unlink(self, dir_fd: int, name: str) -> None:
        self._tick()
        super().unlink(dir_fd, name)

    def mkdir(self, dir_fd: int, name: str, mode: int) -> None:
        self._tick()
        super().mkdir(dir_fd, name, mode)

    def rmdir(self, dir_fd: int, name: str) -> None:
        self._tick()
        super().rmdir(dir_fd, name)


@dataclass
class Op:
    """One drawn operation: its batch form, OCC checks and its plan on the model."""

    args: dict[str, Any]
    plan: Callable[[Tx], None]
    checks: list[tuple[str, str | None]] = field(default_factory=list)
    # A single call resolves this path first; missing, it may be NOT_FOUND.
    needs: str | None = None


@dataclass
class ModelTx:
    tx: int
    undo_of: int | None
    touched: dict[str, tuple[Value | None, Value | None]]


def snapshot(root: str) -> tuple[FS, list[str]]:
    """Every file and folder under root (skipping .ledgerfs/), and stray temp files."""
    fs: FS = {}
    temps = []
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if d != ".ledgerfs"]
        for d in dirs:
            fs[os.path.normpath(os.path.join(rel, d))] = DIR
        for name in files:
            path = os.path.join(folder, name)
            if name.startswith(".ledgerfs-") and name.endswith(".tmp"):
                temps.append(path)
                continue
            with open(path, "rb") as fh:
                fs[os.path.normpath(os.path.join(rel, name))] = fh.read()
    return fs, temps


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="ledgerfs-stateful-")
        self.root = os.path.join(os.path.realpath(self.tmp), "w")
        os.mkdir(self.root)
        self.config = {"roots": [self.root], "durability": "normal", "auto_occ": "off"}
        self.fileops = CrashingOps()
        self.portal_cm = start_blocking_portal("asyncio")
        self.portal = self.portal_cm.__enter__()
        self.engine_cm: Any = None
        self.fs: FS = {}
        self.effective: list[ModelTx] = []
        self.ineffective: set[int] = set()
        self.last_tx = 0
        self.seen: set[str] = set()
        self.external: tuple[str, str] | None = None
        self.outside: set[str] = set()  # paths changed behind the engine's back
        self.folder_moves: dict[int, str] = {}  # transactions that moved a folder: its source
        self._open()

    # -- plumbing ------------------------------------------------------------------

    def _open(self) -> None:
        self.engine_cm = self.portal.wrap_async_context_manager(
            Engine.open(self.config, fileops=self.fileops)
        )
        self.engine = self.engine_cm.__enter__()
        self.session = self.portal.call(self.engine.session)

    def _close(self) -> None:
        if self.engine_cm is not None:
            cm, self.engine_cm = self.engine_cm, None
            cm.__exit__(None, None, None)

    def teardown(self) -> None:
        try:
            self._close()
        finally:
            self.portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.tmp, ignore_errors=True)

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        return self.portal.call(self.session.call, tool, args)

    def abs(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def stale_hash(self, path: str, data: st.DataObject) -> str:
        current = hash_of(self.fs.get(path))
        choices = sorted(self.seen - {current}) or [NO_HASH]
        return data.draw(st.sampled_from(choices), label="stale hash")

    # -- drawing operations ----------------------------------------------------------

    def draw_occ(self, data: st.DataObject, path: str, base: FS) -> str | None:
        """No expected_hash, the right one (of `base`, what the client read), or a stale one."""
        kind = data.draw(st.sampled_from(["none", "none", "good", "stale"]), label="occ")
        if kind == "good" and isinstance(base.get(path), bytes):
            return hash_of(base[path])
        if kind == "stale":
            return self.stale_hash(path, data)
        return None

    def draw_op(self, data: st.DataObject, fs: FS, base: FS, *, in_batch: bool) -> Op:
        files = sorted(p for p, v in fs.items() if isinstance(v, bytes))
        text_files = [p for p in files if is_text(fs[p])]  # type: ignore[arg-type]
        kinds = ["write", "write", "edit", "edit", "move", "delete", "mkdir", "patch"]
        kind = data.draw(st.sampled_from(kinds), label="op")
        draw = data.draw
        if kind == "write":
            path = draw(st.sampled_from(FILES), label="path")
            expected = self.draw_occ(data, path, base)
            args: dict[str, Any] = {"op": "write", "path": path}
            if draw(st.booleans(), label="binary"):
                raw = draw(st.binary(max_size=24), label="bytes")
                args |= {"content": base64.b64encode(raw).decode(), "encoding": "base64"}
                plan: Callable[[Tx], None] = lambda tx: tx.write(path, raw, text=False)  # noqa: E731
            else:
                text = draw(texts(), label="text")
                args["content"] = text
                plan = lambda tx: tx.write(path, text.encode(), text=True)  # noqa: E731
            if expected is not None:
                args["expected_hash"] = expected
            return Op(args, plan, [(path, expected)])
        if kind == "edit":
            path = draw(st.sampled_from(text_files or files or FILES), label="path")
            expected = self.draw_occ(data, path, base)
            current = fs.get(path)
            readable = isinstance(current, bytes) and is_text(current)
            text = current.decode("utf-8") if readable else ""  # type: ignore[union-attr]
            edits = []
            for _ in range(draw(st.integers(1, 2), label="edits")):
                how = draw(st.sampled_from(["line", "line", "slice", "missing", "char"]))
                lines = split_lines(text)
                if how == "line" and lines:
                    old = draw(st.sampled_from(lines)).rstrip("\r\n") or "\n"
                elif how == "slice" and text:
                    start = draw(st.integers(0, len(text) - 1))
                    old = text[start : draw(st.integers(start + 1, min(len(text), start + 16)))]
                elif how == "char" and text:
                    old = draw(st.sampled_from(sorted(set(text))))
                else:
                    old = "zzz not there"
                new = draw(st.sampled_from(["", "NEW", "one\ntwo", "é\n", "alpha"]), label="new")
                edits.append((old, new))
            args = {
                "op": "edit",
                "path": path,
                "edits": [{"old_text": o, "new_text": n} for o, n in edits],
                "allow_rewrite": True,
            }
            if expected is not None:
                args["expected_hash"] = expected
            return Op(args, lambda tx: tx.edit(path, edits), [(path, expected)], needs=path)
        if kind == "move":
            source = draw(st.sampled_from(files or FILES), label="source")
            destination = draw(st.sampled_from(FILES), label="destination")
            if source == destination:
                destination = "moved.txt"
            expected = self.draw_occ(data, source, base)
            args = {"op": "move", "source": source, "destination": destination}
            if expected is not None:
                args["expected_hash"] = expected
            return Op(
                args, lambda tx: tx.move(source, destination), [(source, expected)], needs=source
            )
        if kind == "delete":
            path = draw(st.sampled_from(files if files and draw(st.booleans()) else FILES))
            expected = self.draw_occ(data, path, base)
            args = {"op": "delete", "path": path}
            if expected is not None:
                args["expected_hash"] = expected
            return Op(args, lambda tx: tx.delete(path), [(path, expected)], needs=path)
        if kind == "patch":
            op = self.draw_patch(data, fs, base, in_batch=in_batch)
            if op is not None:
                return op
        path = draw(st.sampled_from(FOLDERS), label="folder")
        return Op({"op": "mkdir", "path": path}, lambda tx: tx.mkdirs(path))

    def draw_patch(self, data: st.DataObject, fs: FS, base: FS, *, in_batch: bool) -> Op | None:
        """A unified diff of one or two files made with difflib from the model."""
        draw = data.draw
        candidates = [
            p
            for p in FILES
            if fs.get(p) is None or (isinstance(fs.get(p), bytes) and is_text(fs[p]))  # type: ignore[arg-type]
        ]
        if not candidates:
            return None
        paths = draw(
            st.lists(st.sampled_from(candidates), min_size=1, max_size=2, unique=True),
            label="patch paths",
        )
        parts, files, checks = [], [], []
        expected_hashes: dict[str, str] = {}
        for path in paths:
            old = fs.get(path)
            assert old is None or isinstance(old, bytes)
            if old is not None and old and draw(st.integers(0, 5), label="delete?") == 0:
                new: bytes | None = None
            elif old is not None and draw(st.booleans(), label="tweak"):
                lines = split_lines(old.decode("utf-8"))
                start = draw(st.integers(0, len(lines)))
                stop = draw(st.integers(start, min(len(lines), start + 3)))
                added = draw(st.lists(LINE, max_size=3))
                eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
                lines[start:stop] = [line + eol for line in added]
                new = "".join(lines).encode()
            else:
                new = draw(texts(), label="patch text").encode()
            diff = unified(path, old, new, draw(st.integers(1, 3), label="context"))
            if not diff:
                continue
            parts.append(diff)
            files.append((path, old, new))
            if old is not None:
                expected = None if in_batch else self.draw_occ(data, path, base)
                checks.append((path, expected))
                if expected is not None:
                    expected_hashes[path] = expected
        if not parts:
            return None
        args: dict[str, Any] = {"op": "patch", "patch": "".join(parts)}
        if expected_hashes:
            args["expected_hashes"] = expected_hashes
        return Op(args, lambda tx: tx.patch(files), checks)

    # -- running and checking ---------------------------------------------------------

    def expect(self, ops: list[Op], *, single: bool) -> Tx | Fail:
        """The model's verdict: OCC checks against the state read, then the plan in order.

        Each operation's check reads the file its path names where the earlier
        operations left it (a moved file is checked as it was before the batch).
        """
        tx = Tx(dict(self.fs))
        failed: Fail | None = None
        try:
            for op in ops:
                for path, expected in op.checks:
                    if expected is not None and expected != hash_of(self.fs.get(tx.named(path))):
                        raise Fail(OCC_MISMATCH)
                if failed is None:
                    try:
                        op.plan(tx)
                    except Fail as fail:
                        failed = fail  # reported once every check is made
            if failed is not None:
                raise failed
        except Fail as fail:
            # A single call may resolve its source before OCC: then it is NOT_FOUND.
            if single and ops[0].needs is not None and ops[0].needs not in self.fs:
                fail.codes.add(NOT_FOUND)
            return fail
        return tx

    def perform(
        self, tool: str, args: dict[str, Any], expected: Tx | Fail
    ) -> MutationResult | None:
        """Run one call and hold it to the model's verdict; update the model."""
        try:
            result = self.call(tool, args)
        except LedgerError as exc:
            code = str(exc.code)
            assert isinstance(expected, Fail), f"{tool} failed with {exc.envelope.to_json()}"
            assert code in expected.codes, f"{tool}: {code}, model says {expected.codes}"
            if code == OCC_MISMATCH:
                error = msgspec.to_builtins(exc.envelope)["error"]
                assert error["retryable"] is True
                assert "expected_hash" in error and "current_hash" in error
            return None
        assert isinstance(result, MutationResult)
        assert not isinstance(expected, Fail), f"{tool} succeeded; model says {expected.codes}"
        self.commit_model(result, expected)
        return result

    def commit_model(self, result: MutationResult, tx: Tx, undo_of: int | None = None) -> None:
        got = [
            Change(
                self.rel(f.path),
                self.rel(f.destination) if f.destination else None,
                f.previous_hash,
                f.content_hash,
            )
            for f in result.files
        ]
        assert got == tx.changes, (got, tx.changes)
        assert result.undo_of == undo_of
        self.fs = tx.fs
        for change in tx.changes:
            self.seen.update(h for h in (change.before, change.after) if h)
        if not tx.changes:
            assert result.transaction is None
            return
        assert result.transaction is not None and result.transaction > self.last_tx
        self.last_tx = result.transaction
        self.effective.append(ModelTx(result.transaction, undo_of, tx.touched))

    # -- rules ---------------------------------------------------------------------

    @rule(data=st.data())
    def single(self, data: st.DataObject) -> None:
        op = self.draw_op(data, self.fs, self.fs, in_batch=False)
        args = {k: v for k, v in op.args.items() if k != "op"}
        self.perform(TOOL[op.args["op"]], args, self.expect([op], single=True))

    @rule(data=st.data())
    def batch(self, data: st.DataObject) -> None:
        """2-4 ops, each drawn against what the ones before it leave."""
        ops, virtual = [], dict(self.fs)
        for _ in range(data.draw(st.integers(2, 4), label="batch size")):
            op = self.draw_op(data, virtual, self.fs, in_batch=True)
            ops.append(op)
            tx = Tx(dict(virtual))
            try:
                op.plan(tx)
                virtual = tx.fs
            except Fail:
                pass
        moves_folder = data.draw(st.integers(0, 3), label="folder move?") == 0
        if moves_folder:
            ops += self.draw_folder_move(data, virtual)
        expected = self.expect(ops, single=False)
        result = self.perform("batch", {"operations": [op.args for op in ops]}, expected)
        if result is not None and result.transaction is not None and moves_folder:
            self.folder_moved(result.transaction, ops[-2].args)

    @rule(data=st.data())
    def move_folder_then_write(self, data: st.DataObject) -> None:
        """A batch that moves a folder and writes into it where it went."""
        ops = self.draw_folder_move(data, self.fs)
        expected = self.expect(ops, single=False)
        result = self.perform("batch", {"operations": [op.args for op in ops]}, expected)
        if result is not None and result.transaction is not None:
            self.folder_moved(result.transaction, ops[0].args)

    def folder_moved(self, tx: int, move: dict[str, Any]) -> None:
        """Note a committed folder move: the journal follows the folder, so a file
        changed behind the engine's back now drifts under the folder's new name."""
        source, destination = move["source"], move["destination"]
        self.folder_moves[tx] = source
        self.outside |= {
            destination + p[len(source) :] for p in self.outside if p.startswith(source + "/")
        }

    def draw_folder_move(self, data: st.DataObject, fs: FS) -> list[Op]:
        """A folder moved, then a write into it where one of its files went (or a new one)."""
        draw = data.draw
        folders = sorted(p for p, v in fs.items() if v == DIR) or FOLDERS
        source = draw(st.sampled_from(folders), label="moved folder")
        destination = draw(st.sampled_from(MOVED_FOLDERS), label="to")
        inside = sorted(
            p[len(source) + 1 :]
            for p, v in fs.items()
            if isinstance(v, bytes) and p.startswith(source + "/")
        )
        name = draw(st.sampled_from([*inside, "new.txt"]), label="written")
        target = f"{destination}/{name}"
        text = draw(texts(), label="text")
        occ = draw(st.sampled_from(["none", "good", "stale"]), label="occ")
        write: dict[str, Any] = {"op": "write", "path": target, "content": text}
        was = self.fs.get(f"{source}/{name}")
        if occ == "good" and isinstance(was, bytes):
            write["expected_hash"] = hash_of(was)
        elif occ == "stale":
            write["expected_hash"] = self.stale_hash(target, data)
        move = Op(
            {"op": "move", "source": source, "destination": destination},
            lambda tx: tx.move_folder(source, destination),
            [(source, None)],
        )
        written = Op(
            write,
            lambda tx: tx.write(target, text.encode(), text=True),
            [(target, write.get("expected_hash"))],
        )
        return [move, written]

    @rule(data=st.data())
    def undo(self, data: st.DataObject) -> None:
        """Undo an earlier transaction; the model's history decides OCC_MISMATCH."""
        choice = data.draw(st.integers(0, 9), label="undo kind")
        if choice == 0 or not self.effective:
            target = self.last_tx + 1 + data.draw(st.integers(0, 3))
            expected: Tx | Fail = Fail(NOT_FOUND)
            try:
                self.call("undo", {"transaction": target})
            except LedgerError as exc:
                assert str(exc.code) == NOT_FOUND
                return
            raise AssertionError("undo of a transaction that does not exist succeeded")
        if choice == 1 and self.ineffective:
            target = data.draw(st.sampled_from(sorted(self.ineffective)))
            try:
                self.call("undo", {"transaction": target})
            except LedgerError as exc:
                assert str(exc.code) == VALIDATION
                return
            raise AssertionError("undo of a rolled-back transaction succeeded")
        # Undoing a folder's move moves the folder back with whatever is in it now,
        # and undoing a transaction whose paths a later one moved away with their
        # folder finds them where the journal followed them: the model's
        # path-by-path undo describes neither, so neither is drawn.
        undoable = [
            m
            for m in self.effective
            if m.tx not in self.folder_moves
            and not any(
                later > m.tx and (path == moved or path.startswith(moved + "/"))
                for later, moved in self.folder_moves.items()
                for path in m.touched
            )
        ]
        if not undoable:
            return
        record = data.draw(st.sampled_from(undoable), label="undone")
        undone = self.undone_by(record.tx)
        if undone is not None:
            # Undone already (and that undo not undone): refused, nothing changes.
            with pytest.raises(LedgerError) as refused:
                self.call("undo", {"transaction": record.tx})
            error = refused.value.envelope.error
            assert (str(refused.value.code), error.retryable) == (VALIDATION, False)
            assert error.details["undone_by"] == undone, error
            return
        try:
            fs = undo_target(self.fs, record.touched)
            made = folders_undo_makes(self.fs, fs)
            fs.update(dict.fromkeys(made, DIR))
            tx = Tx(fs)
            tx.touched = {p: (after, before) for p, (before, after) in record.touched.items()}
            tx.touched.update({folder: (None, DIR) for folder in made})
            expected = tx
        except Fail as fail:
            expected = fail
        try:
            result = self.call("undo", {"transaction": record.tx})
        except LedgerError as exc:
            assert isinstance(expected, Fail), f"undo failed: {exc.envelope.to_json()}"
            assert str(exc.code) == OCC_MISMATCH, exc.envelope.to_json()
            return
        assert not isinstance(expected, Fail), "undo succeeded; the model says OCC_MISMATCH"
        assert result.undo_of == record.tx
        assert result.transaction > self.last_tx
        final: dict[str, str | None] = {}
        for f in result.files:  # a path's last change leaves what the model says
            final[self.rel(f.destination or f.path)] = f.content_hash
            if f.destination:
                final[self.rel(f.path)] = None
        for rel, digest in final.items():
            assert digest == hash_of(expected.fs.get(rel)), rel
        self.fs = expected.fs
        self.last_tx = result.transaction
        self.effective.append(ModelTx(result.transaction, record.tx, expected.touched))

    def undone_by(self, tx: int) -> int | None:
        """The transaction in effect that undid `tx` (an undone undo does not count)."""
        for m in self.effective:
            if m.undo_of == tx and self.undone_by(m.tx) is None:
                return m.tx
        return None

    @rule(data=st.data())
    def external_edit(self, data: st.DataObject) -> None:
        """Change a file behind the engine's back."""
        path = data.draw(st.sampled_from(FILES), label="external path")
        if any(self.fs.get(folder) != DIR for folder in _parents(path)):
            return
        before = self.fs.get(path)
        if isinstance(before, bytes) and data.draw(st.booleans(), label="remove"):
            os.unlink(self.abs(path))
            del self.fs[path]
        else:
            content = data.draw(texts(), label="external text").encode() + b"ext\n"
            with open(self.abs(path), "wb") as fh:
                fh.write(content)
            self.fs[path] = content
        self.outside.add(path)
        if isinstance(before, bytes):
            self.seen.add(hash_of(before))  # type: ignore[arg-type]
            self.external = (path, hash_of(before))  # type: ignore[assignment]

    @precondition(lambda self: self.external is not None)
    @rule(data=st.data())
    def stale_after_external(self, data: st.DataObject) -> None:
        """An op with the hash read before the external edit gets OCC_MISMATCH."""
        assert self.external is not None
        path, old = self.external
        if hash_of(self.fs.get(path)) == old:
            return
        tool = data.draw(st.sampled_from(["write_file", "edit_file", "delete_file"]))
        args: dict[str, Any] = {"path": path, "expected_hash": old}
        if tool == "write_file":
            args["content"] = "stale\n"
        elif tool == "edit_file":
            args["edits"] = [{"old_text": "x", "new_text": "y"}]
        try:
            self.call(tool, args)
        except LedgerError as exc:
            assert str(exc.code) in (OCC_MISMATCH, NOT_FOUND), exc.envelope.to_json()
            if path in self.fs:
                assert str(exc.code) == OCC_MISMATCH
            return
        raise AssertionError("a stale expected_hash was accepted")

    @rule()
    def clean_restart(self) -> None:
        self._close()
        self._open()
        assert self.engine.recovered == []

    @rule(data=st.data())
    def dirty_restart(self, data: st.DataObject) -> None:
        """Crash one transaction before its k-th change, then recover on open."""
        ops = [self.draw_op(data, self.fs, self.fs, in_batch=True)]
        expected = self.expect(ops, single=False)
        if isinstance(expected, Fail) or not expected.changes:
            return
        k = data.draw(st.integers(0, len(expected.changes) - 1), label="crash before")
        self.fileops.countdown = k
        try:
            self.call("batch", {"operations": [op.args for op in ops]})
        except Crash:
            pass
        else:
            raise AssertionError("the armed crash did not happen")
        finally:
            self.fileops.countdown = None
        dead = self.engine.journal.owner
        self._close()
        # What a writer killed between its temp file and the rename leaves behind.
        folders = sorted({os.path.dirname(self.abs(c.path)) for c in expected.changes})
        folder = data.draw(st.sampled_from(folders), label="temp folder")
        if os.path.isdir(folder):
            with open(os.path.join(folder, temp_name("a.txt", dead)), "wb") as fh:
                fh.write(b"torn")
        self._open()
        [outcome] = self.engine.recovered
        assert outcome.transaction > self.last_tx
        self.last_tx = outcome.transaction
        disk, _ = snapshot(self.root)
        if disk == expected.fs:
            assert outcome.action == "roll_forward" and outcome.outcome == "rolled_forward"
            self.fs = expected.fs
            self.effective.append(ModelTx(outcome.transaction, None, expected.touched))
        else:
            assert disk == self.fs, "a crashed transaction was left half applied"
            assert outcome.action == "roll_back"
            self.ineffective.add(outcome.transaction)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        files = sorted(p for p, v in self.fs.items() if isinstance(v, bytes))
        if not files:
            return
        path = data.draw(st.sampled_from(files))
        result = self.call("read_file", {"path": path})
        assert result.content_hash == hash_of(self.fs[path])

    # -- invariants -----------------------------------------------------------------

    @invariant()
    def disk_matches_model(self) -> None:
        disk, temps = snapshot(self.root)
        assert temps == [], f"temp files left: {temps}"
        assert disk == self.fs

    @invariant()
    def verify_reports_only_outside_changes(self) -> None:
        """verify is clean but for paths changed behind the engine's back."""
        report = self.portal.call(verify, self.engine)
        assert report.journal_ok and report.awaiting_recovery == [], report
        drifted = {os.path.relpath(d.path, self.root) for d in report.drifted}
        assert drifted <= self.outside, (drifted - self.outside, report.drifted)

    @invariant()
    def history_matches_model(self) -> None:
        history = self.portal.call(self.session.call, "history", {"limit": 1000})
        entries = sorted(history.entries, key=lambda e: e.transaction)
        # The "committed" mark is queued lazily, but this engine's own reads show
        # it at once: an acknowledged transaction is never "pending" here.
        in_effect = [
            (e.transaction, e.undo_of)
            for e in entries
            if e.state == "committed" or (e.state == "recovered" and e.outcome == "rolled_forward")
        ]
        assert in_effect == [(m.tx, m.undo_of) for m in self.effective]
        others = {e.transaction for e in entries} - {m.tx for m in self.effective}
        assert others <= self.ineffective, [
            (e.transaction, e.state, e.outcome) for e in entries if e.transaction in others
        ]


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


# The default run's share; the soak below runs 400 examples of 60 steps.
EngineMachine.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_engine_model = EngineMachine.TestCase


@pytest.mark.soak
def test_engine_model_soak() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        EngineMachine,
        settings=settings(
            max_examples=400,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
