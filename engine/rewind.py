"""Rewind: revert what a session did, or what came after a point, as one new transaction.

A rewind takes the journaled transactions in its scope and reverts their changes,
newest first, over the files as they are now. Each file's revert is a three-way
merge by lines (engine/merge.py), as `git revert` does: the base is what the
rewound change left (its after image), theirs is the file now, ours is what it
held before the change. What others did since (another session, a transaction out
of scope, a person's editor) is kept; only hunks that meet are conflicts. Binary
files and links are not merged: they go back only while they still hold what the
rewound change left.

Every kind of change goes back: a file's content and mode, a file made (deleted
again, unless someone changed it since: a conflict), a file deleted (made again,
with its folders), a move (whatever is at its destination now moves back), a
folder made (removed if nothing is left in it), a folder removed (made again).
A change that cannot go back is a conflict on its file: with `on_conflict:
"refuse"` the rewind is OCC_MISMATCH and nothing changes; with "skip" every
change to that file is left out (the file is left as it is) and the rest goes.

The reverts become planned changes like any other call's, and commit through the
pipeline's one route (locks, OCC under them, the journal record, apply, rollback).
Undoing the rewind's transaction puts back what it reverted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import anyio
import msgspec

from ..journal import CheckpointRecord, Journal, MutationRecord, TxRecord
from ..journal import content_hash as hash_of
from . import bounds, pipeline
from .budget import files_changed
from .caller import Caller
from .changes import NEW_DIR_MODE, Change, Entry, is_link_mode, unkept
from .effects import Tree, effects, state_of, under
from .encodings import shared_views
from .errors import Code, LedgerError
from .merge import Conflict, merge3
from .requests import Rewind
from .results import RewindResult, Skipped
from .transaction import change_of, inverse

__all__ = [
    "MAX_REWOUND",
    "Clash",
    "Revert",
    "RewindPlan",
    "check_scope",
    "compact",
    "plan_rewind",
    "rewind",
]

#: The most transactions one rewind reverts, and the most changes of theirs.
MAX_REWOUND = 10_000
MAX_CHANGES = 100_000
#: Conflicts an OCC_MISMATCH lists (the count says how many there were), hunks
#: per file, and characters of each side of a hunk.
MAX_CONFLICTS = 50
MAX_HUNKS = 10
HUNK_TEXT = 400
#: Reverts planned on the loop's thread; more plan in a worker (merges are Python).
INLINE_REVERTS = 64
#: Transactions read from the journal at a time.
_PAGE = 500


class Revert(msgspec.Struct, frozen=True):
    """One journaled change to revert, and the transaction that made it."""

    tx: int
    change: Change


class Clash(msgspec.Struct, frozen=True):
    """A change that cannot be reverted: the path it names, why, and the hunks that meet."""

    path: str
    paths: tuple[str, ...]
    reason: str
    tx: int
    hunks: tuple[Conflict, ...] = ()
    #: What the rewound change left at `path` (a file's hash; None for anything else).
    expected: str | None = None


class RewindPlan(msgspec.Struct, frozen=True):
    """What a rewind changes, in order, and the files it cannot revert."""

    changes: list[Change]
    clashes: list[Clash]
    rewound: list[int]


class _Refused(Exception):
    """Why a change cannot be reverted, at which of its paths, and the hunks that meet."""

    def __init__(self, reason: str, path: str, hunks: Sequence[Conflict] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path
        self.hunks = tuple(hunks)


async def rewind(
    session: Caller, request: Rewind, checkpoint: CheckpointRecord | None = None
) -> RewindResult:
    """Revert the transactions `request` names, newest first, as one new transaction.

    `checkpoint` is the record of `request.checkpoint` when it names one.

    Raises VALIDATION (not exactly one of checkpoint, after_transaction and session;
    too many transactions), NOT_FOUND (no such transaction),
    OCC_MISMATCH (a file whose changes meet someone else's, with on_conflict
    "refuse": details list each file, who changed it and the hunks; nothing
    changes), and what any mutation raises (READONLY, BUDGET_EXCEEDED, ROLLBACK_*).
    """
    engine = session.engine
    records, scope = await _scope(session, request, checkpoint)
    wanted = None
    if request.paths is not None:
        wanted = [
            (
                await session.resolve(p, must_exist=False, field=f"paths[{i}]", follow_last=False)
            ).path
            for i, p in enumerate(request.paths)
        ]
    picked = [
        (record, mutation)
        for record in records
        for mutation in reversed(record.mutations)
        if wanted is None or _touches(mutation, wanted)
    ]
    if len(picked) > MAX_CHANGES:
        raise LedgerError(
            Code.VALIDATION,
            f"This rewind covers {len(picked)} changes, more than {MAX_CHANGES}; rewind a "
            "later point, or fewer paths, first.",
            details={"reason": "too_many_changes", "limit": MAX_CHANGES},
        )
    await _vet(session, picked)
    hashes = {h for _, m in picked for h in (m.before_hash, m.after_hash) if h}
    blobs = await engine.journal.blobs(hashes)
    reverts = [Revert(record.id, change_of(m, blobs, engine.label)) for record, m in picked]
    roots = engine.workspace.roots
    locked = _lock_paths(reverts, roots)
    skip = request.on_conflict == "skip"
    # Below a link or file the rewind removes, it makes everything anew (undo's rule).
    fresh = pipeline.below_removed([inverse(r.change) for r in reverts])
    async with engine.locks.hold(locked):
        view = await pipeline._view(
            session, locked, limit=pipeline.restore_limit(session, blobs.values()), fresh=fresh
        )
        if len(reverts) <= INLINE_REVERTS:
            plan = plan_rewind(view, reverts, roots, engine.label, pipeline._names)
        else:
            plan = await anyio.to_thread.run_sync(
                plan_rewind, view, reverts, roots, engine.label, pipeline._names
            )
        rewound_ids = {record.id for record in records}
        # Who changed each file, for the files the envelope or the result lists.
        listed = plan.clashes[: bounds.MAX_FILES if skip else MAX_CONFLICTS]
        by = [await _changed_by(engine.journal, view, c, rewound_ids) for c in listed]
        if plan.clashes and not skip:
            current = view.base(plan.clashes[0].path).hash
            raise _conflict_error(engine.label, plan.clashes, by, current)
        changes = compact(plan.changes)
        summary = f"rewind {scope} ({len(plan.rewound)} transactions)"
        planned = pipeline.Planned(
            session, changes, files_changed(changes), summary, [], dry_run=request.dry_run
        )
        [result] = await pipeline.commit([planned])
    if isinstance(result, Exception):
        raise result
    return RewindResult(
        **msgspec.structs.asdict(result),
        rewound=plan.rewound[: bounds.MAX_FILES],
        rewound_total=len(plan.rewound),
        skipped=[
            Skipped(path=c.path, reason=c.reason, by=who) for c, who in zip(listed, by, strict=True)
        ],
        skipped_total=len(plan.clashes),
    )


# Scope ------------------------------------------------------------------------------


def _in_effect(record: TxRecord) -> bool:
    # A pending transaction's durable intent is its commit point (as for undo).
    return record.state in ("committed", "pending") or record.outcome == "rolled_forward"


def check_scope(request: Rewind) -> None:
    """Raise VALIDATION unless exactly one of checkpoint, after_transaction and session is given."""
    given = [
        name
        for name in ("checkpoint", "after_transaction", "session")
        if getattr(request, name) is not None
    ]
    if len(given) != 1:
        raise LedgerError(
            Code.VALIDATION,
            "rewind takes exactly one of checkpoint, after_transaction and session"
            + (f", not {' and '.join(given)}." if given else "."),
            details={"field": given[-1] if given else "session", "reason": "one_scope"},
        )


async def _scope(
    session: Caller, request: Rewind, checkpoint: CheckpointRecord | None
) -> tuple[list[TxRecord], str]:
    """The transactions to revert, newest first, and how a summary names them."""
    check_scope(request)
    journal = session.engine.journal
    mine: str | None = session.id if request.sessions == "mine" else None
    if request.session is not None:
        owner = request.session
        own = await _transactions(journal, session=owner, after=0)
        if request.sessions == "mine" or not own:
            return own, f"session {owner}"
        return await _transactions(journal, session=None, after=own[-1].id - 1), (
            f"since session {owner}"
        )
    if request.checkpoint is not None:
        assert checkpoint is not None and checkpoint.id == request.checkpoint
        # "mine" is the session that took the checkpoint (a host takes it for its agent).
        taker = checkpoint.session if mine is not None else None
        after = checkpoint.transaction or 0
        return await _transactions(journal, session=taker, after=after), (
            f"to checkpoint {checkpoint.id}"
        )
    assert request.after_transaction is not None
    after = request.after_transaction
    if after > 0 and await journal.transaction(after) is None:
        raise LedgerError(
            Code.NOT_FOUND,
            f"There is no transaction {after}.",
            details={"transaction": after},
            suggestion="list the journaled transactions with history",
        )
    return await _transactions(journal, session=mine, after=after), f"after {after}"


async def _transactions(journal: Journal, *, session: str | None, after: int) -> list[TxRecord]:
    """The transactions in effect with ids above `after` (of `session` when given),
    newest first; VALIDATION when there are more than MAX_REWOUND."""
    found: list[TxRecord] = []
    before: int | None = None
    while True:
        page = await journal.history(session=session, limit=_PAGE, before=before, after=after)
        for record in page:
            if record.id <= after:
                return found
            if _in_effect(record):
                found.append(record)
        if len(found) > MAX_REWOUND:
            raise LedgerError(
                Code.VALIDATION,
                f"This rewind covers more than {MAX_REWOUND} transactions; rewind a "
                "later point, or fewer paths, first.",
                details={"reason": "too_many_transactions", "limit": MAX_REWOUND},
            )
        if len(page) < _PAGE:
            return found
        before = page[-1].id


async def _vet(session: Caller, picked: Sequence[tuple[TxRecord, MutationRecord]]) -> None:
    """Every path the rewind would change, checked as any mutation's path is: outside
    the roots, a secret (unless allowed) or the journal's own folder is refused."""
    named = dict.fromkeys(p for _, m in picked for p in (m.path, m.destination) if p)
    for path in named:
        try:
            # The journal names entries themselves: a link there is not followed.
            await session.resolve(path, must_exist=False, follow_last=False)
        except LedgerError as exc:
            if exc.code is not Code.NOT_FOUND:  # a folder above it is a file now: a conflict
                raise


