"""Stale changes merged: a change computed on an older version, rebased onto the file now.

A call whose `expected_hash` names a version the file no longer holds is an
OCC_MISMATCH, unless it asks `on_stale: "merge"` (or the server's `--on-stale
merge` asks for it) and ledgerfs knows that version's bytes: then the call's
operation is planned against that version (the base), and each file it changes
is merged with the file as it is now by `merge.merge3`. Where the two sides'
changes meet, nothing is written and the OCC_MISMATCH shows each conflict.

Where a base's bytes come from: the journal keeps every before and after image
it records (every version a mutation result returned), and each session keeps
the bytes its own reads returned (`KeptReads`, bounded), since a file never
changed through ledgerfs has no image in the journal.

Which changes merge: a change of an existing text file's content, by write,
edit or patch. A file that is binary (on any side), a link, gone or turned into a
folder since, or a change that deletes, moves or creates it does not merge: the
call is OCC_MISMATCH as without merging, and `details.merge` says why.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from ..journal import Journal
from .changes import Change, Entry, is_link_mode
from .effects import Tree
from .encodings import shared_views, text_views
from .errors import LedgerError
from .merge import Conflict, changes, merge3, split_lines
from .planning import Planner, Step
from .rewrite import check_rewrite

__all__ = [
    "KEEP_READ_BYTES",
    "KeptReads",
    "Rebase",
    "find_bases",
    "merge_details",
    "plan_merged",
]

#: The bytes of reads a session keeps, newest first, for merging a later stale
#: change onto: 4 MiB (a few dozen source files). A file bigger than this is not
#: kept; its change merges only from a version the journal holds.
KEEP_READ_BYTES = 4 * 1024 * 1024
#: An OCC_MISMATCH lists at most this many conflicts (`conflicts_total` counts
#: them all), each side's text cut at MAX_SIDE characters.
MAX_CONFLICTS = 20
MAX_SIDE = 2000

#: Why a stale change was not merged (`details.merge` of its OCC_MISMATCH).
Status = Literal[
    "merged", "conflicts", "unknown_version", "binary", "does_not_apply", "not_mergeable"
]


class KeptReads:
    """The bytes a session's reads returned, by content hash; the newest kept, bounded.

    >>> kept = KeptReads(limit=4)
    >>> kept.keep("blake3:a", b"ab"); kept.keep("blake3:b", b"cd"); kept.keep("blake3:c", b"e")
    >>> kept.get("blake3:a"), kept.get("blake3:c")
    (None, b'e')
    """

    def __init__(self, limit: int = KEEP_READ_BYTES) -> None:
        self._limit = limit
        self._size = 0
        self._data: OrderedDict[str, bytes] = OrderedDict()

    def keep(self, digest: str, data: bytes) -> None:
        if self.touch(digest):
            return
        if not self.would_keep(len(data)):
            return
        self._data[digest] = data
        self._size += len(data)
        while self._size > self._limit:
            _, dropped = self._data.popitem(last=False)
            self._size -= len(dropped)

    def touch(self, digest: str) -> bool:
        """Mark the version `digest` names as read again; False if it is not kept."""
        if digest not in self._data:
            return False
        self._data.move_to_end(digest)
        return True

    def would_keep(self, size: int) -> bool:
        """Whether a version of `size` bytes is one to keep."""
        return size <= self._limit

    def get(self, digest: str) -> bytes | None:
        return self._data.get(digest)


class Rebase(msgspec.Struct, frozen=True):
    """What became of one stale file of a call that asked to merge."""

    status: Status
    #: Where both sides changed the same lines (status `conflicts`).
    conflicts: list[dict[str, Any]] = []
    conflicts_total: int = 0
    #: The error the change met on the version it names (status `does_not_apply`).
    cause: dict[str, Any] | None = None

    @property
    def merged(self) -> bool:
        return self.status == "merged"


def stale_checks(step: Step, tree: Tree) -> list[tuple[str, str]]:
    """The (path, expected hash) of a merging step whose file moved on since."""
    if not step.merge:
        return []
    return [
        (path, expected)
        for path, expected in step.checks
        if expected is not None and expected != tree.before(path).hash
    ]


async def find_bases(
    kept: KeptReads, journal: Journal, tree: Tree, steps: Sequence[Step]
) -> dict[tuple[str, str], bytes | None]:
    """The bytes of every version a merging step's stale expected_hash names, where known.

    Costs nothing when no merging step is stale (the usual call); otherwise the
    caller's `kept` reads first, then one read of the `journal` for the rest.
    """
    wanted = [key for step in steps for key in stale_checks(step, tree)]
    if not wanted:
        return {}
    found: dict[str, bytes | None] = {expected: kept.get(expected) for _, expected in wanted}
    missing = [digest for digest, data in found.items() if data is None]
    if missing:
        found.update(await journal.blobs(missing))
    return {(path, expected): found[expected] for path, expected in wanted}


def plan_merged(
    planner: Planner, step: Step, bases: dict[str, tuple[str, bytes | None]]
) -> tuple[dict[str, Rebase], LedgerError | None]:
    """Plan `step` against the versions its stale files name, merged onto them as they are.

    `bases` holds each stale path's expected hash and that version's bytes (None
    when unknown). Returns each stale path's outcome, and the error planning
    what is written met (a file over max_file_size, REWRITE_BLOCKED for an edit
    that replaces most of the file as it is now): the merge was made, and what
    it writes is judged as any change. The step's changes are planned only when
    every stale file merged.
    """
    refused = {
        path: why
        for path, (digest, data) in bases.items()
        if (why := _unmergeable(data, planner.state.get(path)))
    }
    if refused:
        return _all_refused(bases, refused), None
    known = {
        path: Entry(data=data, hash=digest, mode=planner.state.get(path).mode)
        for path, (digest, data) in bases.items()
    }
    scratch = Planner(Tree(planner.state.get, dict(known)), planner.label, planner.max_size)
    scratch.search_left = planner.search_left
    try:
        step.plan(scratch, *step.args)
    except LedgerError as exc:
        body = exc.envelope.error
        cause = {"code": str(body.code), "message": body.message}
        return {path: Rebase("does_not_apply", cause=cause) for path in bases}, None
    planner.search_left = scratch.search_left
    merged: dict[str, bytes] = {}
    for change in scratch.changes:
        why = _unmergeable_change(change, change.path in bases)
        if why is not None:
            return _all_refused(bases, {path: why for path in bases}), None
        if change.path in bases:
            base, current = known[change.path].data, planner.state.get(change.path).data
            assert base is not None and current is not None and change.after is not None
            # Merged as text (engine/encodings.py), stored in the file's encoding.
            texts = shared_views(base, change.after, current)
            if texts is None:
                return _all_refused(bases, {change.path: Rebase("binary")}), None
            form, (base_text, ours, theirs) = texts
            result = merge3(base_text, ours, theirs)
            if result.conflicts:
                conflicts = _conflicts(base_text, theirs, result.conflicts)
                return _all_refused(bases, {change.path: conflicts}), None
            merged[change.path] = form.stored(result.data, change.label)
    outcomes = {path: Rebase("merged") for path in bases}
    try:
        for change in scratch.changes:
            _replay(planner, step, change, merged.get(change.path), known.get(change.path))
    except LedgerError as exc:
        return outcomes, exc
    return outcomes, None


def _unmergeable(base: bytes | None, current: Entry) -> Rebase | None:
    if base is None:
        return Rebase("unknown_version")
    if current.is_dir or current.is_link or current.data is None:
        return Rebase("not_mergeable")
    if shared_views(base, current.data) is None:
        return Rebase("binary")
    return None


def _unmergeable_change(change: Change, stale: bool) -> Rebase | None:
    """Why a change of a merging step cannot be replayed or merged (None: it can).

    Only content changes of files (and the folders they need) are: a delete,
    move or link of the step's would need the file as it was.
    """
    if change.op == "mkdir" and not stale:
        return None
    if change.op in ("move", "rmdir", "mkdir") or change.after is None:
        return Rebase("not_mergeable")
    if is_link_mode(change.after_mode) or is_link_mode(change.before_mode):
        return Rebase("not_mergeable")
    if stale and (change.before is None or text_views(change.after) is None):
        return Rebase("binary" if change.before is not None else "not_mergeable")
    return None


def _all_refused(
    bases: dict[str, tuple[str, bytes | None]], refused: dict[str, Rebase]
) -> dict[str, Rebase]:
    """Every stale path's outcome when one cannot merge: the step is not planned."""
    sibling = Rebase("not_mergeable")
    return {path: refused.get(path, sibling) for path in bases}


