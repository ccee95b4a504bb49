"""A pure model of the transactional core, for the stateful test.

The file system is a dict: relative path -> bytes (a file) or DIR (a folder); a
path not in it is absent. `Tx` plans a transaction's operations in order against
a virtual copy, recording every change as the engine's result lists them
(folders first, then the operation's own change). Nothing here imports the engine.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ledgerfs.journal import content_hash

DIR = "<dir>"
Value = bytes | str  # bytes: a file; DIR: a folder
FS = dict[str, Value]

VALIDATION = "VALIDATION"
NOT_FOUND = "NOT_FOUND"
OCC_MISMATCH = "OCC_MISMATCH"


class Fail(Exception):
    """The operation must fail with one of `codes` and change nothing."""

    def __init__(self, *codes: str) -> None:
        super().__init__(codes)
        self.codes = set(codes)


def hash_of(value: Value | None) -> str | None:
    return content_hash(value) if isinstance(value, bytes) else None


def parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def is_crlf(data: bytes) -> bool:
    crlf = data.count(b"\r\n")
    return crlf > 0 and crlf == data.count(b"\n")


def keep_line_endings(original: Value | None, new: bytes) -> bytes:
    """A text write into an all-CRLF file gets CRLF when it brings plain LF."""
    if not isinstance(original, bytes) or not is_crlf(original) or b"\r" in new:
        return new
    return new.replace(b"\n", b"\r\n")


def apply_edits(data: bytes, edits: Sequence[tuple[str, str]]) -> bytes:
    """Exact old/new pairs in order, each matching exactly once in the text the
    ones before it left."""
    if not is_text(data):
        raise Fail(VALIDATION)
    text = data.decode("utf-8")
    crlf = is_crlf(data)
    for old, new in edits:
        if crlf and "\r" not in old:
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        if not old:
            raise Fail(VALIDATION)
        first = text.find(old)
        if first < 0 or text.find(old, first + 1) >= 0:
            raise Fail(VALIDATION)
        text = text[:first] + new + text[first + len(old) :]
    return text.encode("utf-8")


def split_lines(text: str) -> list[str]:
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def unified(rel: str, old: bytes | None, new: bytes | None, context: int) -> str:
    """A `diff -u` with a/ b/ prefixes and `\\ No newline` markers, from difflib."""
    a = split_lines(old.decode("utf-8")) if old is not None else []
    b = split_lines(new.decode("utf-8")) if new is not None else []
    out = []
    for line in difflib.unified_diff(
        a,
        b,
        f"a/{rel}" if old is not None else "/dev/null",
        f"b/{rel}" if new is not None else "/dev/null",
        n=context,
    ):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


@dataclass
class Change:
    """One entry of a result's files[]: relative path, destination, hashes."""

    path: str
    destination: str | None
    before: str | None
    after: str | None


