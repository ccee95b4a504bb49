"""The mutation pipeline: every change to files takes this one path.

prepare (decode and resolve, no locks) -> lock -> load -> check (OCC, auto-OCC)
-> plan (pure) -> reserve budget -> apply through the journal -> commit.
Undo takes the same path from lock on, with the undone transaction's inverse as
its plan and the transaction's after images as its precondition.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from functools import partial
from typing import NamedTuple

import anyio
import anyio.lowlevel
import msgspec

from . import bounds, git, stale
from .binpatch import Room
from .budget import files_changed
from .caller import Caller, EngineParts
from .changes import ABSENT, NEW_DIR_MODE, Change, Entry, is_link_mode, unkept
from .edits import LooseMatch
from .effects import Tree, effects, state_of, under
from .encodings import codec_name
from .errors import Code, LedgerError
from .fileops import TooLarge, Vet, load_entry
from .history import changes_diff, not_recorded
from .nofollow import open_dir
from .nonutf8 import reply_json
from .notebooks import require_notebook
from .occ import check_hash_format, conflict_error, precondition
from .patchparse import patch_text
from .patchplan import LinkCheck, prepare_patch
from .paths import Resolved
from .planning import (
    MAX_EDIT_SEARCH,
    Planner,
    Step,
    TextEdit,
    Written,
    charge_edit_search,
    check_edit_text,
    decode_content,
    edit_search,
    grows,
)
from .progress import EVERY, report
from .reads import guard_os, read_error, too_large
from .requests import (
    CopyOp,
    DeleteOp,
    EditOp,
    MkdirOp,
    MoveOp,
    NotebookOp,
    Operation,
    PatchOp,
    WriteOp,
)
from .results import FileChange, MergedFile, MutationResult
from .transaction import INLINE_MAX, Meanwhile, Pending, change_of, inverse
from .walk import folder_contents

__all__ = ["QUIET_TICKS", "Call", "commit", "transact", "undo"]

#: Loop ticks a call waits for others to show themselves: before a leader stops
#: gathering (engine/gather.py), and before a lone call blocks the loop with its
#: commit (`_alone`). Requests that reach a served process together reach the
#: pipeline a few ticks apart (the MCP SDK starts one request's task per tick,
#: and each takes some ticks through dispatch): one tick would find nobody.
QUIET_TICKS = 3


class Call(NamedTuple):
    """A mutating tool call as the pipeline runs it: its operations, in order, and
    what holds for them all."""

    tool: str
    ops: Sequence[Operation]
    dry_run: bool = False
    #: The client's expected_status_hash (STALE_GIT when the repository moved on).
    status_hash: str | None = None


async def transact(session: Caller, call: Call) -> MutationResult:
    """Run `call` as one transaction of its own (a preview with `dry_run`): prepare,
    lock, load, plan, check, commit."""
    tool, ops, dry_run, status_hash = call
    engine = session.engine
    steps: list[Step] = []
    paths: list[str] = []
    count = 0
    batch = tool == "batch"
    room = Room(engine.config.max_file_size)  # shared by the call's binary hunks
    # A file a delete names loads as its hash alone when it is over max_file_size:
    # the delete goes through, and its undo cannot bring it back (the result warns).
    deleting: set[str] = set()
    for index, op in enumerate(ops):
        step = await prepare_op(session, op, index if batch else None, room)
        steps.append(step)
        paths += step.paths
        deleting.update(step.deletes)
        count += step.weight
        if (index + 1) % EVERY == 0:
            await report(index + 1, len(ops), f"{index + 1} of {len(ops)} operations prepared")
    _refuse_long_searches(session, steps)
    if status_hash is not None:
        await _check_status(session, status_hash)
    async with engine.locks.hold(paths):
        tree = await _view(session, paths, deleting)
        bases = await stale.find_bases(session.kept, engine.journal, tree, steps)
        if plans_inline(tree, steps):
            changes, checks, failure = plan(session, tree, steps, bases)
        else:
            # Long searches leave the loop, so other calls are answered meanwhile.
            changes, checks, failure = await anyio.to_thread.run_sync(
                plan, session, tree, steps, bases
            )
        warnings = await check(session, checks) if checks else []
        if failure is not None:
            raise failure
        warnings += [_not_kept_warning(session, c) for c in changes if unkept(c)]
        summary = summarize(tool, changes)
        return await _commit(session, changes, count, summary, dry_run, warnings)


#: An OCC check: (path, expected hash, entry before the transaction, its path then,
#: and what became of it when it was stale and its step merges).
Check = tuple[str, str | None, Entry, str, stale.Rebase | None]


#: Planning that scans at most this many bytes runs on the loop: a few milliseconds
#: on the worst text, where a thread hop costs about 0.3 ms. More runs in a worker.
INLINE_SCAN = 1024 * 1024


def _refuse_long_searches(session: Caller, steps: Sequence[Step]) -> None:
    """Refuse edits that would search more than MAX_EDIT_SEARCH bytes of their files
    as they are on disk, before any file is loaded: a refusal costs a stat, not a
    read, a hash and a scan of each file. The planner judges the files it loads
    again; a file an earlier operation of the call changes is left to it."""
    left = MAX_EDIT_SEARCH
    earlier: set[str] = set()
    for step in steps:
        path = step.paths[0] if step.paths else None
        if step.scans and path is not None and path not in earlier:
            try:
                size = os.stat(path).st_size
            except OSError:
                size = 0  # missing or unreadable: the planner says which
            label = session.engine.label(path)
            left = charge_edit_search(path, label, step.scans, size, left, step.prefix + "edits")
        earlier.update(step.paths)


def plans_inline(tree: Tree, steps: Sequence[Step]) -> bool:
    """Whether planning `steps` is cheap enough to run on the loop's thread."""
    scanned = 0
    for step in steps:
        if step.long:
            return False
        if step.scans:
            data = tree.get(step.paths[0]).data
            scanned += edit_search(step.scans, len(data or b""))
    return scanned <= INLINE_SCAN