def _touches(mutation: MutationRecord, wanted: Sequence[str]) -> bool:
    named = [p for p in (mutation.path, mutation.destination) if p]
    return any(under(p, w) for p in named for w in wanted)


def _lock_paths(reverts: Sequence[Revert], roots: Sequence[str]) -> list[str]:
    """Every path the reverts name, and the folders above them (made again if gone)."""
    paths: dict[str, None] = {}
    for revert in reverts:
        for path in filter(None, (revert.change.path, revert.change.destination)):
            paths[path] = None
            paths.update(dict.fromkeys(_folders_above(path, roots)))
    return list(paths)


def _folders_above(path: str, roots: Sequence[str]) -> list[str]:
    """The folders between `path`'s root and `path`, outermost first.

    >>> _folders_above("/w/a/b/c.txt", ["/w"])
    ['/w/a', '/w/a/b']
    """
    root = max((r for r in roots if under(path, r) and r != path), key=len, default=None)
    if root is None:
        return []
    folders = []
    folder = os.path.dirname(path)
    while folder != root and under(folder, root):
        folders.append(folder)
        folder = os.path.dirname(folder)
    return folders[::-1]


# Planning (pure but for what the tree reads) -------------------------------------------


def plan_rewind(
    view: Tree,
    reverts: Sequence[Revert],
    roots: Sequence[str],
    label: Callable[[str], str],
    listdir: Callable[[str], Iterable[str]],
) -> RewindPlan:
    """Plan the reverts in order over `view` (the disk under the rewind's locks).

    A change that cannot be reverted makes the paths it names conflicts, and so
    does every other change naming one of them (a move carries its file to the
    paths it names); no change naming a conflicting path is reverted. The plan is
    made again until no new conflict comes up, so a conflicting file is left as
    it is whole: the conflicts are the files a skipping rewind leaves as they are.
    """
    excluded: dict[str, Clash] = {}
    while True:
        planner = _Reverter(Tree(view.base), roots, label, listdir)
        grew = False
        rewound: dict[int, None] = {}
        for revert in reverts:
            named = _named(revert.change)
            held = [excluded[p] for p in named if p in excluded]
            if held:
                for path in named:
                    if path not in excluded:
                        reason = f"it goes with {label(held[0].path)}: {held[0].reason}"
                        excluded[path] = Clash(path, named, reason, revert.tx)
                        grew = True
                continue
            try:
                planner.revert(revert.change)
            except _Refused as refused:
                left = revert.change.after_hash if revert.change.op != "move" else None
                clash = Clash(refused.path, named, refused.reason, revert.tx, refused.hunks, left)
                excluded[refused.path] = clash
                for path in named:
                    excluded.setdefault(
                        path, Clash(path, named, f"it goes with {label(refused.path)}", revert.tx)
                    )
                grew = True
                continue
            rewound[revert.tx] = None
        if not grew:
            return RewindPlan(planner.changes, list(excluded.values()), list(rewound))