def _replay(
    planner: Planner, step: Step, change: Change, merged: bytes | None, base: Entry | None
) -> None:
    """Make on the real view a change planned on the scratch one (a stale file's merged)."""
    if change.op == "mkdir":
        planner.mkdir(change.path)
        return
    assert change.after is not None
    if merged is None or base is None:
        planner.replace(
            change.path,
            change.after,
            change.op,
            mode=change.after_mode,
            regions=change.regions,
            loose=change.loose,
        )
        return
    current = planner.state.get(change.path).data
    assert current is not None
    texts = shared_views(current, merged)
    if change.op == "edit" and not step.allow_rewrite and texts is not None:
        _, (current_text, merged_text) = texts
        check_rewrite(change.label, current_text, written_spans(current_text, merged_text))
    planner.replace(
        change.path,
        merged,
        change.op,
        mode=change.after_mode,
        loose=change.loose,
        merged_from=base.hash,
    )


def written_spans(before: bytes, after: bytes) -> list[tuple[int, int]]:
    """The byte spans of `before` that `after` replaces, by lines.

    >>> written_spans(b"a\\nb\\nc\\n", b"a\\nB\\nc\\n")
    [(2, 4)]
    """
    lines = split_lines(before)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return [(starts[c.start], starts[c.end]) for c in changes(lines, split_lines(after))]