def plan(
    session: Caller,
    tree: Tree,
    steps: Sequence[Step],
    bases: dict[tuple[str, str], bytes | None] | None = None,
) -> tuple[list[Change], list[Check], LedgerError | None]:
    """Plan `steps` in order over `tree`: the changes, the OCC checks to make, and
    the first planning error (raised by the caller once every check is made).

    A merging step whose files moved on since the versions it names (`bases`,
    from `stale.find_bases`) is planned against those versions and merged onto
    the files as they are (`stale.plan_merged`); its checks carry the outcome.
    """
    planner = Planner(tree, session.engine.label, session.engine.config.max_file_size)
    checks: list[Check] = []
    failure: LedgerError | None = None
    for step in steps:
        # Judged where the earlier operations left it: a path inside a
        # folder the batch moved names the file moved there.
        judged = [
            (path, expected, tree.before(path), tree.source(path) or path)
            for path, expected in step.checks
        ]
        stale_bases = {
            path: (expected, (bases or {}).get((path, expected)))
            for path, expected in stale.stale_checks(step, tree)
        }
        rebased: dict[str, stale.Rebase] = {}
        if failure is None:
            try:
                for folder in step.new_folders:
                    planner.mkdir(folder)
                if stale_bases:
                    rebased, failure = stale.plan_merged(planner, step, stale_bases)
                else:
                    step.plan(planner, *step.args)
            except LedgerError as exc:
                failure = exc  # reported once every precondition is checked
        checks += [(*check, rebased.get(check[0])) for check in judged]
    return planner.changes, checks, failure


async def undo(session: Caller, transaction: int, dry_run: bool) -> MutationResult:
    """Undo a committed transaction as a new one, OCC-checked against its after images.

    Raises NOT_FOUND (no such transaction), VALIDATION (it never committed, or
    an undo in effect undid it already), OCC_MISMATCH (a file changed since;
    nothing changes), and what any mutation raises.
    """
    engine = session.engine
    record = await engine.journal.transaction(transaction)
    if record is None:
        raise not_recorded("transaction", transaction)
    # A pending transaction's durable intent is its commit point; its files are
    # checked below, under the locks, after any apply in flight has finished.
    if not (record.state in ("committed", "pending") or record.outcome == "rolled_forward"):
        raise LedgerError(
            Code.VALIDATION,
            f"Transaction {record.id} is {record.state}; only committed ones can be undone.",
            details={"transaction": record.id, "state": record.state},
        )
    undone = await _undone_by(session, record.id)
    if undone is not None:
        raise LedgerError(
            Code.VALIDATION,
            f"Transaction {record.id} was already undone by transaction {undone}.",
            details={"transaction": record.id, "reason": "already_undone", "undone_by": undone},
            suggestion=f"undo transaction {undone} to make transaction {record.id} again",
        )
    lost = [m.path for m in record.mutations if not m.before_kept]
    if lost:
        raise LedgerError(
            Code.VALIDATION,
            f"Transaction {record.id} deleted {len(lost)} file(s) over max_file_size whose "
            "content was not kept; it cannot be undone.",
            path=lost[0],
            details={"transaction": record.id, "reason": "content_not_kept", "paths": lost[:50]},
        )
    # Only the before images are loaded: the after images are what the files
    # hold now (checked below), and their bytes are taken from the files as read
    # under the locks (`_with_current`), not held twice.
    blobs = await engine.journal.blobs({m.before_hash for m in record.mutations if m.before_hash})
    changes = [change_of(m, blobs, engine.label) for m in record.mutations]
    inverses = [inverse(c) for c in reversed(changes)]
    made_by_undo = {c.path for c in inverses if c.op == "mkdir"}
    # A folder the undo moves back brings what is in it along.
    moved_back = [c.destination for c in inverses if c.op == "move" and c.kind == "dir"]
    # Below a link or file the undo removes (a path whose type the undone transaction
    # changed), the undo makes everything anew: nothing there is resolved or read.
    fresh = below_removed(inverses)
    folders: dict[str, None] = {}  # in order, each once
    for change in inverses:
        for path in filter(None, (change.path, change.destination)):
            if path in fresh:
                continue
            # The journal names entries themselves: a link there is not followed.
            target = await session.resolve(path, must_exist=False, follow_last=False)
            # A folder removed since (by another transaction) is made again,
            # as a write into a new folder would make it.
            folders.update(
                (f, None)
                for f in target.missing
                if f not in made_by_undo and not any(under(f, m) for m in moved_back if m)
            )
    inverses = [_new_folder(f, engine.label(f)) for f in folders] + inverses
    paths = [p for c in inverses for p in (c.path, c.destination) if p]
    async with engine.locks.hold(paths):
        # A file bigger than any image put back is loaded as its hash alone, in
        # bounded memory: an OCC_MISMATCH unless it is the version the transaction
        # left, whose bytes then come from the journal (`_with_current`).
        tree = await _view(
            session, paths, paths, restore_limit(session, blobs.values()), fresh=fresh
        )
        for index, change in enumerate(inverses):
            inverses[index] = change = await _with_current(session, tree, change)
            await _expect_state(session, tree, change)
        # One per file it puts back, as the undone transaction paid per file.
        charge = files_changed(inverses)
        return await _commit(
            session, inverses, charge, f"undo {record.id}", dry_run, [], undo_of=record.id
        )