def _named(change: Change) -> tuple[str, ...]:
    return (change.path, change.destination) if change.destination else (change.path,)


class _Reverter:
    """Plans the revert of one journaled change at a time over a virtual tree."""

    def __init__(
        self,
        tree: Tree,
        roots: Sequence[str],
        label: Callable[[str], str],
        listdir: Callable[[str], Iterable[str]],
    ) -> None:
        self.tree = tree
        self.roots = roots
        self.label = label
        self.listdir = listdir
        self.changes: list[Change] = []

    def _plan(self, change: Change) -> None:
        self.changes.append(change)
        self.tree.apply(change)

    def revert(self, change: Change) -> None:
        """Plan what takes `change` back, keeping what others did since; raise _Refused."""
        match change.op:
            case "mkdir":
                self._unmake_folder(change)
            case "rmdir":
                self._remake_folder(change)
            case "move":
                self._move_back(change)
            case _:
                self._revert_content(change)

    def _unmake_folder(self, change: Change) -> None:
        # A folder someone put something in since is theirs too: it stays.
        now = self.tree.get(change.path)
        if now.is_dir and self.tree.is_empty(change.path, self.listdir):
            self._plan(
                Change(
                    op="rmdir",
                    path=change.path,
                    label=change.label,
                    kind="dir",
                    before_mode=now.mode,
                )
            )

    def _remake_folder(self, change: Change) -> None:
        now = self.tree.get(change.path)
        if now.is_dir:
            return
        if now.exists:
            raise _Refused("a file is where the folder was", change.path)
        self._make_parents(change.path)
        self._plan(_mkdir(change.path, change.label, change.before_mode))

    def _move_back(self, change: Change) -> None:
        assert change.destination is not None and change.destination_label is not None
        there = self.tree.get(change.destination)
        here = self.tree.get(change.path)
        folder = change.kind == "dir"
        if here.exists:
            if not there.exists and state_of(here) == _moved_state(change):
                return  # moved back already
            raise _Refused("something else is where it was moved from", change.path)
        if not there.exists:
            raise _Refused("moved or deleted since", change.destination)
        link = is_link_mode(change.after_mode)
        if there.is_dir != folder or (not folder and there.is_link != link):
            raise _Refused("replaced by something else since", change.destination)
        self._make_parents(change.path)
        self._plan(
            Change(
                op="move",
                path=change.destination,
                label=change.destination_label,
                kind=change.kind,
                destination=change.path,
                destination_label=change.label,
                before=there.data,
                after=there.data,
                before_hash=there.hash,
                after_hash=there.hash,
                before_mode=there.mode,
                after_mode=there.mode,
            )
        )

    def _revert_content(self, change: Change) -> None:
        path = change.path
        if unkept(change):
            raise _Refused("its content was over max_file_size and not kept", path)
        now = self.tree.get(path)
        before = _image(change.before, change.before_hash, change.before_mode)
        after = _image(change.after, change.after_hash, change.after_mode)
        if now.is_dir:
            raise _Refused("a folder is there now", path)
        if state_of(now) == state_of(after):
            # As the rewound change left it (modes aside): its before image goes back.
            mode = before.mode if now.mode == after.mode else now.mode
            self._become(change, now, before, mode)
            return
        if not after.exists:  # it deleted the file, and something is there now
            if state_of(now) != state_of(before):
                raise _Refused("a new file was made there since", path)
            return
        if not now.exists:
            if not before.exists:
                return  # made by the change, deleted since: nothing to take back
            raise _Refused("deleted or moved since", path)
        if not before.exists:
            raise _Refused("made by the rewound change and changed since", path)
        if now.is_link or after.is_link or before.is_link:
            raise _Refused("a link changed since", path)
        assert now.data is not None and after.data is not None and before.data is not None
        # Merged as text (engine/encodings.py), stored in the file's encoding.
        texts = shared_views(after.data, before.data, now.data)
        if texts is None:
            raise _Refused("a binary file changed since", path)
        form, (after_text, before_text, now_text) = texts
        merged = merge3(after_text, before_text, now_text)
        if merged.conflicts:
            raise _Refused("changed since in the same lines", path, merged.conflicts)
        data = form.stored(merged.data, change.label)
        mode = before.mode if now.mode == after.mode else now.mode
        self._become(change, now, _image(data, hash_of(data), mode), mode)

    def _become(self, change: Change, now: Entry, target: Entry, mode: int | None) -> None:
        """Plan `change.path` from `now` to `target` (its bytes, in `mode`)."""
        path = change.path
        if not target.exists:
            if now.exists:
                self._plan(
                    Change(
                        op="delete",
                        path=path,
                        label=change.label,
                        before=now.data,
                        before_hash=now.hash,
                        before_mode=now.mode,
                    )
                )
            return
        assert target.data is not None
        if now.exists and now.data == target.data and now.mode == mode:
            return
        if not now.exists:
            self._make_parents(path)
        self._plan(
            Change(
                op="write",
                path=path,
                label=change.label,
                before=now.data,
                after=target.data,
                before_hash=now.hash,
                after_hash=target.hash or hash_of(target.data),
                before_mode=now.mode,
                after_mode=mode,
            )
        )

    def _make_parents(self, path: str) -> None:
        """Make the folders above `path` that are gone (a file in the way: _Refused)."""
        for folder in _folders_above(path, self.roots):
            found = self.tree.get(folder)
            if found.is_dir:
                continue
            if found.exists:
                raise _Refused("a file is where its folder was", path)
            self._plan(_mkdir(folder, self.label(folder), None))


