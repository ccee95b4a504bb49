"""What changes leave on each path: the one model of a transaction's effects.

Planning a batch, rolling back, recovering, undoing and verifying all ask one
question: given changes in order and what the paths held before them, what does
each path hold after them? A folder's move carries everything in it, so the
state of `b/f.txt` after `move a -> b` is what `a/f.txt` held. `Tree` answers
that question over a base the caller supplies (the disk, preloaded entries, or
nothing at all when only the journal's records are known); `effects` names the
before and after state a single change puts on each path it names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypeVar

import msgspec

from .changes import ABSENT, Change, Entry, is_link_mode

__all__ = [
    "ABSENT_STATE",
    "FOLDER",
    "Effect",
    "State",
    "Tree",
    "effects",
    "file_state",
    "match_prefix",
    "position",
    "state_of",
    "torn",
    "under",
]

T = TypeVar("T")


class State(msgspec.Struct, frozen=True):
    """What one path holds, without its bytes: nothing, a folder, a file's or a link's hash.

    A link's hash is its target text's; a link holding text equal to a file's
    bytes is still not that file.
    """

    kind: Literal["absent", "file", "link", "dir"]
    hash: str | None = None

    def describe(self) -> str:
        """How a message names this state.

        >>> State("dir").describe()
        'a folder'
        """
        if self.kind == "file":
            return str(self.hash)
        if self.kind == "link":
            return f"a link ({self.hash})"
        return "a folder" if self.kind == "dir" else "nothing"


ABSENT_STATE = State("absent")
FOLDER = State("dir")


def file_state(digest: str | None, mode: int | None = None) -> State:
    """A file (a link, by its mode) with this hash, or nothing when the hash is None."""
    if digest is None:
        return ABSENT_STATE
    return State("link" if is_link_mode(mode) else "file", digest)


def state_of(entry: Entry) -> State:
    """The state an entry (read from disk or planned) stands for."""
    if entry.is_dir:
        return FOLDER
    return file_state(entry.hash, entry.mode) if entry.exists else ABSENT_STATE


class Effect(msgspec.Struct, frozen=True):
    """One path a change names, with the state it needs there and the state it leaves."""

    path: str
    before: State
    after: State


def effects(change: Change) -> list[Effect]:
    """The (path, before, after) of every path a change names.

    A folder's move also carries its contents; `Tree` follows those.

    >>> from ledgerfs.engine.changes import Change
    >>> [e.after.kind for e in effects(Change(op="move", path="/a", label="a",
    ...     kind="dir", destination="/b"))]
    ['absent', 'dir']
    """
    if change.op == "move":
        assert change.destination is not None
        moved = (
            FOLDER if change.kind == "dir" else file_state(change.before_hash, change.before_mode)
        )
        return [
            Effect(change.path, moved, ABSENT_STATE),
            Effect(change.destination, ABSENT_STATE, moved),
        ]
    if change.op == "mkdir":
        return [Effect(change.path, ABSENT_STATE, FOLDER)]
    if change.op == "rmdir":
        return [Effect(change.path, FOLDER, ABSENT_STATE)]
    return [
        Effect(
            change.path,
            file_state(change.before_hash, change.before_mode),
            file_state(change.after_hash, change.after_mode),
        )
    ]


def position(
    change: Change, current: Callable[[str], State]
) -> Literal["before", "after", "other"]:
    """Where the paths of a change stand: before it, after it, or elsewhere."""
    named = effects(change)
    now = [current(effect.path) for effect in named]
    if all(state == effect.after for state, effect in zip(now, named, strict=True)):
        return "after"
    if all(state == effect.before for state, effect in zip(now, named, strict=True)):
        return "before"
    return "other"


def under(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies inside it.

    >>> under("/a/b", "/a"), under("/ab", "/a"), under("/a", "/a")
    (True, False, True)
    """
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class Tree:
    """A virtual view of paths: a base (read on demand) under changes applied in order.

    `get` is what a path holds after the changes; `before` is what the thing
    a path names now held before them (following moves back), which is what an
    `expected_hash` given in a batch refers to. Each path a change set may carry a
    tag (the transaction that set it, for `verify`).
    """

    def __init__(self, base: Callable[[str], Entry], known: dict[str, Entry] | None = None) -> None:
        self._base = base
        # What the base holds, as read so far (`known`: read already; taken as is).
        self._cache: dict[str, Entry] = {} if known is None else known
        # Paths the changes set, and the base path each one's file came from.
        self._set: dict[str, Entry] = {}
        self._source: dict[str, str | None] = {}
        self._tags: dict[str, object] = {}
        # Folders whose contents are not their own base path's: a moved folder's
        # come from its source; a new or removed folder holds nothing (None).
        self._contents: dict[str, str | None] = {}
        # The length of the shortest of those folders (None: to be measured): a
        # path's walk up to them stops there, so a deep delete, deepest first,
        # finds at once that none lies above the path.
        self._shortest: int | None = None
        # The names directly inside each folder that a set path lies under, so
        # `is_empty` costs the same for the thousandth folder of a deep delete as
        # for the first. Built when `is_empty` first needs it (most views never
        # ask: an edit's would walk every folder above its file for nothing), kept
        # up to date from then on; None again after a folder move.
        self._inside: dict[str, set[str]] | None = None

    def assume(self, entries: dict[str, Entry]) -> None:
        """Take `entries` as what the base holds at their paths, without reading them."""
        self._cache.update(entries)

    def base(self, path: str) -> Entry:
        """What `path` held before any change (read once)."""
        entry = self._cache.get(path)
        if entry is None:
            entry = self._cache[path] = self._base(path)
        return entry

    def get(self, path: str) -> Entry:
        """What `path` holds once the changes applied so far are made."""
        entry = self._set.get(path)
        if entry is not None:
            return entry
        source = self.source(path)
        return ABSENT if source is None else self.base(source)

    def before(self, path: str) -> Entry:
        """What `path` named before the changes: where the thing it holds now came from
        (following moves), or, for a thing the changes made new, the path itself."""
        source = self.source(path)
        return self.base(path if source is None else source)

    def source(self, path: str) -> str | None:
        """The base path whose file `path` names now, or None for a thing made new."""
        if path in self._source:
            return self._source[path]
        if not self._contents:
            return path
        if self._shortest is None:
            self._shortest = min(map(len, self._contents))
        end = len(path)
        while True:
            end = path.rfind(os.sep, 0, end)
            if end < 0:
                return path
            folder = path[:end] or os.sep
            if len(folder) < self._shortest:
                return path
            if folder in self._contents:
                origin = self._contents[folder]
                return None if origin is None else origin + path[end:]

    def tag(self, path: str) -> object:
        """The tag given with the change that last set `path` (None if unset)."""
        return self._tags.get(path)

    def changed(self) -> dict[str, Entry]:
        """Every path the changes set, with what it holds now."""
        return dict(self._set)

    def reshaped(self) -> bool:
        """Whether a folder was made, moved or removed (paths may lack a parent)."""
        return bool(self._contents)

    def is_empty(self, folder: str, listdir: Callable[[str], Iterable[str]]) -> bool:
        """Whether `folder` holds nothing after the changes (`listdir` reads the base)."""
        source = self.source(folder)
        names = set(listdir(source)) if source is not None else set()
        if self._inside is None:
            self._inside = {}
            for path in self._set:
                self._index(path)
        names.update(self._inside.get(folder.rstrip(os.sep) or os.sep, ()))
        return not any(self.get(os.path.join(folder, name)).exists for name in names)

    def _index(self, path: str) -> None:
        """Record `path` under each folder above it, up to one recorded already."""
        assert self._inside is not None
        child = path
        while True:
            parent, name = os.path.split(child)
            if not name or parent == child:
                return
            names = self._inside.setdefault(parent, set())
            if name in names:
                return  # and so are the folders above it
            names.add(name)
            child = parent

    def apply(self, change: Change, tag: object = None) -> None:
        """Make `change` in the view."""
        match change.op:
            case "move":
                assert change.destination is not None
                if change.kind == "dir":
                    self._move_folder(change.path, change.destination, change, tag)
                else:
                    moved = Entry(
                        data=change.before, hash=change.before_hash, mode=change.before_mode
                    )
                    origin = self.source(change.path)
                    self._put(change.destination, moved, origin, tag)
                    self._put(change.path, ABSENT, None, tag)
            case "mkdir":
                self._put(change.path, Entry(is_dir=True, mode=change.after_mode), None, tag)
                self._no_contents(change.path)
            case "rmdir":
                self._put(change.path, ABSENT, None, tag)
                self._no_contents(change.path)
            case _ if change.after_hash is None:
                self._put(change.path, ABSENT, self.source(change.path), tag)
            case _:
                written = Entry(data=change.after, hash=change.after_hash, mode=change.after_mode)
                self._put(change.path, written, self.source(change.path), tag)

    def apply_all(self, changes: Sequence[Change], tag: object = None) -> None:
        for change in changes:
            self.apply(change, tag)

    def _put(self, path: str, entry: Entry, source: str | None, tag: object) -> None:
        self._set[path] = entry
        if self._inside is not None:
            self._index(path)
        self._source[path] = source
        self._tags[path] = tag

    def _move_folder(self, source: str, destination: str, change: Change, tag: object) -> None:
        origin = self._contents[source] if source in self._contents else self.source(source)
        self._inside = None  # the paths inside move with the folder
        _rekey(self._set, source, destination)
        _rekey(self._source, source, destination)
        _rekey(self._tags, source, destination)
        _rekey(self._contents, source, destination)
        # A file the changes removed inside the folder moves along as absent, to
        # hide the base's file there, but nothing it names came from anywhere: a
        # batch's expected_hash for it refers to no file of before the batch.
        inside = destination + os.sep
        for path, entry in self._set.items():
            if not entry.exists and path.startswith(inside):
                self._source[path] = None
        self._shortest = None
        self._put(destination, Entry(is_dir=True, mode=change.before_mode), origin, tag)
        self._contents[destination] = origin
        self._put(source, ABSENT, None, tag)
        self._no_contents(source)

    def _no_contents(self, folder: str) -> None:
        """`folder` holds nothing of its base path's (made new, or removed)."""
        self._contents[folder] = None
        if self._shortest is not None:
            self._shortest = min(self._shortest, len(folder))