async def prepare_op(
    session: Caller, op: Operation, index: int | None = None, room: Room | None = None
) -> Step:
    """Resolve an operation's paths and bind its plan; raises what resolution raises.

    A write, edit or patch step merges a stale expected hash when the operation's
    `on_stale` (else the server's) says `merge`; a move or a delete never does.
    """
    step = await _prepare(session, op, index, room)
    step.prefix = f"operations[{index}]." if index is not None else ""
    if isinstance(op, (WriteOp, EditOp, PatchOp)):
        step.merge = (op.on_stale or session.engine.config.on_stale) == "merge"
    return step


async def _prepare(session: Caller, op: Operation, index: int | None, room: Room | None) -> Step:
    """`prepare_op` but for `on_stale`.

    `room` is what the binary hunks of the call's patches may still inflate to
    (a call of one operation gets its own).

    Existence is the planner's to judge, against the batch's virtual state, so
    an operation may act on what an earlier one of the same batch created.
    """
    prefix = f"operations[{index}]." if index is not None else ""
    # Resolving runs inline, as Session.resolve says why; called here without its frame.
    resolve = session.engine.workspace.resolve
    # An entry a move or delete acts on: a link there is the link itself, never a root.
    resolve_entry = partial(resolve, must_exist=False, allow_root=False, follow_last=False)
    match op:
        case WriteOp():
            target = resolve(op.path, must_exist=False, field=prefix + "path", creates=True)
            content = _written(op, target.path, prefix)
            # Text takes a byte a character at least, in any encoding.
            _check_size(session, target.path, len(content.text or content.data or b""))
            return Step(
                paths=[target.path, *target.missing],
                checks=[(target.path, _expected(op.expected_hash, prefix))],
                plan=Planner.write,
                args=(target.path, content),
                new_folders=list(target.missing),
            )
        case EditOp():
            target = resolve(op.path, must_exist=False, field=prefix + "path")
            named = _codec(op.encoding, prefix)
            edits = [TextEdit(e.old_text, e.new_text, e.replace_all) for e in op.edits]
            check_edit_text(edits, session.engine.config.max_file_size, prefix + "edits")
            return Step(
                paths=[target.path],
                checks=[(target.path, _expected(op.expected_hash, prefix))],
                plan=Planner.edit,
                args=(target.path, edits, op.allow_rewrite, op.match, prefix + "edits", named),
                scans=len(edits),
                long=grows(edits),
                allow_rewrite=op.allow_rewrite,
            )
        case MoveOp():
            # A link at either end is the link itself, as `mv` takes it: the
            # source moves as a link, and a link at the destination is in the way.
            source = resolve_entry(op.source, field=prefix + "source")
            dest = resolve_entry(op.destination, field=prefix + "destination", creates=True)
            return Step(
                paths=[source.path, dest.path, *dest.missing],
                checks=[(source.path, _expected(op.expected_hash, prefix))],
                plan=partial(_plan_move, session.engine.workspace.check_link_target),
                args=(source.path, dest.path),
                new_folders=list(dest.missing),
            )
        case DeleteOp():
            # A link is deleted itself, as `rm` deletes it, never what it leads to.
            target = resolve_entry(op.path, field=prefix + "path")
            if target.is_dir:
                return await _prepare_folder_delete(session, op, target, prefix)
            return Step(
                paths=[target.path],
                checks=[(target.path, _expected(op.expected_hash, prefix))],
                plan=Planner.delete,
                args=(target.path,),
                deletes=[target.path],
            )
        case MkdirOp():
            target = resolve(op.path, must_exist=False, field=prefix + "path", creates=True)
            return Step(
                paths=[*target.missing, target.path],
                checks=[],
                plan=_nothing,
                new_folders=[*target.missing, target.path],
            )
        case NotebookOp():
            target = resolve(op.path, must_exist=False, field=prefix + "path")
            label = session.engine.label(target.path)
            require_notebook(target.path, label, prefix + "path", "edit it with edit_file.")
            return Step(
                paths=[target.path],
                checks=[(target.path, _expected(op.expected_hash, prefix))],
                plan=Planner.edit_notebook,
                args=(target.path, list(op.operations)),
                long=True,  # nbformat's parse, validation and layout: planned in a worker
            )
        case CopyOp():
            # A link is copied as the link itself (`cp -P`), never what it leads to.
            source = resolve(op.source, field=prefix + "source", follow_last=False)
            dest = resolve_entry(op.destination, field=prefix + "destination", creates=True)
            if source.is_dir:
                return await _prepare_folder_copy(session, op, source, dest, prefix)
            expected = _expected(op.expected_hash, prefix)
            return Step(
                paths=[source.path, dest.path, *dest.missing],
                # The source is only read: it is checked when a hash is given, and
                # auto-OCC (which guards what a call changes) leaves it alone.
                checks=[] if expected is None else [(source.path, expected)],
                plan=partial(_plan_copy, session.engine.workspace.check_link_target),
                args=(None, [], [(source.path, dest.path)]),
                new_folders=list(dest.missing),
            )
        case PatchOp():

            async def resolve_patch_path(relative: str, field: str, follow: bool) -> Resolved:
                return resolve(
                    relative, must_exist=False, field=field, follow_last=follow, creates=True
                )

            diff = patch_text(op.patch, op.patch_base64, prefix)
            workspace = session.engine.workspace
            return await prepare_patch(
                diff,
                op.expected_hashes,
                prefix,
                resolve_patch_path,
                workspace.beneath,
                workspace.check_link_target,
                session.engine.config.max_file_size,
                room or Room(session.engine.config.max_file_size),
                from_bytes=op.patch_base64 is not None,
            )
    raise LedgerError(Code.VALIDATION, "Unknown operation.")  # pragma: no cover