def _image(data: bytes | None, digest: str | None, mode: int | None) -> Entry:
    if digest is None:
        return Entry()
    return Entry(data=data, hash=digest, mode=mode)


def _mkdir(path: str, label: str, mode: int | None) -> Change:
    return Change(op="mkdir", path=path, label=label, kind="dir", after_mode=mode or NEW_DIR_MODE)


def _moved_state(change: Change) -> Any:
    return effects(change)[1].after


def compact(changes: Sequence[Change]) -> list[Change]:
    """The same changes, with the successive content changes of a file as one.

    A rewind of many transactions reverts a file once per change it made; the
    journal needs only the file's first before image and last after image. Two
    changes of a path join when nothing between them moves, makes or removes a
    folder at or above it; a pair that leaves the path as it was disappears.
    """
    out: list[Change | None] = []
    last: dict[str, int] = {}
    for change in changes:
        if change.op in ("move", "mkdir", "rmdir"):
            for named in _named(change):
                for path in [p for p in last if under(p, named) or under(named, p)]:
                    del last[path]
            out.append(change)
            continue
        at = last.get(change.path)
        if at is None:
            last[change.path] = len(out)
            out.append(change)
            continue
        first = out[at]
        assert first is not None
        joined = _joined(first, change)
        out[at] = joined
        if joined is None:
            del last[change.path]
    return [change for change in out if change is not None]


