"""Pure planning: (request, current bytes) -> a change with before, after and diff.

Nothing here touches a disk; the transaction module applies what is planned.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ledgerfs.journal import content_hash as hash_of

from .edits import (
    MAX_EDIT_SEARCH,
    MAX_EDITS,
    LooseMatch,
    Match,
    TextEdit,
    apply_edits,
    check_edit_text,
    edit_search,
    is_crlf,
)
from .errors import Code, LedgerError

if TYPE_CHECKING:
    from .effects import Tree

__all__ = [
    "ABSENT",
    "LINK_MODE",
    "MAX_EDITS",
    "MAX_EDIT_SEARCH",
    "NEW_DIR_MODE",
    "NEW_FILE_MODE",
    "Change",
    "Entry",
    "Planner",
    "TextEdit",
    "apply_edits",
    "check_edit_text",
    "decode_content",
    "edit_search",
    "grows",
    "is_link_mode",
    "keep_line_endings",
    "unkept",
]

Kind = Literal["file", "dir"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
NEW_FILE_MODE = 0o666 & ~_UMASK
NEW_DIR_MODE = 0o777 & ~_UMASK
#: The mode of a symbolic link. A file's mode is its permission bits alone; a
#: link's carries the link type bit, so a mode says which of the two a path is
#: (and a journal record's modes say so for its before and after images).
LINK_MODE = stat.S_IFLNK | 0o777


def is_link_mode(mode: int | None) -> bool:
    """Whether a mode is a symbolic link's (its data is then the link's target).

    >>> is_link_mode(LINK_MODE), is_link_mode(0o644), is_link_mode(None)
    (True, False, False)
    """
    return mode is not None and stat.S_ISLNK(mode)


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """What a path holds: a file's bytes, a link's target, a folder, or nothing."""

    data: bytes | None = None
    hash: str | None = None
    mode: int | None = None
    is_dir: bool = False

    @property
    def exists(self) -> bool:
        # A file known by its hash only (from the journal's records) exists too.
        return self.is_dir or self.data is not None or self.hash is not None

    @property
    def is_link(self) -> bool:
        return is_link_mode(self.mode)


ABSENT = Entry()


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One planned mutation of one path (a move also names its destination)."""

    op: str
    path: str
    label: str
    kind: Kind = "file"
    destination: str | None = None
    destination_label: str | None = None
    before: bytes | None = None
    after: bytes | None = None
    before_hash: str | None = None
    after_hash: str | None = None
    before_mode: int | None = None
    after_mode: int | None = None
    #: Line spans (old start, old end, new start, new end) outside which before
    #: and after are equal, when the planner knows them (a patch's hunks): the
    #: result's diff then compares only those lines. Never journaled.
    regions: tuple[tuple[int, int, int, int], ...] | None = None
    #: The edits of this change that `match: "loose"` applied. Never journaled.
    loose: tuple[LooseMatch, ...] = ()


def grows(edits: Sequence[TextEdit]) -> bool:
    """Whether edits may grow their file many times over (a replace_all with a
    longer new text): planning them is then long whatever the file's size.

    >>> grows([TextEdit("a", "bb", replace_all=True)]), grows([TextEdit("a", "bb")])
    (True, False)
    """
    return any(e.replace_all and len(e.new_text) > len(e.old_text) for e in edits)


def decode_content(content: str, encoding: str, *, path: str) -> bytes:
    """The bytes a write carries, from text or base64.

    >>> decode_content("aGk=", "base64", path="x")
    b'hi'
    """
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise LedgerError(
                Code.VALIDATION,
                "content is not valid base64.",
                path=path,
                details={"field": "content"},
            ) from exc
    return content.encode("utf-8", errors="strict")


def keep_line_endings(original: bytes | None, new: bytes) -> bytes:
    """Give new text the original's CRLF line endings when it uses plain LF.

    >>> keep_line_endings(b"a\\r\\nb\\r\\n", b"a\\nc\\n")
    b'a\\r\\nc\\r\\n'
    >>> keep_line_endings(b"a\\nb\\n", b"a\\r\\nc\\n")
    b'a\\r\\nc\\n'
    """
    if original is None or not is_crlf(original) or b"\r" in new:
        return new
    return new.replace(b"\n", b"\r\n")