def _codec(name: str | None, prefix: str) -> str | None:
    return None if name is None else codec_name(name, prefix + "encoding")


def _written(op: WriteOp, path: str, prefix: str) -> Written:
    """What a write operation stores; VALIDATION for bad base64, an unknown encoding,
    or a BOM asked of base64."""
    if op.encoding != "base64":
        named = _codec(op.encoding, prefix)
        return Written(text=op.content, encoding=named, bom=op.bom, prefix=prefix)
    if op.bom is not None:
        raise LedgerError(
            Code.VALIDATION,
            f"{prefix}bom does not go with encoding base64 (the bytes are written as given).",
            path=path,
            details={"field": prefix + "bom", "reason": "conflicting_arguments"},
        )
    return Written(data=decode_content(op.content, path=path, field=prefix + "content"))


def _refuse_folder_hash(expected: str | None, folder: Resolved, label: str, prefix: str) -> None:
    """VALIDATION for an expected_hash given with a folder: it guards files only."""
    if expected is not None:
        raise LedgerError(
            Code.VALIDATION,
            f"{label} is a folder; expected_hash guards files only.",
            path=folder.path,
            details={"field": prefix + "expected_hash", "reason": "is_a_folder"},
        )


#: A folder delete touches at most this many entries (a batch's limit).
MAX_FOLDER_ENTRIES = 10_000