def _rekey(table: dict[str, T], source: str, destination: str) -> None:
    """Move every key inside folder `source` to the same place inside `destination`."""
    for path in [p for p in table if p != source and under(p, source)]:
        table[destination + path[len(source) :]] = table.pop(path)


def _tearable(entry: Entry) -> bool:
    """A file with bytes (a link is made whole or not at all)."""
    return entry.data is not None and not entry.is_dir and not is_link_mode(entry.mode)


def torn(found: bytes, whole: bytes) -> bool:
    """Whether `found` is what a power loss can leave of a file meant to hold `whole`.

    A file renamed into place before its bytes reached the disk can come back
    empty, cut short, or with its tail reading as zeros.

    >>> torn(b"", b"abc"), torn(b"ab", b"abc"), torn(b"a\\0\\0", b"abc"), torn(b"ax", b"abc")
    (True, True, True, False)
    """
    if len(found) > len(whole) or found == whole:
        return False
    return whole.startswith(found.rstrip(b"\0"))


def match_prefix(
    chain: Sequence[Change], disk: Callable[[str], Entry]
) -> tuple[int, dict[str, Entry]] | None:
    """How many of `chain`'s changes the disk shows made, and which files to write again.

    Returns (k, torn files) for the largest k such that every path the chain
    names holds what its first k changes leave there, except files holding a
    cut-short copy of what one of those changes wrote (`torn`); those are to be
    written again. None when no k fits: something else changed a path.
    """
    candidates, known = _candidates(chain)
    found = {path: disk(path) for path in candidates}
    tree = Tree(lambda _path: ABSENT)
    best: tuple[int, dict[str, Entry]] | None = None
    for made in range(len(chain) + 1):
        if made:
            tree.apply(chain[made - 1])
        repairs = _compare(tree, candidates, known, found)
        if repairs is not None:
            best = (made, repairs)
    return best