class Planner:
    """Plans operations in order against a virtual view of the files they touch.

    `state` is a `Tree` over the targets as they were when the transaction's
    locks were taken; each planned change is applied to it, so a later operation
    of the same batch sees what an earlier one did, on every path (a file inside
    a folder the batch moved included).
    """

    def __init__(self, state: Tree, label: Callable[[str], str], max_size: int) -> None:
        self.state = state
        self.label = label
        #: The most bytes a planned file may hold (the engine's max_file_size).
        self.max_size = max_size
        #: What the call's edits may still search (MAX_EDIT_SEARCH for them all).
        self.search_left = MAX_EDIT_SEARCH
        self.changes: list[Change] = []

    def _plan(self, change: Change) -> None:
        self.changes.append(change)
        self.state.apply(change)

    def _need_parent(self, path: str) -> None:
        """Refuse a path whose folder the batch moved or removed (NOT_FOUND)."""
        if not self.state.reshaped():
            return  # every parent was checked when the path was resolved
        parent = os.path.dirname(path)
        if not self.state.get(parent).is_dir:
            raise LedgerError(
                Code.NOT_FOUND,
                f"{self.label(parent)} is not a folder once the earlier operations are made.",
                path=path,
                details={"reason": "no_parent_folder"},
            )

    def write(self, path: str, data: bytes, text: bool, *, op: str = "write") -> None:
        current = self._file_or_absent(path)
        self.refuse_unread(path, current)
        if text:
            data = keep_line_endings(current.data, data)
        self._put(op, path, current, data, hash_of(data))

    def edit(
        self, path: str, edits: list[TextEdit], allow_rewrite: bool, match: Match = "exact"
    ) -> None:
        current = self._existing_file(path)
        assert current.data is not None
        label = self.label(path)
        size = len(current.data)
        self._charge_search(path, label, len(edits), size)

        def grown(more: int) -> None:
            # Text the edits grew is searched too: counted as it is searched.
            self._charge_search(path, label, 1, more, edits=len(edits), size=size)

        edited = apply_edits(
            label,
            current.data,
            edits,
            allow_rewrite=allow_rewrite,
            match=match,
            limit=self.max_size,
            charge=grown,
        )
        self._put(
            "edit",
            path,
            current,
            edited.data,
            hash_of(edited.data),
            label=label,
            loose=tuple(edited.loose),
        )

    def _charge_search(
        self,
        path: str,
        label: str,
        count: int,
        scanned: int,
        *,
        edits: int | None = None,
        size: int | None = None,
    ) -> None:
        """Count what an edit searches (`count` scans of `scanned` bytes), or refuse it
        (VALIDATION naming `edits`) when the call's edits would search more than
        MAX_EDIT_SEARCH bytes. `edits` and `size` describe the whole edit when this
        is a part of it (text it grew)."""
        needed = edit_search(count, scanned)
        if needed <= self.search_left:
            self.search_left -= needed
            return
        edits = count if edits is None else edits
        size = scanned if size is None else size
        most = self.search_left // max(size, 1)
        raise LedgerError(
            Code.VALIDATION,
            f"{edits} edits of {label} ({size} bytes) would search over what one call "
            f"may search ({MAX_EDIT_SEARCH} bytes in all); send at most {most} edits of "
            "this file in this call, or the change as one apply_patch.",
            path=path,
            details={
                "field": "edits",
                "reason": "edit_search_too_large",
                "edits": edits,
                "size": size,
                "max_edits": most,
            },
        )

    def replace(
        self,
        path: str,
        data: bytes | None,
        op: str,
        *,
        mode: int | None = None,
        regions: Sequence[tuple[int, int, int, int]] | None = None,
    ) -> None:
        """Set a file's (or link's) new bytes as computed elsewhere (a patch); None deletes it.

        A `mode` of LINK_MODE makes `data` a link's target; without a mode the
        path keeps its type. `regions` are the line spans outside which the
        bytes did not change (see `Change.regions`).
        """
        current = self._file_or_absent(path, links=True)
        if data is None:
            self.delete(path, op=op)
            return
        spans = tuple(regions) if regions is not None else None
        self._put(op, path, current, data, hash_of(data), mode=mode, regions=spans)

    def remove_folder(self, path: str) -> None:
        """Plan the removal of a folder the changes planned so far leave empty."""
        current = self.state.get(path, ABSENT)
        assert current.is_dir
        self._plan(
            Change(
                op="rmdir", path=path, label=self.label(path), kind="dir", before_mode=current.mode
            )
        )

    def move(self, source: str, destination: str) -> None:
        current = self.state.get(source, ABSENT)
        if not current.exists:
            raise LedgerError(Code.NOT_FOUND, f"{self.label(source)} does not exist.", path=source)
        self.refuse_unread(source, current)
        if current.is_dir and destination.startswith(source.rstrip(os.sep) + os.sep):
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(source)} cannot be moved into itself.",
                path=destination,
                details={"field": "destination", "reason": "inside_source"},
            )
        self._need_parent(destination)
        if self.state.get(destination, ABSENT).exists:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(destination)} already exists; move_file never overwrites.",
                path=destination,
                details={"field": "destination", "reason": "destination_exists"},
            )
        self._plan(
            Change(
                op="move",
                path=source,
                label=self.label(source),
                kind="dir" if current.is_dir else "file",
                destination=destination,
                destination_label=self.label(destination),
                before=current.data,
                after=current.data,
                before_hash=current.hash,
                after_hash=current.hash,
                before_mode=current.mode,
                after_mode=current.mode,
            )
        )

    def delete(self, path: str, *, op: str = "delete") -> None:
        # Paths to delete are resolved without following a last link: a link
        # here is the entry to delete (its target text is its before image).
        # A file over the size cap is known by its hash alone (not kept).
        current = self._file_or_absent(path, links=True)
        if not current.exists:
            raise LedgerError(Code.NOT_FOUND, f"{self.label(path)} does not exist.", path=path)
        self._plan(
            Change(
                op=op,
                path=path,
                label=self.label(path),
                before=current.data,
                before_hash=current.hash,
                before_mode=current.mode,
            )
        )

    def mkdir(self, path: str) -> bool:
        """Plan a folder; False when it already exists (nothing to do)."""
        current = self.state.get(path, ABSENT)
        if current.is_dir:
            return False
        if current.exists:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} exists and is a file, not a folder.",
                path=path,
                details={"reason": "not_a_folder"},
            )
        self._need_parent(path)
        self._plan(
            Change(
                op="mkdir", path=path, label=self.label(path), kind="dir", after_mode=NEW_DIR_MODE
            )
        )
        return True

    def _put(
        self,
        op: str,
        path: str,
        current: Entry,
        data: bytes,
        digest: str,
        *,
        mode: int | None = None,
        regions: tuple[tuple[int, int, int, int], ...] | None = None,
        label: str | None = None,
        loose: tuple[LooseMatch, ...] = (),
    ) -> None:
        new_mode = mode if mode is not None else current.mode or NEW_FILE_MODE
        if data == current.data and new_mode == current.mode:
            return  # nothing would change: no transaction, no budget
        if len(data) > self.max_size:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} would be {len(data)} bytes, over the limit of "
                f"{self.max_size} bytes.",
                path=path,
                details={"reason": "file_too_large", "size": len(data), "limit": self.max_size},
            )
        self._need_parent(path)
        self._plan(
            Change(
                op=op,
                path=path,
                label=self.label(path) if label is None else label,
                before=current.data,
                after=data,
                before_hash=current.hash,
                after_hash=digest,
                before_mode=current.mode,
                after_mode=new_mode,
                regions=regions,
                loose=loose,
            )
        )

    def _file_or_absent(self, path: str, *, links: bool = False) -> Entry:
        current = self.state.get(path, ABSENT)
        if current.is_dir:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} is a folder, not a file.",
                path=path,
                details={"reason": "is_a_folder"},
            )
        if current.is_link and not links:
            # Paths were resolved through their links: one here was swapped in since.
            raise LedgerError(
                Code.FILE_POLICY_DENIED,
                f"{self.label(path)} became a symbolic link while the call ran.",
                path=path,
                details={"reason": "symlink"},
            )
        return current

    def _existing_file(self, path: str, *, links: bool = False) -> Entry:
        current = self._file_or_absent(path, links=links)
        if current.data is None:
            self.refuse_unread(path, current)
            raise LedgerError(Code.NOT_FOUND, f"{self.label(path)} does not exist.", path=path)
        return current

    def refuse_unread(self, path: str, current: Entry) -> None:
        """Refuse to act on a file loaded as its hash alone (over `max_file_size`) but
        to delete it: no other change can be made, or undone, without its bytes."""
        if current.hash is not None and current.data is None and not current.is_dir:
            raise LedgerError(
                Code.VALIDATION,
                f"{self.label(path)} is over max_file_size; only a delete can act on it.",
                path=path,
                details={"reason": "file_too_large"},
            )