async def _prepare_folder_delete(
    session: Caller, op: DeleteOp, folder: Resolved, prefix: str
) -> Step:
    """Delete a folder: every file in it (each OCC-checked like a file delete), then
    its folders deepest first. Charges the budget one per file."""
    label = session.engine.label(folder.path)
    _refuse_folder_hash(op.expected_hash, folder, label, prefix)
    files, folders = await anyio.to_thread.run_sync(
        guard_os(folder_contents), session.engine.workspace, folder, MAX_FOLDER_ENTRIES
    )
    if (files or folders) and not op.recursive:
        raise LedgerError(
            Code.VALIDATION,
            f"{label} is a folder holding {len(files)} files and {len(folders)} folders; "
            "pass recursive: true to delete it with everything in it.",
            path=folder.path,
            details={"field": prefix + "recursive", "reason": "folder_not_empty"},
        )
    emptied = [*folders, folder.path]
    engine_label = session.engine.label

    def plan(planner: Planner) -> None:
        for path in files:
            planner.delete(path)
        for path in emptied:
            if not planner.state.is_empty(path, _names):
                raise LedgerError(
                    Code.VALIDATION,
                    f"{engine_label(path)} changed while it was being deleted; try again.",
                    path=path,
                    details={"reason": "folder_changed"},
                )
            planner.remove_folder(path)

    return Step(
        paths=[*files, *emptied],
        checks=[(path, None) for path in files],
        plan=plan,
        weight=max(1, len(files)),
        deletes=files,
    )


async def _prepare_folder_copy(
    session: Caller, op: CopyOp, folder: Resolved, dest: Resolved, prefix: str
) -> Step:
    """Copy a folder: its folders made top down, each file and link copied
    (charged one per file). Everything inside is listed and checked as a recursive
    delete lists it (secrets, internals and special files refused), and every
    path the copy makes is resolved as a new path given by the client would be."""
    _refuse_folder_hash(op.expected_hash, folder, session.engine.label(folder.path), prefix)
    if dest.path != folder.path and under(dest.path, folder.path):
        raise LedgerError(
            Code.VALIDATION,
            f"{session.engine.label(folder.path)} cannot be copied into itself.",
            path=dest.path,
            details={"field": prefix + "destination", "reason": "inside_source"},
        )
    workspace = session.engine.workspace
    field = prefix + "destination"

    def listed() -> tuple[list[str], list[tuple[str, str]]]:
        files, folders = folder_contents(workspace, folder, MAX_FOLDER_ENTRIES, links=True)

        def made(path: str) -> str:
            there = dest.path + path[len(folder.path) :]
            return workspace.resolve(
                there, must_exist=False, field=field, follow_last=False, creates=True
            ).path

        # Deepest first reversed: every folder before what it holds.
        return [made(f) for f in reversed(folders)], [(f, made(f)) for f in files]

    made_folders, pairs = await anyio.to_thread.run_sync(guard_os(listed))
    return Step(
        paths=[
            *(source for source, _ in pairs),
            dest.path,
            *made_folders,
            *(made for _, made in pairs),
            *dest.missing,
        ],
        checks=[],
        plan=partial(_plan_copy, workspace.check_link_target),
        args=(dest.path, made_folders, pairs),
        new_folders=list(dest.missing),
        weight=max(1, len(pairs)),
    )


def _plan_copy(
    check_link: LinkCheck,
    planner: Planner,
    folder: str | None,
    folders: list[str],
    pairs: list[tuple[str, str]],
) -> None:
    """Plan a copy: the destination `folder` (None for a file's copy) and the
    `folders` inside it, then each (source, destination) file or link.

    A copied link keeps its target text, read from its new folder; a copy never
    makes a link that leads outside the roots (NOT_ALLOWED), wherever the
    original led.
    """
    if folder is not None:
        planner.refuse_existing(folder, "copy_file")
        planner.mkdir(folder)
        for made in folders:
            planner.mkdir(made)
    for source, destination in pairs:
        planner.copy(source, destination)
        change = planner.changes[-1]
        if is_link_mode(change.after_mode) and change.after is not None:
            check_link(destination, change.after, change.label)


def _plan_move(check_link: LinkCheck, planner: Planner, source: str, destination: str) -> None:
    """Plan a move; a link keeps its target text, so it must not come to lead outside.

    A relative link's text is read from its folder: moved elsewhere it may lead
    somewhere else, as with `mv`. That is kept (the text is what the link is),
    but a link that led inside the roots and would lead outside from its new
    folder is refused (NOT_ALLOWED), as apply_patch refuses it. A link that led
    outside already moves as it is: no new way out is made.
    """
    planner.move(source, destination)
    change = planner.changes[-1]
    if not is_link_mode(change.before_mode) or change.before is None:
        return
    label = change.destination_label or destination
    try:
        check_link(source, change.before, change.label)
    except LedgerError:
        return  # it led outside already
    check_link(destination, change.before, label)


def _expected(value: str | None, prefix: str) -> str | None:
    if value is not None:
        check_hash_format(value, prefix + "expected_hash")
    return value


def _check_size(session: Caller, path: str, size: int) -> None:
    limit = session.engine.config.max_file_size
    if size > limit:
        raise too_large(TooLarge(path, size, limit))