@dataclass
class Tx:
    """Plans one transaction against a virtual copy of the file system."""

    fs: FS
    changes: list[Change] = field(default_factory=list)
    # path -> (first before value, last after value); None = absent
    touched: dict[str, tuple[Value | None, Value | None]] = field(default_factory=dict)
    # path -> the path its file had before the transaction (None: made new), by moves
    origin: dict[str, str | None] = field(default_factory=dict)

    def named(self, path: str) -> str:
        """The path, before the transaction, of what `path` names now (itself if new)."""
        return self.origin.get(path, path) or path

    def _set(self, path: str, value: Value | None) -> None:
        before = self.touched.get(path, (self.fs.get(path), None))[0]
        self.touched[path] = (before, value)
        if value is None:
            self.fs.pop(path, None)
        else:
            self.fs[path] = value

    def mkdir(self, path: str) -> None:
        current = self.fs.get(path)
        if current == DIR:
            return
        if current is not None:
            raise Fail(VALIDATION)
        self.changes.append(Change(path, None, None, None))
        self._set(path, DIR)

    def mkdirs(self, path: str) -> None:
        """create_directory: missing parents first, then the folder itself."""
        self.folders(path)
        self.mkdir(path)

    def folders(self, path: str) -> None:
        for folder in parents(path):
            self.mkdir(folder)

    def put(self, path: str, data: bytes) -> None:
        current = self.fs.get(path)
        if current == DIR:
            raise Fail(VALIDATION)
        if current == data:
            return  # nothing would change: no change, no transaction
        self.changes.append(Change(path, None, hash_of(current), hash_of(data)))
        self._set(path, data)

    def write(self, path: str, data: bytes, *, text: bool) -> None:
        self.folders(path)
        current = self.fs.get(path)
        self.put(path, keep_line_endings(current, data) if text else data)

    def existing(self, path: str) -> bytes:
        current = self.fs.get(path)
        if current is None:
            raise Fail(NOT_FOUND)
        if current == DIR:
            raise Fail(VALIDATION)
        assert isinstance(current, bytes)
        return current

    def edit(self, path: str, edits: Sequence[tuple[str, str]]) -> None:
        self.put(path, apply_edits(self.existing(path), edits))

    def move(self, source: str, destination: str) -> None:
        self.folders(destination)
        current = self.fs.get(source)
        if current is None:
            raise Fail(NOT_FOUND)
        if self.fs.get(destination) is not None:
            raise Fail(VALIDATION)
        digest = hash_of(current)
        self.changes.append(Change(source, destination, digest, digest))
        self.origin[destination] = self.origin.get(source, source)
        self.origin[source] = None
        self._set(source, None)
        self._set(destination, current)

    def move_folder(self, source: str, destination: str) -> None:
        """A folder's move: everything in it moves along (the model of `move` of a folder)."""
        self.folders(destination)
        if self.fs.get(source) != DIR:
            raise Fail(NOT_FOUND)
        if self.fs.get(destination) is not None or destination.startswith(source + "/"):
            raise Fail(VALIDATION)
        self.changes.append(Change(source, destination, None, None))
        moved = {p: v for p, v in self.fs.items() if p == source or p.startswith(source + "/")}
        for path in moved:
            self.origin[destination + path[len(source) :]] = self.origin.get(path, path)
            self.origin[path] = None
            self._set(path, None)
        for path, value in moved.items():
            self._set(destination + path[len(source) :], value)

    def delete(self, path: str) -> None:
        current = self.existing(path)
        self.changes.append(Change(path, None, hash_of(current), None))
        self._set(path, None)

    def patch(self, files: Sequence[tuple[str, bytes | None, bytes | None]]) -> None:
        """(path, old, new) per file: creation when old is None, deletion when new is None.

        The folders new files need come first; then, as `git apply` (and the
        engine) does it, the deletions, then the other files in the patch's order.
        """
        for path, _, new in files:
            if new is not None:
                self.folders(path)
        deletions = [f for f in files if f[2] is None]
        for path, old, new in [*deletions, *(f for f in files if f[2] is not None)]:
            current = self.fs.get(path)
            if current != old:  # generated from the virtual state, so never here
                raise AssertionError("patch generated from a stale base")
            if new is None:
                self.delete(path)
            elif new != old:
                self.put(path, new)
        # Folders the patch's deletions leave empty go too, deepest first, as with git apply.
        vacated = {folder for path, _, new in files if new is None for folder in parents(path)}
        for folder in sorted(vacated, key=lambda f: (-f.count("/"), f)):
            if self.fs.get(folder) == DIR and not any(p.startswith(folder + "/") for p in self.fs):
                self.changes.append(Change(folder, None, None, None))
                self._set(folder, None)


def undo_target(fs: FS, touched: dict[str, tuple[Value | None, Value | None]]) -> FS:
    """What undoing a transaction leaves, or Fail(OCC_MISMATCH) when it cannot.

    Every path it touched must still hold its after state, and a folder it created
    must be empty once the undo has removed what the transaction put in it.
    """
    new = dict(fs)
    for path, (before, after) in touched.items():
        if fs.get(path) != after:
            raise Fail(OCC_MISMATCH)
        if before is None:
            new.pop(path, None)
        else:
            new[path] = before
    for path, (before, after) in touched.items():
        if after == DIR and before is None and any(p.startswith(path + "/") for p in new):
            raise Fail(OCC_MISMATCH)
    return new


def folders_undo_makes(fs: FS, target: FS) -> list[str]:
    """Folders removed since that an undo makes again to restore a file in them."""
    made: list[str] = []
    for path in sorted(target):
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if folder not in fs and folder not in target and folder not in made:
                made.append(folder)
    return made