def _conflicts(base: bytes, current: bytes, found: list[Conflict]) -> Rebase:
    """The conflicts as an agent reads them: lines of the file now, and each side's text."""
    base_lines = split_lines(base)
    theirs = changes(base_lines, split_lines(current))
    shown: list[dict[str, Any]] = []
    for conflict in found[:MAX_CONFLICTS]:
        # Changes wholly before the conflict shift its lines; those that meet it are in it.
        shift = sum(len(c.lines) - (c.end - c.start) for c in theirs if c.end < conflict.start)
        line = conflict.start + shift + 1
        shown.append(
            {
                "line": line,
                "end_line": line + len(split_lines(conflict.theirs)) - 1,
                "base_line": conflict.start + 1,
                "base_end_line": conflict.end,
                "base": _text(conflict.base),
                "yours": _text(conflict.ours),
                "current": _text(conflict.theirs),
            }
        )
    return Rebase("conflicts", conflicts=shown, conflicts_total=len(found))


def _text(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= MAX_SIDE else text[:MAX_SIDE] + "\n[... cut]"


def merge_details(rebase: Rebase) -> dict[str, Any]:
    """What an OCC_MISMATCH's details say of a merge that was asked for and not made."""
    details: dict[str, Any] = {"on_stale": "merge", "merge": rebase.status}
    if rebase.conflicts:
        details["conflicts"] = rebase.conflicts
        details["conflicts_total"] = rebase.conflicts_total
    if rebase.cause is not None:
        details["cause"] = rebase.cause
    return details


#: What the OCC_MISMATCH of a merge that met conflicts suggests.
CONFLICTS_SUGGESTION = (
    "read the file again and redo your change on the lines the conflicts show; the "
    "other change stays"
)