async def _view(
    session: Caller,
    paths: Sequence[str],
    unkept_ok: Collection[str] = frozenset(),
    limit: int | None = None,
    fresh: Collection[str] = frozenset(),
) -> Tree:
    """A transaction's view of the disk: its targets loaded (under their locks),
    other paths read on demand (only those inside a folder the batch moves).
    The `fresh` paths (`below_removed`) are absent, never read.

    Small files load inline: a thread hop (~270 us) costs more than reading and
    hashing a few KiB. When a target is bigger, all of them load in a worker.
    A file over `limit` (the engine's max_file_size unless given) in `unkept_ok`
    loads as its hash alone (a delete that does not keep it, a file undo finds
    changed); any other is refused (VALIDATION, file_too_large, naming `limit`).
    """
    limit = session.engine.config.max_file_size if limit is None else limit
    if fresh:
        paths = [p for p in paths if p not in fresh]
    tree = view_inline(session, paths, unkept_ok, limit)
    if tree is None:
        try:
            loaded = await anyio.to_thread.run_sync(
                _load_all,
                list(dict.fromkeys(paths)),
                limit,
                session.engine.workspace.vet,
                unkept_ok,
            )
        except TooLarge as exc:
            raise too_large(exc) from exc
        except OSError as exc:
            raise read_error(exc) from exc
        tree = Tree(partial(_read_entry, limit), loaded)
    tree.assume(dict.fromkeys(fresh, ABSENT))
    return tree


def view_inline(
    session: Caller,
    paths: Sequence[str],
    unkept_ok: Collection[str] = frozenset(),
    limit: int | None = None,
) -> Tree | None:
    """`_view` on the loop's thread, or None when a target is bigger than `INLINE_MAX`
    (it loads in a worker). Raises FILE_TOO_LARGE and the read errors."""
    limit = session.engine.config.max_file_size if limit is None else limit
    try:
        loaded = _load_all(
            list(dict.fromkeys(paths)), min(limit, INLINE_MAX), session.engine.workspace.vet
        )
    except TooLarge as exc:
        if exc.size > limit and exc.path not in unkept_ok:
            # Refused by the limit that applies, not by the inline cap that noticed.
            raise too_large(TooLarge(exc.path, exc.size, limit)) from exc
        return None
    except OSError as exc:
        raise read_error(exc) from exc
    return Tree(partial(_read_entry, limit), loaded)


def restore_limit(session: Caller, images: Iterable[bytes]) -> int:
    """The most bytes of a file undo and rewind load: what agents may write, or the
    largest image they put back or take away, if bigger.

    `max_file_size` guards what agents write, not what the journal gives back: a
    change made under a larger limit is undone whole. The images are in memory
    already, so a file loaded beside them at most doubles what the call holds.
    """
    return max(session.engine.config.max_file_size, max(map(len, images), default=0))


def _load_all(
    paths: list[str], cap: int, vet: Vet, unkept_ok: Collection[str] = frozenset()
) -> dict[str, Entry]:
    return {
        path: load_entry(path, None, vet, links=True, hash_above=cap)
        if path in unkept_ok
        else load_entry(path, cap, vet, links=True)
        for path in paths
    }


def _not_kept_warning(session: Caller, change: Change) -> str:
    limit = session.engine.config.max_file_size
    return (
        f"{change.label} is over max_file_size ({limit} bytes): a delete keeps no copy "
        "of it, so undo cannot bring it back."
    )


def _read_entry(limit: int, path: str) -> Entry:
    try:
        return load_entry(path, limit, links=True)
    except TooLarge as exc:
        raise too_large(exc) from exc
    except OSError as exc:
        raise read_error(exc) from exc


async def check(session: Caller, checks: Sequence[Check]) -> list[str]:
    """OCC and auto-OCC of (path, expected hash, entry before the batch, its path then)."""
    warnings: list[str] = []
    engine = session.engine
    for path, expected, entry, source, rebased in checks:
        if expected is not None and expected == entry.hash:
            continue  # what precondition says of a match, without a label to build
        if rebased is not None and rebased.merged:
            continue  # planned against the version it names, merged onto this one
        label = engine.label(path)
        mismatch, warning = precondition(
            label,
            entry,
            expected,
            engine.config.auto_occ,
            last_read=session.last_read.get(source),
        )
        if mismatch:
            raise await conflict_error(
                engine.journal,
                label,
                source,
                expected,
                entry,
                details=None if rebased is None else stale.merge_details(rebased),
                suggestion=stale.CONFLICTS_SUGGESTION if rebased and rebased.conflicts else None,
            )
        if warning:
            warnings.append(warning)
    return warnings


async def _undone_by(session: Caller, tx: int) -> int | None:
    """The transaction in effect that undid `tx`, if any (an undone undo does not count)."""
    # An explicit stack, not recursion: an agent can undo an undo a thousand times.
    undos: dict[int, list[int]] = {}
    found: dict[int, int | None] = {}
    stack = [tx]
    while stack:
        current = stack[-1]
        if current not in undos:
            undos[current] = await session.engine.journal.undos_of(current)
        for undo in undos[current]:
            if undo not in found:
                stack.append(undo)  # to be answered first
                break
            if found[undo] is None:  # an undo in effect
                found[current] = undo
                stack.pop()
                break
        else:
            found[current] = None
            stack.pop()
    return found[tx]