def _candidates(chain: Sequence[Change]) -> tuple[list[str], dict[str, State]]:
    """Every path the chain names or sets, and what the base paths held before it."""
    tree = Tree(lambda _path: ABSENT)
    names: dict[str, None] = {}
    known: dict[str, State] = {}
    for change in chain:
        for effect in effects(change):
            names[effect.path] = None
            if effect.path not in tree.changed():
                source = tree.source(effect.path)
                if source is not None:
                    known.setdefault(source, effect.before)
        tree.apply(change)
        names.update(dict.fromkeys(tree.changed()))
    return list(names), known


def _compare(
    tree: Tree, candidates: list[str], known: dict[str, State], found: dict[str, Entry]
) -> dict[str, Entry] | None:
    """The torn files to rewrite if the disk matches `tree`; None if it does not."""
    changed = tree.changed()
    repairs: dict[str, Entry] = {}
    for path in candidates:
        now = found[path]
        if path in changed:
            wanted = changed[path]
            if state_of(now) == state_of(wanted):
                continue
            if _tearable(wanted) and _tearable(now) and torn(now.data or b"", wanted.data or b""):
                repairs[path] = wanted
                continue
            return None
        source = tree.source(path)
        expected = ABSENT_STATE if source is None else known.get(source)
        if expected is not None and state_of(now) != expected:
            return None
    return repairs