def unkept(change: Change) -> bool:
    """Whether a change's before image is its hash alone, without the bytes.

    So is a file over `max_file_size` deleted: nothing can put it back.

    >>> unkept(Change(op="delete", path="/a", label="a", before_hash="blake3:00"))
    True
    """
    return (
        change.op != "move"
        and change.kind == "file"
        and change.before_hash is not None
        and change.before is None
    )


class Step(msgspec.Struct, kw_only=True):
    """One operation, resolved and ready to plan; no locks held yet.

    `paths` are every path to lock and load, `checks` the (path, expected hash)
    pairs OCC checks, `new_folders` the missing parents to make before
    `plan(planner, *args)` runs (a Planner method, or a function of one).
    """

    paths: list[str]
    checks: list[tuple[str, str | None]]
    plan: Callable[..., None]
    args: tuple[Any, ...] = ()
    new_folders: list[str] = []
    #: What the step charges the mutation budget: 1, or the files it changes (a
    #: folder delete, a patch).
    weight: int = 1
    #: How many times planning scans the file at `paths[0]` (an edit: one per old_text).
    scans: int = 0
    #: Whether planning is long whatever the files hold (a patch with a big delta).
    long: bool = False
    #: The files the step deletes (one over `max_file_size` loads as its hash
    #: alone, see `unkept`).
    deletes: list[str] = []