async def _with_current(session: Caller, tree: Tree, change: Change) -> Change:
    """An undo's change given the bytes its path holds as its before bytes, when
    they are the version the undone transaction left (else `_expect_state`
    refuses it); from the journal when the view holds that version by hash alone."""
    if change.op == "move" or change.before_hash is None or change.before is not None:
        return change
    entry = tree.get(change.path)
    if entry.hash != change.before_hash:
        return change
    data = entry.data
    if data is None:
        data = await session.engine.journal.blob(change.before_hash)
    return msgspec.structs.replace(change, before=data)


def below_removed(changes: Collection[Change]) -> set[str]:
    """The paths of `changes` below a link or file that the changes delete and make
    a folder in its place (a path whose type changes).

    The changes make that folder after the deletion, so what the disk holds
    below it now (what a link leads to, or nothing below a file) is never what
    they work on: those paths are absent, and never read.
    """
    removed = {
        c.path
        for c in changes
        if c.kind != "dir" and c.op not in ("move", "mkdir", "rmdir") and c.after_hash is None
    }
    anchors = removed & {c.path for c in changes if c.op == "mkdir"}
    if not anchors:
        return set()
    return {
        path
        for c in changes
        for path in (c.path, c.destination)
        if path and any(path.startswith(a + os.sep) for a in anchors)
    }


async def _expect_state(session: Caller, tree: Tree, change: Change) -> None:
    """Undo's precondition: each path holds what the undone transaction left.

    A folder the undone transaction created is removed only if nothing else was
    put in it since; otherwise it changed: OCC_MISMATCH.
    """
    for effect in effects(change):
        entry = tree.get(effect.path)
        ok = state_of(entry) == effect.before
        if ok and change.op == "rmdir":
            ok = tree.is_empty(change.path, _names)
        if not ok:
            raise await conflict_error(
                session.engine.journal,
                session.engine.label(effect.path),
                effect.path,
                effect.before.hash,
                entry,
                expected_text="an empty folder"
                if change.op == "rmdir"
                else effect.before.describe(),
            )
    tree.apply(change)


async def _check_status(session: Caller, expected: str) -> None:
    root = session.engine.workspace.roots[0]
    status = await git.git_status(root, ceiling=root)
    if status.status_hash != expected:
        raise LedgerError(
            Code.STALE_GIT,
            "The repository changed since git_status returned that status_hash.",
            path=status.repo_root,
            details={"expected_status_hash": expected, "status_hash": status.status_hash},
        )


class Planned(msgspec.Struct):
    """A call planned and checked under its locks, ready to commit: what it changes,
    what it charges the budget, and what its result says besides."""

    session: Caller
    changes: list[Change]
    charge: int
    summary: str
    warnings: list[str]
    undo_of: int | None = None
    dry_run: bool = False


async def _commit(
    session: Caller,
    changes: list[Change],
    count: int,
    summary: str,
    dry_run: bool,
    warnings: list[str],
    *,
    undo_of: int | None = None,
) -> MutationResult:
    """`commit` for one call, raising its error."""
    planned = Planned(session, changes, count, summary, warnings, undo_of, dry_run)
    [outcome] = await commit([planned])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


async def commit(calls: Sequence[Planned]) -> list[MutationResult | Exception]:
    """Reserve each call's budget, record and apply the calls as one journal group
    (`Applier.run_group`), and give each its result, or the error that is its alone.

    A call that changes nothing (or is a dry run) gets its result and no
    transaction. A call's budget is charged once its intent was recorded, even
    if applying then failed and rolled back (the error's details name it).
    """
    results: list[MutationResult | Exception | None] = [None] * len(calls)
    ready: list[int] = []
    for index, call in enumerate(calls):
        if call.dry_run or not call.changes:
            shown = show(call.changes, call.warnings)
            results[index] = mutation_result(
                call.session.id,
                None,
                shown,
                call.undo_of,
                len(call.changes),
                dry_run=call.dry_run,
            )
            continue
        try:
            call.session.budget.reserve(call.charge)
        except Exception as exc:  # a call fails alone, whatever it raises
            results[index] = exc
            continue
        ready.append(index)
    if ready:
        await _record(calls, ready, results)
    return [result for result in results if result is not None]


