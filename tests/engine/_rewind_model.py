"""A pure model of sessions' transactions and of a rewind, for the rewind model test.

The file system is a dict: relative path -> bytes (a file) or DIR (a folder). A
text file is always `LINES` lines, line i reading `"i:token\\n"`, so no two lines
of a file are ever equal and every change is a set of replaced line numbers: the
three-way merge of such files is stated here by line numbers alone (two sides'
changed lines meet when they are the same or next to each other), independently
of engine/merge.py. Nothing here imports the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DIR = "<dir>"
Value = bytes | str
FS = dict[str, Value]

LINES = 8


def text_file(tokens: Sequence[str]) -> bytes:
    return "".join(f"{i}:{token}\n" for i, token in enumerate(tokens, start=1)).encode()


def lines_of(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def with_line(data: bytes, number: int, token: str) -> bytes:
    lines = lines_of(data)
    lines[number - 1] = f"{number}:{token}\n".encode()
    return b"".join(lines)


def is_text(data: bytes) -> bool:
    return b"\0" not in data


def parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


@dataclass(frozen=True)
class Put:
    """A file made, changed or deleted (None: absent)."""

    path: str
    before: bytes | None
    after: bytes | None


@dataclass(frozen=True)
class Mkdir:
    path: str


@dataclass(frozen=True)
class Rmdir:
    path: str


@dataclass(frozen=True)
class Move:
    source: str
    destination: str
    folder: bool
    moved: bytes | None  # a file's bytes when it moved


Change = Put | Mkdir | Rmdir | Move


@dataclass
class Tx:
    id: int
    session: str
    changes: list[Change]


# What the engine's tools do, as changes -----------------------------------------------


def missing_folders(fs: FS, path: str) -> list[Change]:
    return [Mkdir(folder) for folder in parents(path) if folder not in fs]


def write(fs: FS, path: str, data: bytes) -> list[Change]:
    if fs.get(path) == data:
        return []
    return [*missing_folders(fs, path), Put(path, _bytes(fs.get(path)), data)]


def move(fs: FS, source: str, destination: str) -> list[Change]:
    value = fs[source]
    folder = value == DIR
    moved = None if folder else _bytes(value)
    return [*missing_folders(fs, destination), Move(source, destination, folder, moved)]


def delete(fs: FS, path: str) -> list[Change]:
    if fs[path] != DIR:
        return [Put(path, _bytes(fs[path]), None)]
    files = [p for p, v in fs.items() if v != DIR and inside(p, path)]
    folders = sorted(
        (p for p, v in fs.items() if v == DIR and inside(p, path)),
        key=lambda p: -p.count("/"),
    )
    return [*(Put(p, _bytes(fs[p]), None) for p in files), *(Rmdir(p) for p in folders)]


def mkdir(fs: FS, path: str) -> list[Change]:
    return [Mkdir(p) for p in [*parents(path), path] if p not in fs]


def apply(fs: FS, change: Change) -> None:
    match change:
        case Put(path=path, after=None):
            fs.pop(path, None)
        case Put(path=path, after=after):
            assert after is not None
            fs[path] = after
        case Mkdir(path=path):
            fs[path] = DIR
        case Rmdir(path=path):
            del fs[path]
        case Move(source=source, destination=destination):
            for path in [p for p in fs if inside(p, source)]:
                fs[destination + path[len(source) :]] = fs.pop(path)


def _bytes(value: Value | None) -> bytes | None:
    assert value != DIR
    return value if isinstance(value, bytes) else None


# The rewind --------------------------------------------------------------------------


class Conflict(Exception):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def merge(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """Both sides' changed lines of `base`; Conflict("") when changed lines meet."""
    b, o, t = lines_of(base), lines_of(ours), lines_of(theirs)
    assert len(b) == len(o) == len(t) == LINES
    mine = {i for i in range(LINES) if o[i] != b[i]}
    yours = {i for i in range(LINES) if t[i] != b[i]}
    out = list(b)
    i = 0
    while i < LINES:
        if i not in mine | yours:
            i += 1
            continue
        run = []
        while i < LINES and i in mine | yours:
            run.append(i)
            i += 1
        ours_run, theirs_run = [o[j] for j in run], [t[j] for j in run]
        if run and mine & set(run) and yours & set(run) and ours_run != theirs_run:
            raise Conflict("")
        for j in run:
            out[j] = o[j] if mine & set(run) else t[j]
    return b"".join(out)


class Reverter:
    """Reverts changes one at a time over a copy of the file system."""

    def __init__(self, fs: FS) -> None:
        self.fs = dict(fs)

    def make_parents(self, path: str) -> None:
        for folder in parents(path):
            if self.fs.get(folder) == DIR:
                continue
            if folder in self.fs:
                raise Conflict(path)
            self.fs[folder] = DIR

    def revert(self, change: Change) -> None:
        fs = self.fs
        match change:
            case Mkdir(path=path):
                if fs.get(path) == DIR and not any(p != path and inside(p, path) for p in fs):
                    del fs[path]
            case Rmdir(path=path):
                if fs.get(path) == DIR:
                    return
                if path in fs:
                    raise Conflict(path)
                self.make_parents(path)
                fs[path] = DIR
            case Move(source=source, destination=destination, folder=folder, moved=moved):
                here, there = fs.get(source), fs.get(destination)
                if here is not None:
                    if there is None and here == (DIR if folder else moved):
                        return
                    raise Conflict(source)
                if there is None or (there == DIR) != folder:
                    raise Conflict(destination)
                self.make_parents(source)
                apply(fs, Move(destination, source, folder, None))
            case Put(path=path, before=before, after=after):
                self.revert_put(path, before, after)

    def revert_put(self, path: str, before: bytes | None, after: bytes | None) -> None:
        now = self.fs.get(path)
        if now == DIR:
            raise Conflict(path)
        if now == after:
            self.become(path, before)
        elif after is None:
            if now != before:
                raise Conflict(path)
        elif now is None:
            if before is not None:
                raise Conflict(path)
        elif before is None:
            raise Conflict(path)
        else:
            assert isinstance(now, bytes)
            if not (is_text(now) and is_text(after) and is_text(before)):
                raise Conflict(path)
            try:
                self.become(path, merge(after, before, now))
            except Conflict:
                raise Conflict(path) from None

    def become(self, path: str, data: bytes | None) -> None:
        if data is None:
            self.fs.pop(path, None)
            return
        if path not in self.fs:
            self.make_parents(path)
        self.fs[path] = data


def named(change: Change) -> set[str]:
    match change:
        case Move(source=source, destination=destination):
            return {source, destination}
        case Put(path=path) | Mkdir(path=path) | Rmdir(path=path):
            return {path}
    raise AssertionError(change)


def rewind(fs: FS, scope: Sequence[Tx]) -> tuple[FS, set[str]]:
    """The files after reverting `scope` (newest first), and the conflicting paths.

    A change that cannot be reverted makes the paths it names conflicts, and so
    does any other change naming one of them; none of those is reverted. Planned
    again from the start until no new conflict comes up; with conflicts, a
    refusing rewind changes nothing.
    """
    reverts = [c for tx in sorted(scope, key=lambda t: -t.id) for c in reversed(tx.changes)]
    excluded: set[str] = set()
    while True:
        reverter = Reverter(fs)
        grew = False
        for change in reverts:
            if named(change) & excluded:
                grew |= not named(change) <= excluded
                excluded |= named(change)
                continue
            try:
                reverter.revert(change)
            except Conflict:
                excluded |= named(change)
                grew = True
        if not grew:
            return reverter.fs, excluded