def _joined(first: Change, second: Change) -> Change | None:
    """`first` then `second` (of one path) as one change; None when they cancel out."""
    same = first.before_hash == second.after_hash and (
        first.before_hash is None or first.before_mode == second.after_mode
    )
    if same:
        return None
    return msgspec.structs.replace(
        second,
        op="delete" if second.after_hash is None else "write",
        before=first.before,
        before_hash=first.before_hash,
        before_mode=first.before_mode,
        regions=None,
    )


# Conflicts ---------------------------------------------------------------------------


async def _changed_by(journal: Journal, view: Tree, clash: Clash, rewound: set[int]) -> str:
    """Who changed the clash's path since the rewound change: a session id, or
    "outside" when the path holds what no journaled change left there.

    Pending transactions count (as in the scope): another process's commit mark
    may not be written yet.
    """
    path = clash.path
    live = [r for r in await journal.history(path=path, limit=100) if _in_effect(r)]
    if not live:
        return "outside"
    newest = live[0]
    mutation = max(
        (m for m in newest.mutations if path in (m.path, m.destination)), key=lambda m: m.ordinal
    )
    left = next(e.after for e in effects(change_of(mutation, {}, str)) if e.path == path)
    if left != state_of(view.base(path)):
        return "outside"
    later = [r for r in live if r.id > clash.tx]
    for record in later:
        if record.id not in rewound:
            return record.session
    return later[0].session if later else newest.session