async def _record(
    calls: Sequence[Planned], ready: list[int], results: list[MutationResult | Exception | None]
) -> None:
    """Run the `ready` calls as one group; fill in their results."""
    group = [
        Pending(c.session.id, c.changes, c.summary, c.charge, c.undo_of)
        for c in (calls[i] for i in ready)
    ]
    # The results' diffs and files are made while the intents' fsync runs.
    shown = Meanwhile(_show_all, [calls[i] for i in ready])
    engine = calls[ready[0]].session.engine
    try:
        here = await _alone(engine)  # a call cancelled in its ticks is dropped
        outcomes = await engine.applier.run_group(group, meanwhile=shown, here=here)
    except BaseException:
        for index in ready:
            calls[index].session.budget.release(calls[index].charge, charged=False)
        raise
    if shown.error is not None:  # a defect: every call of the group reports it
        for index, outcome in zip(ready, outcomes, strict=True):
            calls[index].session.budget.release(
                calls[index].charge, charged=isinstance(outcome, int)
            )
            results[index] = shown.error
        return
    for index, outcome, each in zip(ready, outcomes, shown.result, strict=True):
        call = calls[index]
        if isinstance(outcome, int):
            call.session.budget.release(call.charge, charged=True)
            remember = call.session.remember
            for change in call.changes:
                remember(change)
            results[index] = mutation_result(
                call.session.id, outcome, each, call.undo_of, len(call.changes)
            )
        else:
            # Charged once its intent was recorded: the error names its transaction.
            charged = (
                isinstance(outcome, LedgerError) and outcome.details.get("transaction") is not None
            )
            call.session.budget.release(call.charge, charged=charged)
            results[index] = outcome


async def _alone(engine: EngineParts) -> bool:
    """Whether the call is the only one in flight, and still is `QUIET_TICKS` loop
    ticks later: then its journal group commits, fsync included, on the loop's
    thread (`Journal.begin_group`'s `here`), which would only wait meanwhile,
    rather than pay two thread wake-ups (most of a lone edit's CPU).

    Without the ticks, a call that blocks the loop for its whole run would leave
    a request that arrived meanwhile unseen, which would then run alone too:
    concurrent clients would take turns, an fsync each, instead of sharing one.
    """
    if not engine.alone:
        return False
    for _ in range(QUIET_TICKS):
        await anyio.lowlevel.checkpoint()
        if not engine.alone:
            return False
    return True


def _show_all(calls: list[Planned]) -> list[Shown]:
    return [show(call.changes, call.warnings) for call in calls]


class Shown(msgspec.Struct, frozen=True):
    """What a mutation result shows of its changes: bounded, with what was cut."""

    files: list[FileChange]
    diff: str
    diff_truncated: bool
    diff_size: int
    warnings: list[str]
    loose_matches: list[LooseMatch] = []
    merged: list[MergedFile] = []


def show(changes: Sequence[Change], warnings: list[str]) -> Shown:
    diff = changes_diff(changes)
    shown, cut = bounds.cut(diff, bounds.MAX_DIFF)
    files = [_file_change(change) for change in changes[: bounds.MAX_FILES]]
    files = files[: bounds.listed(len(reply_json(f)) for f in files)]
    loose = [match for change in changes for match in change.loose]
    merged = [
        MergedFile(path=c.path, base_hash=c.merged_from, current_hash=c.before_hash)
        for c in changes
        if c.merged_from is not None
    ][: bounds.MAX_FILES]
    return Shown(files, shown, cut, len(diff), bounds.warnings(warnings), loose, merged)


def mutation_result(
    session: str,
    tx: int | None,
    shown: Shown,
    undo_of: int | None,
    total: int,
    *,
    dry_run: bool = False,
) -> MutationResult:
    """The result a client sees: bounded, with what it needs to ask for the rest."""
    return MutationResult(
        transaction=tx,
        session=session,
        files=shown.files,
        diff=shown.diff,
        dry_run=dry_run,
        warnings=shown.warnings,
        undo_of=undo_of,
        files_total=total,
        files_truncated=total > len(shown.files),
        diff_truncated=shown.diff_truncated,
        diff_size=shown.diff_size,
        loose_matches=shown.loose_matches,
        merged=shown.merged,
    )


def _nothing(planner: Planner) -> None:
    """The plan of a step whose folders are all its work (mkdir)."""


def _names(folder: str) -> list[str]:
    """The names in `folder` on disk (none if it is not there: made by the plan)."""
    try:
        fd = open_dir(folder)
    except OSError:
        return []
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def _new_folder(path: str, label: str) -> Change:
    return Change(op="mkdir", path=path, label=label, kind="dir", after_mode=NEW_DIR_MODE)


def _file_change(change: Change) -> FileChange:
    return FileChange(
        path=change.path,
        previous_hash=change.before_hash,
        content_hash=change.after_hash,
        op=change.op,
        destination=change.destination if change.op == "move" else None,
    )


def summarize(tool: str, changes: Sequence[Change]) -> str:
    if len(changes) == 1:
        return f"{tool} {changes[0].label}".strip()
    names = sorted({c.label for c in changes})
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{tool} {shown}".strip()