def _conflict_error(
    label: Callable[[str], str], clashes: Sequence[Clash], by: Sequence[str], current: str | None
) -> LedgerError:
    """OCC_MISMATCH listing the first conflicts (`by`: who changed each of them); its
    hashes are those of the first file."""
    listed = [_described(label, clash, who) for clash, who in zip(clashes, by, strict=False)]
    first = clashes[0]
    names = ", ".join(label(c.path) for c in clashes[:5])
    more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
    return LedgerError(
        Code.OCC_MISMATCH,
        f"The rewind meets later changes in {len(clashes)} file(s): {names}{more}; "
        "nothing was changed.",
        path=first.path,
        details={
            "reason": "rewind_conflict",
            "conflicts": listed,
            "conflicts_total": len(clashes),
        },
        suggestion="rewind with on_conflict: skip to leave those files as they are, "
        "or with paths naming the others",
        expected_hash=first.expected,
        current_hash=current,
        conflict={"source": "rewind", "files": [c["path"] for c in listed]},
    )


def _described(label: Callable[[str], str], clash: Clash, by: str) -> dict[str, Any]:
    return {
        "path": clash.path,
        "label": label(clash.path),
        "by": by,
        "reason": clash.reason,
        "transaction": clash.tx,
        "hunks": [_hunk(h) for h in clash.hunks[:MAX_HUNKS]],
        "hunks_total": len(clash.hunks),
    }


def _hunk(conflict: Conflict) -> dict[str, Any]:
    """A hunk as a conflict lists it: lines start..end (1-based) of what the rewound
    change left, and what each side made of them."""
    return {
        "start": conflict.start + 1,
        "end": conflict.end,
        "rewound": _text(conflict.base),
        "restored": _text(conflict.ours),
        "now": _text(conflict.theirs),
    }


def _text(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= HUNK_TEXT else text[:HUNK_TEXT] + "..."
